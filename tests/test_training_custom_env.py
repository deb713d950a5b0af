"""Custom environments (`module:EnvId-v0`, a preset's `[env_kwargs]`) in cockpit's own worker.

Up front, in the cockpit: a module that fails to import, an id it does not register, or env_kwargs
the env refuses are one line and exit 2, with nothing started. Then a module in the user's working
directory trains under `cockpit run`, and run.toml records the env and its kwargs. The gymnasium
fallback steps such envs in DummyVecEnv or SubprocVecEnv by the measured cost of a step, and
`recommend` says which and why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest
from rich.console import Console

from cockpit.contract import envids
from cockpit.contract.costs import Costs
from cockpit.contract.envids import (
    SUBPROC_MIN_STEP_US,
    WORKDIR_ENV,
    EnvKwargsError,
    UnknownEnvError,
    backend_for,
    check_env,
    pick_vec_env,
    split_env_id,
)
from cockpit.contract.fleetplan import PlanError, load_plan
from cockpit.contract.presets import load, to_toml
from cockpit.contract.rundir import JobDir
from cockpit.contract.runrecord import ConfigRecord, HostRecord, RunRecord, parse, render
from cockpit.contract.states import RunStatus
from cockpit.core.sizing.advisor import Machine

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "gridworld"
COCKPIT = str(Path(sys.executable).parent / "cockpit")  # the console script: its sys.path starts at bin/, not the cwd

PRESET = """
env = "{env}"
n_envs = 4
n_steps = 64
batch_size = 64
n_epochs = 4
net_arch = [32, 32]
learning_rate = 1e-3
checkpoint_every = 100_000
timesteps = {timesteps}
{extra}
"""


def preset_file(directory: Path, env: str, extra: str = "", timesteps: int = 4096, name: str = "p.toml") -> Path:
    path = directory / name
    path.write_text(PRESET.format(env=env, extra=extra, timesteps=timesteps))
    return path


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's working directory holding a copy of the example package as `gridworld` (and what a
    test writes there), as this process's cwd; what importing from it changed is undone after."""
    work = tmp_path / "work"
    shutil.copytree(EXAMPLE, work / "gridworld", ignore=shutil.ignore_patterns("__pycache__", "*.toml"))
    monkeypatch.chdir(work)
    monkeypatch.delenv(WORKDIR_ENV, raising=False)
    path, ids = list(sys.path), set(gym.registry)
    yield work
    sys.path[:] = path
    for name, module in list(sys.modules.items()):  # the user's modules only: never a library's
        if str(getattr(module, "__file__", None) or "").startswith(str(work)):
            del sys.modules[name]
    for env_id in set(gym.registry) - ids:
        del gym.registry[env_id]


def cockpit(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`cockpit *args` from its console script, in `cwd`, as a user would type it there."""
    return subprocess.run([COCKPIT, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)  # fmt: skip


# ----- the id and the import -----


def test_the_module_form_splits_and_malformed_ones_are_refused() -> None:
    assert split_env_id("CartPole-v1") == (None, "CartPole-v1")
    assert split_env_id("my_pkg.envs:Grid-v0") == ("my_pkg.envs", "Grid-v0")
    for bad in ("a:b:c", ":Grid-v0", "pkg:", "my-pkg:Grid-v0"):
        with pytest.raises(ValueError, match="is not module:EnvId"):
            split_env_id(bad)


def test_a_module_in_the_working_directory_registers_its_env(workdir: Path) -> None:
    assert "gridworld" not in sys.modules and str(workdir) not in sys.path
    assert backend_for("gridworld:GridWorld-v0") == "gymnasium"
    assert sys.path[-1] == str(workdir)  # after the installed packages: it never shadows one of them
    assert check_env("gridworld:GridWorld-v0", {"size": 6}) == "gymnasium"


def test_the_launchers_workdir_wins_over_the_processes_cwd(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = workdir.parent / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv(WORKDIR_ENV, str(workdir))
    assert backend_for("gridworld:GridWorld-v0") == "gymnasium"


def test_workers_get_the_cockpits_working_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from cockpit.core.launch.local import worker_env

    monkeypatch.delenv(WORKDIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert worker_env()[WORKDIR_ENV] == str(tmp_path)


def test_each_failure_names_what_failed(workdir: Path) -> None:
    (workdir / "broken.py").write_text("import gymnasium\nimport no_such_dependency_xyz\n")
    (workdir / "silent.py").write_text("X = 1\n")
    with pytest.raises(UnknownEnvError) as raised:
        backend_for("broken:Broken-v0")
    assert str(raised.value) == ("--env 'broken:Broken-v0': importing module 'broken' failed: ModuleNotFoundError: "
                                 "No module named 'no_such_dependency_xyz'")  # fmt: skip
    with pytest.raises(UnknownEnvError, match="'silent' imported, but no env 'Silent-v0' is registered"):
        backend_for("silent:Silent-v0")
    with pytest.raises(UnknownEnvError, match="did you mean gridworld:GridWorld-v0"):
        backend_for("gridworld:GridWorld-v1")
    with pytest.raises(EnvKwargsError) as kwargs_error:
        check_env("gridworld:GridWorld-v0", {"size": 1}, kwargs_source="preset p.toml: env_kwargs")
    prefix = "preset p.toml: env_kwargs {'size': 1}: building 'gridworld:GridWorld-v0' with them failed"
    assert str(kwargs_error.value).startswith(prefix)
    assert "ValueError: size must be an integer >= 2, got 1" in str(kwargs_error.value)
    with pytest.raises(EnvKwargsError, match="unexpected keyword argument 'sise'"):
        check_env("gridworld:GridWorld-v0", {"sise": 4})


def test_env_kwargs_for_an_envpool_id_are_envpool_config_keys() -> None:
    assert check_env("CartPole-v1", {"max_episode_steps": 100}) == "envpool"
    with pytest.raises(EnvKwargsError, match="envpool's CartPole-v1 takes no gravity; its config keys are "):
        check_env("CartPole-v1", {"gravity": 9.8})
    with pytest.raises(EnvKwargsError, match="num_envs cannot be set for envpool's CartPole-v1"):
        check_env("CartPole-v1", {"num_envs": 3})
    with pytest.raises(EnvKwargsError) as raised:
        check_env("CartPole-v1", {"max_episode_steps": "long"})
    assert "\n" not in str(raised.value) and "refused them: TypeError" in str(raised.value)


def test_a_custom_id_never_reaches_the_env_id_cache(workdir: Path, tmp_path: Path) -> None:
    probe = "from cockpit.contract.envids import backend_for\nprint(backend_for('gridworld:GridWorld-v0'))\n"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", probe], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "gymnasium\n"), done.stderr
    # Nothing was written: a custom id is looked up by importing its module, never from the cache,
    # and a process that imported gymnasium through a user's module never fills the cache either.
    assert not (tmp_path / "cache" / "cockpit" / envids.CACHE_FILE).exists()


# ----- presets carry env_kwargs through every copy of them -----


def test_env_kwargs_round_trip_through_to_toml_and_run_toml(tmp_path: Path) -> None:
    extra = '[env_kwargs]\nsize = 6\nname = "maze"\nweights = [1, 2]\nlayout = { walls = false }\n'
    preset = load(str(preset_file(tmp_path, "gridworld:GridWorld-v0", extra)))
    kwargs = {"size": 6, "name": "maze", "weights": [1, 2], "layout": {"walls": False}}
    assert preset.env_kwargs == kwargs and hash(preset)  # still hashable
    copy = tmp_path / "copy.toml"
    copy.write_text(to_toml(preset))
    assert load(str(copy)).env_kwargs == kwargs
    assert "env_kwargs" not in to_toml(load("cartpole"))  # a preset without any writes none
    record = RunRecord(
        command="cockpit run", status=RunStatus.DONE, started_at="2026-11-22T00:00:00Z",
        updated_at="2026-11-22T00:01:40Z", duration_s=100.0,
        config=ConfigRecord(jobs=1, agents=1, preset=str(copy), env=preset.env, timesteps=4096, seed=0, max_restarts=3),
        host=HostRecord(hostname="h", cpu_model="c", physical_cores=2, logical_cores=2, ram_gib=8.0, os="Linux"),
        preset=preset,
    )  # fmt: skip
    back = parse(render(record), "run")
    assert back.preset is not None and back.preset.env_kwargs == kwargs and back.config.env == preset.env


def test_the_measured_costs_are_kept_apart_by_env_kwargs(tmp_path: Path) -> None:
    from cockpit.core.sizing.cost_probe import cache_key

    plain = load(str(preset_file(tmp_path, "CartPole-v1")))
    bigger = load(str(preset_file(tmp_path, "CartPole-v1", "[env_kwargs]\nmax_episode_steps = 1000\n", name="b.toml")))
    assert cache_key(plain, None) != cache_key(bigger, None)
    assert '{"max_episode_steps": 1000}' in cache_key(bigger, None) and "{" not in cache_key(plain, None)


# ----- fleets -----


def test_a_fleet_plan_checks_custom_envs_and_their_kwargs(workdir: Path) -> None:
    bad = preset_file(workdir, "gridworld:GridWorld-v0", "[env_kwargs]\nsize = 1\n")
    plan = workdir / "plan.toml"
    plan.write_text(
        textwrap.dedent(f"""
        [agents]
        env = ["gridworld:GridWorld-v0"]
        preset = ["{bad.name}"]
        seeds = 2
        [[tiers]]
        timesteps = 4096
    """)
    )
    with pytest.raises(PlanError) as raised:
        load_plan(plan)
    assert "size must be an integer >= 2, got 1" in str(raised.value) and "\n" not in str(raised.value)
    bad.write_text(bad.read_text().replace("size = 1", "size = 4"))
    assert [a.preset.env_kwargs for a in load_plan(plan).agents] == [{"size": 4}] * 2
    plan.write_text(plan.read_text() + "[agents.overrides]\nenv_kwargs = [{ size = 3 }]\n")
    with pytest.raises(PlanError, match=r"unknown key 'agents\.overrides\.env_kwargs'"):
        load_plan(plan)


# ----- DummyVecEnv or SubprocVecEnv -----


def test_the_vec_env_rule() -> None:
    assert pick_vec_env(SUBPROC_MIN_STEP_US, 8, 2)[0] == "subproc"
    assert pick_vec_env(SUBPROC_MIN_STEP_US - 1, 8, 16)[0] == "dummy"
    assert pick_vec_env(10_000, 1, 16)[0] == "dummy"  # one env: nothing to do in parallel
    assert pick_vec_env(10_000, 8, 1)[0] == "dummy"  # one core: the processes would take turns
    kind, why = pick_vec_env(12.0, 8, 4)
    assert kind == "dummy" and why.startswith("DummyVecEnv: a step costs 12 us, under the")


def test_the_worker_measures_a_step_and_picks_by_it(workdir: Path) -> None:
    from cockpit_training.envs import choose_vec_env, make_vec_env, step_cost_us

    (workdir / "slow.py").write_text(
        textwrap.dedent("""
        import time
        import gymnasium as gym
        from gymnasium.envs.classic_control import CartPoleEnv

        class Slow(CartPoleEnv):
            def step(self, action):
                end = time.perf_counter() + 0.002
                while time.perf_counter() < end:
                    pass
                return super().step(action)

        gym.register(id="Slow-v0", entry_point=Slow, max_episode_steps=200)
    """)
    )
    assert step_cost_us("gridworld:GridWorld-v0") < SUBPROC_MIN_STEP_US / 4
    assert step_cost_us("slow:Slow-v0") >= 2000
    assert choose_vec_env("gridworld:GridWorld-v0", 8, threads=4)[0] == "dummy"
    assert choose_vec_env("slow:Slow-v0", 8, threads=4)[0] == "subproc"
    assert choose_vec_env("slow:Slow-v0", 8, threads=1)[0] == "dummy"
    assert choose_vec_env("gridworld:GridWorld-v0", 8, threads=1, vec_env="subproc")[0] == "subproc"
    said: list[str] = []
    venv = make_vec_env("gridworld:GridWorld-v0", 2, seed=0, threads=2, env_kwargs={"size": 3}, report=said.append)
    try:
        assert type(venv).__name__ == "DummyVecEnv" and said[0].startswith("gridworld:GridWorld-v0: 2 env(s) in Dummy")
        assert venv.get_attr("size") == [3, 3]
    finally:
        venv.close()


@pytest.mark.slow
def test_subprocvecenv_children_find_the_module_though_their_forkserver_started_before(workdir: Path) -> None:
    # A served worker runs job after job: its forkserver may have started for a gymnasium env before
    # a later job's custom module was on its path, and the worker's own cwd is not the user's.
    script = textwrap.dedent("""
        from cockpit_training.envs import make_vec_env
        first = make_vec_env("Taxi-v4", 2, seed=0, vec_env="subproc")  # starts the forkserver
        first.close()
        venv = make_vec_env("gridworld:GridWorld-v0", 2, seed=0, env_kwargs={"size": 3}, vec_env="subproc")
        print(type(venv).__name__, venv.get_attr("size"))
        venv.close()
    """)
    elsewhere = workdir.parent / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, WORKDIR_ENV: str(workdir), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=180, check=False)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "SubprocVecEnv [3, 3]\n"), done.stderr[-2000:]


def test_recommend_says_which_vec_env_and_why(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cockpit.commands.recommend import recommend, vec_env_line
    from cockpit.core.sizing.cost_probe import measured_costs

    preset = load(str(preset_file(workdir, "gridworld:GridWorld-v0")))
    machine = Machine(16, 32, 64 * 1024**3)

    def costs(step_us: float) -> Costs:
        return Costs("cpu", 300.0, 40.0 + step_us, step_us, 30.0, 0.0, 1.0, 3.0, 50)

    assert vec_env_line(machine, preset, 2, costs(8.0)).startswith("DummyVecEnv: a step costs 8 us, under the")
    assert vec_env_line(machine, preset, 2, costs(2500.0)).startswith(
        "SubprocVecEnv: a step costs 2,500 us, at least the"
    )
    assert "SubprocVecEnv when a step costs" in vec_env_line(machine, preset, 2, None)  # the worker measures
    assert "the job has one core" in vec_env_line(machine, preset, 16, costs(2500.0))
    assert vec_env_line(machine, load("cartpole"), 2, costs(2500.0)) is None  # envpool has no choice to make

    # In recommend's own output, from the probe's figures (here put in the cache as a probe would).
    record = {"device": "cpu", "step_overhead_us": 300.0, "env_policy_us": 48.0, "env_step_us": 8.0,
              "train_sample_us": 30.0, "train_epoch_us": 0.0, "setup_s": 1.0, "import_s": 3.0,
              "episode_steps_max": 50, "busy_factor": 1.0, "shared_factor": 1.0,
          "train_threads": 2, "train_speedup": 0.94}  # fmt: skip
    monkeypatch.setenv("XDG_CACHE_HOME", str(workdir / "cache"))
    measured_costs(preset, None, probe=lambda p, d: record)
    console = Console(record=True, width=400)
    recommend(console, preset=preset.source, env=None, jobs=2, run_dir=None, machine=machine)
    text = console.export_text()
    # It suggests a job per core (16), so each job's envs have one core: in-process stepping.
    assert "vec env          DummyVecEnv: the job has one core" in text, text


# ----- the cockpit, end to end -----


@pytest.mark.parametrize(
    ("env", "extra", "message"),
    [
        ("broken:Broken-v0", "", "--env 'broken:Broken-v0': importing module 'broken' failed: ModuleNotFoundError: "
                                 "No module named 'no_such_dependency_xyz'"),
        ("silent:Silent-v0", "", "--env 'silent:Silent-v0': module 'silent' imported, but no env 'Silent-v0' is "
                                 "registered"),
        ("gridworld:GridWorld-v0", "[env_kwargs]\nsize = 1\n",
         "env_kwargs {'size': 1}: building 'gridworld:GridWorld-v0' with them failed: ValueError: size must be an "
         "integer >= 2, got 1"),
        ("gridworld:GridWorld-v0", "env_kwargs = 5\n",
         "p.toml: 'env_kwargs' must be a table of keyword arguments for the env (an [env_kwargs] section), got 5"),
    ],
)  # fmt: skip
def test_bad_custom_envs_are_one_line_exit_2_and_start_nothing(workdir: Path, env: str, extra: str,
                                                              message: str) -> None:  # fmt: skip
    (workdir / "broken.py").write_text("import gymnasium\nimport no_such_dependency_xyz\n")
    (workdir / "silent.py").write_text("X = 1\n")
    preset = preset_file(workdir, "CartPole-v1", extra)
    result = cockpit(workdir, "run", "--headless", "--preset", str(preset), "--env", env, "--run-dir", "run")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cockpit run: error: ") and message in lines[0], result.stderr
    assert not (workdir / "run").exists() and not (workdir / "runs").exists() and result.stdout == ""


@pytest.mark.slow
def test_a_module_in_the_working_directory_trains_under_cockpit_run(workdir: Path) -> None:
    preset = preset_file(workdir, "gridworld:GridWorld-v0", "[env_kwargs]\nsize = 4\n", timesteps=6144)
    result = cockpit(workdir, "run", "--headless", "--jobs", "1", "--preset", preset.name,
                     "--env", "gridworld:GridWorld-v0", "--run-dir", "run", timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    from cockpit.contract.runrecord import read

    log = read(workdir / "run")
    assert log.status == "done" and log.config.env == "gridworld:GridWorld-v0"
    assert log.preset is not None and log.preset.env_kwargs == {"size": 4}
    (job,) = log.jobs
    assert job.status == "done" and job.steps == 6144
    # Solved: a random walk on the 4x4 grid averages about 0.4; the shortest path scores 0.95.
    assert job.final_ep_rew_mean is not None and job.final_ep_rew_mean >= 0.85, job.final_ep_rew_mean
    stderr = JobDir(workdir / "run" / "jobs" / "000").stderr_log.read_text()
    assert "gridworld:GridWorld-v0: 4 env(s) in DummyVecEnv" in stderr
