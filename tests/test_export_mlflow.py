"""`cockpit export mlflow`: runs exported into a real local SQLite MLflow store and read back
through MLflow's own client. The run directories are written through the contract's writers
(`EventWriter`, the run record's renderer, fleet.db's store, the models manifest); no training.

All tests share one store (`runs/mlflow.db`, the default beside their run directories): MLflow's
import and a new database's migrations take seconds, paid once here."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from cockpit.cli import main
from cockpit.contract.events import EventWriter
from cockpit.contract.files import sha256_of
from cockpit.contract.fleetplan import parse_plan
from cockpit.contract.model_manifest import MODELS_DIR, ModelEntry, copy_atomic, write_manifest
from cockpit.contract.presets import load
from cockpit.contract.rundir import JobDir, RunDir
from cockpit.contract.runrecord import (
    ConfigRecord,
    HostRecord,
    JobRecord,
    PhaseRecord,
    RunRecord,
    iso,
    parse,
    write,
)
from cockpit.contract.states import JobState, RunStatus
from cockpit.contract.toml import tomllib
from cockpit.core.fleet.store import FleetStore

if os.environ.get("CI"):
    import mlflow  # CI installs the dev extra, which has MLflow: these tests must run there
else:
    mlflow = pytest.importorskip("mlflow", reason="MLflow is not installed: pip install 'cockpit[mlflow]'")
from mlflow import MlflowClient

PRESET = load("cartpole")
HOST = HostRecord(hostname="h", cpu_model="c", physical_cores=2, logical_cores=2, ram_gib=4.0, os="Linux")
T0 = 1_795_000_000.0  # the runs' start, Unix time
ROLLOUT = 256  # steps per rollout


# One pytest-xdist worker runs the module: its tests share one store (`runs`).
pytestmark = pytest.mark.xdist_group("mlflow_store")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the tests' run directories share, and with it the default store, runs/mlflow.db."""
    return tmp_path_factory.mktemp("export") / "runs"


def _client(runs: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{runs / 'mlflow.db'}")


def _iteration(writer: EventWriter, t: float, steps: int, iteration: int, reward: float) -> tuple[float, int]:
    """One PPO iteration as the worker reports it: the last train phase's statistics (after the
    first), a rollout with a progress report halfway, then a train phase; returns (t, steps) after."""
    if iteration:
        writer.progress(num_timesteps=steps, iteration=iteration, sps=900.0, ep_rew_mean=reward, ep_len_mean=reward,
                        episodes=steps // 50, losses={"loss": 1.0 / iteration, "approx_kl": 0.01}, t=t)  # fmt: skip
    writer.phase("rollout", iteration=iteration, num_timesteps=steps, t=t)
    writer.progress(num_timesteps=steps + ROLLOUT // 2, iteration=iteration, sps=1000.0, ep_rew_mean=reward + 5,
                    ep_len_mean=reward + 5, episodes=steps // 50 + 1, t=t + 1)  # fmt: skip
    writer.phase("train", iteration=iteration + 1, num_timesteps=steps + ROLLOUT, t=t + 2)
    return t + 3, steps + ROLLOUT


def _finish(writer: EventWriter, job_dir: Path, t: float, steps: int, iteration: int, *,
            score: float | None = None) -> None:  # fmt: skip
    """The end of a worker: the last train statistics, the final checkpoint (a model file in its
    directory), an evaluation when scored, and `finished`."""
    writer.progress(num_timesteps=steps, iteration=iteration, sps=900.0, ep_rew_mean=100.0 + steps / 10,
                    ep_len_mean=100.0, episodes=steps // 50, losses={"loss": 0.5, "approx_kl": 0.02}, t=t)  # fmt: skip
    checkpoint = JobDir(job_dir).checkpoints / f"step-{steps}-{int(t * 1e9)}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.zip").write_bytes(f"the model of {job_dir.name} at {steps}".encode())
    sums = {"model.zip": sha256_of(checkpoint / "model.zip")}  # as the worker records them beside it
    (checkpoint / "meta.json").write_text(json.dumps({"step": steps, "files": sums}))
    writer.checkpoint(path=str(checkpoint), step=steps, t=t + 0.1)
    if score is not None:
        writer.evaluated(step=steps, mean_reward=score, std_reward=1.0, episodes=5, seed=10_000, t=t + 0.2)
    writer.finished(status="done", steps=steps, t=t + 0.3)


def _record(run_dir: Path, status: RunStatus, jobs: list[JobRecord]) -> None:
    config = ConfigRecord(jobs=2, agents=len(jobs), preset="cartpole", env="CartPole-v1",
                          timesteps=3 * ROLLOUT, seed=0, max_restarts=3)  # fmt: skip
    write(run_dir, RunRecord(command="cockpit run --jobs 2", status=status, started_at=iso(T0) or "",
                             updated_at=iso(T0 + 60) or "", duration_s=60.0, config=config, host=HOST, preset=PRESET,
                             jobs=tuple(jobs)))  # fmt: skip


def _job(job_id: str, status: JobState, steps: int, *, seed: int = 0) -> JobRecord:
    phases = {"rollout": PhaseRecord(seconds=6.0, cpu_percent_mean=95.0), "train": PhaseRecord(seconds=3.0)}
    return JobRecord(id=job_id, seed=seed, status=status, steps=steps, target=3 * ROLLOUT, mean_sps=85.3,
                     restarts=0, checkpoints=1, cpu_percent_mean=70.0, peak_rss_mib=300.0, phases=phases)  # fmt: skip


def _started(writer: EventWriter, t: float, seed: int, resumed_from_step: int | None = None) -> None:
    writer.started(pid=100 + seed, device="cpu", config={"preset": PRESET.as_dict(), "env": "CartPole-v1",
                   "seed": seed}, target_steps=3 * ROLLOUT, resumed_from_step=resumed_from_step, t=t)  # fmt: skip


def _ordinary_run(runs: Path) -> Path:
    """Two jobs: 000 done after 3 iterations (768 steps, a checkpoint), 001 live in its second
    train phase (512 steps)."""
    run_dir = runs / "20261124T200000Z-cartpole-CartPole-v1"
    done = EventWriter(RunDir(run_dir).job("000").events)
    _started(done, T0, 0)
    t, steps = T0 + 1, 0
    for i in range(3):
        t, steps = _iteration(done, t, steps, i, reward=20.0 * (i + 1))
    _finish(done, RunDir(run_dir).job("000").path, t, steps, 3)
    live = EventWriter(RunDir(run_dir).job("001").events)
    _started(live, T0, 1)
    t, steps = T0 + 1, 0
    for i in range(2):
        t, steps = _iteration(live, t, steps, i, reward=10.0 * (i + 1))
    _record(run_dir, RunStatus.RUNNING, [_job("000", JobState.DONE, 768), _job("001", JobState.RUNNING, 512, seed=1)])
    return run_dir


def _runs_by_job(client: MlflowClient, run_dir: Path) -> dict[str, mlflow.entities.Run]:
    experiment = client.get_experiment_by_name(run_dir.name)
    assert experiment is not None
    found = client.search_runs([experiment.experiment_id])
    mine = str(run_dir.resolve())
    return {run.data.tags["cockpit.job"]: run for run in found if run.data.tags["cockpit.run_dir"] == mine}


def _histories(client: MlflowClient, runs_by_job: dict[str, mlflow.entities.Run]) -> dict[tuple[str, str], list[int]]:
    """Every metric's steps, by (job, key)."""
    return {
        (job, key): sorted(m.step for m in client.get_metric_history(run.info.run_id, key))
        for job, run in runs_by_job.items()
        for key in run.data.metrics
    }


def test_a_run_exports_one_mlflow_run_per_job_and_again_only_what_is_new(
    runs: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_dir = _ordinary_run(runs)
    assert main(["export", "mlflow", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "2 MLflow run(s) created" in out
    assert f"mlflow ui --backend-store-uri sqlite:///{runs / 'mlflow.db'}" in out
    client = _client(runs)
    by_job = _runs_by_job(client, run_dir)
    assert sorted(by_job) == ["000", "001"]
    done, live = by_job["000"], by_job["001"]
    assert (done.info.run_name, done.info.status, live.info.status) == ("000", "FINISHED", "RUNNING")
    assert done.data.tags["cockpit.status"] == "done" and live.data.tags["cockpit.status"] == "running"

    params = done.data.params
    assert params["preset.n_envs"] == str(PRESET.n_envs) and params["preset.net_arch"] == "[64, 64]"
    assert params["preset.learning_rate"] == str(PRESET.learning_rate)
    assert (params["env"], params["seed"], params["timesteps"], live.data.params["seed"]) == ("CartPole-v1", "0",
                                                                                             "768", "1")  # fmt: skip
    assert {f"preset.{key}" for key in PRESET.as_dict()} <= set(params)

    histories = _histories(client, by_job)
    assert histories["000", "rollout/ep_rew_mean"] == [128, 256, 384, 512, 640, 768]
    assert histories["000", "train/loss"] == [256, 512, 768]
    assert histories["000", "phase/rollout_s"] == [256, 512, 768]
    assert histories["000", "phase/train_s"] == [256, 512, 768]
    assert histories["000", "time/sps"] == [256, 512]  # from the second rollout start: whole cycles
    assert histories["000", "job/mean_sps"] == [768]  # run.toml's totals, at the job's steps
    assert histories["000", "phase/rollout/cpu_percent_mean"] == [768]
    assert histories["001", "rollout/ep_rew_mean"] == [128, 256, 384]
    assert histories["001", "phase/train_s"] == [256]  # its second train phase is still under way
    assert "phase/train/gpu_util_mean" not in done.data.metrics  # no GPU: no GPU figure
    rollout_s = client.get_metric_history(done.info.run_id, "phase/rollout_s")
    assert [m.value for m in rollout_s] == [2.0, 2.0, 2.0]  # each rollout took 2 s, each train phase 1 s
    sps = client.get_metric_history(done.info.run_id, "time/sps")
    assert [m.value for m in sps] == [ROLLOUT / 3, ROLLOUT / 3]  # 256 steps per 3-s cycle

    # Artifacts: the job's run.toml (readable by cockpit), and the finished job's final model.
    record = parse(Path(client.download_artifacts(done.info.run_id, "run.toml", str(tmp_path))).read_text(), "artifact")
    assert [job.id for job in record.jobs] == ["000"] and record.preset == PRESET
    assert [a.path for a in client.list_artifacts(done.info.run_id, "model")] == ["model/model.zip"]
    assert [a.path for a in client.list_artifacts(live.info.run_id)] == ["run.toml"]

    # Again, unchanged: nothing new.
    assert main(["export", "mlflow", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "0 MLflow run(s) created, 2 found from before; 0 metric point(s), 0 param(s), 1 artifact(s)" in out
    again = _runs_by_job(client, run_dir)
    assert sorted(again) == ["000", "001"]
    assert _histories(client, again) == histories
    assert len(client.search_runs([done.info.experiment_id])) == 2

    # The live job crashes, resumes from its checkpoint at 256 steps, trains again past 384, and ends.
    writer = EventWriter(RunDir(run_dir).job("001").events)
    writer.error(type="RuntimeError", message="boom", t=T0 + 10)
    _started(writer, T0 + 20, 1, resumed_from_step=256)
    t, steps = _iteration(writer, T0 + 21, 256, 1, reward=15.0)
    t, steps = _iteration(writer, t, steps, 2, reward=30.0)
    _finish(writer, RunDir(run_dir).job("001").path, t, steps, 3)
    _record(run_dir, RunStatus.DONE, [_job("000", JobState.DONE, 768), _job("001", JobState.DONE, 768, seed=1)])
    assert main(["export", "mlflow", str(run_dir)]) == 0
    third = _runs_by_job(client, run_dir)
    after = _histories(client, third)
    assert after["001", "rollout/ep_rew_mean"] == [128, 256, 384, 512, 640, 768]  # 384 again is not logged twice
    assert after["001", "phase/train_s"] == [256, 512, 768]
    assert after["001", "job/mean_sps"] == [512, 768]
    assert {key: steps for key, steps in after.items() if key[0] == "000"} == {
        key: steps for key, steps in histories.items() if key[0] == "000"
    }
    assert third["001"].info.status == "FINISHED"
    assert [a.path for a in client.list_artifacts(third["001"].info.run_id, "model")] == ["model/model.zip"]


PLAN = """
name = "screen"
jobs = 2
promotion = "sync"
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = 2
[agents.overrides]
learning_rate = [0.001, 0.0003]
[[tiers]]
timesteps = 256
promote = 2
[[tiers]]
timesteps = 512
"""
TIER0 = {"a0000": 40.0, "a0001": 90.0, "a0002": 70.0, "a0003": 20.0}  # a0001 and a0002 go on
TIER1 = {"a0001": 480.0, "a0002": 500.0}  # a0002 is the best


def _fleet_run(runs: Path) -> Path:
    """A finished fleet of 4 agents in 2 tiers, its 2 promoted agents' models collected."""
    run_dir = runs / "20261124T210000Z-fleet-screen"
    run_dir.mkdir(parents=True)
    plan = parse_plan(tomllib.loads(PLAN), "screen.toml")
    store = FleetStore.in_run_dir(run_dir)
    store.create(PLAN, "screen.toml", [(a.id, a.index, a.env, a.preset_name, dict(a.overrides), a.seed)
                                       for a in plan.agents])  # fmt: skip
    jobs = []
    for agent in plan.agents:
        job_dir = RunDir(run_dir).job(agent.id).path
        writer = EventWriter(JobDir(job_dir).events)
        writer.started(pid=1, device="cpu", config={"preset": agent.preset.as_dict(), "env": agent.env,
                       "seed": agent.seed}, target_steps=256, t=T0)  # fmt: skip
        t, steps = _iteration(writer, T0 + 1, 0, 0, reward=TIER0[agent.id] / 2)
        _finish(writer, job_dir, t, steps, 1, score=TIER0[agent.id])
        store.start(agent.id, 0)
        store.record(agent.id, 0, steps=256, score=TIER0[agent.id], score_std=1.0, train_return=1.0)
        if agent.id in TIER1:  # promoted: its worker resumes from its checkpoint for the next tier
            writer.started(pid=2, device="cpu", config={"preset": agent.preset.as_dict(), "env": agent.env,
                           "seed": agent.seed}, target_steps=512, resumed_from_step=256, t=t + 1)  # fmt: skip
            t, steps = _iteration(writer, t + 2, steps, 1, reward=TIER1[agent.id] / 2)
            _finish(writer, job_dir, t, steps, 2, score=TIER1[agent.id])
        jobs.append(_job(agent.id, JobState.DONE, steps, seed=agent.seed))
    store.promote(list(TIER1), 0, decided=True)
    entries = []
    for agent_id in sorted(TIER1, key=lambda a: -TIER1[a]):
        store.record(agent_id, 1, steps=512, score=TIER1[agent_id], score_std=1.0, train_return=1.0)
        (run_dir / MODELS_DIR).mkdir(exist_ok=True)
        newest = max(RunDir(run_dir).job(agent_id).checkpoints.iterdir())
        digest = copy_atomic(newest / "model.zip", run_dir / MODELS_DIR / f"{agent_id}.zip")
        entries.append(ModelEntry(agent_id, f"{agent_id}.zip", digest, "CartPole-v1", "cartpole", 0, TIER1[agent_id],
                                  512))  # fmt: skip
    write_manifest(run_dir, "screen", entries)
    store.close()
    _record(run_dir, RunStatus.DONE, jobs)
    return run_dir


def test_a_fleet_registers_its_best_models_under_the_chosen_names_once(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _fleet_run(runs)
    command = ["export", "mlflow", str(run_dir), "--register", "screen-best", "--register", "screen-second"]
    assert main(command) == 0
    out = capsys.readouterr().out
    assert "agent a0002 (score 500): registered as screen-best version 1" in out
    assert "agent a0001 (score 480): registered as screen-second version 1" in out
    client = _client(runs)
    by_job = _runs_by_job(client, run_dir)
    assert sorted(by_job) == ["a0000", "a0001", "a0002", "a0003"]
    best = by_job["a0002"]
    assert (best.data.tags["cockpit.tier"], best.data.tags["cockpit.score"]) == ("1", "500")
    assert best.data.tags["cockpit.agent_status"] == "done"
    assert by_job["a0000"].data.tags["cockpit.agent_status"] == "culled"
    # The agent's own preset, its override applied.
    assert best.data.params["preset.learning_rate"] == best.data.params["overrides.learning_rate"]
    assert "timesteps" not in best.data.params  # a fleet's targets grow with its tiers
    assert [m.step for m in client.get_metric_history(best.info.run_id, "eval/mean_reward")] == [256, 512]
    assert [a.path for a in client.list_artifacts(best.info.run_id, "model")] == ["model/a0002.zip"]
    assert client.list_artifacts(by_job["a0000"].info.run_id, "model") == []  # culled: no model collected

    def versions(name: str) -> list[tuple[str, str]]:
        return [(str(v.version), v.run_id) for v in client.search_model_versions(f"name = '{name}'")]

    assert versions("screen-best") == [("1", best.info.run_id)]
    assert versions("screen-second") == [("1", by_job["a0001"].info.run_id)]
    (version,) = client.search_model_versions("name = 'screen-best'")
    assert version.tags["cockpit.agent"] == "a0002" and version.source.endswith("/model")
    assert (
        Path(client.download_artifacts(best.info.run_id, "model/a0002.zip", str(runs.parent))).read_bytes()
        == (run_dir / MODELS_DIR / "a0002.zip").read_bytes()
    )

    assert main(command) == 0
    assert "already registered as screen-best version 1" in capsys.readouterr().out
    assert versions("screen-best") == [("1", best.info.run_id)]
    assert versions("screen-second") == [("1", by_job["a0001"].info.run_id)]
    assert len(_runs_by_job(client, run_dir)) == 4


def test_bad_input_is_one_line_and_exit_2_with_nothing_written(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    run_dir = _ordinary_run(tmp_path / "elsewhere")
    cases = {
        "no such run directory": [str(tmp_path / "nope")],
        "not a run directory (no run.toml": [str(lonely)],
        "--tracking-uri nosuch://store:": [str(run_dir), "--tracking-uri", "nosuch://store"],
        "--tracking-uri sqlite:///": [str(run_dir), "--tracking-uri", f"sqlite:///{run_dir}/run.toml/m.db"],
        "is not a fleet": [str(run_dir), "--register", "best"],
    }
    for expected, args in cases.items():
        assert main(["export", "mlflow", *args]) == 2, expected
        captured = capsys.readouterr()
        assert captured.out == "" and expected in captured.err and captured.err.count("\n") == 1, captured.err
    fleet = _fleet_run(tmp_path / "fleets")
    assert main(["export", "mlflow", str(fleet), "--register", "a", "--register", "b", "--register", "c"]) == 2
    assert "3 name(s) for the best models, but" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere" / "mlflow.db").exists() and not (tmp_path / "fleets" / "mlflow.db").exists()

    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if MLflow were not installed
    assert main(["export", "mlflow", str(run_dir)]) == 2
    assert capsys.readouterr().err == (
        "cockpit export mlflow: mlflow is not installed: pip install 'cockpit[mlflow]' to export runs to MLflow\n"
    )


def test_a_long_export_prints_its_progress_by_tenths_and_a_short_one_does_not() -> None:
    from cockpit.commands.export import _progress

    for total, expected in ((25, [3, 5, 8, 10, 13, 15, 18, 20, 23, 25]), (10, [])):
        lines: list[str] = []
        report = _progress(lines.append)
        for done in range(1, total + 1):
            report(done, total)
        assert lines == [f"mlflow: {done}/{total} jobs" for done in expected]


def test_a_final_checkpoint_that_does_not_match_its_workers_sums_is_not_logged(tmp_path: Path) -> None:
    from cockpit.core.export.run_export import read_run

    run_dir = _ordinary_run(tmp_path)  # its own: the module's runs are shared by the tests before it
    final = read_run(run_dir).jobs[0].model
    assert final is not None and final.files[0].name == "model.zip"
    recorded = json.loads((final.files[0].parent / "meta.json").read_text())["files"]["model.zip"]
    assert final.sha256 == recorded  # the sum its worker recorded, not one taken now
    final.files[0].write_bytes(b"bit rot")  # corrupt after it was written: its sum no longer matches
    export = read_run(run_dir)
    assert export.jobs[0].model is None
    assert export.notices == (
        f"job 000: checkpoint {final.files[0].parent}: model.zip does not match the SHA-256 its worker recorded: "
        "no model logged",
    )
