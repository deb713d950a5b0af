"""A run directory is code: `--resume` refuses one another user could have written (as OpenSSH's
StrictModes does), prints the commands its run.toml recorded before it runs any, and a new run's
directory and files are the user's alone (0700, 0600), while a script's own files keep the user's modes."""

from __future__ import annotations

import dataclasses
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cockpit.cli import main
from cockpit.contract.files import write_atomic
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import read, render
from cockpit.contract.states import RunStatus

NOBODY = 65534
# Writes a file of its own in its job dir, as a user's training script writes its outputs.
SCRIPT = "import os\nopen(os.path.join(os.environ['COCKPIT_JOB_DIR'], 'mine.txt'), 'w').write('x')\n"


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(scope="module")
def ended(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real script run, run to its end by `cockpit run` in this process, with an --on-done."""
    where = tmp_path_factory.mktemp("trust")
    run_dir, script = where / "run", where / "mine.py"
    script.write_text(SCRIPT)
    argv = ["run", "--run-dir", str(run_dir), "--max-restarts", "0", "--no-tensorboard", "--headless",
            "--on-done", "true", "--", sys.executable, str(script)]  # fmt: skip
    user = os.umask(0o022)  # what the user's shell gave: the script's own files must come out with it
    try:
        assert main(argv) == 0
        assert os.umask(0o022) == 0o022  # and the run gave it back
    finally:
        os.umask(user)
    return run_dir


def _copy_tampered(ended: Path, where: Path, marker: Path) -> Path:
    """A copy of the ended run, left interrupted, whose run.toml's --on-done was changed by hand to
    make `marker`: what another user, or a careless download, could leave in a run directory."""
    run_dir = where / "run"
    run_dir.mkdir(mode=0o700)
    record = read(ended)
    config = dataclasses.replace(record.config, on_done=f"touch {marker}")
    write_atomic(
        RunDir(run_dir).run_toml, render(dataclasses.replace(record, config=config, status=RunStatus.INTERRUPTED))
    )
    os.chmod(RunDir(run_dir).run_toml, 0o600)
    return run_dir


def test_a_new_run_dir_and_its_files_are_the_users_alone_and_a_scripts_own_keep_the_users_modes(ended: Path) -> None:
    files = RunDir(ended)
    job = files.job("000")
    assert {str(p.relative_to(ended)): _mode(p) for p in (ended, files.jobs, job.path)} == {
        ".": 0o700, "jobs": 0o700, "jobs/000": 0o700}  # fmt: skip
    own = [files.run_toml, files.samples, files.job_samples, files.lock, job.stdout_log, job.stderr_log]
    assert {p.name: _mode(p) for p in own} == {p.name: 0o600 for p in own}
    assert _mode(job.path / "mine.txt") == 0o644  # the user's command writes with the user's umask (022)


@pytest.mark.parametrize(
    ("loosen", "said"),
    [(lambda d: os.chmod(d, 0o777), "{d} is writable by its group or by others (mode 777)"),
     (lambda d: os.chmod(d, 0o770), "{d} is writable by its group or by others (mode 770)"),
     (lambda d: os.chmod(RunDir(d).run_toml, 0o622), "{d}/run.toml is writable by its group or by others (mode 622)"),
     (lambda d: os.chown(d, NOBODY, -1), f"{{d}} is owned by uid {NOBODY}, not by you (uid 0)"),
     (lambda d: os.chown(RunDir(d).run_toml, NOBODY, -1), f"{{d}}/run.toml is owned by uid {NOBODY}, not by you")],
    ids=["dir-777", "dir-770", "run-toml-622", "dir-nobodys", "run-toml-nobodys"],
)  # fmt: skip
@pytest.mark.parametrize("command", ["run", "fleet"])
def test_a_resume_refuses_a_run_dir_another_user_could_have_written_before_anything_starts(
    ended: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
    loosen: Callable[[Path], None], said: str,
) -> None:  # fmt: skip
    if "uid" in said and os.geteuid() != 0:
        pytest.skip("giving a file to another uid needs root")
    marker = tmp_path / "ran"
    run_dir = _copy_tampered(ended, tmp_path, marker)
    loosen(run_dir)
    before = RunDir(run_dir).run_toml.read_bytes()
    capsys.readouterr()
    assert main([command, "--resume", str(run_dir), "--headless"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"cockpit {command}: error: --resume {said.format(d=run_dir)}"), err
    assert "--on-done" in err and "pickles" in err  # why: it says what a run directory holds
    assert not marker.exists() and sorted(p.name for p in run_dir.iterdir()) == ["run.toml"]  # nothing started
    assert RunDir(run_dir).run_toml.read_bytes() == before


def test_a_resume_prints_the_recorded_on_done_and_script_before_it_runs_them(
    ended: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    run_dir = _copy_tampered(ended, tmp_path, marker)
    capsys.readouterr()
    main(["run", "--resume", str(run_dir), "--headless"])
    lines = capsys.readouterr().err.splitlines()
    command = f"{sys.executable} {ended.parent / 'mine.py'}"
    assert lines[:2] == [
        f"cockpit run: resuming {run_dir}: --on-done from run.toml: 'touch {marker}'",
        f"cockpit run: resuming {run_dir}: script from run.toml: '{command}'",
    ]
    assert marker.exists()  # and then it ran it: printing is no refusal
