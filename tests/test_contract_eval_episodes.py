"""`--eval-episodes N`, the setting added through its declaration alone: from the flag to the spec,
the background run, run.toml, a resume and each worker's arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.cli import build_parser, main
from cockpit.commands.run import _spec
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import read
from cockpit.contract.runspec import ConfigError, RunSpec
from cockpit.core.launch.protocol import LaunchRequest, WorkerHandle
from cockpit.core.session.background import headless_argv
from cockpit.core.session.startup import start_session
from cockpit.core.telemetry.sampler import Sampler
from tests.background_child import child_spec
from tests.test_feed_control import FakeWorkers

GOLDEN = Path(__file__).parent / "data" / "run-v1"  # a run.toml from before the setting


class RecordingWorkers(FakeWorkers):
    """`FakeWorkers` that keep what they were asked to launch."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[LaunchRequest] = []

    def launch(self, request: LaunchRequest) -> WorkerHandle:
        self.requests.append(request)
        return super().launch(request)


def spec_of(*words: str) -> RunSpec:
    """The spec `cockpit run WORDS` validates, on a machine without GPUs."""
    args = build_parser().parse_args(["run", *words])
    args.script, args.argv = None, ["run", *words]
    return _spec(args, None, ("cockpit", "run", *words))


def test_eval_episodes_reaches_the_spec_the_background_run_run_toml_a_resume_and_each_worker(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert spec_of("--run-dir", str(run_dir)).eval_episodes is None  # by default nothing is scored
    spec = spec_of("--run-dir", str(run_dir), "--jobs", "2", "--eval-episodes", "5")
    assert spec.eval_episodes == 5
    assert child_spec(headless_argv(spec)) == spec  # a run started in the background gets it as data

    run_dir.mkdir()
    workers = RecordingWorkers()
    session = start_session(spec, Sampler(gpu=None, gpu_status="test"), launcher=workers, serve=False)
    session.supervisor.tick()
    session.write_run_log(session.snapshot(), final=True)
    session.recorder.close()
    assert [r.args.eval_episodes for r in workers.requests] == [5, 5]  # type: ignore[attr-defined]
    assert "--eval-episodes" in workers.requests[0].args.to_argv()  # type: ignore[attr-defined]
    assert "\neval_episodes = 5\n" in RunDir(run_dir).run_toml.read_text()
    assert read(run_dir).config.eval_episodes == 5

    resumed = spec_of("--resume", str(run_dir))
    assert resumed.eval_episodes == 5  # --resume keeps it
    assert child_spec(headless_argv(resumed, resume=True)).eval_episodes == 5
    assert spec_of("--resume", str(run_dir), "--eval-episodes", "9").eval_episodes == 9  # or takes another
    assert spec_of("--resume", str(GOLDEN)).eval_episodes is None  # a run.toml from before it: none


def test_eval_episodes_is_a_positive_count_and_not_a_scripts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--headless", "--run-dir", str(tmp_path / "run"), "--eval-episodes", "0"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--eval-episodes" in err and "positive integer" in err
    args = build_parser().parse_args(["run", "--run-dir", str(tmp_path / "run"), "--eval-episodes", "3"])
    args.script, args.argv = ("python", "train.py"), []
    with pytest.raises(ConfigError, match=r"^--eval-episodes: cockpit's own worker's settings"):
        _spec(args, None, ("cockpit",))
    assert not (tmp_path / "run").exists()  # nothing was started
