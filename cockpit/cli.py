"""The `cockpit` command line: it parses the command line and dispatches to a command; nothing else.

Each command's work lives in its own module under cockpit.commands, imported only when that command
runs, so that `cockpit --help` or a mistyped flag answers without loading the rest. Here: the
dispatchers, one helper per flag that several commands take, chiefly `run` and `fleet` (one
declaration, so its spelling, type, default and metavar cannot drift apart between them), one function
per command adding its subparser, `build_parser` and `main`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cockpit.contract.arguments import ArgumentParser, positive_float, positive_int
from cockpit.contract.settings import add_flags

if TYPE_CHECKING:
    from cockpit.views.terminal import TerminalFrontEnds

    # What `add_subparsers` returns: each command function adds its parser to it.
    Commands = argparse._SubParsersAction[ArgumentParser]


def _front_ends() -> TerminalFrontEnds:
    """The terminal front ends (TUI, live table, plain lines) that the commands drive."""
    # Imported here: Textual loads only for a command that shows something.
    from cockpit.views.terminal import TerminalFrontEnds

    return TerminalFrontEnds()


def _cmd_presets(args: argparse.Namespace) -> int:
    """`cockpit presets`: returns its exit code."""
    from cockpit.commands import presets

    return presets.main(args.preset)


def _cmd_run(args: argparse.Namespace) -> int:
    """`cockpit run`: returns its exit code."""
    from cockpit.commands import run

    return run.main(args, _front_ends())


def _cmd_attach(args: argparse.Namespace) -> int:
    """`cockpit attach`: returns its exit code."""
    from cockpit.commands import attach

    return attach.main(args.run_dir, _front_ends())


def _cmd_launcher(parser: ArgumentParser) -> int:
    """`cockpit` with no command: the start screen on a terminal, else the help; returns the exit code."""
    from cockpit.commands.console import interactive

    if not interactive():
        parser.print_help()
        return 0
    return _front_ends().start_screen()


def _cmd_recommend(args: argparse.Namespace) -> int:
    """`cockpit recommend`: returns its exit code."""
    from cockpit.commands.recommend import main as recommend

    return recommend(preset=args.preset, env=args.env, jobs=args.jobs, run_dir=args.run_from, probe=not args.no_probe)


def _cmd_tune(args: argparse.Namespace) -> int:
    """`cockpit tune`: returns its exit code."""
    from cockpit.commands.tune import main as tune

    return tune(preset=args.preset, env=args.env, budget=args.budget, out=args.out)


def _cmd_fleet(args: argparse.Namespace) -> int:
    """`cockpit fleet`: returns its exit code."""
    from cockpit.commands.fleet import main as fleet

    return fleet(args, _front_ends())


def _cmd_report(args: argparse.Namespace) -> int:
    """`cockpit report`: returns its exit code."""
    from cockpit.commands.report import main as report

    return report(args.run_dir, as_json=args.json, html=args.html, png_dir=args.png)


def _cmd_play(args: argparse.Namespace) -> int:
    """`cockpit play`: returns its exit code."""
    from cockpit.commands.play import main as play

    return play(args)


def _cmd_export(args: argparse.Namespace) -> int:
    """`cockpit export TARGET`: returns its exit code."""
    from cockpit.commands.export import main as export

    return export(args)


# Flags that several commands take, chiefly `run` and `fleet`. Where the commands word a flag's help
# differently (jobs or agents, a run or a fleet), the caller passes the help; everything else about the
# flag is declared here once. Each is called at the place the flag has in its command's usage, so the
# helpers fix no order.


def _add_jobs_flag(parser: ArgumentParser, help_text: str) -> None:
    """`--jobs N`, the jobs running at once: for `run`, `fleet` and `recommend`."""
    parser.add_argument("--jobs", type=positive_int, metavar="N", help=help_text)


def _add_resume_flag(parser: ArgumentParser, help_text: str) -> None:
    """`--resume RUN_DIR`, continue an interrupted run: for `run` and `fleet`."""
    parser.add_argument("--resume", type=Path, metavar="RUN_DIR", help=help_text)


def _add_headless_flag(parser: ArgumentParser) -> None:
    """`--headless`, no TUI: for `run` and `fleet`."""
    parser.add_argument(
        "--headless",
        action="store_true",
        help="no TUI: a live table on a terminal, plain lines otherwise (the default when not on a terminal)",
    )


def _add_background_flags(parser: ArgumentParser, verb: str) -> None:
    """`--typed JSON` and `--spec JSON`, hidden: what a terminal's `cockpit VERB` hands the copy of
    itself it starts in the background (`cockpit.core.session.background.spec_argv`)."""
    # What the user typed, for run.toml to record rather than the background run's own command line.
    parser.add_argument("--typed", metavar="JSON", help=argparse.SUPPRESS)
    # The run it validated, as data (`cockpit.contract.settings.encode`): no flag is spelled again.
    parser.add_argument("--spec", metavar="JSON", help=argparse.SUPPRESS)


def _add_cluster_flags(parser: ArgumentParser, what: str) -> None:
    """`--ray [ADDRESS]` and `--storage DIR`, for `run` and `fleet` (docs/ray.md)."""
    parser.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help=f"run the {what} on Ray: the cluster at ADDRESS (host:port of its head), or without one a "
        "local Ray instance started for it (needs pip install 'cockpit[ray]'; see docs/ray.md)",
    )
    parser.add_argument(
        "--storage",
        type=Path,
        metavar="DIR",
        help="with --ray: the directory every node mounts at the same path; the run directory goes there "
        "(job dirs, checkpoints). Required on a cluster of more than one node",
    )


def _add_from_flag(parser: ArgumentParser, help_text: str) -> None:
    """`--from RUN_DIR`, use a finished run's measurements: for `recommend` and `fleet`."""
    # dest: `from` is a Python keyword, and both commands read args.run_from.
    parser.add_argument("--from", dest="run_from", type=Path, metavar="RUN_DIR", help=help_text)


def _add_presets_command(commands: Commands) -> None:
    """`cockpit presets [PRESET ...]`."""
    presets = commands.add_parser(
        "presets",
        help="list the training presets with their resolved values",
        description="Show every preset's resolved PPO settings, its total batch per rollout and "
        "its gradient steps per update. Give names or .toml paths to show just those.",
    )
    presets.add_argument("preset", nargs="*", help="preset names or .toml files (default: all built-in presets)")
    presets.set_defaults(func=_cmd_presets)


def _add_run_command(commands: Commands) -> None:
    """`cockpit run [FLAGS] [-- COMMAND [ARG ...]]`; `main` splits off what follows `--`."""
    run = commands.add_parser(
        "run",
        help="train N PPO agents in parallel (or run your own training script N times), supervised, with a "
        "live table and a TOML run log",
        usage="cockpit run [FLAGS]\n       cockpit run [--jobs N] [--agents M] [--seed S] [FLAGS] -- COMMAND [ARG ...]",
        description="Start PPO training workers (stable-baselines3 on envpool), at most --jobs at a time,\n"
        "restart crashed ones from their checkpoints, sample the GPU (NVML, 5 Hz) and CPU, watch each job's\n"
        "memory for leaks ('memory growing: +N MiB/h', else 'no growth'), and write RUN_DIR/run.toml.\n"
        "Ctrl-C checkpoints every job and stops; --resume RUN_DIR continues.\n\n"
        "After --, your own command runs instead, once per agent, with the same queue, restarts, telemetry,\n"
        "run.toml, TUI and attach. In it {seed}, {job_id} and {job_dir} become each job's; the job's\n"
        "process also gets COCKPIT_SEED, COCKPIT_JOB_ID and COCKPIT_JOB_DIR. Exit 0 is done, any other\n"
        "exit a crash (restarted; resuming is the script's business). Add\n"
        "  from cockpit.callback import CockpitCallback; model.learn(..., callback=CockpitCallback())\n"
        "to an SB3 script for its phases, progress, SPS and ETA.",
        epilog="Examples:\n  cockpit run                          2 cartpole jobs on a CPU machine (heavy on a GPU)\n"
        "  cockpit run --jobs 4 --preset heavy\n  cockpit run --agents 20 --jobs 4 --timesteps 500000\n"
        "  cockpit run --preset fast --env Pong-v5 --episodes 3000   a target in whole games\n"
        "  cockpit run --auto --agents 16       size the parallel jobs by measuring\n"
        "  cockpit run --name production        in runs/<UTC time>-production; later: cockpit attach production\n"
        "  cockpit run --resume runs/20261121T230000Z-heavy-LunarLander-v3\n"
        "  cockpit run --jobs 2 --agents 3 -- python examples/train_gridworld.py --seed {seed} --out {job_dir}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # The run's settings are declared in cockpit.contract.settings; here is only where each section goes.
    add_flags(run, "run", "work")
    _add_headless_flag(run)
    add_flags(run, "run", "machine")
    _add_background_flags(run, "run")
    _add_run_sizing_flags(run)
    add_flags(run, "run", "restarts")
    _add_resume_flag(run, "continue an interrupted run's unfinished jobs")
    add_flags(run, "run", "end")
    _add_cluster_flags(run, "jobs")
    run.set_defaults(func=_cmd_run)


def _add_run_sizing_flags(run: ArgumentParser) -> None:
    """`run --auto [--auto-window S]`: size the run by measuring it."""
    run.add_argument(
        "--auto",
        action="store_true",
        help="size the run by measuring: start at --jobs (default 1), add a job per ~30 s window while the "
        "aggregate SPS gains >= 5%% and cores and GPU memory allow (take back one that hurts), then double "
        "n_envs the same way (jobs checkpoint and resume with it); with a GPU where an MPS daemon can be "
        "started, last a window with the jobs as its clients: MPS stays on for a >= 5%% gain (recommend "
        "then advises --mps from it)",
    )
    run.add_argument(
        "--auto-window",
        type=positive_int,
        default=30,
        metavar="S",
        help="seconds of each --auto measurement (default: 30; jobs settle for a third of it first)",
    )


def _add_recommend_command(commands: Commands) -> None:
    """`cockpit recommend [--from RUN_DIR]`."""
    rec = commands.add_parser(
        "recommend",
        help="advice for this machine: jobs, n_envs, batch size and preset, from hardware or a finished run",
        description="Recommend the number of parallel jobs, n_envs, batch size and preset for this machine's\n"
        "cores and GPU memory, before any run (hardware facts alone) or from a run's measurements\n"
        "(--from RUN_DIR: utilization by phase, GPU memory peaks, CPU). Prints the numbers it used.\n\n"
        "The first time for a preset and env it measures what one job costs here (20-40 s: a few\n"
        "real PPO iterations on 2 and 16 envs and at the preset's shape, then two such jobs side by\n"
        "side) and keeps the figures in ~/.cache/cockpit/costs.toml;\n"
        "they size n_envs and the core budget. --no-probe uses a fixed envs-per-core table instead.",
        epilog="Examples:\n  cockpit recommend\n  cockpit recommend --preset beast --jobs 4\n"
        "  cockpit recommend --from runs/20261121T230000Z-heavy-LunarLander-v3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rec.add_argument("--preset", metavar="P", help="preset name or .toml file (default: the run's, or heavy/cartpole)")
    rec.add_argument("--env", metavar="ENV", help="environment id (default: the preset's)")
    _add_jobs_flag(rec, "parallel jobs planned (default: the run's, or 2)")
    _add_from_flag(rec, "use this run's measurements")
    rec.add_argument("--no-probe", action="store_true", help="hardware facts and tables only: measure nothing")
    rec.set_defaults(func=_cmd_recommend)


def _add_tune_command(commands: Commands) -> None:
    """`cockpit tune [--budget TIME]`."""
    tune = commands.add_parser(
        "tune",
        help="measure a few jobs x n_envs configurations within a time budget and write the fastest as a preset",
        description="A time-boxed search, not an exhaustive one: from recommend's pick, it climbs over parallel\n"
        "jobs x n_envs (the batch size follows, always a divisor of the rollout), running short trials\n"
        "of real workers that measure the aggregate SPS and the CPU and GPU use. It prints every trial and\n"
        "writes the winner as a preset TOML, with the --jobs to run it with. Recommend's pick comes\n"
        "from this machine's measured costs (measured once, 20-40 s of the budget; see recommend).\n"
        "With a GPU it then measures the winner two more ways: the mix of CUDA and CPU jobs the\n"
        "advisor predicts faster (--devices), and, where an MPS daemon can be started, the jobs as\n"
        "its clients (--mps); each wins only by measuring faster. The MPS figure is kept for\n"
        "recommend, which advises --mps from a measured gain only.",
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


def _add_attach_command(commands: Commands) -> None:
    """`cockpit attach RUN_DIR|NAME`."""
    attach = commands.add_parser(
        "attach",
        help="open the cockpit on a run supervised elsewhere (tmux, nohup, another login), or replay a finished one",
        description="Attach the cockpit to a live run through its control socket (RUN_DIR/cockpit.sock, mode 0600:\n"
        "only you can connect). Several viewers may attach at once, and quitting one leaves the run going.\n"
        "A finished run opens read-only as a replay, with a timeline to scrub.",
        epilog="Examples:\n  tmux new -d 'cockpit run --headless --jobs 4'   then   cockpit attach runs/<run>\n"
        "  cockpit run --headless --name nightly &         then   cockpit attach nightly",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    attach.add_argument(
        "run_dir",
        type=Path,
        metavar="RUN_DIR|NAME",
        help="the run's directory, or a run name (--name, a fleet's plan name): the newest run of that name in runs/",
    )
    attach.set_defaults(func=_cmd_attach)


def _add_fleet_command(commands: Commands) -> None:
    """`cockpit fleet PLAN.toml [FLAGS]` or `cockpit fleet --resume RUN_DIR [FLAGS]`."""
    fleet = commands.add_parser(
        "fleet",
        help="train many agents in tiers, promoting the best by evaluation score; project time and cost first",
        description="A fleet trains many agents in tiers: every agent to the first tier's steps (or episodes), then\n"
        "the best share by evaluation score on to the next, each resuming from its checkpoint. Agents run in\n"
        "--jobs slots under the same supervisor, TUI, attach, report and run.toml as `cockpit run`; scores and\n"
        "promotions are kept in RUN_DIR/fleet.db, so --resume RUN_DIR continues after a crash or kill. The last\n"
        "tier's models are collected in RUN_DIR/models/ with SHA-256 checksums (models.toml).\n"
        "--dry-run checks the plan and projects each tier's agents, steps, wall time and cost from this\n"
        "machine's measured costs (the probe runs once per preset, seconds); a plan in episodes takes its\n"
        "envs' steps per episode from --from RUN_DIR, a run on them. The plan format is in docs/fleets.md.",
        epilog="Examples:\n  cockpit fleet screen.toml --dry-run --rate 1.99\n"
        "  cockpit fleet screen.toml --dry-run --from runs/20261120T090000Z-cartpole-CartPole-v1  (an A100's run)\n"
        "  cockpit fleet screen.toml --jobs 4\n"
        "  cockpit fleet --resume runs/20261123T140000Z-fleet-screen\n"
        "  cockpit fleet --replay a0003 runs/20261123T140000Z-fleet-pbt  (a pbt agent's schedule, from scratch)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Optional: --resume RUN_DIR reads the plan from the fleet's own record (commands.fleet checks one of the two).
    fleet.add_argument("plan", type=Path, nargs="?", metavar="PLAN.toml", help="the fleet plan")
    add_flags(fleet, "fleet", "work")
    fleet.add_argument(
        "--rate",
        type=positive_float,
        metavar="USD_PER_H",
        help="what this machine costs per hour (default: the plan's)",
    )
    fleet.add_argument("--dry-run", action="store_true", help="check and project the plan; start nothing")
    _add_from_flag(
        fleet,
        "with --dry-run: cost the plan at the speeds a finished run measured (on this or another machine: "
        "its run.toml's SPS per job and jobs at once) instead of this machine's probe",
    )
    _add_resume_flag(fleet, "continue the fleet in RUN_DIR")
    fleet.add_argument(
        "--replay",
        nargs=2,
        metavar=("AGENT", "RUN_DIR"),
        help="train the schedule of AGENT, an agent of the pbt fleet in RUN_DIR, again from scratch as a one-agent "
        "fleet: its seed, env and preset, each tier with the values its weights were trained with there (report "
        "--json's `schedule`), no exploit (Ray Tune's PopulationBasedTrainingReplay); instead of a PLAN.toml",
    )
    add_flags(fleet, "fleet", "end")
    _add_headless_flag(fleet)
    add_flags(fleet, "fleet", "machine")
    add_flags(fleet, "fleet", "restarts")
    _add_cluster_flags(fleet, "fleet's agents")
    _add_background_flags(fleet, "fleet")
    fleet.set_defaults(func=_cmd_fleet)


def _add_report_command(commands: Commands) -> None:
    """`cockpit report RUN_DIR [--json] [--html OUT.html] [--png DIR]`."""
    report = commands.add_parser(
        "report",
        help="summarize a finished or live run (a fleet's tiers, leaderboard and models too)",
        description="Print a run's config, host, GPU, per-job results and utilization by phase; for a fleet, its\n"
        "tiers, leaderboard and every agent, with its collected models' SHA-256 checksums verified.\n"
        "Exit codes: 0, 1 when a collected model fails its checksum, 2 when RUN_DIR holds no readable run.",
        epilog="Examples:\n  cockpit report runs/20261121T230000Z-cartpole-CartPole-v1\n"
        "  cockpit report runs/20261121T230000Z-cartpole-CartPole-v1 --html report.html --png plots/",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run's directory")
    report.add_argument(
        "--json",
        action="store_true",
        help="print the run as one JSON object (live from its socket, else from its files): state, steps, "
        "windowed SPS, ETA, restarts and reasons per job; schema in docs/report.schema.json",
    )
    report.add_argument(
        "--html",
        type=Path,
        metavar="OUT.html",
        help="write the report with plots as one self-contained page that opens offline: GPU utilization with "
        "each job's phases, utilization by phase, SPS and return over steps, CPU per core, a fleet's funnel, "
        "leaderboard and scores, settings, warnings and advice",
    )
    report.add_argument(
        "--png", type=Path, metavar="DIR", help="write each of those figures as DIR/<figure>.png (alone or with --html)"
    )
    report.set_defaults(func=_cmd_report)


def _add_play_command(commands: Commands) -> None:
    """`cockpit play RUN_DIR [--job ID | --best] [--checkpoint PATH] [--episodes N] [--video OUT] ...`."""
    from cockpit.contract import play as defaults

    play = commands.add_parser(
        "play",
        help="watch a trained agent play: returns over N episodes, and a video of them",
        description="Play a run's job (its final model, else its newest checkpoint), a fleet's agent or its collected\n"
        "model (checked against its SHA-256 first) on the env and preprocessing it trained on, with its\n"
        "VecNormalize statistics frozen, in a niced process of its own; print the mean +/- std of the return and\n"
        "the episode length. --video records the episodes: MP4 (H.264) with the ffmpeg 'cockpit[video]'\n"
        "installs, else GIF; Atari plays through gymnasium's ALE env with the job's preprocessing.\n"
        "Exit codes: 0, 1 when the player fails, 2 on bad input (no such job, a model failing its checksum, an\n"
        "env that cannot render: the returns still print).",
        epilog="Examples:\n  cockpit play runs/20261121T230000Z-heavy-LunarLander-v3 --video lander.mp4\n"
        "  cockpit play runs/20261123T140000Z-fleet-screen --best --episodes 10 --video best.gif\n"
        "  cockpit play runs/20261121T230000Z-pong --job 2 --stochastic --seed 3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    play.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run's directory (or one job's directory)")
    which = play.add_mutually_exclusive_group()
    which.add_argument("--job", metavar="ID", help="the job (a fleet's agent) to play; needed when the run has several")
    which.add_argument("--best", action="store_true", help="a fleet: its leaderboard's first agent")
    play.add_argument(
        "--checkpoint",
        type=Path,
        metavar="PATH",
        help="a checkpoint directory (jobs/<id>/checkpoints/step-...) or a fleet's models/<agent>.zip instead of "
        "the final model",
    )
    defaults.add_play_options(play)
    play.set_defaults(func=_cmd_play)


def _add_export_command(commands: Commands) -> None:
    """`cockpit export TARGET ...`, one nested subcommand per target tool."""
    export = commands.add_parser(
        "export",
        help="export a finished or live run into another tool (mlflow)",
        description="Export a run's jobs into another tool. Exporting again adds only what is new.",
        epilog="Example:\n  cockpit export mlflow runs/20261123T140000Z-fleet-screen --register screen-best",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    targets = export.add_subparsers(dest="target", metavar="TARGET", required=True)
    _add_export_mlflow_command(targets)


def _add_export_mlflow_command(targets: Commands) -> None:
    """`cockpit export mlflow RUN_DIR [--tracking-uri URI] [--experiment NAME] [--register NAME ...]`."""
    to_mlflow = targets.add_parser(
        "mlflow",
        help="each job as an MLflow run: params, metrics over its steps, tags, run.toml and its final model",
        description="Log each job of RUN_DIR (finished or live) as one MLflow run, in the experiment named after\n"
        "RUN_DIR (or --experiment):\n"
        "  params     the resolved preset (preset.<key>), env, seed, the target, a fleet agent's overrides.<key>\n"
        "  metrics    at the job's steps: rollout/ep_rew_mean, rollout/ep_len_mean, train/<loss>, time/sps,\n"
        "             phase/rollout_s and phase/train_s per iteration, a fleet's eval/mean_reward; and run.toml's\n"
        "             totals (phase/<phase>/gpu_util_mean, .../cpu_percent_mean, job/mean_sps, job/peak_rss_mib)\n"
        "  tags       cockpit.run_dir, cockpit.job, cockpit.status; a fleet's cockpit.tier and cockpit.score\n"
        "  artifacts  run.toml (the run's record with this job's entry), and a finished job's model under\n"
        "             model/ (its final checkpoint's model.zip; a fleet's collected models/<agent>.zip)\n"
        "Exporting again duplicates nothing: each job's MLflow run is found by its cockpit.run_dir and\n"
        "cockpit.job tags and gets only the metric points past the steps it holds, params it lacks and\n"
        "changed artifacts; export a live run again to add its new points.\n\n"
        "The default store is SQLite beside the runs: sqlite:///<RUN_DIR's parent>/mlflow.db (artifacts in\n"
        "mlartifacts/ beside it). Open it with:\n"
        "  mlflow ui --backend-store-uri sqlite:///<RUN_DIR's parent>/mlflow.db   (the UI: pip install mlflow)\n"
        "Needs MLflow's client: pip install 'cockpit[mlflow]'.",
        epilog="Examples:\n  cockpit export mlflow runs/20261121T230000Z-heavy-LunarLander-v3\n"
        "  cockpit export mlflow runs/20261123T140000Z-fleet-screen --register screen-best --register screen-second\n"
        "  cockpit export mlflow runs/20261123T140000Z-fleet-screen --tracking-uri http://mlflow.lan:5000 "
        "--experiment screens",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    to_mlflow.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run's directory")
    to_mlflow.add_argument(
        "--tracking-uri",
        metavar="URI",
        help="the MLflow store: sqlite:///FILE, a server's http(s)://HOST:PORT, ... (default: "
        "sqlite:///<RUN_DIR's parent>/mlflow.db)",
    )
    to_mlflow.add_argument(
        "--experiment", metavar="NAME", help="the MLflow experiment (default: RUN_DIR's name; created if missing)"
    )
    to_mlflow.add_argument(
        "--register",
        action="append",
        metavar="NAME",
        help="a fleet: register its best collected model in MLflow's model registry as NAME; give it again for "
        "the next best (--register best --register second). Registering the same model again adds no version",
    )
    to_mlflow.set_defaults(func=_cmd_export)


def build_parser() -> ArgumentParser:
    """The `cockpit` command and its subcommands; each subcommand's `func` default is its dispatcher."""
    parser = ArgumentParser(
        prog="cockpit",
        description="Keep one GPU workstation busy with parallel PPO training jobs.\n"
        "With no command on a terminal, cockpit opens the start screen: pick a preset, env and jobs, or reopen a run.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    # The order here is the order `cockpit --help` lists them in.
    _add_presets_command(commands)
    _add_run_command(commands)
    _add_recommend_command(commands)
    _add_tune_command(commands)
    _add_attach_command(commands)
    _add_fleet_command(commands)
    _add_report_command(commands)
    _add_play_command(commands)
    _add_export_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `cockpit` console script; returns the exit code."""
    parser = build_parser()
    words = sys.argv[1:] if argv is None else list(argv)
    # `cockpit run [FLAGS] -- COMMAND ...`: everything after the first `--` is the user's command.
    split = words.index("--") if "--" in words else None
    args = parser.parse_args(words[:split] if split is not None else words)
    if split is not None and args.command != "run":
        args = parser.parse_args(words)  # another command's own `--`, as argparse reads it
    args.script = tuple(words[split + 1 :]) if split is not None and args.command == "run" else None
    args.argv = argv
    if args.command is None:
        return _cmd_launcher(parser)
    return args.func(args)
