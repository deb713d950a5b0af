"""Ray against local: 2 jobs through `RayLauncher` on a local Ray, against `LocalLauncher`; and how
long a job lost with its node takes to run again.

What it measures:
1. The aggregate steps per second of `cockpit run --headless --jobs 2 --ray` (a local Ray instance
   started by the run; each job an actor that starts its worker) as a fraction of the same run
   without `--ray` (the workers as the cockpit's own subprocesses). The goal is >= 0.95.
2. On a cluster of two `ray start` nodes on this machine (benchmarks/raycluster.py, the head's
   failure detector at 0.5 s x 3 misses instead of Ray's default): a one-job run whose first
   attempt runs on the second node, which is killed once the job has checkpointed. It reports the
   seconds from the loss to the supervisor seeing the job fail, and to the requeued attempt's
   `started` event (its worker, on the head, has resumed from the checkpoint).

How: for 1, each repeat runs both sides one after the other (alternating which goes first), in
fresh processes. Aggregate SPS = the two jobs' steps together / (last `finished` - first
`started`), from the jobs' own events (supervision_overhead.aggregate_sps), so the start-up of
processes, imports and of Ray itself count on neither side.

Run from the repo root (defaults take about 5 minutes on 2 cores):
    .venv/bin/python -m benchmarks.ray_launcher
    .venv/bin/python -m benchmarks.ray_launcher --repeats 5 --timesteps 100000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import Summary, fmt_ratio, load_caption, log, print_table, side_by_side, warn_if_busy
from benchmarks.raycluster import LocalCluster, loss_preset, run_through_node_loss
from benchmarks.supervision_overhead import JOBS, aggregate_sps
from cockpit.contract.events import EVENTS_FILE, StartedEvent, of_kind, read_events
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import read


def run_side(preset: str, timesteps: int, seed: int, root: Path, *, ray: bool) -> float:
    """Aggregate SPS of `cockpit run --headless --jobs 2`, with `--ray` (a local instance) or without."""
    run_dir = root / "run"
    cmd = [sys.executable, "-m", "cockpit", "run", "--headless", "--jobs", str(JOBS), "--preset", preset,
           "--timesteps", str(timesteps), "--seed", str(seed), "--run-dir", str(run_dir)]  # fmt: skip
    if ray:
        cmd.append("--ray")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return aggregate_sps([RunDir(run_dir).job(f"{i:03d}").path for i in range(JOBS)])


def node_loss() -> tuple[float, float]:
    """Seconds from the second node's loss to the first tick that shows its job failed (in
    back-off), and to the job's next attempt's `started` event."""
    cluster = LocalCluster()
    with tempfile.TemporaryDirectory(prefix="bench-ray-loss-") as tmp:
        root = Path(tmp)
        preset = loss_preset(root)
        storage = root / "storage"
        storage.mkdir()
        try:
            cluster.start(head_cpus=1)
            loss = run_through_node_loss(cluster, storage, preset)
        finally:
            cluster.stop()
        if loss.lost_at is None or len(read(loss.spec.run_dir).jobs) != 1:
            raise RuntimeError("the node was never lost")
        started = of_kind(read_events(RunDir(loss.spec.run_dir).job("000").path / EVENTS_FILE), StartedEvent)
        if len(started) != 2:
            raise RuntimeError(f"expected 2 attempts, the job had {len(started)}")
        failed_at = loss.failed_at if loss.failed_at is not None else float("nan")  # missed between ticks
        return failed_at - loss.lost_at, started[1].t - loss.lost_at


def main() -> int:
    """Run the benchmark and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cartpole")
    parser.add_argument("--timesteps", type=int, default=50_000, help="steps per job (default: 50000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    before = warn_if_busy()
    measured = side_by_side(args.repeats, {
        "ray": lambda tmp: run_side(args.preset, args.timesteps, args.seed, tmp, ray=True),
        "local": lambda tmp: run_side(args.preset, args.timesteps, args.seed, tmp, ray=False),
    }, "bench-ray-")  # fmt: skip
    r, local = Summary(tuple(measured["ray"])), Summary(tuple(measured["local"]))
    ratio = r.median / local.median
    verdict = "ok" if ratio >= 0.95 else "BELOW"
    print_table(
        f"RayLauncher on a local Ray vs LocalLauncher: {JOBS} CartPole jobs (median of {args.repeats})",
        ["preset", "steps/job", "Ray SPS (min–max)", "local SPS (min–max)", "ray/local", ">= 0.95"],
        [[args.preset, f"{args.timesteps:,}", r.cell, local.cell, fmt_ratio(ratio), verdict]],
        caption=load_caption(before),
    )
    log("node loss: a head and a second node, the second killed mid-run")
    seen_s, running_s = node_loss()
    print_table(
        "A node lost mid-run (2 ray start nodes here; head's health check 0.5 s x 3)",
        ["", "seconds after the loss"],
        [["job seen failed (actor gone)", f"{seen_s:.1f}"], ["job running again (its `started`)", f"{running_s:.1f}"]],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
