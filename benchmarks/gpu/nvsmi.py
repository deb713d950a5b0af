"""`nvidia-smi`, the reference the kit holds cockpit's own NVML figures against.

Three uses, each with a pure parser the tests feed with text:
- `gpu_facts()`: the card, its driver and its memory (`--query-gpu`);
- `Dmon`: `nvidia-smi dmon -s um -o DT` running beside a run, one row a second (utilization and
  memory), read back with `parse_dmon`;
- `Pmon`: `nvidia-smi pmon -s u -o DT` beside a run, each process's SM % a second, read back with
  `parse_pmon`;
- `ComputeApps`: `--query-compute-apps` polled in a thread, each process's GPU memory stamped with
  the time it was read (`parse_compute_apps`).

Nothing here invents a figure: without `nvidia-smi` every function says so (None, or no rows), and
a field the driver does not report (`[N/A]`, `-`) stays None.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

QUERY_TIMEOUT_S = 10.0
GPU_FIELDS = ("name", "driver_version", "memory.total", "memory.used", "memory.free")


def binary() -> str | None:
    """The path of `nvidia-smi`, or None where there is none (no NVIDIA driver)."""
    return shutil.which("nvidia-smi")


def _number(text: str) -> float | None:
    """A figure as nvidia-smi prints it; None for the ways it says "not available"."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]", "-"


def parse_query_gpu(text: str) -> list[dict[str, str]]:
    """`--query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits` output: one dict per GPU."""
    rows = []
    for line in text.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(GPU_FIELDS):
            rows.append(dict(zip(GPU_FIELDS, values, strict=True)))
    return rows


def gpu_facts(index: int = 0) -> dict[str, str] | None:
    """Name, driver and memory (MiB: total, used, free) of GPU `index` as nvidia-smi reports them
    now; None without nvidia-smi or when it fails."""
    exe = binary()
    if exe is None:
        return None
    argv = [exe, f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits", "-i", str(index)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = parse_query_gpu(done.stdout) if done.returncode == 0 else []
    return rows[0] if rows else None


# ----- dmon -----


@dataclass(frozen=True)
class DmonRow:
    """One second of `nvidia-smi dmon`: `t` (Unix time of the row, to the second), `sm` (the GPU's
    utilization, %: the figure NVML's utilization rate and cockpit's samples report), `mem` (the
    memory controller's %), `fb_mib` (framebuffer memory used)."""

    t: float
    sm: float | None
    mem: float | None
    fb_mib: float | None


def _gpu0_rows(text: str, *, trailing: bool) -> Iterator[tuple[float, dict[str, str]]]:
    """(Unix time, column -> value) for each of GPU 0's rows of `nvidia-smi dmon`/`pmon -o DT`
    output: the columns are named by the first `#` line, later `#` lines (units, repeated headers)
    are skipped, and so are rows of other GPUs and torn lines. `trailing`: the last column may
    hold spaces (pmon's command), so a row may have more fields than names."""
    names: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            if names is None:
                names = [n.lower() for n in line.lstrip("#").split()]
            continue
        values = line.split()
        if names is None or len(values) < len(names) or (len(values) > len(names) and not trailing):
            continue  # a torn last line, or output before the header
        row = dict(zip(names, values, strict=False))
        if row.get("gpu", "0") != "0":
            continue
        try:
            t = time.mktime(time.strptime(f"{row['date']} {row['time']}", "%Y%m%d %H:%M:%S"))
        except (KeyError, ValueError):
            continue
        yield t, row


def parse_dmon(text: str) -> list[DmonRow]:
    """Rows of `nvidia-smi dmon -s um -o DT` for GPU 0.

    The first `#` line names the columns (`Date Time gpu sm mem ... fb bar1 ...`; the set varies
    with the driver, so columns are found by name); `#` lines after it (units, repeated headers)
    and rows of other GPUs are skipped. Date and time are the machine's local time, as
    `time.mktime` reads them, so they compare with `time.time()` taken on the same machine.
    """
    rows: list[DmonRow] = []
    for t, row in _gpu0_rows(text, trailing=False):
        rows.append(DmonRow(t, _number(row.get("sm", "-")), _number(row.get("mem", "-")), _number(row.get("fb", "-"))))
    return rows


class Dmon:
    """`nvidia-smi dmon -s um -o DT -c SECONDS` writing to a file, for `seconds` rows.

    It runs for a count of rows rather than until killed because its output is block-buffered
    into a file: a killed dmon may lose the rows it had not flushed, one that ends by itself
    flushes them all. `stdbuf -oL`, where there is one, makes the file grow line by line too.
    """

    ARGS: tuple[str, ...] = ("dmon", "-s", "um", "-o", "DT")

    def __init__(self, path: Path, seconds: int) -> None:
        self.path = path
        self.seconds = seconds
        self._proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    def __enter__(self) -> Dmon:
        return self

    def __exit__(self, *exc: object) -> None:
        """A check that failed before `finish` leaves no dmon behind."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._out is not None:
            self._out.close()

    def start(self) -> bool:
        """Start dmon; False (and nothing started) without nvidia-smi."""
        exe = binary()
        if exe is None:
            return False
        argv = [exe, *self.ARGS, "-c", str(self.seconds)]
        stdbuf = shutil.which("stdbuf")
        self._out = self.path.open("wb")
        self._proc = subprocess.Popen([stdbuf, "-oL", *argv] if stdbuf else argv, stdout=self._out,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
        return True

    def finish(self, timeout: float) -> list[DmonRow]:
        """Wait up to `timeout` s for dmon to end by itself (then stop it) and return its rows."""
        if self._proc is not None:
            try:
                self._proc.wait(timeout=max(0.0, timeout))
            except subprocess.TimeoutExpired:
                self._proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=5)
                if self._proc.poll() is None:
                    self._proc.kill()
                    self._proc.wait()
        if self._out is not None:
            self._out.close()
        return parse_dmon(self.path.read_text(encoding="utf-8", errors="replace")) if self.path.exists() else []


# ----- pmon -----


@dataclass(frozen=True)
class PmonRow:
    """One process in one second of `nvidia-smi pmon -s u`: `t` (Unix time, to the second), its
    `pid` and its `sm` % (None where pmon prints "-": no sample of it in that second)."""

    t: float
    pid: int
    sm: float | None


def parse_pmon(text: str) -> list[PmonRow]:
    """Rows of `nvidia-smi pmon -s u -o DT` for GPU 0's processes.

    The columns are those the nvidia-smi manual page lists under "Process Monitoring" (`-s u`:
    the utilization group; `-o DT`: date and time first): `# Date Time gpu pid type sm mem enc dec
    ... command`, with `jpg` and `ofa` on newer drivers, so they are found by name from the first
    `#` line; the second `#` line (units) is skipped, and so are rows of an idle GPU (pid "-") and
    of other GPUs. `command` may hold spaces, so a row has at least as many fields as names."""
    rows: list[PmonRow] = []
    for t, row in _gpu0_rows(text, trailing=True):
        if row.get("pid", "-").isdigit():
            rows.append(PmonRow(t, int(row["pid"]), _number(row.get("sm", "-"))))
    return rows


class Pmon(Dmon):
    """`nvidia-smi pmon -s u -o DT -c SECONDS` writing to a file, for `seconds` rows (as `Dmon`)."""

    ARGS = ("pmon", "-s", "u", "-o", "DT")

    def rows(self, timeout: float) -> list[PmonRow]:
        """Wait up to `timeout` s for pmon to end by itself (then stop it) and return its rows."""
        self.finish(timeout)
        return parse_pmon(self.path.read_text(encoding="utf-8", errors="replace")) if self.path.exists() else []


# ----- per-process memory -----


@dataclass(frozen=True)
class AppMemory:
    """One process's GPU memory as `--query-compute-apps` listed it at `t` (Unix time)."""

    t: float
    pid: int
    mib: float | None


def parse_compute_apps(text: str, t: float) -> list[AppMemory]:
    """`--query-compute-apps=pid,used_memory --format=csv,noheader,nounits` output, stamped `t`."""
    apps = []
    for line in text.strip().splitlines():
        pid, _, mib = line.partition(",")
        with contextlib.suppress(ValueError):
            apps.append(AppMemory(t, int(pid.strip()), _number(mib)))
    return apps


class ComputeApps:
    """Polls `nvidia-smi --query-compute-apps` every `interval` s in a thread, as a context manager.

    `rows` holds every reading; `peak_mib(pid)` the most a process held. Without nvidia-smi it
    starts nothing and `available` is False.
    """

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.rows: list[AppMemory] = []
        self.available = binary() is not None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ComputeApps:
        if self.available:
            self._thread = threading.Thread(target=self._poll, name="compute-apps", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=QUERY_TIMEOUT_S + 1)

    def _poll(self) -> None:
        exe = binary()
        assert exe is not None
        argv = [exe, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
        while not self._stop.is_set():
            t = time.time()
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False)
            except (OSError, subprocess.TimeoutExpired):
                done = None
            if done is not None and done.returncode == 0:
                self.rows.extend(parse_compute_apps(done.stdout, t))
            self._stop.wait(self.interval)

    def peak_mib(self, pid: int) -> float | None:
        """The most GPU memory `pid` held in any reading; None if it was never listed with a figure."""
        values = [r.mib for r in self.rows if r.pid == pid and r.mib is not None]
        return max(values) if values else None
