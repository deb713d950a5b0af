"""`[agents.search]` in a fleet plan: every malformed table is refused before anything starts, in one
line naming the key and what would be valid, with exit 2, and no run directory, study or process
made; a plan that would silently draw one point, lose its grid, or fail agents mid-fleet is refused
too."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.cli import main
from cockpit.contract.fleetplan import PlanError, load_plan, parse_plan
from cockpit.contract.toml import tomllib
from tests.test_contract_fleetplan import forbid_processes

PLAN = """name = "searched"
jobs = 2
promotion = "async"
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = 1
[agents.overrides]
n_epochs = [4, 8]
[agents.search]
samples = 4
learning_rate = { loguniform = [1e-5, 1e-3] }
[[tiers]]
timesteps = 1000
promote = 0.5
[[tiers]]
timesteps = 2000
"""
SEARCHED = "learning_rate = { loguniform = [1e-5, 1e-3] }\n"


@pytest.mark.parametrize(("old", "new", "says"), [
    # Without samples the plan would draw a single point.
    ("samples = 4\n", "", "'agents.search.samples' is missing: say how many points to draw"),
    ("samples = 4", "samples = 0", "'agents.search.samples' must be a positive integer, got 0"),
    ("samples = 4", "samples = 2.5", "'agents.search.samples' must be a positive integer, got 2.5"),
    ("samples = 4", "samples = true", "'agents.search.samples' must be a positive integer, got True"),
    ("samples = 4", 'samples = "4"', "'agents.search.samples' must be a positive integer, got '4'"),
    ("samples = 4", 'samples = 4\nsampler = "grid"',
     "'agents.search.sampler' must be one of random, tpe, qmc, got 'grid'"),
    ("samples = 4", "samples = 4\nseed = -1", "'agents.search.seed' must be an integer in [0, 2^32), got -1"),
    ("samples = 4", "samples = 4\nseed = 4294967296", "'agents.search.seed' must be an integer in [0, 2^32)"),
    # A key both searched and gridded: one of the two would be lost.
    (SEARCHED, "n_epochs = { int = [3, 10] }\n",
     "'agents.search.n_epochs' is also listed in 'agents.overrides': search it or list it, not both"),
    (SEARCHED, "lr = { loguniform = [1e-5, 1e-3] }\n",
     "unknown key 'agents.search.lr' (valid: samples, sampler, seed, multivariate, or any preset key but env and "
     "env_kwargs)"),
    # multivariate is TPE's: under random or qmc it would be silently ignored.
    ("samples = 4\n", "samples = 4\nmultivariate = true\n",
     "'agents.search.multivariate' applies to sampler = \"tpe\" only, got sampler = 'random'"),
    ("samples = 4\n", 'samples = 4\nsampler = "tpe"\nmultivariate = "yes"\n',
     "'agents.search.multivariate' must be true or false, got 'yes'"),
    (SEARCHED, 'env = { choice = ["CartPole-v1"] }\n', "unknown key 'agents.search.env'"),
    (SEARCHED, "env_kwargs = { choice = [{}] }\n", "unknown key 'agents.search.env_kwargs'"),
    (SEARCHED, "", "'agents.search' names no preset key to search: add one"),
    (SEARCHED, "learning_rate = 1e-3\n", "'agents.search.learning_rate' must be one of { loguniform = [low, high] }"),
    (SEARCHED, "learning_rate = { normal = [0, 1] }\n", "'agents.search.learning_rate' must be one of"),
    (SEARCHED, "learning_rate = { uniform = [1e-5, 1e-3], int = [1, 2] }\n",
     "'agents.search.learning_rate' must be one of"),
    (SEARCHED, "learning_rate = { uniform = [1e-5] }\n",
     "'agents.search.learning_rate': uniform takes [low, high], got [1e-05]"),
    (SEARCHED, "learning_rate = { uniform = [1e-3, 1e-5] }\n",
     "'agents.search.learning_rate': uniform needs low < high, got [0.001, 1e-05]"),
    (SEARCHED, "learning_rate = { loguniform = [0.0, 1e-3] }\n",
     "'agents.search.learning_rate': loguniform needs 0 < low < high, got [0.0, 0.001]"),
    (SEARCHED, "learning_rate = { uniform = [1e-5, inf] }\n",
     "'agents.search.learning_rate': uniform takes two numbers [low, high], got [1e-05, inf]"),
    (SEARCHED, 'learning_rate = { uniform = [1e-5, "high"] }\n', "uniform takes two numbers [low, high]"),
    (SEARCHED, "n_steps = { int = [16, 64.5] }\n",
     "'agents.search.n_steps': int takes two integers [low, high], got [16, 64.5]"),
    (SEARCHED, "activation = { choice = [] }\n",
     "'agents.search.activation': choice takes a non-empty list of values, got []"),
    (SEARCHED, 'activation = { choice = ["tanh", "tanh"] }\n',
     "'agents.search.activation': choice lists a value twice: ['tanh', 'tanh']"),
    # Extremes the preset refuses: agents drawing them would fail mid-fleet.
    (SEARCHED, "gamma = { uniform = [0.9, 1.5] }\n",
     "'agents.search.gamma' { uniform = [0.9, 1.5] } draws 1.5, which cartpole/CartPole-v1 refuses: "),
    (SEARCHED, "batch_size = { int = [1, 64] }\n",
     "'agents.search.batch_size' { int = [1, 64] } draws 1, which cartpole/CartPole-v1 refuses: "),
    (SEARCHED, "n_steps = { uniform = [16, 64] }\n",
     "'agents.search.n_steps' { uniform = [16.0, 64.0] } draws 16.0, which cartpole/CartPole-v1 refuses: "),
    (SEARCHED, 'activation = { choice = ["tanh", "swish"] }\n',
     "'agents.search.activation' { choice = ['tanh', 'swish'] } draws 'swish', which cartpole/CartPole-v1 refuses: "),
    # Each value alone suits the preset, their midpoints together (what the dry run measures) do not.
    (SEARCHED, "n_envs = { choice = [1, 8] }\nn_steps = { choice = [7, 32] }\nbatch_size = { choice = [4, 64] }\n",
     "'agents.search' at each key's midpoint (batch_size=4, n_envs=1, n_steps=7), what the projection "
     "measures, is refused: "),
    ("[agents.overrides]\nn_epochs = [4, 8]\n[agents.search]\nsamples = 4\n" + SEARCHED,
     "search = 3\n[agents.overrides]\nn_epochs = [4, 8]\n", "'agents.search' must be a table of distributions, got 3"),
])  # fmt: skip
def test_each_bad_search_table_is_one_line_naming_the_key_exit_2_and_nothing_started(
    old: str, new: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert old in PLAN
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.replace(old, new, 1))
    with pytest.raises(PlanError) as raised:
        load_plan(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and "\n" not in message and says in message, message
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COCKPIT_RUNS", str(tmp_path / "runs"))
    forbid_processes(monkeypatch)
    assert main(["fleet", str(path), "--headless", "--no-tensorboard"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.toml"]  # no run directory, no study


def test_the_plan_the_table_changes_is_a_good_one() -> None:
    """So each change above is the only problem of its plan."""
    plan = parse_plan(tomllib.loads(PLAN), "plan.toml")
    assert plan.search is not None and plan.search.samples == 4 and len(plan.agents) == 4 * 2
