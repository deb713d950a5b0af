"""The kit's machinery: settings and plan, the report, and the processes it starts.

`Settings` come from the command line (`parse_args`: bad input is one line naming the flag, exit
2); `estimate` and `plan_seconds` are the time plan. A `Kit` carries one run of the kit: its
figures, sections and raw files, and its children, each started from the repository root with
the kit's environment (its own cost cache). `CockpitRun` is one `cockpit run --headless`, stopped
as Ctrl-C stops it. `write_report` writes report.md and the CSVs to `--out`: at most 8 files and
no folders, as the device tool brings back.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import io
import os
import platform
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.gpu import measure
from cockpit.contract.events import ErrorEvent, Event, StartedEvent, of_kind, read_events
from cockpit.contract.presets import builtin_names
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import RunRecord, RunRecordError, read

REPO_ROOT = Path(__file__).resolve().parents[2]
# What only a GPU can tell first (NVML at 5 Hz and its timestamps, per-job memory, the N-job sweep,
# MPS), then what the CPU already showed (the worker, OOM advice, recommend and tune, a fleet): a
# first run that ends early has lost the least.
CHECKS = ("host", "run", "sweep", "mps", "worker", "oom", "probe", "fleet")
GPU_PRESETS = ("heavy", "beast")
SMOKE_PRESET = "cartpole"
FOREVER = 1_000_000_000  # --timesteps for runs the kit stops itself
STOP_GRACE_S = 60.0  # a stopped run checkpoints every job, then exits (cut to what is left, see `Kit.grace`)
STOP_GRACE_MIN_S = 5.0  # a stop's grace even past the deadline: the jobs' checkpoints are a few MB
# The device tool's budget for one GPU session's kit, first run: check.sh's whole command, the wheel
# install included, in this many seconds, so that a rerun fits in the 15 minutes of device time.
COMMAND_BUDGET_S = 420.0
# check.sh's install of prepare.sh's wheels (pip --no-index --no-deps --target, about 15 wheels,
# 55 MB), a conservative bound; and what the last stop and the report may add after the deadline.
INSTALL_S = 30.0
OVERRUN_S = STOP_GRACE_MIN_S + 10.0  # a stop's last grace, then SIGKILL's wait (`stop_process`)
GPU_DEADLINE_S = COMMAND_BUDGET_S - INSTALL_S - OVERRUN_S  # --deadline's default on a GPU: 375 s
MIN_TIMEOUT_S = 5.0  # the shortest timeout a child gets however late it starts (`Kit.timeout`)
# The source files a cockpit wheel is built from; prepare.sh records their digest in .whl/SOURCE.
SOURCE_GLOBS = ("pyproject.toml", "cockpit/**/*.py", "cockpit/**/*.tcss", "training/**/*.py", "presets/*.toml",
                "presets/*.py")  # fmt: skip
WHEELS = "WHEELS"  # check.sh's wheel folder (default .whl), passed on so the report can name it
RAW_FILE_MAX = 4 * 1024 * 1024  # a raw file larger than this is left out of raw.tar.gz (named in it)
RAW_TOTAL_MAX = 14 * 1024 * 1024  # the device tool brings back 16 MiB a file
SMOKE_MODE = "CPU smoke (`--cpu-smoke`): the kit end to end on the CPU, no GPU figures"


class KitError(RuntimeError):
    """A check cannot go on; the message is its one-line reason (a failed check)."""


class Skipped(Exception):
    """A check that does not apply here (no GPU, no time left); the message says why."""


# ----- settings and plan -----


@dataclass(frozen=True)
class Settings:
    """The kit's run, from the command line (`parse_args`)."""

    smoke: bool
    out: Path
    checks: tuple[str, ...]
    presets: tuple[str, ...]
    updates: int
    run_jobs: int
    run_seconds: float
    sweep_jobs: tuple[int, ...]
    sweep_window: float
    sweep_max: float
    tune_budget: int
    deadline: float
    keep: Path | None
    preset: str  # the preset of the run, sweep, mps, probe and fleet checks
    plan: bool = False  # print the plan and start nothing (`--plan`)

    @property
    def device(self) -> str:
        """The worker's `--device`."""
        return "cpu" if self.smoke else "cuda"


def start_seconds(s: Settings) -> float:
    """A worker's imports (and CUDA's start) before it trains, s: part of every check's plan."""
    return 6.0 if s.smoke else 10.0


def mps_counts(s: Settings) -> tuple[int, ...]:
    """The job counts the mps check runs with `--mps`: the sweep's above one (a lone job shares
    the GPU with nobody), or the sweep's own where it has none above one."""
    return tuple(n for n in s.sweep_jobs if n > 1) or s.sweep_jobs


def estimate(check: str, s: Settings) -> float:
    """Seconds `check` is planned to take (start-up, measurement, stop): the plan printed first. A
    check starts only when this much is left before `--deadline` (`enough_time`), and cuts its own
    waits and its children's timeouts to what is left (`Kit.timeout`)."""
    start = start_seconds(s)
    if check == "host":
        return 4.0 if s.smoke else 10.0
    if check == "worker":
        return len(s.presets) * (start + s.updates * (0.5 if s.smoke else 2.5))
    if check == "run":
        return s.run_seconds + (4.0 if s.smoke else start + 5.0)
    if check == "sweep":
        points = [n for n in s.sweep_jobs if n != s.run_jobs or "run" not in s.checks]
        return len(points) * sweep_point(s)
    if check == "mps":
        if s.smoke:
            return 0.0  # skipped: MPS needs a GPU
        # Each of its counts under MPS, and without it each count no earlier check measures.
        without = set(s.sweep_jobs) if "sweep" in s.checks else {s.run_jobs} if "run" in s.checks else set()
        counts = mps_counts(s)
        return (len(counts) + len([n for n in counts if n not in without])) * sweep_point(s)
    if check == "oom":
        return 0.0 if s.smoke else 35.0  # start-up, a rollout of twice the free memory's worth, recommend
    if check == "probe":
        return 4.0 if s.smoke else 40.0 + s.tune_budget + 10.0  # recommend's probe, then tune and its start
    if check == "fleet":
        return 14.0 if s.smoke else 40.0
    raise ValueError(check)


def sweep_point(s: Settings) -> float:
    """Seconds one point of the sweep (or of the mps check) is planned to take: start-up, the
    window, the stop; at most `sweep_max`."""
    return min(s.sweep_max, start_seconds(s) + s.sweep_window + 5.0)


def plan_seconds(s: Settings) -> float:
    """The whole plan's seconds."""
    return sum(estimate(c, s) for c in s.checks)


def plan_lines(s: Settings) -> list[str]:
    """`check.sh --plan`: each check's planned seconds, in order, then `planned total: N s
    (deadline D s)`; on a GPU, a line with the whole command's bound (check.sh's install, the plan
    up to the deadline, the last stop's grace) against `COMMAND_BUDGET_S`."""
    width = max(len(c) for c in s.checks)
    lines = [f"{c:<{width}}  {estimate(c, s):4.0f} s" for c in s.checks]
    if not s.smoke:
        bound = INSTALL_S + s.deadline + OVERRUN_S
        lines.append(f"command at most: {bound:.0f} s (wheel install {INSTALL_S:.0f} s, deadline {s.deadline:.0f} s, "
                     f"last stop {OVERRUN_S:.0f} s; budget {COMMAND_BUDGET_S:.0f} s)")  # fmt: skip
    lines.append(f"planned total: {plan_seconds(s):.0f} s (deadline {s.deadline:.0f} s)")
    return lines


class _Parser(argparse.ArgumentParser):
    """argparse with the house's one-line errors and exit 2."""

    def error(self, message: str) -> Any:
        print(f"benchmarks.gpu.check: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _counts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected job counts like 1,2,4,8, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive job counts, got {text!r}")
    return values


def _names(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n for n in text.split(",") if n)
        unknown = [n for n in names if n not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown) or 'empty list'}; choose from "
                                             f"{', '.join(allowed)}")  # fmt: skip
        return names

    return parse


def _positive(kind: Callable[[str], float]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value

    return parse


def _preset(text: str) -> str:
    """A built-in preset's name (the kit's runs name presets by name)."""
    if text not in builtin_names():
        raise argparse.ArgumentTypeError(f"unknown preset {text!r}; choose from {', '.join(builtin_names())}")
    return text


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    """The settings; bad input is one line naming the flag, and exit 2 (SystemExit)."""
    p = _Parser(prog="benchmarks/gpu/check.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-smoke", action="store_true", help="the same checks on the CPU at tiny sizes")
    p.add_argument("--plan", action="store_true", help="print each check's planned seconds and start nothing")
    p.add_argument("--out", type=Path, help="where the report and CSVs go (default: $OUT)")
    p.add_argument("--checks", type=_names(CHECKS), help=f"only these, in this order (default: {','.join(CHECKS)})")
    p.add_argument("--skip", type=_names(CHECKS), default=(), help="leave these out")
    p.add_argument("--updates", type=_positive(int), help="PPO updates per worker preset (default: 3)")
    p.add_argument("--run-seconds", type=_positive(float), help="the 4-job run's length (default: 30; smoke 6)")
    p.add_argument("--sweep-jobs", type=_counts, help="job counts of the sweep (default: 1,2,4,8; smoke 1,2)")
    p.add_argument("--sweep-window", type=_positive(float),
                   help="seconds measured per sweep and mps point after warm-up (default: 5; smoke 2)")  # fmt: skip
    p.add_argument("--tune-budget", type=_positive(int), help="cockpit tune --budget, seconds (default: 30)")
    p.add_argument(
        "--deadline",
        type=_positive(float),
        help=f"seconds after which no check starts and long ones shorten (default: {GPU_DEADLINE_S:.0f}; smoke 240)",
    )
    p.add_argument("--preset", type=_preset, help="the run's, sweep's, mps's, probe's and fleet's preset "
                   "(default: heavy; smoke cartpole)")  # fmt: skip
    p.add_argument("--keep", type=Path, help="keep the run directories in this folder (default: deleted)")
    a = p.parse_args(argv)
    out: Path | None = a.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if out is None and a.plan:
        out = Path(".")  # --plan writes nothing
    if out is None:
        return p.error("--out: no folder given and $OUT is not set")  # type: ignore[no-any-return]
    if out.exists() and not out.is_dir():
        p.error(f"--out {out}: not a folder")
    smoke = bool(a.cpu_smoke)
    checks = tuple(c for c in (a.checks or CHECKS) if c not in a.skip)
    sweep_jobs = a.sweep_jobs or ((1, 2) if smoke else (1, 2, 4, 8))
    window = a.sweep_window or (2.0 if smoke else 5.0)
    return Settings(
        smoke=smoke, out=out, checks=checks, presets=(SMOKE_PRESET,) if smoke else GPU_PRESETS,
        updates=a.updates or 3, run_jobs=2 if smoke else 4,
        run_seconds=a.run_seconds or (6.0 if smoke else 30.0), sweep_jobs=sweep_jobs, sweep_window=window,
        # A smoke's point waits longer for its first whole cycles: on a loaded 2-core CI machine a
        # CartPole job's start-up alone took over 15 s. It ends once measured, so a quiet one is as quick.
        sweep_max=window + (40.0 if smoke else 33.0), tune_budget=a.tune_budget or 30,
        deadline=a.deadline or (240.0 if smoke else GPU_DEADLINE_S), keep=a.keep,
        preset=a.preset or (SMOKE_PRESET if smoke else "heavy"), plan=bool(a.plan),
    )  # fmt: skip


# ----- the kit: figures, sections, processes -----


@dataclass
class Section:
    """One check's part of the report."""

    name: str
    title: str
    status: str = "running"  # passed, failed, skipped
    seconds: float = 0.0
    lines: list[str] = field(default_factory=list)
    error: str | None = None


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table."""
    cell = lambda v: "-" if v is None else str(v).replace("|", "\\|")  # noqa: E731
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers),
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)]  # fmt: skip


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    """A figure, or "-" for one nobody measured."""
    return "-" if value is None else f"{value:,.{digits}f}{unit}"


class Kit:
    """The run of the kit: settings, the work folder, the figures and sections so far, and the
    child processes it starts (all of which it ends)."""

    def __init__(self, settings: Settings, work: Path) -> None:
        self.s = settings
        self.work = work
        self.began = time.monotonic()
        self.began_at = time.time()
        self.figures: list[tuple[str, str, str, str, str]] = []
        self.sections: list[Section] = []
        self.per_second: list[measure.SecondPair] = []
        self.memory_rows: list[tuple[str, str, str, int | None, float | None, float]] = []
        self.sweep_rows: list[dict[str, object]] = []
        self.raw: list[tuple[Path, str]] = []  # (file, name in raw.tar.gz)
        self.facts: dict[str, str] = {}
        self.headline: list[str] = []
        self.sweep: dict[int, tuple[float | None, float | None]] = {}  # jobs -> (aggregate SPS, GPU %)
        self.gpu_free_mib: float | None = None
        self._log = (settings.out / "kit.log").open("a", encoding="utf-8")
        # A cache of its own: recommend's probe always runs here (its CUDA costs are a figure), the
        # user's cache is left alone, and the kit's in-process reads (cached_costs) see the same one.
        os.environ["XDG_CACHE_HOME"] = str(work / "cache")
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}

    def log(self, message: str) -> None:
        """A progress line, with the seconds since the kit started, to stdout and kit.log."""
        line = f"[gpu-check {self.elapsed():5.0f} s] {message}"
        print(line, flush=True)
        self._log.write(line + "\n")
        self._log.flush()

    def elapsed(self) -> float:
        """Seconds since the kit started."""
        return time.monotonic() - self.began

    def left(self) -> float:
        """Seconds until the deadline."""
        return self.s.deadline - self.elapsed()

    def timeout(self, want: float) -> float:
        """A child's timeout: `want` s, cut to what is left before the deadline (at least
        `MIN_TIMEOUT_S`, so a check that ran long fails its step with a reason instead of hanging)."""
        return max(MIN_TIMEOUT_S, min(want, self.left()))

    def grace(self) -> float:
        """How long a stopped run may take to checkpoint its jobs and exit: `STOP_GRACE_S`, cut to
        what is left before the deadline, and at least `STOP_GRACE_MIN_S`."""
        return max(STOP_GRACE_MIN_S, min(STOP_GRACE_S, self.left()))

    def figure(self, check: str, subject: str, metric: str, value: object, unit: str = "") -> None:
        """Record one figure for figures.csv; None is written as an empty value."""
        shown = "" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
        self.figures.append((check, subject, metric, shown, unit))

    def keep_raw(self, path: Path, name: str) -> None:
        """Put `path` into raw.tar.gz as `name` (if it exists when the report is written)."""
        self.raw.append((path, name))

    def child(self, argv: Sequence[str], log: Path, *, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start `argv` from the repository root with its output in `log`."""
        self.log("$ " + " ".join(argv))
        with log.open("ab") as out:
            return subprocess.Popen(list(argv), cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env or self.env)  # fmt: skip

    def call(self, argv: Sequence[str], log: Path, *, timeout: float, env: dict[str, str] | None = None) -> int:
        """Run `argv` to its end (killed after `timeout` s: KitError) and return its exit code."""
        proc = self.child(argv, log, env=env)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_process(proc)
            raise KitError(f"{' '.join(argv[2:5])} ... took over {timeout:.0f} s (log: {log.name})") from None
        finally:
            stop_process(proc)


def py() -> list[str]:
    """This interpreter, as the children's."""
    return [sys.executable]


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGINT, grace: float = 10.0) -> int:
    """End `proc`: `sig`, then SIGKILL after `grace` s. Its exit code (immediately if it ended)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def tail(path: Path, lines: int = 3) -> str:
    """The last lines of a log, as one line (for an error message)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " / ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def job_events(run_dir: Path) -> dict[str, list[Event]]:
    """Each job's events so far, by job id."""
    jobs = RunDir(run_dir).jobs
    if not jobs.is_dir():
        return {}
    return {d.name: read_events(RunDir(run_dir).job(d.name).events) for d in sorted(jobs.iterdir()) if d.is_dir()}


def last_started(events: Sequence[Event]) -> StartedEvent | None:
    """The job's latest `started` event."""
    started = of_kind(events, StartedEvent)
    return started[-1] if started else None


def job_errors(events: dict[str, list[Event]]) -> list[str]:
    """`job: type: message` of every job that reported an error."""
    return [f"{job}: {e.reason}" for job, evs in events.items() for e in of_kind(evs, ErrorEvent)]


@dataclass
class CockpitRun:
    """`python -m cockpit run --headless ...` in the work folder, stopped by the kit (SIGINT, as
    Ctrl-C: every job checkpoints and stops), then read back."""

    kit: Kit
    name: str
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    stopped_at: float | None = None
    exit_code: int | None = None

    @property
    def run_dir(self) -> Path:
        """The run's directory."""
        return self.kit.work / self.name

    @property
    def log(self) -> Path:
        """The headless output."""
        return self.kit.work / f"{self.name}.log"

    def start(self) -> None:
        """Start the run."""
        argv = [*py(), "-m", "cockpit", "run", "--headless", "--run-dir", str(self.run_dir), *self.args]
        self.proc = self.kit.child(argv, self.log)
        for name in ("run.toml", "samples.csv", "job_samples.csv", "gpu_util.csv"):
            self.kit.keep_raw(self.run_dir / name, f"{self.name}/{name}")
        self.kit.keep_raw(self.log, f"{self.name}/headless.log")

    def alive(self) -> bool:
        """The cockpit process is still running."""
        return self.proc is not None and self.proc.poll() is None

    def wait(self, seconds: float, until: Callable[[], bool] | None = None) -> None:
        """Let it run `seconds` (or until `until()` is true, checked every second); KitError when it
        ends by itself first."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if not self.alive():
                raise KitError(f"cockpit run exited early with {self.proc.returncode if self.proc else '?'}: "
                               f"{tail(self.log)}")  # fmt: skip
            if until is not None and until():
                return
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))

    def wait_exit(self, timeout: float) -> int:
        """Wait for the run to end by itself (every job done or failed); KitError after `timeout` s."""
        assert self.proc is not None
        try:
            self.exit_code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise KitError(f"cockpit run did not end within {timeout:.0f} s: {tail(self.log)}") from None
        return self.exit_code

    def stop(self) -> int:
        """SIGINT, then wait for the jobs' checkpoints; a second SIGINT (kill the jobs) and then
        SIGKILL if it hangs. The exit code (130 for a run stopped this way)."""
        assert self.proc is not None
        self.stopped_at = time.time()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            grace = self.kit.grace()
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.kit.log(f"{self.name}: still stopping after {grace:.0f} s; interrupting again")
                stop_process(self.proc)
        self.exit_code = self.proc.returncode
        return self.exit_code

    def record(self) -> RunRecord:
        """run.toml as the run left it; KitError when there is none."""
        try:
            return read(self.run_dir)
        except RunRecordError as exc:
            raise KitError(str(exc)) from exc

    def events(self) -> dict[str, list[Event]]:
        """Each job's events."""
        return job_events(self.run_dir)

    def keep_events(self) -> None:
        """Put each job's events and stderr into raw.tar.gz."""
        for job in self.events():
            jd = RunDir(self.run_dir).job(job)
            self.kit.keep_raw(jd.events, f"{self.name}/jobs/{job}/events.jsonl")
            self.kit.keep_raw(jd.stderr_log, f"{self.name}/jobs/{job}/stderr.log")


@contextlib.contextmanager
def running(run: CockpitRun) -> Iterator[CockpitRun]:
    """Start `run`, and stop it however the block ends (no worker outlives a check)."""
    run.start()
    try:
        yield run
    finally:
        if run.proc is not None and run.proc.poll() is None:
            run.stop()


def source_digest(root: Path = REPO_ROOT) -> str:
    """SHA-256 of the files a cockpit wheel is built from (names and contents, sorted)."""
    digest = hashlib.sha256()
    files = sorted({p for pattern in SOURCE_GLOBS for p in root.glob(pattern) if p.is_file()})
    for path in files:
        if "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


# ----- the report -----


def write_report(kit: Kit) -> None:
    """report.md and the CSVs in `--out`, as far as the kit has got (called after every check)."""
    s = kit.s
    done = [x for x in kit.sections if x.status != "running"]
    counts = {status: sum(x.status == status for x in done) for status in ("passed", "failed", "skipped")}
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(kit.began_at))
    gpu = kit.facts.get("gpu", "none")
    lines = [
        f"# cockpit GPU verification, {when}",
        "",
        f"- **Mode:** {SMOKE_MODE if s.smoke else 'GPU'}",
        f"- **GPU:** {gpu}; driver {kit.facts.get('driver', '-')}; {kit.facts.get('memory_mib', '-')} MiB",
        f"- **torch:** {kit.facts.get('torch', '-')} (CUDA {kit.facts.get('torch_cuda', '-')}); "
        f"python {platform.python_version()}; {os.cpu_count()} logical CPUs",
        f"- **Checks:** {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
        f"of {len(s.checks)}, in {kit.elapsed():.0f} s (planned {plan_seconds(s):.0f} s)",
        f"- **Command:** `benchmarks/gpu/check.sh {' '.join(sys.argv[1:])}`".rstrip(),
    ]  # fmt: skip
    if kit.headline:
        lines += ["", "## Headline figures", "", *(f"- {h}" for h in kit.headline)]
    for sec in kit.sections:
        lines += ["", f"## {sec.title}", ""]
        if sec.status == "skipped":
            lines.append(f"**skipped**: {sec.error}")
            continue
        lines.append(f"**{sec.status}** in {sec.seconds:.0f} s" + (f": {sec.error}" if sec.error else ""))
        lines += ["", *sec.lines] if sec.lines else []
    lines += ["", "Raw data: figures.csv, util_per_second.csv, gpu_memory.csv, sweep.csv, raw.tar.gz, kit.log.", ""]
    (s.out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    write_csv(s.out / "figures.csv", ["check", "subject", "metric", "value", "unit"], kit.figures)
    write_csv(s.out / "util_per_second.csv", ["second", "cockpit_util_mean", "cockpit_samples", "dmon_sm"],
              [(p.second, f"{p.cockpit:.2f}", p.cockpit_samples, f"{p.dmon:.0f}") for p in kit.per_second])  # fmt: skip
    write_csv(s.out / "gpu_memory.csv", ["source", "run", "job", "pid", "mib", "t"],
              [(*r[:4], "" if r[4] is None else f"{r[4]:.0f}", f"{r[5]:.3f}") for r in kit.memory_rows])  # fmt: skip
    sweep_cols = ["jobs", "preset", "mps", "source", "window_s", "min_cycles", "aggregate_sps", "per_job_sps",
                  "gpu_util_mean"]  # fmt: skip
    write_csv(s.out / "sweep.csv", sweep_cols, [[r[c] for c in sweep_cols] for r in kit.sweep_rows])
    write_raw(kit)


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """One CSV file, header first."""
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def write_raw(kit: Kit) -> None:
    """raw.tar.gz: the raw files the checks kept, each at most RAW_FILE_MAX and all under
    RAW_TOTAL_MAX (what is left out is named in its SKIPPED.txt)."""
    skipped, total = [], 0
    with tarfile.open(kit.s.out / "raw.tar.gz", "w:gz") as tar:
        for path, name in kit.raw:
            if not path.is_file():
                continue
            size = path.stat().st_size
            if size > RAW_FILE_MAX or total + size > RAW_TOTAL_MAX:
                skipped.append(f"{name}: {size:,} bytes")
                continue
            total += size
            tar.add(path, arcname=f"raw/{name}")
        if skipped:
            data = ("left out, too large:\n" + "\n".join(skipped) + "\n").encode()
            info = tarfile.TarInfo("raw/SKIPPED.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
