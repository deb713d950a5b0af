"""The `cockpit` command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich import box
from rich.table import Table

from cockpit.arguments import ArgumentParser, non_negative_int, positive_int
from cockpit.console import output_console
from cockpit.presets import PRESET_KEYS, Preset, PresetError, builtin_names, load


def presets_table(presets: list[Preset]) -> Table:
    """One column per preset and one row per resolved value, plus the derived batch figures."""
    table = Table(title="cockpit presets", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("key", style="bold", no_wrap=True)
    for preset in presets:
        table.add_column(preset.name, justify="right", no_wrap=True)
    derived = [
        ("total batch", lambda p: f"{p.total_batch:,}"),
        ("minibatches/epoch", lambda p: str(p.minibatches)),
        ("grad steps/update", lambda p: f"{p.gradient_steps_per_update:,}"),
    ]
    hidden = {"description", "batch_size_cap"}
    for key in PRESET_KEYS:
        if key in hidden:
            continue
        cells = []
        for preset in presets:
            value = getattr(preset, key)
            if key == "net_arch":
                cells.append(",".join(map(str, value)))
            elif key == "batch_size" and preset.batch_size_auto:
                cells.append(f"{value:,} (auto, cap {preset.batch_size_cap:,})")
            elif isinstance(value, bool):
                cells.append(str(value).lower())
            elif isinstance(value, int):
                cells.append(f"{value:,}")
            else:
                cells.append(f"{value:g}" if isinstance(value, float) else str(value))
        table.add_row(key, *cells)
    table.add_section()
    for label, fmt in derived:
        table.add_row(label, *(fmt(p) for p in presets))
    return table


def _cmd_presets(args: argparse.Namespace) -> int:
    specs = args.preset or builtin_names()
    try:
        presets = [load(spec) for spec in specs]
    except PresetError as exc:
        print(f"cockpit presets: error: {exc}", file=sys.stderr)
        return 2
    console = output_console()
    console.print(presets_table(presets))
    for preset in presets:
        console.print(f"[bold]{preset.name}[/] ({preset.source}): {preset.description}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from cockpit.config import ConfigError, build_spec
    from cockpit.core.nvml import open_gpu
    from cockpit.core.runlog import read_run_log
    from cockpit.core.session import RunSession, exit_code, resume_spec_args
    from cockpit.core.telemetry import Sampler
    from cockpit.headless import HeadlessView

    command_line = ("cockpit", *sys.argv[1:]) if args.argv is None else ("cockpit", *args.argv)
    gpu, gpu_status = open_gpu()
    try:
        if args.resume is not None:
            fixed = [flag for flag, value in (("--agents", args.agents), ("--preset", args.preset), ("--env", args.env),
                     ("--timesteps", args.timesteps), ("--run-dir", args.run_dir)) if value is not None]  # fmt: skip
            if fixed:
                raise ConfigError(f"--resume continues a run with its recorded settings; drop {', '.join(fixed)}")
            try:
                recorded = read_run_log(args.resume)
                spec_args = resume_spec_args(args.resume, recorded)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"--resume {args.resume}: no usable run.toml there ({exc!r})") from exc
            if args.jobs is not None:
                spec_args["jobs"] = args.jobs
            spec = build_spec(**spec_args, headless=True, command_line=command_line, resuming=True)
        else:
            preset = args.preset or ("heavy" if gpu is not None else "cartpole")
            spec = build_spec(
                jobs=args.jobs or 2, agents=args.agents, preset=preset, env=args.env, timesteps=args.timesteps,
                seed=args.seed, run_dir=args.run_dir, max_restarts=args.max_restarts, pin=args.pin,
                headless=True, command_line=command_line,
            )  # fmt: skip
    except ConfigError as exc:
        if gpu is not None:
            gpu.close()
        print(f"cockpit run: error: {exc}", file=sys.stderr)
        return 2
    session = RunSession(spec, Sampler(gpu=gpu, gpu_status=gpu_status), resume=args.resume is not None)
    try:
        state = session.run(HeadlessView())
    except ConfigError as exc:
        print(f"cockpit run: error: {exc}", file=sys.stderr)
        return 2
    return exit_code(state, session.supervisor.interrupt_signal)


def _cmd_report(args: argparse.Namespace) -> int:
    from cockpit.config import ConfigError
    from cockpit.report import print_report

    try:
        print_report(args.run_dir)
    except ConfigError as exc:
        print(f"cockpit report: error: {exc}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> ArgumentParser:
    """The `cockpit` command and its subcommands."""
    parser = ArgumentParser(
        prog="cockpit",
        description="Keep one GPU workstation busy with parallel PPO training jobs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    presets = sub.add_parser(
        "presets",
        help="list the training presets with their resolved values",
        description="Show every preset's resolved PPO settings, its total batch per rollout and "
        "its gradient steps per update. Give names or .toml paths to show just those.",
    )
    presets.add_argument("preset", nargs="*", help="preset names or .toml files (default: all built-in presets)")
    presets.set_defaults(func=_cmd_presets)

    run = sub.add_parser(
        "run",
        help="train N PPO agents in parallel, supervised, with a live table and a TOML run log",
        description="Start PPO training workers (stable-baselines3 on envpool), at most --jobs at a time,\n"
        "restart crashed ones from their checkpoints, sample the GPU (NVML, 5 Hz) and CPU, and\n"
        "write RUN_DIR/run.toml. Ctrl-C checkpoints every job and stops; --resume RUN_DIR continues.",
        epilog="Examples:\n  cockpit run                          2 cartpole jobs on a CPU machine (heavy on a GPU)\n"
        "  cockpit run --jobs 4 --preset heavy\n  cockpit run --agents 20 --jobs 4 --timesteps 500000\n"
        "  cockpit run --resume runs/20261121T230000Z-heavy-LunarLander-v3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--jobs", type=positive_int, metavar="N", help="workers running at once (default: 2)")
    run.add_argument(
        "--agents", type=positive_int, metavar="M", help="agents to train in all, seeds S..S+M-1 (default: N)"
    )
    run.add_argument(
        "--preset", metavar="P", help="preset name or .toml file (default: heavy with a GPU, cartpole without)"
    )
    run.add_argument("--env", metavar="ENV", help="environment id (default: the preset's env)")
    run.add_argument("--timesteps", type=positive_int, metavar="T", help="steps per agent (default: the preset's)")
    run.add_argument("--seed", type=non_negative_int, default=0, metavar="S", help="first agent's seed (default: 0)")
    run.add_argument(
        "--run-dir", type=Path, metavar="DIR", help="where the run goes (default: runs/<UTC time>-<preset>-<env>)"
    )
    run.add_argument("--headless", action="store_true", help="plain terminal output (the default until the TUI lands)")
    run.add_argument("--pin", action="store_true", help="pin each parallel slot to its own CPU cores")
    run.add_argument(
        "--max-restarts",
        type=non_negative_int,
        default=3,
        metavar="K",
        help="restarts of a crashed job before it is marked failed (default: 3; back-off 1 s, 2 s, 4 s...)",
    )
    run.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue an interrupted run's unfinished jobs")
    run.set_defaults(func=_cmd_run)

    report = sub.add_parser(
        "report",
        help="summarize a finished or live run from its run.toml",
        description="Print a run's config, host, GPU, per-job results and utilization by phase.",
    )
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run's directory")
    report.set_defaults(func=_cmd_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `cockpit` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    if args.command is None:
        parser.print_help()
        return 0
    return args.func(args)
