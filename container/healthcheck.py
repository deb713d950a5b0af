"""The image's HEALTHCHECK: exit 0 when the newest run under $COCKPIT_RUNS (default /runs) answers
a hello on its control socket, 1 otherwise, with one line saying which.

    python /opt/cockpit/healthcheck.py [RUNS]

The newest run is the directory directly under RUNS whose run.toml changed last (the one the pod's
cockpit started or resumed). Its socket is where the cockpit put it (`control_path`: RUN_DIR/
cockpit.sock, or a private fallback for a long path); the hello is the protocol's own
(cockpit/core/feed/control.py): `{"op": "hello"}`, answered `{"ok": true, "pid": ...}`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

from cockpit.core.feed.control import control_path

TIMEOUT_S = 5.0


def newest_run(runs: Path) -> Path | None:
    """The run directory under `runs` whose run.toml was written last, or None."""
    tomls = [p for p in runs.glob("*/run.toml") if p.is_file()]
    return max(tomls, key=lambda p: p.stat().st_mtime).parent if tomls else None


def hello(run_dir: Path) -> str | None:
    """None if the run's control socket answers a hello with ok; else why not, in words."""
    path = control_path(run_dir)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(TIMEOUT_S)
            conn.connect(os.fspath(path))
            conn.sendall(b'{"op": "hello"}\n')
            answer = conn.makefile("rb").readline()
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    try:
        said = json.loads(answer)
    except ValueError:
        return f"{path}: not a cockpit answer: {answer[:80]!r}"
    if not isinstance(said, dict) or said.get("ok") is not True:
        return f"{path}: refused: {said}"
    return None


def main(argv: list[str]) -> int:
    """Exit code 0 healthy, 1 unhealthy (Docker's HEALTHCHECK convention)."""
    runs = Path(argv[0] if argv else os.environ.get("COCKPIT_RUNS", "/runs"))
    run_dir = newest_run(runs)
    if run_dir is None:
        print(f"unhealthy: no run under {runs}")
        return 1
    why = hello(run_dir)
    print(f"unhealthy: {why}" if why else f"healthy: {run_dir} answers on its control socket")
    return 1 if why else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
