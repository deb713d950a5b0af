"""The `cockpit` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from cockpit.arguments import ArgumentParser, non_negative_int, positive_int
from cockpit.console import output_console
from cockpit.presets import PRESET_KEYS, Preset, PresetError, builtin_names, load

if TYPE_CHECKING:
    from cockpit.config import RunSpec
    from cockpit.core.advisor import Costs
    from cockpit.core.autotune import AutoTuner
    from cockpit.core.feed import Frame, RunSource
    from cockpit.core.nvml import GpuReader


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


def _interactive() -> bool:
    """True when stdin and stdout are a terminal the TUI can take over."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def _background_args(spec: RunSpec, args: argparse.Namespace) -> list[str]:
    """`cockpit run --headless` arguments that reproduce a validated spec in the background."""
    auto = ["--auto", "--auto-window", str(args.auto_window)] if args.auto else []
    if args.resume is not None:
        jobs = ["--jobs", str(args.jobs)] if args.jobs is not None else []
        return ["--resume", str(args.resume), *jobs, *auto, "--typed", json.dumps(spec.command_line)]
    # fmt: off
    flags = [
        "--jobs", str(spec.jobs), "--agents", str(spec.agents), "--preset", spec.preset_arg, "--env", spec.env,
        "--timesteps", str(spec.timesteps), "--seed", str(spec.seed), "--run-dir", str(spec.run_dir),
        "--max-restarts", str(spec.max_restarts),
    ]
    # fmt: on
    return [*flags, *auto, *(["--pin"] if spec.pin else []), "--typed", json.dumps(spec.command_line)]


def _view_in_tui(source: RunSource, *, who: str) -> int:
    """Run the cockpit on `source`, then say what became of the run."""
    from cockpit.tui.app import make_app

    return _after_view(make_app(source).run(), source, who=who)


def _after_view(frame: Frame | None, source: RunSource, *, who: str) -> int:
    """The exit code and closing lines once the viewer quit: 0 when the run goes on without it
    (or was a replay), else the run's own exit code (0 done, 1 failed, 130 stopped)."""
    from cockpit.core.feed import Replay
    from cockpit.core.session import exit_code
    from cockpit.core.state import RunStatus
    from cockpit.headless import summary_lines

    if frame is None:
        return 0
    state = frame.state
    if isinstance(source, Replay):
        return 0
    if frame.link_error is None and state.status in (RunStatus.RUNNING, RunStatus.STOPPING):
        print(f"{who}: the run goes on in the background; see it again with: cockpit attach {state.run_dir}")
        return 0
    for line in summary_lines(state, f"{state.run_dir}/run.toml"):
        print(line)
    return exit_code(state)


def _cmd_run(args: argparse.Namespace) -> int:
    from cockpit.config import ConfigError, build_spec
    from cockpit.core.nvml import open_gpu
    from cockpit.core.runlog import read_run_log
    from cockpit.core.session import RunSession, exit_code, resume_spec_args
    from cockpit.core.telemetry import Sampler
    from cockpit.headless import HeadlessView

    command_line = ("cockpit", *sys.argv[1:]) if args.argv is None else ("cockpit", *args.argv)
    if args.typed is not None:
        try:
            typed = json.loads(args.typed)
        except json.JSONDecodeError:
            typed = None
        if not (isinstance(typed, list) and typed and all(isinstance(word, str) for word in typed)):
            print("cockpit run: error: --typed: give the command line as a JSON list of strings", file=sys.stderr)
            return 2
        command_line = tuple(typed)
    headless = args.headless or not _interactive()
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
            spec = build_spec(**spec_args, headless=headless, command_line=command_line, resuming=True)
        else:
            preset = args.preset or ("heavy" if gpu is not None else "cartpole")
            spec = build_spec(
                jobs=args.jobs or (1 if args.auto else 2), agents=args.agents, preset=preset, env=args.env,
                timesteps=args.timesteps, seed=args.seed, run_dir=args.run_dir, max_restarts=args.max_restarts,
                pin=args.pin, headless=headless, command_line=command_line,
            )  # fmt: skip
    except ConfigError as exc:
        if gpu is not None:
            gpu.close()
        print(f"cockpit run: error: {exc}", file=sys.stderr)
        return 2
    if not headless:
        if gpu is not None:
            gpu.close()
        return _run_in_tui(spec, args)
    auto = _auto_tuner(spec, gpu, args.auto_window) if args.auto else None
    session = RunSession(spec, Sampler(gpu=gpu, gpu_status=gpu_status), resume=args.resume is not None, auto=auto,
                         costs=_cached_costs(spec, gpu))  # fmt: skip
    try:
        state = session.run(HeadlessView())
    except ConfigError as exc:
        print(f"cockpit run: error: {exc}", file=sys.stderr)
        return 2
    return exit_code(state, session.supervisor.interrupt_signal)


def _cached_costs(spec: RunSpec, gpu: GpuReader | None) -> Costs | None:
    """The costs `recommend` or `tune` measured for this run's preset on this machine, if any:
    a run never waits for a probe."""
    import dataclasses

    from cockpit.costs import cached_costs

    return cached_costs(dataclasses.replace(spec.preset, env=spec.env), gpu.info.name if gpu is not None else None)


def _auto_tuner(spec: RunSpec, gpu: GpuReader | None, window_s: float) -> AutoTuner:
    """The --auto loop for this machine: capped by the cores the preset's envs need."""
    import dataclasses

    from cockpit.core.advisor import envs_per_core, max_jobs_for_cores
    from cockpit.core.autotune import AutoTuner
    from cockpit.core.clock import SystemClock
    from cockpit.core.host import host_info

    preset = dataclasses.replace(spec.preset, env=spec.env)
    cores = host_info().physical_cores
    return AutoTuner(SystemClock(), max_slots=max_jobs_for_cores(preset, cores), n_envs=preset.n_envs,
                     env_capacity=envs_per_core(spec.env) * cores,
                     gpu_memory_bytes=gpu.info.memory_total_bytes if gpu is not None else None,
                     window_s=window_s, settle_s=window_s / 3)  # fmt: skip


def _run_in_tui(spec: RunSpec, args: argparse.Namespace) -> int:
    """Start the validated run in the background and open the cockpit on it."""
    from cockpit.background import attach_when_ready, spawn
    from cockpit.core.feed import SourceError

    run = spawn(_background_args(spec, args), spec.run_dir)
    print(f"cockpit run: starting {spec.agents} job(s) in {spec.run_dir} (log: {run.log})", file=sys.stderr)
    try:
        source = attach_when_ready(run)
    except SourceError as exc:
        print(f"cockpit run: error: {exc}", file=sys.stderr)
        return 2
    return _view_in_tui(source, who="cockpit run")


def _cmd_attach(args: argparse.Namespace) -> int:
    from cockpit.core.feed import SourceError
    from cockpit.tui.opener import open_run

    try:
        source = open_run(args.run_dir)
    except SourceError as exc:
        print(f"cockpit attach: error: {exc}", file=sys.stderr)
        return 2
    if not _interactive():
        source.close()
        print(f"cockpit attach: error: the cockpit needs a terminal; without one, read: cockpit report {args.run_dir}",
              file=sys.stderr)  # fmt: skip
        return 2
    return _view_in_tui(source, who="cockpit attach")


def _cmd_launcher(parser: ArgumentParser) -> int:
    from cockpit.tui.app import make_app
    from cockpit.tui.opener import LocalOpener

    if not _interactive():
        parser.print_help()
        return 0
    app = make_app(opener=LocalOpener())
    frame = app.run()
    return _after_view(frame, app.source, who="cockpit") if app.source is not None else 0


def _cmd_recommend(args: argparse.Namespace) -> int:
    from cockpit.config import ConfigError
    from cockpit.recommend import recommend

    try:
        recommend(output_console(), preset=args.preset, env=args.env, jobs=args.jobs, run_dir=args.run_from,
                  probe=not args.no_probe)  # fmt: skip
    except ConfigError as exc:
        print(f"cockpit recommend: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from cockpit.config import ConfigError
    from cockpit.recommend import this_machine
    from cockpit.tune import tune

    try:
        tune(output_console(), preset=args.preset, env=args.env, budget=args.budget, out=args.out,
             machine=this_machine())  # fmt: skip
    except ConfigError as exc:
        print(f"cockpit tune: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the trial's workers are already gone (run_trial kills them)
        print("cockpit tune: interrupted; nothing written", file=sys.stderr)
        return 130
    return 0


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
        description="Keep one GPU workstation busy with parallel PPO training jobs.\n"
        "With no command on a terminal, cockpit opens the launcher: pick a preset, env and jobs, or reopen a run.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        "  cockpit run --auto --agents 16       size the parallel jobs by measuring\n"
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
    run.add_argument(
        "--headless",
        action="store_true",
        help="no TUI: a live table on a terminal, plain lines otherwise (the default when not on a terminal)",
    )
    run.add_argument("--pin", action="store_true", help="pin each parallel slot to its own CPU cores")
    # What the user typed, for run.toml, when `cockpit run` on a terminal runs itself in the background.
    run.add_argument("--typed", metavar="JSON", help=argparse.SUPPRESS)
    run.add_argument(
        "--auto",
        action="store_true",
        help="size the run by measuring: start at --jobs (default 1), add a job per ~30 s window while the "
        "aggregate SPS gains >= 5%% and cores and GPU memory allow (take back one that hurts), then double "
        "n_envs the same way (jobs checkpoint and resume with it)",
    )
    run.add_argument(
        "--auto-window",
        type=positive_int,
        default=30,
        metavar="S",
        help="seconds of each --auto measurement (default: 30; jobs settle for a third of it first)",
    )
    run.add_argument(
        "--max-restarts",
        type=non_negative_int,
        default=3,
        metavar="K",
        help="restarts of a crashed job before it is marked failed (default: 3; back-off 1 s, 2 s, 4 s...)",
    )
    run.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue an interrupted run's unfinished jobs")
    run.set_defaults(func=_cmd_run)

    rec = sub.add_parser(
        "recommend",
        help="advice for this machine: jobs, n_envs, batch size and preset, from hardware or a finished run",
        description="Recommend the number of parallel jobs, n_envs, batch size and preset for this machine's\n"
        "cores and GPU memory, before any run (hardware facts alone) or from a run's measurements\n"
        "(--from RUN_DIR: utilization by phase, GPU memory peaks, CPU). Prints the numbers it used.\n\n"
        "The first time for a preset and env it measures what one job costs here (5-15 s: a few\n"
        "real PPO steps on 2 and 16 envs) and keeps the figures in ~/.cache/cockpit/costs.toml;\n"
        "they size n_envs and the core budget. --no-probe uses the seeds' envs-per-core table.",
        epilog="Examples:\n  cockpit recommend\n  cockpit recommend --preset beast --jobs 4\n"
        "  cockpit recommend --from runs/20261121T230000Z-heavy-LunarLander-v3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rec.add_argument("--preset", metavar="P", help="preset name or .toml file (default: the run's, or heavy/cartpole)")
    rec.add_argument("--env", metavar="ENV", help="environment id (default: the preset's)")
    rec.add_argument("--jobs", type=positive_int, metavar="N", help="parallel jobs planned (default: the run's, or 2)")
    rec.add_argument("--from", dest="run_from", type=Path, metavar="RUN_DIR", help="use this run's measurements")
    rec.add_argument("--no-probe", action="store_true", help="hardware facts and tables only: measure nothing")
    rec.set_defaults(func=_cmd_recommend)

    tune = sub.add_parser(
        "tune",
        help="measure a few jobs x n_envs configurations within a time budget and write the fastest as a preset",
        description="A time-boxed search, not an exhaustive one: from recommend's pick, it climbs over parallel\n"
        "jobs x n_envs (the batch size follows, always a divisor of the rollout), running short trials\n"
        "of real workers that measure the aggregate SPS and the CPU and GPU use. It prints every trial and\n"
        "writes the winner as a preset TOML, with the --jobs to run it with. Recommend's pick comes\n"
        "from this machine's measured costs (measured once, 5-15 s of the budget; see recommend).",
        epilog="Examples:\n  cockpit tune --preset heavy --budget 10m\n"
        "  cockpit tune --preset cartpole --env CartPole-v1 --budget 90s --out presets-mine/cp.toml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tune.add_argument(
        "--preset", metavar="P", help="preset to start from (default: heavy with a GPU, cartpole without)"
    )
    tune.add_argument("--env", metavar="ENV", help="environment id (default: the preset's)")
    tune.add_argument(
        "--budget", default="5m", metavar="TIME", help="time for the whole search: 90s, 5m, 1h (default 5m)"
    )
    tune.add_argument(
        "--out", type=Path, metavar="FILE", help="where the winner goes (default: tuned-<preset>-<env>.toml)"
    )
    tune.set_defaults(func=_cmd_tune)

    attach = sub.add_parser(
        "attach",
        help="open the cockpit on a run supervised elsewhere (tmux, nohup, another login), or replay a finished one",
        description="Attach the cockpit to a live run through its control socket (RUN_DIR/cockpit.sock, mode 0600:\n"
        "only you can connect). Several viewers may attach at once, and quitting one leaves the run going.\n"
        "A finished run opens read-only as a replay, with a timeline to scrub.",
        epilog="Example:\n  tmux new -d 'cockpit run --headless --jobs 4'   then   cockpit attach runs/<run>",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    attach.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run's directory")
    attach.set_defaults(func=_cmd_attach)

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
        return _cmd_launcher(parser)
    return args.func(args)
