"""Live SPS against the truth: what a user sees while a run trains, beside steps ÷ wall time.

What it measures: a real `cockpit run --headless --jobs 1` (by default Pong-v5 with the `fast`
preset, whose train phase on a CPU lasts minutes), sampled every few seconds through
`cockpit report --json`, the same figure the TUI and the headless table show. Afterwards the job's
own events give the truth: steps ÷ wall time over whole rollout+train cycles. Each live reading is
divided by the truth over the cycles it fell in, and the ratios are summarised (the goal: close to
1.00 at every reading, and never the rollout rate, which on Pong is about 30x the throughput).

Run from the repo root (the default takes about 8 minutes on 2 cores):
    .venv/bin/python -m benchmarks.live_sps
    .venv/bin/python -m benchmarks.live_sps --preset cartpole --env CartPole-v1 --timesteps 60000
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import log
from cockpit.contract.events import PhaseEvent, ProgressEvent, of_kind, read_events
from cockpit.contract.rundir import RunDir


def readings(run_dir: Path, proc: subprocess.Popen[bytes], every_s: float) -> list[tuple[float, float]]:
    """(time, live SPS of job 000) every `every_s` seconds until the run ends."""
    out: list[tuple[float, float]] = []
    while proc.poll() is None:
        time.sleep(every_s)
        done = subprocess.run([sys.executable, "-m", "cockpit", "report", str(run_dir), "--json"],
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            continue  # not served yet, or already over
        report = json.loads(done.stdout)
        job = report["jobs"][0] if report["jobs"] else None
        if report["live"] and job is not None and job["sps"] is not None:
            out.append((time.time(), float(job["sps"])))
    return out


def true_rate(run_dir: Path) -> tuple[float, list[tuple[float, int]]]:
    """Steps ÷ wall time over the job's whole cycles, and its rollout starts (t, steps)."""
    events = read_events(RunDir(run_dir).job("000").events)
    starts = [(e.t, e.num_timesteps) for e in of_kind(events, PhaseEvent) if e.phase == "rollout"]
    if len(starts) < 2:
        raise SystemExit("the run closed fewer than one whole cycle: give it more --timesteps")
    (t0, s0), (t1, s1) = starts[0], starts[-1]
    return (s1 - s0) / (t1 - t0), starts


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="fast")
    parser.add_argument("--env", default="Pong-v5")
    parser.add_argument("--timesteps", type=int, default=24_576, help="steps of the one job (default: 6 Pong cycles)")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between live readings")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-live-sps-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "cockpit", "run", "--headless", "--jobs", "1", "--preset", args.preset,
               "--env", args.env, "--timesteps", str(args.timesteps), "--run-dir", str(run_dir)]  # fmt: skip
        log(" ".join(cmd[2:]))
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        live = readings(run_dir, proc, args.every)
        if proc.wait() != 0:
            raise SystemExit(f"cockpit run exited {proc.returncode}")
        truth, starts = true_rate(run_dir)
        events = read_events(RunDir(run_dir).job("000").events)
        rollout = [e.sps for e in of_kind(events, ProgressEvent) if e.sps]
    # Readings inside the cycles the truth covers: from the second rollout start (one whole cycle
    # seen) to the last one.
    inside = [(t, sps) for t, sps in live if starts[1][0] <= t <= starts[-1][0]]
    ratios = [sps / truth for _, sps in inside]
    print(f"{args.env} with {args.preset}: {len(starts) - 1} whole cycles, true throughput {truth:,.1f} SPS "
          f"(steps ÷ wall time over whole cycles)")  # fmt: skip
    print(f"worker-reported rollout rate (what the table showed before): median {statistics.median(rollout):,.0f} SPS"
          f" = {statistics.median(rollout) / truth:.2f}x the truth")  # fmt: skip
    if not ratios:
        print("no live reading fell inside the measured cycles: give it more --timesteps")
        return 1
    print(f"live SPS / true throughput over {len(ratios)} readings: median {statistics.median(ratios):.3f}, "
          f"min {min(ratios):.3f}, max {max(ratios):.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
