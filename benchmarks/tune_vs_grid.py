"""`cockpit tune` against an exhaustive grid, on this machine, for CartPole-v1 and Pong-v5.

What it measures, per env, all in one run:
1. The grid: every configuration of `tune`'s search space (parallel jobs x n_envs, the batch
   following) measured with the same real trials `tune` runs (`cockpit.core.sizing.trials`), each for
   `--measure` seconds after start-up. Its best aggregate SPS is the reference.
2. `tune` itself: the probe of this machine's costs (`cockpit.core.sizing.cost_probe`, run fresh into a
   temporary cache, as a first-time user would) and the climb (`cockpit.core.sizing.tune_search.climb`, the code
   behind the command) with a budget of `--tune-share` (default 0.30) of the grid's wall time
   less the probe's. Tune's time is the probe's plus the climb's.
3. The figures, as ratios:
   - tune's pick / grid best, both as the grid measured them (goal >= 0.95), and tune's time /
     the grid's time (goal <= 0.30);
   - tune's pick / the seeds' "before" setup (one job, one env, batch 32), measured the same way;
   - recommend's static pick (hardware facts and the probe's costs) / grid best.

CartPole runs the `cartpole` preset; Pong-v5 runs a CPU-sized Atari preset written here (8 envs,
64 steps, batch 256, 2 epochs), since the GPU presets' rollouts take minutes on 2 cores.

Run from the repo root (about 20 minutes on 2 cores):
    .venv/bin/python -m benchmarks.tune_vs_grid
    .venv/bin/python -m benchmarks.tune_vs_grid --envs cartpole --measure 8
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import fmt_ratio, load_caption, log, print_table, warn_if_busy
from cockpit.contract.presets import load
from cockpit.core.sizing.cost_probe import measured_costs
from cockpit.core.sizing.hill_climb import Config
from cockpit.core.sizing.starting_point import this_machine
from cockpit.core.sizing.trials import run_trial
from cockpit.core.sizing.tune_search import climb, search_space, start_config

PONG_CPU = """
description = "Pong on a CPU: small rollouts and few epochs so a trial sees whole updates"
env = "Pong-v5"
n_envs = 8
n_steps = 64
batch_size = 256
n_epochs = 2
net_arch = [256]
checkpoint_every = 100000000
"""
BEFORE = Config(jobs=1, n_envs=1, batch_size=32)  # the seeds' "current setup": train.py, 1 env, batch 32


def bench_env(name: str, preset_spec: str, measure_s: float, tune_share: float, workdir: Path) -> list[list[str]]:
    preset = load(preset_spec)
    machine = this_machine()
    space = search_space(preset, machine.physical_cores)
    grid = space.grid()
    log(f"{name}: grid of {len(grid)} configurations, {measure_s:.0f} s each after start-up")
    began = time.monotonic()
    measured: dict[Config, float] = {}
    for i, config in enumerate(grid):
        trial = run_trial(preset, config, workdir=workdir / f"{name}-grid-{i}", measure_s=measure_s,
                          physical_cores=machine.physical_cores)  # fmt: skip
        measured[config] = trial.sps
        log(f"  {config.label():<28} {trial.sps:>9,.0f} SPS")
    grid_s = time.monotonic() - began
    best = max(measured, key=lambda c: measured[c])
    probe_began = time.monotonic()
    costs = measured_costs(preset, machine.gpu_name)
    probe_s = time.monotonic() - probe_began
    log(f"{name}: probe {probe_s:.0f} s: {costs.describe()}")
    log(f"{name}: tune with a budget of {tune_share:.0%} of {grid_s:.0f} s, less the probe's")
    result = climb(preset, machine, tune_share * grid_s - probe_s, workdir=workdir / f"{name}-tune", costs=costs)
    for trial in result.trials:
        log(f"  tune: {trial.config.label():<28} {trial.sps:>9,.0f} SPS")
    tune_s = probe_s + result.seconds
    picked = result.best
    before = run_trial(preset, BEFORE, workdir=workdir / f"{name}-before", measure_s=measure_s,
                       physical_cores=machine.physical_cores).sps  # fmt: skip
    static = start_config(preset, machine, costs)
    picked_sps = measured.get(picked, next(t.sps for t in result.trials if t.config == picked))
    return [
        [name, "grid best", best.label(), f"{measured[best]:,.0f}", "1.000", f"{grid_s:.0f}"],
        [name, "tune's pick", picked.label(), f"{picked_sps:,.0f}", fmt_ratio(picked_sps / measured[best]),
         f"{tune_s:.0f} ({fmt_ratio(tune_s / grid_s)} of grid)"],
        [name, "recommend's static pick", static.label(), f"{measured[static]:,.0f}",
         fmt_ratio(measured[static] / measured[best]), f"{probe_s:.0f} (the probe)"],
        [name, "seeds' before (1 job, 1 env, batch 32)", BEFORE.label(), f"{before:,.0f}",
         fmt_ratio(before / measured[best]), "-"],
        [name, "tune's pick / before", "", "", fmt_ratio(picked_sps / before), ""],
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default="cartpole,pong", help="which to run: cartpole, pong (default both)")
    parser.add_argument("--measure", type=float, default=10.0, help="seconds each grid trial measures (default 10)")
    parser.add_argument("--tune-share", type=float, default=0.30, help="tune's budget / grid time (default 0.30)")
    args = parser.parse_args()
    load_before = warn_if_busy()
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as tmp:
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")  # a fresh probe, timed as tune's
        pong = Path(tmp) / "pong-cpu.toml"
        pong.write_text(PONG_CPU)
        specs = {
            "cartpole": ("CartPole-v1", "cartpole", args.measure),
            "pong": ("Pong-v5", str(pong), args.measure * 2),
        }
        for key in args.envs.split(","):
            name, spec, measure_s = specs[key.strip()]
            rows += bench_env(name, spec, measure_s, args.tune_share, Path(tmp))
    print_table("tune vs exhaustive grid (aggregate SPS, same run)",
                ["env", "configuration", "jobs x envs, batch", "SPS", "/ grid best", "seconds"], rows,
                text_columns=3, caption=load_caption(load_before))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
