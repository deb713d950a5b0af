"""The worker's failure path: an exception becomes an `error` event and exit code 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cockpit.contract.events import read_events
from cockpit.contract.workerargs import WorkerArgs
from training import worker
from training.stopping import StopFlag


@pytest.fixture(autouse=True)
def keep_pytest_signal_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StopFlag, "install_signal_handlers", lambda self: None)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB"), "cuda_oom"),
        (ValueError("observation shape changed"), "ValueError"),
    ],
)
def test_a_training_failure_is_an_error_event_and_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: Exception, kind: str
) -> None:
    def failing_train(*_args: object) -> int:
        raise exc

    monkeypatch.setattr(worker, "train", failing_train)
    code = worker.main(["--timesteps", "1000", "--job-dir", str(tmp_path / "job")])
    assert code == 1
    (event,) = read_events(tmp_path / "job" / "events.jsonl")
    assert event.kind == "error" and event.type == kind
    assert str(exc) in event.message


def test_config_resolves_defaults_from_the_preset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = WorkerArgs.parse(["--job-dir", str(tmp_path)])
    config = worker.resolve_config(args)
    assert config.timesteps == 100_000  # the cartpole preset's own default
    assert config.env == "CartPole-v1" and config.backend == "envpool" and config.device == "cpu"
