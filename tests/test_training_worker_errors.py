"""The worker's failure path: an exception becomes an `error` event and exit code 1."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest
import torch

from cockpit.contract.events import read_events
from cockpit.contract.workerargs import WorkerArgs
from cockpit_training import worker
from cockpit_training.stopping import StopFlag


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


def _enospc(path: Path) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", str(path))


def test_a_full_disk_is_a_disk_full_event_naming_the_path_and_free_space_and_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = tmp_path / "job" / "checkpoints" / ".tmp-step-1" / "model.zip"

    def failing_train(*_args: object) -> int:
        raise _enospc(checkpoint)

    monkeypatch.setattr(worker, "train", failing_train)
    code = worker.main(["--timesteps", "1000", "--job-dir", str(tmp_path / "job")])
    assert code == worker.DISK_FULL_EXIT == 3
    (event,) = read_events(tmp_path / "job" / "events.jsonl")
    assert event.kind == "error" and event.type == "disk_full"
    assert re.fullmatch(rf"\d+\.\d MiB free on {re.escape(str(checkpoint))}: No space left on device", event.message)


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
        # torch's zip writer: the failed write surfaces as a RuntimeError, the OSError as its context
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 3840 vs 3792"),
    ],
)
def test_enospc_and_edquot_anywhere_in_the_chain_are_disk_full(exc: Exception) -> None:
    if isinstance(exc, RuntimeError):
        exc.__context__ = OSError(errno.ENOSPC, "No space left on device")
    assert worker._error_type(exc) == "disk_full"
    assert worker._error_type(OSError(errno.EACCES, "Permission denied")) == "PermissionError"


def test_when_the_disk_full_event_cannot_be_written_the_exit_code_still_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_train(*_args: object) -> int:
        raise _enospc(tmp_path / "job" / "events.jsonl")

    def full_emit(self: object, event: object) -> object:
        raise _enospc(tmp_path / "job" / "events.jsonl")

    monkeypatch.setattr(worker, "train", failing_train)
    monkeypatch.setattr(worker._ConsoleEvents, "emit", full_emit)
    assert worker.main(["--timesteps", "1000", "--job-dir", str(tmp_path / "job")]) == 3


def test_a_full_disk_met_while_reporting_another_error_still_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_train(*_args: object) -> int:
        raise ValueError("observation shape changed")

    def full_emit(self: object, event: object) -> object:
        raise _enospc(tmp_path / "job" / "events.jsonl")

    monkeypatch.setattr(worker, "train", failing_train)
    monkeypatch.setattr(worker._ConsoleEvents, "emit", full_emit)
    assert worker.main(["--timesteps", "1000", "--job-dir", str(tmp_path / "job")]) == 3
