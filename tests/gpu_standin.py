"""A GPU machine's boundaries, stood in for the GPU kit's tests (`tests/test_benchmarks_gpu_kit_paths.py`):
NVML (`pynvml`), `nvidia-smi`, torch's CUDA queries and a CUDA worker, all reading one scripted GPU
so that their figures agree as a real machine's do. `install(root)` writes them; the caller puts
`root/site` first on PYTHONPATH (before the repository) and `root/bin` first on PATH, and sets
`GPU_STANDIN_DIR` to `root`.

The scripted GPU ("NVIDIA H200 (stand-in)", 80 GiB, compute capability 9.0):
- Utilization is `util_at(t)`, constant within each whole second. NVML's sample buffer holds a
  sample of it every 1/6 s (`tests.fake_pynvml`), and `nvidia-smi dmon`'s row stamped T shows the
  second [T-1, T) that ends at its stamp (nvidia-smi(1), "Device Monitoring": each row is the
  interval since the one before).
- Each fake CUDA worker registers its pid, GPU memory and SM % in `root/procs` while it runs: NVML's
  running processes and `--query-compute-apps` list them, and memory in use grows by them.
- Per-process utilization has samples only in the seconds `sm_sampled` says (two of every four):
  NVML's per-process call returns none for a process that did not run a kernel in the window
  (NVML API reference, nvmlDeviceGetProcessUtilization: "samples ... since lastSeenTimeStamp"),
  and `nvidia-smi pmon` prints "-" in such a second (nvidia-smi(1), "Process Monitoring").
- `nvmlDeviceGetSamples` fails once, with NVML_ERROR_UNKNOWN, on its `SAMPLE_ERROR_AT`-th call in
  each process: a one-off error outside the codes cockpit's reader handles (nvml.h lists UNKNOWN
  among every call's returns), which costs that tick its buffered reading.

The fake CUDA worker (`python -m cockpit_training.worker`, shadowed in `root/site` while every other
module of the package stays the real one) writes the events docs/events.md gives a worker on CUDA:
`started` with `device` cuda:0 and `tf32` true, a rollout and a train phase per update, `progress`
with the allocator's `cuda_reserved_bytes` and `cuda_peak_bytes` (NVML's per-process figure is
that plus the CUDA context), `finished` done at its target, or stopped on SIGINT or SIGTERM; and
`error` cuda_oom, exit 1, when its first train phase's activations (`activation_bytes`) exceed the
card's free memory.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.fake_pynvml import GIB, FakeGpu, FakeNvml, NVMLError
from tests.mps_standin import alive

STATE_ENV = "GPU_STANDIN_DIR"
REPO = Path(__file__).resolve().parents[1]
GPU_NAME = "NVIDIA H200 (stand-in)"
MEMORY_TOTAL_MIB = 80 * 1024
IDLE_MIB = 512  # in use with no process on the GPU (the driver's own)
DRIVER = "555.42"
SAMPLE_ERROR_AT = 15  # the nvmlDeviceGetSamples call that fails once in each process (3 s at 5 Hz)
ERROR_UNKNOWN = 999
WORKER_PEAK_MIB = 1000.0  # the fake worker's allocator peak (torch.cuda.max_memory_reserved)
CONTEXT_MIB = 400.0  # what NVML's per-process figure adds to the allocator's: the CUDA context
WORKER_SM = 70.0  # a fake worker's SM % in a second it runs kernels
CYCLE_S = 0.6  # one fake update: a rollout phase, then a train phase


def util_at(t: float) -> float:
    """The scripted GPU's utilization at Unix time `t`, %: constant within each whole second."""
    return 40.0 + 10.0 * (int(t) % 4)


def sm_sampled(second: int) -> bool:
    """Whether the workers run kernels in whole second `second` (Unix time, floored): two of every
    four seconds, so that a second without a per-process sample comes often."""
    return second % 4 < 2


def state() -> Path:
    """The stand-ins' folder (`GPU_STANDIN_DIR`)."""
    return Path(os.environ[STATE_ENV])


def register(pid: int, mib: float, sm: float) -> Path:
    """A CUDA process on the scripted GPU: `mib` of memory (NVML's figure), `sm` % when it runs."""
    folder = state() / "procs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / str(pid)
    tmp = folder / f".{pid}.tmp"
    tmp.write_text(json.dumps({"mib": mib, "sm": sm}), encoding="utf-8")
    tmp.replace(path)
    return path


def registered() -> dict[int, tuple[float, float]]:
    """pid -> (MiB, SM %) of the CUDA processes alive on the scripted GPU."""
    procs: dict[int, tuple[float, float]] = {}
    folder = state() / "procs"
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not path.name.isdigit() or not alive(int(path.name)):
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # being written
        procs[int(path.name)] = (float(data["mib"]), float(data["sm"]))
    return procs


def used_mib() -> float:
    """Memory in use on the scripted GPU, MiB."""
    return IDLE_MIB + sum(mib for mib, _ in registered().values())


# ----- NVML -----


class StandInNvml(FakeNvml):
    """`tests.fake_pynvml`'s NVML on the scripted GPU, its processes those registered."""

    def __init__(self) -> None:
        gpu = FakeGpu(util_at=util_at, clock=time.time, mem_total=MEMORY_TOTAL_MIB * 2**20, name=GPU_NAME,
                      uuid="GPU-standin-0", compute_capability=(9, 0))  # fmt: skip
        super().__init__(gpu)

    def nvmlSystemGetDriverVersion(self) -> str:
        return DRIVER

    def nvmlDeviceGetSamples(self, handle: str, kind: int, last_us: int) -> tuple[int, list[SimpleNamespace]]:
        if self.sample_calls + 1 == SAMPLE_ERROR_AT:
            self.sample_calls += 1
            raise NVMLError(ERROR_UNKNOWN)
        return super().nvmlDeviceGetSamples(handle, kind, last_us)

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        used = int(used_mib() * 2**20)
        return SimpleNamespace(used=used, total=self.gpu.mem_total, free=self.gpu.mem_total - used)

    def _records(self, handle: str, read: int, garbage: bool = False) -> list[SimpleNamespace]:
        # The GPU's processes are whichever workers are alive now, packed as the stand-in packs any.
        self.gpu.processes = tuple((pid, int(mib * 2**20)) for pid, (mib, _) in registered().items())
        return super()._records(handle, read, garbage)

    def _process_util(self, handle: str, last_us: int) -> list[SimpleNamespace]:
        now = time.time()
        samples = []
        for pid, (_, sm) in registered().items():
            t = now - 3.0
            while t <= now:
                stamp = int(t * 1e6)
                if sm_sampled(int(t)) and stamp > last_us:
                    samples.append(SimpleNamespace(pid=pid, timeStamp=stamp, smUtil=sm, memUtil=0))
                t += 1 / 6
        if not samples:
            raise NVMLError(6)  # NOT_FOUND: no sample newer than the timestamp
        return samples


# ----- nvidia-smi -----


def _stamp(second: int) -> str:
    return time.strftime("%Y%m%d   %H:%M:%S", time.localtime(second))


def _each_second(count: int) -> Any:
    """The next `count` whole seconds, each yielded once it has begun."""
    for _ in range(count):
        second = int(time.time()) + 1
        time.sleep(max(0.0, second - time.time()))
        yield second


def nvidia_smi(argv: list[str]) -> int:
    """`nvidia-smi` as the kit calls it: `--query-gpu`, `--query-compute-apps`, `dmon -s um -o DT
    -c N` and `pmon -s u -o DT -c N`, laid out as nvidia-smi(1) lays them out."""
    out = sys.stdout
    query = next((a for a in argv if a.startswith("--query-gpu=")), None)
    if query is not None:
        used = used_mib()
        values = {"name": GPU_NAME, "driver_version": DRIVER, "memory.total": f"{MEMORY_TOTAL_MIB}",
                  "memory.used": f"{used:.0f}", "memory.free": f"{MEMORY_TOTAL_MIB - used:.0f}"}  # fmt: skip
        out.write(", ".join(values[f] for f in query.split("=", 1)[1].split(",")) + "\n")
        return 0
    if any(a.startswith("--query-compute-apps=") for a in argv):
        for pid, (mib, _) in registered().items():
            out.write(f"{pid}, {mib:.0f}\n")
        return 0
    count = int(argv[argv.index("-c") + 1]) if "-c" in argv else 1_000_000
    if argv[:1] == ["dmon"]:
        out.write("# Date       Time        gpu    sm   mem   enc   dec   jpg   ofa    fb  bar1  ccpm\n"
                  "# YYYYMMDD   HH:MM:SS    Idx     %     %     %     %     %     %    MB    MB    MB\n")  # fmt: skip
        out.flush()
        for second in _each_second(count):
            out.write(f" {_stamp(second)}      0 {util_at(second - 1):5.0f}     3     0     0     0     0 "
                      f"{used_mib():5.0f}     2     0\n")  # fmt: skip
            out.flush()
        return 0
    if argv[:1] == ["pmon"]:
        out.write("# Date       Time        gpu         pid   type     sm    mem    enc    dec    jpg    ofa"
                  "    command\n"
                  "# YYYYMMDD   HH:MM:SS    Idx           #    C/G      %      %      %      %      %      %"
                  "    name\n")  # fmt: skip
        out.flush()
        for second in _each_second(count):
            procs = registered()
            if not procs:
                out.write(f" {_stamp(second)}      0          -     -      -      -      -      -      -      -    -\n")
            for pid, (_, sm) in procs.items():
                shown = f"{sm:.0f}" if sm_sampled(second - 1) else "-"
                out.write(f" {_stamp(second)}      0 {pid:>10}     C {shown:>6}      1      -      -      -      -    "
                          "python -m cockpit_training.worker\n")  # fmt: skip
            out.flush()
        return 0
    print(f"nvidia-smi stand-in: no script for {' '.join(argv)}", file=sys.stderr)
    return 2


# ----- the CUDA worker -----


def activation_bytes(batch_size: int, net_arch: tuple[int, ...]) -> int:
    """What a minibatch's forward pass keeps for the backward one: a float32 tensor per layer and
    sample, for the policy and the value network each (SB3's MlpPolicy: two separate MLPs)."""
    return 2 * batch_size * sum(net_arch) * 4


def fake_worker() -> int:
    """`python -m cockpit_training.worker` on the scripted GPU: its events as a worker on CUDA
    writes them (module docstring), one update every `CYCLE_S`."""
    from cockpit.contract.events import EventWriter, StartedEvent
    from cockpit.contract.presets import load
    from cockpit.contract.workerargs import WorkerArgs

    began = time.time()
    args = WorkerArgs.parse()
    preset = load(args.preset)
    target = args.timesteps if args.timesteps is not None else preset.timesteps
    device = "cpu" if args.device == "cpu" else "cuda:0"
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    signal.signal(signal.SIGINT, lambda signum, frame: stop.append(signum))
    events = EventWriter(args.job_dir / "events.jsonl")
    mine = register(os.getpid(), WORKER_PEAK_MIB + CONTEXT_MIB, WORKER_SM) if device != "cpu" else None
    try:
        now = time.time()
        events.emit(
            StartedEvent(
                now,
                pid=os.getpid(),
                device=device,
                config={
                    "preset": preset.name,
                    "job_dir": str(args.job_dir),
                    "seed": args.seed,
                    "device": device,
                    "timesteps": target,
                },
                target_steps=target,
                torch_threads=1,
                startup_s=now - began,
                tf32=device != "cpu",
            )
        )
        steps, update = 0, 0
        while not stop:
            events.phase("rollout", iteration=update, num_timesteps=steps)
            time.sleep(CYCLE_S / 2)
            steps, update = steps + preset.total_batch, update + 1
            events.phase("train", iteration=update, num_timesteps=steps)
            need = activation_bytes(preset.batch_size, preset.net_arch)
            free = (MEMORY_TOTAL_MIB - used_mib()) * 2**20
            if device != "cpu" and need > free:
                # As torch's caching allocator fails a request larger than the card's free memory:
                # torch.cuda.OutOfMemoryError, which the real worker reports as cuda_oom (exit 1).
                message = (f"OutOfMemoryError: CUDA out of memory. Tried to allocate {need / 2**30:.2f} GiB. GPU 0 "
                           f"has a total capacity of {MEMORY_TOTAL_MIB / 1024:.2f} GiB of which "
                           f"{free / 2**30:.2f} GiB is free.")  # fmt: skip
                events.error(type="cuda_oom", message=message)
                print(f"[worker] {message}", file=sys.stderr)
                return 1
            time.sleep(CYCLE_S / 2)
            peak = int(WORKER_PEAK_MIB * 2**20) if device != "cpu" else None
            events.progress(num_timesteps=steps, iteration=update, sps=preset.total_batch / CYCLE_S,
                            cuda_reserved_bytes=peak, cuda_peak_bytes=peak)  # fmt: skip
            if steps >= target:
                events.finished(status="done", steps=steps, duration=time.time() - began)
                return 0
        events.finished(status="stopped", steps=steps, duration=time.time() - began)
        return 0
    finally:
        if mine is not None:
            mine.unlink(missing_ok=True)


# ----- installing them -----

TORCH = '''"""torch as the GPU kit's host check asks it (torch.__version__, torch.version.cuda,
torch.cuda.is_available, get_device_properties, mem_get_info: torch's torch.cuda reference), on
the scripted GPU of tests/gpu_standin.py."""
from types import SimpleNamespace

from tests import gpu_standin as _gpu

__version__ = "2.13.0+standin"
version = SimpleNamespace(cuda="12.8")


class cuda:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def get_device_properties(index):
        return SimpleNamespace(name=_gpu.GPU_NAME, major=9, minor=0, multi_processor_count=132)

    @staticmethod
    def mem_get_info():
        total = _gpu.MEMORY_TOTAL_MIB * 2**20
        return total - int(_gpu.used_mib() * 2**20), total
'''

PYNVML = '''"""pynvml (nvidia-ml-py) on the scripted GPU of tests/gpu_standin.py."""
import sys

from tests.gpu_standin import StandInNvml

sys.modules[__name__] = StandInNvml()
'''

WORKER_PACKAGE = '''"""cockpit_training with its worker shadowed by tests/gpu_standin.py's fake CUDA worker; every
other module is the real package's."""
__path__ = [__path__[0], {training!r}]
'''

WORKER = """import sys

from tests.gpu_standin import fake_worker

if __name__ == "__main__":
    sys.exit(fake_worker())
"""

NVIDIA_SMI = """#!{python}
import sys

sys.path.insert(0, {repo!r})
from tests.gpu_standin import nvidia_smi

sys.exit(nvidia_smi(sys.argv[1:]))
"""


def install(root: Path, *, fake_torch: bool = True) -> dict[str, str]:
    """Write the stand-ins under `root`; the environment variables that put them in place (PATH,
    PYTHONPATH and GPU_STANDIN_DIR over this process's). Without `fake_torch` the real torch stays:
    for what trains for real in the cockpit's own process (the probe), which the stand-in torch,
    made for the host check's queries, cannot do."""
    site, bin_dir = root / "site", root / "bin"
    (site / "cockpit_training").mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    if fake_torch:
        (site / "torch").mkdir(parents=True, exist_ok=True)
        (site / "torch" / "__init__.py").write_text(TORCH, encoding="utf-8")
    (site / "pynvml.py").write_text(PYNVML, encoding="utf-8")
    package = WORKER_PACKAGE.format(training=str(REPO / "training"))
    (site / "cockpit_training" / "__init__.py").write_text(package, encoding="utf-8")
    (site / "cockpit_training" / "worker.py").write_text(WORKER, encoding="utf-8")
    smi = bin_dir / "nvidia-smi"
    smi.write_text(NVIDIA_SMI.format(python=sys.executable, repo=str(REPO)), encoding="utf-8")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", STATE_ENV: str(root),
            "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}  # fmt: skip


__all__ = ["GIB", "install"]
