"""A soak: small CartPole fleets trained one after another under seeded random faults, for N minutes.

What it measures: whether fleets ride out a night's faults by themselves. Each fleet is a real
`cockpit fleet PLAN --headless` (4 agents, 2 slots, tiers of 8,192 then 16,384 steps promoting half,
a checkpoint every 1,024 steps, `--stall-timeout 20`, and `--max-restarts 10` since its faults come
faster than a night's and fall on a fleet's few agents); while it runs, every 3-8 s a fault drawn
by `random.Random(--seed)` hits it:

- `kill9`: kill -9 of a training worker;
- `sigstop`: SIGSTOP of a training worker, left stopped: the cockpit's stall watch must kill and
  restart it;
- `corrupt`: bytes of a file in a training job's newest checkpoint overwritten, then its worker
  killed with kill -9: the restart must skip that checkpoint by its SHA-256 sums;
- `disk`: the run directory's filesystem (a tmpfs the soak mounts under --out; needs root, else
  this kind is skipped and said so) filled up for 20 s, then freed: the cockpit waits it out;
- `cockpit-kill9`, `sighup`, `sigint`: the cockpit killed, hung up or interrupted, each followed by
  `cockpit fleet --resume RUN_DIR --headless` (at most 2 a fleet, so that each fleet ends).

It counts the faults by kind; the resumes a person would have had to do (a cockpit that ended by
itself other than done, resumed again by the soak, up to 3 a fleet); the steps redone (per job and
restart, the highest step reached before the restart less the step it restarted from: from each
job's `started`, `progress`, `checkpoint` and `finished` events); the workers left (processes of
the worker package started under the fleet's cockpit and alive 5 s after that cockpit exited,
ended or killed: they are then killed, so they do not weigh on the next fleet); and the models
whose file fails the SHA-256 in the fleet's models.toml. It ends with one summary line.

Run from the repo root (as root for the disk faults); the fleets' logs and run records stay under --out:
    .venv/bin/python -m benchmarks.soak --minutes 30
    .venv/bin/python -m benchmarks.soak --minutes 4 --seed 7 --out /tmp/soak
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import psutil

from benchmarks.common import REPO_ROOT, small_preset_text, warn_if_busy
from cockpit.contract.events import (
    CheckpointEvent,
    ErrorEvent,
    Event,
    FinishedEvent,
    ProgressEvent,
    StartedEvent,
    of_kind,
    read_events,
)
from cockpit.contract.model_manifest import read_manifest, verify
from cockpit.contract.rundir import JobDir, RunDir
from cockpit.contract.runrecord import RunRecordError, read

KINDS = ("kill9", "sigstop", "corrupt", "disk", "cockpit-kill9", "sighup", "sigint")
COCKPIT_SIGNALS = {"cockpit-kill9": signal.SIGKILL, "sighup": signal.SIGHUP, "sigint": signal.SIGINT}
WORKER_PACKAGE = "cockpit_training"
MARKER_ENV = "COCKPIT_SOAK_RUN_DIR"  # set on each cockpit; its workers inherit it, so they are told apart
FAULT_GAP_S = (3.0, 8.0)  # the wait before the next fault, drawn uniformly
RETRY_S = 15.0  # a fault with nothing to hit yet (no worker training, no checkpoint) is tried this long
DISK_FULL_S = 20.0
STALL_TIMEOUT_S = 20
LEFT_AFTER_S = 5.0  # how long after its cockpit exits a worker still alive counts as left
STOP_WAIT_S = 120.0  # a hung-up or interrupted cockpit checkpoints its jobs and exits within this
COCKPIT_FAULTS_PER_FLEET = 2
HAND_RESUMES_PER_FLEET = 3
FLEET_LIMIT_S = 20 * 60.0  # a fleet not over by then is ended and counted failed
TMPFS_SIZE = "256m"  # a fleet's run dir is a few MiB; the rest is what a full disk takes away

PRESET = small_preset_text(checkpoint_every=1024, timesteps=16384)

PLAN = """
name = "soak"
jobs = 2
promotion = "sync"
[agents]
env = "CartPole-v1"
preset = "{preset}"
seeds = 4
[[tiers]]
timesteps = 8192
promote = 0.5
[[tiers]]
timesteps = 16384
[score]
episodes = 10
"""


@dataclass
class Tally:
    """What the soak counted, over all its fleets."""

    faults: Counter[str] = field(default_factory=Counter)
    fleets: int = 0
    fleets_done: int = 0
    hand_resumes: int = 0
    workers_left: int = 0
    workers_left_after_kill9: int = 0  # of `workers_left`: those 5 s after a kill -9 of their cockpit
    models: int = 0
    models_failing: int = 0
    redone: list[int] = field(default_factory=list)  # steps redone at each restart of a job
    corrupt_skipped: int = 0  # checkpoints the workers moved aside as failing their sums
    notes: list[str] = field(default_factory=list)


def steps_redone(events: Sequence[Event]) -> list[int]:
    """For each restart of one job (each `started` after its first): the steps trained again, the
    highest step the job had reached before (progress, checkpoint or finished) less the step the
    restart resumed from (0 when it started afresh); never negative."""
    redone: list[int] = []
    highest, started = 0, False
    for e in events:
        if isinstance(e, StartedEvent):
            if started:
                redone.append(max(0, highest - (e.resumed_from_step or 0)))
            started = True
        elif isinstance(e, ProgressEvent):
            highest = max(highest, e.num_timesteps)
        elif isinstance(e, CheckpointEvent):
            highest = max(highest, e.step)
        elif isinstance(e, FinishedEvent):
            highest = max(highest, e.steps)
    return redone


def summary_line(minutes: float, tally: Tally) -> str:
    """The soak's one-line summary: fleets, faults by kind, resumes by hand, workers left, models
    failing their checksum, and the steps redone (worst restart and in all)."""
    kinds = ", ".join(f"{kind} {tally.faults[kind]}" for kind in KINDS if tally.faults[kind])
    faults = f"faults {sum(tally.faults.values())}" + (f" ({kinds})" if kinds else "")
    left = f"workers left {tally.workers_left}"
    if tally.workers_left_after_kill9:
        left += f" ({tally.workers_left_after_kill9} after a cockpit kill -9)"
    worst = max(tally.redone, default=0)
    fleets = f"{tally.fleets} fleet{'' if tally.fleets == 1 else 's'}"
    if tally.fleets_done != tally.fleets:
        fleets += f" ({tally.fleets_done} done)"
    return (f"soak {minutes:g} min, {fleets}: {faults}; resumes by hand {tally.hand_resumes}; {left}; "
            f"models failing checksum {tally.models_failing}; steps redone worst {worst:,}, "
            f"total {sum(tally.redone):,}")  # fmt: skip


# --- processes -------------------------------------------------------------------------------


def fleet_workers(run_dir: Path) -> list[psutil.Process]:
    """The live (not zombie) worker processes started under a cockpit of `run_dir`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if WORKER_PACKAGE not in " ".join(proc.info["cmdline"] or ()):
                continue
            if proc.environ().get(MARKER_ENV) == str(run_dir) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def end_processes(procs: Sequence[psutil.Process]) -> None:
    """Kill each of `procs` (SIGKILL ends a stopped process too)."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(list(procs), timeout=10)


@dataclass(frozen=True)
class Training:
    """A job a live worker is training now."""

    job_dir: Path
    pid: int


def training(run_dir: Path) -> list[Training]:
    """The jobs of `run_dir` whose newest `started` worker is alive, not stopped, and has not
    finished or failed since."""
    alive = {p.pid: p for p in fleet_workers(run_dir)}
    found = []
    for job_dir in sorted(RunDir(run_dir).jobs.glob("*")):
        events = read_events(JobDir(job_dir).events) if JobDir(job_dir).events.is_file() else []
        last = next((i for i in range(len(events) - 1, -1, -1) if isinstance(events[i], StartedEvent)), None)
        if last is None or any(isinstance(e, (FinishedEvent, ErrorEvent)) for e in events[last:]):
            continue
        pid = of_kind(events[last:], StartedEvent)[0].pid
        try:
            if pid in alive and alive[pid].status() != psutil.STATUS_STOPPED:
                found.append(Training(job_dir, pid))
        except psutil.Error:
            continue
    return found


def newest_checkpoint(job_dir: Path) -> Path | None:
    """The job's checkpoint directory of the highest step, or None."""
    steps = [p for p in JobDir(job_dir).checkpoints.glob("step-*") if p.is_dir()]
    return max(steps, key=lambda p: int(p.name.split("-")[1]), default=None)


@contextlib.contextmanager
def tmpfs(mount_point: Path) -> Iterator[bool]:
    """A tmpfs of `TMPFS_SIZE` at `mount_point` (True), or a plain directory where it cannot be
    mounted (False: not root, or no mount); unmounted lazily on the way out, whatever ends the soak."""
    mount_point.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "cockpit-soak", str(mount_point)],
                              capture_output=True, text=True, check=False)  # fmt: skip
        mounted = done.returncode == 0
        if not mounted:
            print(f"no tmpfs at {mount_point} ({done.stderr.strip() or 'mount failed'}): disk faults skipped")
    except OSError as e:
        print(f"no tmpfs at {mount_point} ({e}): disk faults skipped")
        mounted = False
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(directory: Path) -> Path:
    """A filler file that takes every free byte of `directory`'s filesystem."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (2**20, 4096, 1):  # unbuffered: what fit stays written, down to the last byte
            with contextlib.suppress(OSError):  # ENOSPC: full at this size
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


# --- one fleet -------------------------------------------------------------------------------


class Fleet:
    """One fleet's cockpits, from its plan to its end, and the faults it took."""

    def __init__(self, index: int, root: Path, out: Path, rng: random.Random, tally: Tally, disk: bool) -> None:
        self.index, self.rng, self.tally, self.disk = index, rng, tally, disk
        self.run_dir = root / f"fleet-{index}"
        self.root = root
        self.out = out / f"fleet-{index}"
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "quick.toml").write_text(PRESET)
        self.plan = self.out / "plan.toml"
        self.plan.write_text(PLAN.format(preset=self.out / "quick.toml"))
        self.log = self.out / "cockpit.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.filler: Path | None = None
        self.cockpit_faults = 0
        self.hand_resumes = 0
        self.hit_what = ""  # what the last fault hit, for its line

    def start(self, *args: str) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cockpit", "fleet", *args, "--headless"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO_ROOT,
                env={**os.environ, MARKER_ENV: str(self.run_dir)},
                start_new_session=True,  # a Ctrl-C of the soak is the soak's, not the fleet's
            )

    def resume(self) -> None:
        self.start("--resume", str(self.run_dir))

    def run(self, faults_until: float) -> None:
        """Train the fleet to its end under faults until `faults_until` (monotonic), then without."""
        self.start(str(self.plan), "--run-dir", str(self.run_dir), "--stall-timeout", str(STALL_TIMEOUT_S),
                   "--max-restarts", "10")  # fmt: skip
        give_up = time.monotonic() + FLEET_LIMIT_S
        next_at, kind, tried_since = time.monotonic() + self.rng.uniform(*FAULT_GAP_S), "", 0.0
        disk_until = 0.0
        while True:
            assert self.proc is not None
            now = time.monotonic()
            if self.filler is not None and now >= disk_until:
                self.free_disk()
                next_at = now + self.rng.uniform(*FAULT_GAP_S)  # a gap after the disk fault too
            code = self.proc.poll()
            if code is not None:
                self.free_disk()
                self.count_left(after_kill9=False)
                if self.status() == "done":
                    self.tally.fleets_done += 1
                    return
                if self.hand_resumes >= HAND_RESUMES_PER_FLEET:
                    self.note(f"ended {self.status()} (exit {code}) after {self.hand_resumes} resumes by hand")
                    return
                self.note(f"cockpit exited {code} with the fleet {self.status()}: resumed by hand")
                self.hand_resumes += 1
                self.tally.hand_resumes += 1
                self.resume()
                continue
            if now > give_up:
                self.note(f"not over after {FLEET_LIMIT_S / 60:g} min: ended")
                self.proc.kill()
                self.proc.wait()
                self.free_disk()
                self.count_left(after_kill9=True)
                return
            if self.filler is None and now < faults_until and now >= next_at:
                if not kind:
                    kind, tried_since = self.draw(), now
                if self.hit(kind):
                    self.tally.faults[kind] += 1
                    print(f"fleet {self.index}: {kind} ({self.hit_what})", flush=True)
                    disk_until = time.monotonic() + DISK_FULL_S if kind == "disk" else 0.0
                    kind, next_at = "", time.monotonic() + self.rng.uniform(*FAULT_GAP_S)
                elif now - tried_since > RETRY_S:
                    kind = ""
            time.sleep(0.5)

    def draw(self) -> str:
        kinds = [k for k in KINDS if self.disk or k != "disk"]
        if self.cockpit_faults >= COCKPIT_FAULTS_PER_FLEET:
            kinds = [k for k in kinds if k not in COCKPIT_SIGNALS]
        return self.rng.choice(kinds)

    def hit(self, kind: str) -> bool:
        """Apply one fault of `kind`; False when there is nothing for it to hit yet."""
        if kind in COCKPIT_SIGNALS:
            self.hit_what = f"cockpit {self.proc.pid if self.proc else '-'}"
            return self.hit_cockpit(COCKPIT_SIGNALS[kind])
        if kind == "disk":
            self.filler = fill(self.root)
            self.hit_what = f"{self.root} full for {DISK_FULL_S:g} s"
            return True
        jobs = training(self.run_dir)
        if kind == "corrupt":
            jobs = [j for j in jobs if newest_checkpoint(j.job_dir) is not None]
        if not jobs:
            return False
        job = self.rng.choice(jobs)
        self.hit_what = f"job {job.job_dir.name}, worker {job.pid}"
        try:
            if kind == "corrupt":
                self.corrupt(job.job_dir)
            os.kill(job.pid, signal.SIGSTOP if kind == "sigstop" else signal.SIGKILL)
        except (OSError, ValueError):  # the worker or its checkpoint went meanwhile
            return False
        return True

    def corrupt(self, job_dir: Path) -> None:
        """Overwrite 64 bytes in the middle of the model in the job's newest checkpoint."""
        newest = newest_checkpoint(job_dir)
        if newest is None:
            raise ValueError("no checkpoint")
        model = newest / "model.zip"
        size = model.stat().st_size
        with model.open("r+b") as f:
            f.seek(size // 2)
            f.write(self.rng.randbytes(64))

    def hit_cockpit(self, sig: signal.Signals) -> bool:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.note(f"cockpit still running {STOP_WAIT_S:g} s after {sig.name}: killed")
            self.proc.kill()
            self.proc.wait()
        self.cockpit_faults += 1
        self.count_left(after_kill9=sig == signal.SIGKILL)
        self.resume()
        return True

    def free_disk(self) -> None:
        if self.filler is not None:
            self.filler.unlink(missing_ok=True)
            self.filler = None

    def count_left(self, after_kill9: bool) -> None:
        """Count the fleet's workers alive `LEFT_AFTER_S` after its cockpit exited, and end them."""
        time.sleep(LEFT_AFTER_S)
        left = fleet_workers(self.run_dir)
        if left:
            states = ", ".join(f"{p.pid} {p.status()}" for p in left if p.is_running())
            self.note(f"{len(left)} workers alive {LEFT_AFTER_S:g} s after the cockpit "
                      f"{'was killed' if after_kill9 else 'exited'}: {states}")  # fmt: skip
            self.tally.workers_left += len(left)
            if after_kill9:
                self.tally.workers_left_after_kill9 += len(left)
            end_processes(left)

    def status(self) -> str:
        try:
            return read(self.run_dir).status
        except RunRecordError:
            return "unreadable"

    def note(self, text: str) -> None:
        line = f"fleet {self.index}: {text}"
        print(line, flush=True)
        self.tally.notes.append(line)

    def account(self) -> None:
        """Add the finished fleet's steps redone, corrupt checkpoints caught and model checks to the
        tally, and keep its small records (events, logs, run.toml, models.toml) under --out."""
        for job_dir in sorted(RunDir(self.run_dir).jobs.glob("*")):
            events = read_events(JobDir(job_dir).events) if JobDir(job_dir).events.is_file() else []
            self.tally.redone.extend(steps_redone(events))
            self.tally.corrupt_skipped += sum(len(e.corrupt_checkpoints) for e in of_kind(events, StartedEvent))
        try:
            entries = read_manifest(self.run_dir)
        except ValueError as e:
            self.note(str(e))
            entries = []
        self.tally.models += len(entries)
        problems = verify(self.run_dir, entries)
        for problem in problems:
            self.note(problem)
        self.tally.models_failing += len({p.split(":")[0] for p in problems})
        shutil.copytree(self.run_dir, self.out / "run", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("step-*", "*.zip", "*.pkl", "tb", "corrupt"))  # fmt: skip
        shutil.rmtree(self.run_dir, ignore_errors=True)  # room on the tmpfs for the next fleet

    def close(self) -> None:
        """End whatever of this fleet still runs (on the soak's own way out)."""
        self.free_disk()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        end_processes(fleet_workers(self.run_dir))


# --- the soak --------------------------------------------------------------------------------


def soak(minutes: float, seed: int, out: Path, tally: Tally) -> None:
    """Fleets one after another until `minutes` pass (the last one finishes after that), counted
    into `tally`."""
    rng = random.Random(seed)
    faults_until = time.monotonic() + minutes * 60
    with tmpfs(out / "fs") as disk:
        fleet: Fleet | None = None
        try:
            while time.monotonic() < faults_until:
                fleet = Fleet(tally.fleets, out / "fs", out, rng, tally, disk)
                tally.fleets += 1
                started = time.monotonic()
                fleet.run(faults_until)
                status = fleet.status()
                fleet.account()
                print(f"fleet {fleet.index}: {status} in {time.monotonic() - started:.0f} s; "
                      f"faults so far {sum(tally.faults.values())}", flush=True)  # fmt: skip
                fleet = None
        finally:
            if fleet is not None:  # ended midway: its records are kept and counted as far as they go
                fleet.close()
                fleet.account()


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, required=True, help="inject faults for this long")
    parser.add_argument("--seed", type=int, default=0, help="seed of the faults' random draws (default: 0)")
    parser.add_argument("--out", type=Path, default=None, help="where the fleets' files go (default: a new tempdir)")
    args = parser.parse_args()
    if args.minutes <= 0:
        parser.error("--minutes: a number of minutes above 0")
    out = (args.out or Path(tempfile.mkdtemp(prefix="cockpit-soak-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"soak: {args.minutes:g} min, seed {args.seed}, files in {out}", flush=True)
    warn_if_busy()
    # SIGINT too: a soak started in the background of a script inherits SIGINT ignored, and Python then
    # leaves it so; the cleanup (the fleet, its workers, the tmpfs) must run however the soak is ended.
    for each in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(each, _interrupted)
    started, tally = time.monotonic(), Tally()
    try:
        soak(args.minutes, args.seed, out, tally)
    except KeyboardInterrupt:
        print("interrupted: the summary counts what ran so far", flush=True)
    print(f"ran {(time.monotonic() - started) / 60:.1f} min; models {tally.models}; corrupt checkpoints "
          f"skipped by their sums {tally.corrupt_skipped} (of {tally.faults['corrupt']} corrupted)")  # fmt: skip
    print(summary_line(args.minutes, tally))
    return 0


if __name__ == "__main__":
    sys.exit(main())
