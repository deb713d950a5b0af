"""`--on-done CMD`: a shell command run once when a run ends, done, failed or stopped, so that a
rented GPU stops costing money when its work is over (`runpodctl stop pod "$RUNPOD_POD_ID"`,
`sudo shutdown -h now`; docs/cloud.md).

The contract:
- it runs when the session has ended and run.toml holds the final status: after `done`, `failed`
  and `interrupted` (Ctrl-C, SIGTERM, the TUI's stop: "stopped" to the command). A cockpit killed
  with SIGKILL, or a machine that dies, runs nothing: there is no process left to run it, and the
  run is resumable; a resumed run that then ends runs it then;
- it gets the run in its environment: `COCKPIT_RUN_STATUS` (done, failed or stopped),
  `COCKPIT_RUN_DIR` (absolute), `COCKPIT_RUN_NAME` (the run directory's name when the run has no
  `--name`) and `COCKPIT_EXIT_CODE` (the cockpit's own exit code);
- it runs through `/bin/sh -c`, with no input, its output (both streams) appended to
  `RUN_DIR/cockpit.log` after a header line;
- a command that fails (a non-zero exit, one that cannot start, or one still running after
  `TIMEOUT_S`, which is then killed) is one line on the cockpit's stderr; the cockpit's exit code
  and the run's files stay as they are.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from cockpit.contract.files import user_umask
from cockpit.contract.rundir import RunDir
from cockpit.contract.states import RunStatus

TIMEOUT_S = 600.0  # a hook that stops a pod returns in seconds; one that hangs must not keep the cockpit
STATUS_ENV = "COCKPIT_RUN_STATUS"
RUN_DIR_ENV = "COCKPIT_RUN_DIR"
RUN_NAME_ENV = "COCKPIT_RUN_NAME"
EXIT_CODE_ENV = "COCKPIT_EXIT_CODE"
WORDS = {RunStatus.DONE: "done", RunStatus.FAILED: "failed", RunStatus.INTERRUPTED: "stopped"}


def on_done_environment(status: RunStatus, run_dir: Path, name: str | None, exit_code: int) -> dict[str, str]:
    """The variables the command gets about the run that ended."""
    return {
        STATUS_ENV: WORDS.get(status, str(status)),
        RUN_DIR_ENV: str(run_dir.resolve()),
        RUN_NAME_ENV: name or run_dir.resolve().name,
        EXIT_CODE_ENV: str(exit_code),
    }


def run_on_done(
    command: str, status: RunStatus, run_dir: Path, name: str | None, exit_code: int, *, timeout_s: float = TIMEOUT_S
) -> str | None:
    """Run `command` for the run in `run_dir` that ended with `status` (the module docstring);
    None when it exited 0, else one line saying what went wrong and where its output is."""
    log = RunDir(run_dir).log
    env = {**os.environ, **on_done_environment(status, run_dir, name, exit_code)}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    try:
        with log.open("ab") as out:
            out.write(f"[cockpit] --on-done at {stamp}, the run {env[STATUS_ENV]}: {command}\n".encode())
            out.flush()
            # Its own session: a timeout kills the shell and whatever it started, and nothing else.
            with subprocess.Popen(
                ["/bin/sh", "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                umask=user_umask(),  # the user's command, writing where it likes: the user's modes
            ) as process:
                try:
                    code = process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    return f"--on-done: {command!r} was still running after {timeout_s:.0f} s and was killed; see {log}"
            out.write(f"[cockpit] --on-done exited with {code}\n".encode())
    except OSError as exc:
        return f"--on-done: {command!r} could not run ({exc})"
    if code != 0:
        return f"--on-done: {command!r} exited with {code}; its output is in {log}"
    return None
