"""`--storage`'s refusals (`runspec.on_cluster`), as `cockpit run` and `cockpit fleet` parse and
check their flags: each is one line naming the flag and what would be valid, before anything of
the run exists. No Ray starts here: these are the checks made before a launcher is opened."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from cockpit.cli import build_parser
from cockpit.commands import fleet as fleet_command
from cockpit.commands import run as run_command
from cockpit.contract.fleetplan import load_plan
from cockpit.contract.runspec import ConfigError, RunSpec
from tests.cockpitproc import run_cockpit

PLAN = """
name = "storagefleet"
jobs = 2
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = 2
[[tiers]]
timesteps = 4096
"""

Spec = Callable[..., RunSpec]


@pytest.fixture(params=["run", "fleet"])
def spec(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Spec:
    """`spec(*flags)`: the spec `cockpit run FLAGS` (or `cockpit fleet PLAN FLAGS`) would start,
    checked as the command checks it."""
    if request.param == "run":

        def run_spec(*flags: str) -> RunSpec:
            args = build_parser().parse_args(["run", "--jobs", "2", *flags])
            return run_command._spec(args, [], ("cockpit", "run", *flags))

        return run_spec
    plan = tmp_path_factory.mktemp("plan") / "plan.toml"
    plan.write_text(PLAN, encoding="utf-8")

    def fleet_spec(*flags: str) -> RunSpec:
        args = build_parser().parse_args(["fleet", str(plan), *flags])
        args.argv = ["fleet", str(plan), *flags]  # as `cli.main` records what was typed
        return fleet_command._spec(args, load_plan(plan), [])

    return fleet_spec


def refusal(spec: Spec, *flags: str) -> str:
    """The one-line ConfigError `spec(*flags)` raises."""
    with pytest.raises(ConfigError) as caught:
        spec(*flags)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_storage_without_ray_is_refused(spec: Spec, tmp_path: Path) -> None:
    message = refusal(spec, "--storage", str(tmp_path), "--run-dir", str(tmp_path / "run"))
    assert message == f"--storage {tmp_path}: only with --ray, where it is the directory the nodes share"
    assert list(tmp_path.iterdir()) == []


def test_a_storage_that_is_not_a_directory_is_refused(spec: Spec, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "storage"
    not_a_dir.write_text("")
    for storage in (not_a_dir, tmp_path / "missing"):
        message = refusal(spec, "--ray", "--storage", str(storage), "--run-dir", str(tmp_path / "run"))
        assert message == f"--storage {storage}: no such directory (give the directory every node mounts)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["storage"]


def test_a_run_dir_outside_the_storage_is_refused(spec: Spec, tmp_path: Path) -> None:
    storage, elsewhere = tmp_path / "storage", tmp_path / "elsewhere"
    storage.mkdir()
    message = refusal(spec, "--ray", "--storage", str(storage), "--run-dir", str(elsewhere))
    assert message == (
        f"--run-dir {elsewhere}: with --storage {storage} the run lives on the storage; give a directory in it"
    )
    assert not elsewhere.exists() and list(storage.iterdir()) == []
    # The same run directory inside the storage is taken as given.
    inside = spec("--ray", "--storage", str(storage), "--run-dir", str(storage / "run"))
    assert inside.run_dir == storage / "run" and inside.cluster is not None and inside.cluster.storage == storage


def test_the_default_run_dir_goes_on_the_storage(spec: Spec, tmp_path: Path) -> None:
    made = spec("--ray", "--storage", str(tmp_path))
    assert made.run_dir.parent == tmp_path / "runs" and made.cluster is not None
    assert list(tmp_path.iterdir()) == []  # checked, not made: the session makes it


def test_a_storage_that_cannot_be_written_is_refused_naming_storage(tmp_path: Path) -> None:
    # No --run-dir: the run would go on the storage, so the refusal names --storage, the flag given.
    result = run_cockpit("run", "--jobs", "2", "--ray", "--storage", "/sys")
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("cockpit run: error: --storage /sys/runs/") and "cannot write in /sys" in line, line
    assert line.endswith("choose a directory you can write to") and result.stdout == ""
    assert not Path("/sys/runs").exists()
