"""The cockpit's own cost while it supervises: CPU seconds per minute of the cockpit process.

What it measures: the CPU time (user + system) of the `cockpit run --headless` process itself,
not its workers, over a window while 2 jobs train: the 5 Hz sampler (NVML at every tick when
there is a GPU; psutil per core and per job tree once a second), the supervisor loop following
the event files, the run log and the headless display. The goal is at most 1% of one core (0.6
CPU-s per minute). It also reports the sampler's own mean tick cost, which the sampler measures
(its thread's CPU time per tick, without the run log's writing of the sample) and run.toml
records, over the whole run.

How: start the run with long jobs, skip a warm-up, read the process's CPU times at the start and
end of the window with psutil, then SIGINT the run and read run.toml.

Run from the repo root (defaults take about 90 s):
    .venv/bin/python -m benchmarks.sampler_cost
    .venv/bin/python -m benchmarks.sampler_cost --window 300
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.common import load_caption, print_table, warn_if_busy
from cockpit.contract.runrecord import read


def cpu_seconds(proc: psutil.Process) -> float:
    """User plus system CPU seconds of the process itself (children excluded)."""
    times = proc.cpu_times()
    return times.user + times.system


def main() -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=60.0, help="measured seconds (default: 60)")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds skipped first (default: 15)")
    args = parser.parse_args()
    before = warn_if_busy()
    with tempfile.TemporaryDirectory(prefix="bench-sampler-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "cockpit", "run", "--headless", "--jobs", "2", "--preset", "cartpole",
               "--timesteps", "100000000", "--run-dir", str(run_dir)]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        me = psutil.Process(proc.pid)
        time.sleep(args.warmup)
        cpu0, t0 = cpu_seconds(me), time.monotonic()
        time.sleep(args.window)
        cpu1, t1 = cpu_seconds(me), time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        log = read(run_dir)
    per_minute = (cpu1 - cpu0) / (t1 - t0) * 60
    tick_ms = log.utilization.sampler_cost_ms_mean if log.utilization is not None else None
    sampler_per_minute = tick_ms / 1000 * 5 * 60 if tick_ms is not None else None
    print_table(
        "Cockpit process CPU while supervising 2 jobs (headless, 5 Hz)",
        ["window", "cockpit CPU-s / min", "% of one core", "<= 1%", "sampler tick (mean)", "sampler CPU-s / min"],
        [
            [
                f"{t1 - t0:.0f} s",
                f"{per_minute:.3f}",
                f"{per_minute / 60 * 100:.2f}%",
                "ok" if per_minute <= 0.6 else "ABOVE",
                f"{tick_ms:.3f} ms" if tick_ms is not None else "-",
                f"{sampler_per_minute:.3f}" if sampler_per_minute is not None else "-",
            ]
        ],
        text_columns=1,
        caption=load_caption(before) + f" GPU telemetry: {log.gpu.telemetry if log.gpu else '-'}.",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
