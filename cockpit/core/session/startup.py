"""A session's start-up: everything a `RunSession` runs with, built in one order before its loop.

`start_session` makes the supervisor (the run's jobs, on the launcher and the GPUs the sampler
reads), the recorder that keeps the samples, TensorBoard's scalars, and the run's first warnings;
on `--resume` it waits for a killed cockpit's workers and takes back what the jobs did; a fleet
gets its `FleetRun` beside the supervisor. What it hands `RunSession` is ready to run: the
session itself only ticks, serves and records.
"""

from __future__ import annotations

from cockpit.contract.costs import Costs
from cockpit.contract.events import FinishedEvent, of_kind
from cockpit.contract.runrecord import RunRecord, RunRecordError
from cockpit.contract.runrecord import read as read_record
from cockpit.contract.runspec import RunSpec
from cockpit.contract.scriptargs import script_label
from cockpit.contract.states import JobState
from cockpit.contract.workerargs import MpsServers
from cockpit.core.export.tensorboard import TensorBoardScalars, install_hint, tensorboard_api
from cockpit.core.fleet.run import FleetFactory
from cockpit.core.launch.local import LocalLauncher, wait_for_previous_workers
from cockpit.core.launch.pooled import PooledLauncher
from cockpit.core.launch.protocol import Launcher, RemoteJobs
from cockpit.core.machine.clock import Clock, SystemClock
from cockpit.core.machine.host import HostInfo, host_info, thread_budget
from cockpit.core.machine.placement import GpuRef
from cockpit.core.record.runlog import Recorder
from cockpit.core.session.clips import session_clips
from cockpit.core.session.run_session import RunSession
from cockpit.core.sizing.autotune import AutoTuner
from cockpit.core.supervise.supervisor import Supervisor
from cockpit.core.supervise.workload import JobTemplate, Placement
from cockpit.core.telemetry.memwatch import MIB, MemoryVerdict
from cockpit.core.telemetry.sampler import Sampler

# How long a resumed run waits for a killed cockpit's workers to checkpoint and exit: a stop's grace,
# plus the imports of a worker that was still starting on a loaded machine.
ORPHAN_WAIT_S = 30.0


def start_session(
    spec: RunSpec,
    sampler: Sampler,
    launcher: Launcher | None = None,
    *,
    clock: Clock | None = None,
    host: HostInfo | None = None,
    resume: bool = False,
    serve: bool = True,
    auto: AutoTuner | None = None,
    costs: Costs | None = None,
    fleet: FleetFactory | None = None,
    notes: tuple[str, ...] = (),
    mps: MpsServers | None = None,
) -> RunSession:
    """The session of one `cockpit run` (or `--resume`, or a `cockpit fleet` with `fleet`, which
    gets the supervisor and feeds its queue: the spec's seeds are unused), ready to `run()`.

    `launcher` (this machine's `LocalLauncher` when None) starts the jobs; `sampler` reads the GPUs
    they are placed on (none on Ray, whose cluster places them). `notes` begin the run's warnings
    (what the cockpit's CUDA_VISIBLE_DEVICES left it, the compute modes' bounds, the MPS lines).
    `mps` is where the jobs of each GPU meet their MPS daemon (`MpsServers.external`: one found
    running); the jobs are its clients from the start under `--mps` only, else a daemon stands
    ready for `--auto` to make them its clients. `costs` is what a job of the preset costs here,
    if measured; `auto` the `--auto` loop; with `serve` the run is served on its control socket.
    With `resume`, a killed cockpit's workers are waited for before anything the jobs wrote is
    read, then each job takes back its GPU, its memory verdict and whether it was done."""
    launcher = launcher if launcher is not None else LocalLauncher()
    clock = clock if clock is not None else SystemClock()
    host = host if host is not None else host_info()
    remote = isinstance(launcher, RemoteJobs)
    supervisor = Supervisor(
        run_dir=spec.run_dir,
        template=_template(spec, costs),
        seeds=spec.seeds if fleet is None else (),
        slots=spec.slots,
        launcher=launcher,
        budget=thread_budget(spec.slots, host.physical_cores),
        restart=spec.restart,
        placement=Placement(
            # On Ray the cluster places each actor on a GPU of its node; this machine's are not theirs.
            gpus=tuple if remote else sampler.gpu_rooms,
            peak_gpu_mem=lambda: sampler.peak_gpu_mem,
            mps=mps,
            mps_clients=spec.mps,
            pin=spec.pin,
        ),
        clock=clock,
        preset_name=spec.loaded_preset.name if spec.loaded_preset is not None else "script",
    )
    supervisor.warnings.extend(notes)
    if spec.gpus is not None and not sampler.gpus:
        asked = ",".join(map(str, spec.gpus))
        supervisor.warnings.append(f"--gpus {asked}: {sampler.gpu_status or 'no GPU'}; training on the CPU")
    recorder = Recorder(spec.run_dir)
    sampler.on_sample = recorder
    if isinstance(launcher, RemoteJobs):  # no local pid to follow: the launcher reports its jobs, and their nodes
        sampler.remote = launcher.usage
    session = RunSession(
        spec,
        sampler,
        supervisor,
        recorder,
        clock=clock,
        host=host,
        serve=serve,
        auto=auto,
        costs=costs,
        tensorboard=_tensorboard(spec, supervisor.warnings),
        mps=mps,
    )
    if resume and isinstance(launcher, (LocalLauncher, PooledLauncher)):
        # Before reading what the jobs wrote: a killed cockpit's workers may still be writing.
        waited = wait_for_previous_workers(spec.run_dir, ORPHAN_WAIT_S)
        if waited:
            supervisor.warnings.append(waited)
    if fleet is not None:
        session.fleet = fleet(supervisor)
    elif resume:
        _restore_jobs(session)
    session.clips = session_clips(spec, supervisor.warnings, session.fleet)
    return session


def _tensorboard(spec: RunSpec, warnings: list[str]) -> TensorBoardScalars | None:
    """Each job's cockpit scalars for TensorBoard (<job dir>/tb/cockpit), unless --no-tensorboard;
    without the package the run says once, in `warnings`, how to get them."""
    if not spec.tensorboard:
        return None
    api = tensorboard_api()
    if api is None:
        warnings.append(install_hint(spec.run_dir))
        return None
    return TensorBoardScalars(spec.run_dir, api)


def _restore_jobs(session: RunSession) -> None:
    """Each job of a resumed run as the earlier session left it: back on its GPU with the room it
    needed, its memory verdict, and done when it reached its target (a script: exited 0)."""
    sup, spec = session.supervisor, session.spec
    recorded = _record(spec)
    # A script is done when it exited 0, which only the earlier session saw: its run.toml says.
    script_done = set()
    if recorded is not None and spec.script is not None:
        script_done = {job.id for job in recorded.jobs if job.status is JobState.DONE}
    for job_record in recorded.jobs if recorded is not None else ():
        job = sup.jobs.get(job_record.id)
        if job is not None and job_record.gpu is not None:  # back on its GPU, if that is still there
            job.gpu = GpuRef(job_record.gpu, job_record.gpu_uuid or "")
        if job is not None and job_record.peak_gpu_mem_mib:  # the room that GPU must still have
            job.recorded_peak_gpu_mem = job_record.peak_gpu_mem_mib * MIB
        # What the leak watch said of it then, until a worker of this session is judged.
        verdict = MemoryVerdict.recorded(
            job_record.memory, job_record.memory_growth_mib_h, job_record.gpu_memory_growth_mib_h
        )
        if verdict is not None:
            session.recorder.memory.restore(job_record.id, verdict)
    for job in sup.jobs.values():
        events = sup.restore(job)
        done = [e for e in of_kind(events, FinishedEvent) if e.status == "done"]
        # A worker reports `done` for an episode target only once it is reached (`target` is 0 then).
        if job.id in script_done or (spec.script is None and done and done[-1].steps >= job.target):
            sup.queue.remove(job.id)
            job.change_state(JobState.DONE, session.clock.time())
            job.exit_reason = "done in an earlier session"


def _record(spec: RunSpec) -> RunRecord | None:
    """The run's run.toml as the earlier session left it (None when it cannot be read)."""
    try:
        return read_record(spec.run_dir)
    except RunRecordError:
        return None


def _template(spec: RunSpec, costs: Costs | None = None) -> JobTemplate:
    """What each of the run's jobs runs: cockpit's worker on the preset, or the user's command,
    shown by its short name where a worker run shows its env (as `ConfigRecord.shown` does). A
    worker trains on its core budget's torch threads, or on one where the preset's measured
    `costs` say more do not pay."""
    if spec.script is not None:
        return JobTemplate("", script_label(spec.script), spec.timesteps, script=spec.script)
    return JobTemplate(
        spec.preset,
        spec.env,
        spec.timesteps,
        episodes=spec.episodes,
        tensorboard=spec.tensorboard,
        one_torch_thread=costs is not None and costs.one_torch_thread,
        devices=spec.devices or (),
        eval_episodes=spec.eval_episodes,
    )
