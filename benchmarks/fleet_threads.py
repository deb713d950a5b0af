"""One job alone at 1 and at K env threads, in turns: `python -m benchmarks.fleet threads`.

What it settles: cockpit gives a lone job every core's envpool thread, and on the CPU as many torch
threads for its train phase, and the overlap model credits the extra threads with the env's own
step (`Costs.on_env_threads`) and the train phase's measured speedup (`Costs.on_train_threads`). Whether a job gains
that much is measured here: one worker at a time (the `overlap` benchmark's workload and its
`measure`: whole rollout + train cycles after the first, only those while other processes used at
most `--max-foreign` cores), alternating the thread counts turn by turn (1, K, K, 1, 1, K, ...)
so that the machine's drift over minutes falls on both alike. It prints each turn's SPS, each
count's mean, and the mean ratio K threads / 1 thread beside the model's for the cached costs.

Run from the repo root (about 2 minutes a turn for Pong on 2 quiet cores):
    .venv/bin/python -m benchmarks.fleet threads --only pong --turns 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.common import fmt_ratio, fmt_sps, log, print_table, warn_if_busy
from benchmarks.fleet_overlap import measure, workloads
from cockpit.core.sizing.overlap import speed_of
from cockpit.core.sizing.starting_point import costs_for, this_machine


def main(argv: list[str] | None = None) -> int:
    """Measure, then print the table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet threads", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("cartpole", "pong"), default="pong", help="the workload (default: pong)")
    parser.add_argument("--threads", type=int, default=2, metavar="K", help="the env threads to compare with 1 "
                        "(default: 2)")  # fmt: skip
    parser.add_argument("--turns", type=int, default=3, metavar="T", help="measurements of each count (default: 3)")
    parser.add_argument("--seconds", type=float, default=10.0, metavar="S",
                        help="seconds of clean cycles a measurement counts (default: 10)")  # fmt: skip
    parser.add_argument("--warmup", type=float, default=5.0, metavar="S", help="seconds before any cycle counts")
    parser.add_argument("--max-foreign", type=float, default=0.15, metavar="CORES",
                        help="the most CPU other processes may use during a clean cycle (default: 0.15)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=150.0, metavar="S",
                        help="seconds to wait for clean cycles before counting every cycle (default: 150)")  # fmt: skip
    parser.add_argument("--pong-n-steps", type=int, default=128, metavar="K", help="Pong's n_steps (default: 128)")
    parser.add_argument("--pong-epochs", type=int, default=2, metavar="K", help="Pong's n_epochs (default: 2)")
    args = parser.parse_args(argv)
    counts = (1, args.threads)
    warn_if_busy()
    sps: dict[int, list[float]] = {k: [] for k in counts}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-threads-") as tmp:
        (workload,) = workloads(args.only, args.pong_n_steps, args.pong_epochs, Path(tmp))
        for turn in range(args.turns):
            for k in counts if turn % 2 == 0 else counts[::-1]:
                log(f"turn {turn + 1}: {workload.label}, one job on {k} env thread(s)")
                got = measure(workload, 1, args, Path(tmp) / f"turn{turn}-{k}", threads=k)
                sps[k].append(got.sps)
                rows.append([str(turn + 1), str(k), fmt_sps(got.sps), "yes" if got.clean else "no",
                             f"{got.foreign_cores:.2f}"])  # fmt: skip
        machine = this_machine()
        costs = costs_for(log, machine, workload.preset)
    print_table(f"{workload.label}: one job, 1 vs {args.threads} env threads in turns",
                ["turn", "env threads", "SPS", "clean", "others' cores"], rows)  # fmt: skip
    ratio = statistics.fmean(sps[args.threads]) / statistics.fmean(sps[1])
    modelled = "-"
    if costs is not None:
        # One job given 1 core, then K: its envpool and (on the CPU) torch threads both follow.
        one = speed_of(workload.preset, costs, 1, 1).sps
        more = speed_of(workload.preset, costs, 1, args.threads).sps
        modelled = fmt_ratio(more / one)
    print(f"mean SPS: 1 thread {fmt_sps(statistics.fmean(sps[1]))}, {args.threads} threads "
          f"{fmt_sps(statistics.fmean(sps[args.threads]))}: measured ratio {fmt_ratio(ratio)}, "
          f"the model's credit {modelled}")  # fmt: skip
    return 0
