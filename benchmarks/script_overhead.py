"""The cockpit's overhead on a user's own script: its SPS under `cockpit run -- ...` against bare.

What it measures: `examples/train_gridworld.py` (SB3 PPO on the example GridWorld env, with
`CockpitCallback()`) trains the same steps with the same seed, `--jobs` copies at once, two ways:
- under the cockpit: `cockpit run --headless --jobs N -- python examples/train_gridworld.py ...`,
  where the guard starts it, the supervisor follows its events, the 5 Hz sampler watches it, and
  its callback reports phases and progress and checkpoints every `--checkpoint-every` steps;
- bare: `python examples/train_gridworld.py ...` side by side, the callback inert.
Each script prints the steps it trained over the seconds `learn()` took; the benchmark reads that
line (from the job's stdout.log under the cockpit), so start-up and imports count on neither side.
The ratio is the mean SPS under the cockpit over the mean SPS bare.

Each repeat runs both sides one after the other, alternating which goes first.

Run from the repo root (the defaults take about 2 minutes on 2 cores):
    .venv/bin/python -m benchmarks.script_overhead
    .venv/bin/python -m benchmarks.script_overhead --jobs 2 --repeats 5 --timesteps 60000
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.common import REPO_ROOT, Summary, fmt_ratio, load_caption, print_table, side_by_side, warn_if_busy
from cockpit.contract.rundir import RunDir

EXAMPLE = REPO_ROOT / "examples" / "train_gridworld.py"
TRAINED = re.compile(r"trained ([\d,]+) steps in ([\d.]+) s")


def script_sps(output: str) -> float:
    """SPS from the script's own last line: the steps `learn()` trained over its seconds."""
    found = TRAINED.findall(output)
    if not found:
        raise RuntimeError(f"the script printed no 'trained ... steps' line:\n{output[-2000:]}")
    steps, seconds = found[-1]
    return int(steps.replace(",", "")) / float(seconds)


def script_args(timesteps: int, checkpoint_every: int) -> list[str]:
    return [str(EXAMPLE), "--timesteps", str(timesteps), "--checkpoint-every", str(checkpoint_every)]


def cockpit_side(jobs: int, timesteps: int, checkpoint_every: int, root: Path) -> float:
    """The mean of the scripts' SPS under `cockpit run --headless --jobs N`."""
    run_dir = root / "run"
    script = [sys.executable, *script_args(timesteps, checkpoint_every), "--seed", "{seed}", "--out", "{job_dir}"]
    cmd = [sys.executable, "-m", "cockpit", "run", "--headless", "--jobs", str(jobs), "--run-dir", str(run_dir),
           "--", *script]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO_ROOT)
    return statistics.fmean(
        script_sps(RunDir(run_dir).job(f"{i:03d}").path.joinpath("stdout.log").read_text()) for i in range(jobs)
    )


def bare_side(jobs: int, timesteps: int, checkpoint_every: int, root: Path) -> float:
    """The mean of the same scripts' SPS, started directly side by side."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                *script_args(timesteps, checkpoint_every),
                "--seed",
                str(i),
                "--out",
                str(root / f"bare-{i}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=REPO_ROOT,
        )
        for i in range(jobs)
    ]
    outputs = [p.communicate()[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError("a bare script failed")
    return statistics.fmean(script_sps(out) for out in outputs)


def main() -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1, help="scripts at once on each side (default: 1)")
    parser.add_argument("--timesteps", type=int, default=40_000, help="steps per script (default: 40000)")
    parser.add_argument("--checkpoint-every", type=int, default=4096, help="the example's default: 4096")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    before = warn_if_busy()
    measured = side_by_side(args.repeats, {
        "cockpit": lambda tmp: cockpit_side(args.jobs, args.timesteps, args.checkpoint_every, tmp),
        "bare": lambda tmp: bare_side(args.jobs, args.timesteps, args.checkpoint_every, tmp),
    }, "bench-script-")  # fmt: skip
    cockpit, bare = measured["cockpit"], measured["bare"]
    c, b = Summary(tuple(cockpit)), Summary(tuple(bare))
    ratio = statistics.fmean(cockpit) / statistics.fmean(bare)
    print_table(
        f"A user's script under cockpit run -- ... vs bare ({args.jobs} at once, mean of {args.repeats})",
        ["script", "steps", "ckpt every", "cockpit SPS (min–max)", "bare SPS (min–max)", "cockpit/bare"],
        [[EXAMPLE.name, f"{args.timesteps:,}", f"{args.checkpoint_every:,}", c.cell, b.cell, fmt_ratio(ratio)]],
        caption=load_caption(before),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
