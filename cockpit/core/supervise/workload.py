"""What a run's jobs train (`JobTemplate`) and where each launch of one goes (`Placement`, `Placer`).

On a machine with GPUs, each launch places the job on one (`cockpit.core.machine.placement`: the
GPU it ran on before, found by UUID, while it is there, has room for the job's known peak GPU
memory and is not crowded; else the one with the fewest jobs, then the most free memory; never past
what the GPU's compute mode takes: one job on an EXCLUSIVE_PROCESS GPU unless the jobs are MPS
clients, none on a PROHIBITED one); the launcher makes that the only GPU its worker sees.

Under MPS (`Placement.mps`: `--mps`), each worker placed on a GPU is a client of that GPU's MPS
daemon (`MpsServers.for_gpu`: its pipe and log directories), its memory capped from its known
peak (`workerargs.mps_memory_limit_mib`). With `mps_clients` False the daemons stand ready and the
jobs are not their clients until `SetMps(True)` (`run --auto` measuring MPS).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from cockpit.contract.scriptargs import ScriptArgs
from cockpit.contract.workerargs import DeviceRequest, MpsServers, WorkerArgs, mps_memory_limit_mib
from cockpit.core.launch.protocol import LaunchRequest
from cockpit.core.machine.host import pin_sets
from cockpit.core.machine.placement import GpuRef, GpuRoom, place
from cockpit.core.supervise.jobs import Job


@dataclass(frozen=True)
class JobTemplate:
    """What every job of a run shares: worker arguments apart from seed and job dir, or the user's
    command (`script`, a `ScriptArgs` template) that runs instead of cockpit's worker."""

    preset_arg: str
    env: str
    timesteps: int
    script: tuple[str, ...] | None = None
    episodes: int | None = None  # an episode target per job (`--episodes`) in place of `timesteps`
    tensorboard: bool = True  # the workers log SB3's scalars to <job dir>/tb (False: --no-tensorboard)
    # One torch thread per worker instead of its core budget: the probe measured that the preset's
    # train phase gains nothing from more (`Costs.one_torch_thread`).
    one_torch_thread: bool = False
    # The device each parallel slot's worker trains on (`--devices`), by slot; empty: the worker's choice.
    devices: tuple[str, ...] = ()
    eval_episodes: int | None = None  # score each job's model over this many episodes at its target (`--eval-episodes`)

    def device(self, job: Job) -> DeviceRequest:
        """The device `job`'s slot trains on (`devices`), else the worker's choice."""
        if not self.devices or job.slot is None:
            return "auto"
        return "cpu" if self.devices[job.slot % len(self.devices)] == "cpu" else "cuda"

    def args(self, job: Job, threads: int) -> WorkerArgs | ScriptArgs:
        """What `job`'s next worker runs: cockpit's worker on the job's own preset and env (else
        the template's) to its target, or the user's command, with `threads` env threads."""
        if self.script is not None:
            return ScriptArgs(job.job_dir, job.id, job.seed, self.script, threads=threads)
        episodes = job.target_episodes
        return WorkerArgs(
            job.job_dir,
            preset=job.preset_arg or self.preset_arg,
            env=job.env or self.env,
            device=self.device(job),
            timesteps=job.target if episodes is None else None,
            episodes=episodes,
            seed=job.seed,
            threads=threads,
            eval_episodes=job.eval_episodes,
            tensorboard=self.tensorboard,
            torch_threads=1 if self.one_torch_thread else None,
        )


@dataclass(frozen=True)
class Placement:
    """Where a run's workers may go: `gpus` gives the GPUs jobs may be placed on as they are at the
    moment of a launch (none: no placement), `peak_gpu_mem` each job's peak GPU memory measured so
    far (bytes by job id), which its previous GPU must still have free for the job to go back to it;
    `mps` is where the workers of each GPU meet their MPS daemon (None: no MPS), and `mps_clients`
    whether the jobs start as its clients (module docstring); `pin` pins each slot to its CPUs."""

    gpus: Callable[[], Sequence[GpuRoom]] = tuple
    peak_gpu_mem: Callable[[], Mapping[str, int]] = dict
    mps: MpsServers | None = None
    mps_clients: bool = True
    pin: bool = False


class Placer:
    """Places each launch of a job as its `Placement` says: its slot's CPUs, its GPU, and under MPS
    its daemon and memory cap (the module docstring)."""

    def __init__(self, placement: Placement, slots: int) -> None:
        self.placement = placement
        self.mps = placement.mps
        # Whether the jobs launched from now on are the daemons' clients: `--auto` starts daemons
        # without them and turns them on and off (`SetMps`) to measure what MPS does.
        self.mps_clients = placement.mps is not None and placement.mps_clients
        self._pins = pin_sets(slots, sorted(os.sched_getaffinity(0))) if placement.pin else None

    def set_slots(self, slots: int) -> None:
        """Later launches share the CPUs among `slots` slots."""
        if self._pins is not None:
            self._pins = pin_sets(slots, sorted(os.sched_getaffinity(0)))

    @property
    def mps_served(self) -> bool:
        """Whether the jobs launched now on GPUs are MPS clients: under `--mps` (or `SetMps`), or
        of a daemon found running, which serves every CUDA process here."""
        return self.mps_clients or (self.mps is not None and self.mps.external)

    def known_peak(self, job: Job) -> int | None:
        """The job's GPU memory peak measured so far, this session's or a resumed run's record."""
        known = [p for p in (self.placement.peak_gpu_mem().get(job.id), job.recorded_peak_gpu_mem) if p]
        return max(known, default=None)

    def place(self, job: Job, jobs: Iterable[Job], device: DeviceRequest) -> None:
        """Put `job` on its GPU for this launch among the slot-holding `jobs`; None without a GPU,
        and for a job whose slot trains on the CPU (`--devices`): it takes no GPU's room."""
        if device == "cpu":
            job.gpu = None
            return
        counts: dict[int, int] = {}  # NVML index -> the other jobs that hold a slot on that GPU
        for other in jobs:
            if other is not job and other.gpu is not None and other.state.holds_slot:
                counts[other.gpu.index] = counts.get(other.gpu.index, 0) + 1
        # The GPUs' compute modes bound the jobs on each unless they are MPS clients (`placement.job_limit`).
        room = place(self.placement.gpus(), counts, job.gpu, self.known_peak(job), mps=self.mps_clients)
        job.gpu = GpuRef(room.index, room.uuid) if room is not None else None

    def request(self, job: Job, args: WorkerArgs | ScriptArgs) -> LaunchRequest:
        """The launch of `job`'s next worker running `args`, where `place` put it."""
        assert job.slot is not None  # given before the job is placed
        cpus = tuple(self._pins[job.slot % len(self._pins)]) if self._pins else None
        served = self.mps is not None and self.mps_clients and job.gpu is not None
        dirs = self.mps.for_gpu(job.gpu.index) if served and self.mps is not None and job.gpu is not None else None
        cap = mps_memory_limit_mib(self.known_peak(job)) if dirs is not None else None
        return LaunchRequest(
            job.id,
            args,
            cpus,
            job.gpu,
            dirs.pipe_dir if dirs is not None else None,
            cap,
            dirs.log_dir if dirs is not None else None,
        )
