"""The run directory: every path a run leaves, named once.

```
<run dir>/
  run.toml          the run record (`cockpit.contract.runrecord`), rewritten atomically
  samples.csv       telemetry per sampler tick
  job_samples.csv   telemetry per tick and job
  gpu_util.csv      every NVML utilization sample
  preset-<n>.toml   the n-th preset applied to the live run (advice that changed n_envs or batch_size)
  cockpit.sock      the control socket, while the run is live
  .cockpit.lock     held (flock) by the process that supervises the run
  cockpit.log       the run's own output, when `cockpit run` started it in the background
  mps.json          the MPS control daemons this run started (`--mps`), while they run
  mps/gpu<i>/pipe, mps/gpu<i>/log  GPU i's daemon's pipes and logs (`cockpit.core.machine.mps_daemon`)
  jobs/<id>/        one job directory per job (`JobDir`)
```

A run's directory is `runs/<UTC time>-<what>` unless `--run-dir` says otherwise (`stamped`): `<what>`
is the run's name (`--name`) when it has one, else what it trains (`<preset>-<env>`, `script-<name>`,
`fleet-<plan name>`). A run name is a safe path component (`check_run_name`), the one rule for
`--name` and a fleet plan's `name`.

A job directory is the worker's (`python -m cockpit_training.worker --job-dir DIR`); it need not sit in a
run directory, so `JobDir` stands alone:

```
<job dir>/
  events.jsonl      the job's event stream (`cockpit.contract.events`)
  checkpoints/      step-<step>-<ns>/ checkpoints, the newest two kept
  stdout.log        the worker's output, when the cockpit started it
  stderr.log
  .lock             held (flock) by the worker using the directory
  tb/               TensorBoard's logdir: PPO_0/ (SB3's own scalars, the worker's) and cockpit/
                    (the cockpit's scalars for the job, and its clips), unless --no-tensorboard
  videos/           clips of the job playing: step-<step>-<ns>.mp4 (or .gif), named for the
                    checkpoint each was recorded from (`--video-every`, the cockpit's clip key)
```

Every process (the cockpit run, its viewers, `report`, `recommend`, replay, the worker) names these
paths through `RunDir` and `JobDir` and spells none of them itself.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from pathlib import Path

from cockpit.contract.events import EVENTS_FILE

RUN_TOML = "run.toml"
SAMPLES_CSV = "samples.csv"
JOB_SAMPLES_CSV = "job_samples.csv"
GPU_UTIL_CSV = "gpu_util.csv"
SOCKET = "cockpit.sock"
RUN_LOCK = ".cockpit.lock"
COCKPIT_LOG = "cockpit.log"
MPS_RECORD = "mps.json"
MPS_DIR = "mps"
JOBS = "jobs"
CHECKPOINTS = "checkpoints"
STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"
JOB_LOCK = ".lock"
TENSORBOARD = "tb"  # the worker's `tensorboard_log`
TB_LOG_NAME = "PPO"  # the worker's `tb_log_name`
# SB3's run directory in it: `configure_logger` names it `<tb_log_name>_<get_latest_run_id() + 1>`,
# less one with `reset_num_timesteps=False` (the worker's, always): `PPO_0` at the first start, and
# `PPO_0` again at every resume, as the newest id it finds is then 0.
TB_SB3_RUN = f"{TB_LOG_NAME}_0"
TB_COCKPIT_RUN = "cockpit"  # the cockpit's own scalars: a run of its own, apart from SB3's event files
VIDEOS = "videos"

RUNS = Path("runs")  # where runs go by default, relative to the working directory
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"  # the UTC time that starts a default run directory's name
RUN_NAME_MAX = 64
# A letter or digit first: a name starting with '-' reads as a flag, one starting with '.' hides
# the directory. No '/', no spaces, nothing a shell or a path would take apart.
RUN_NAME_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{RUN_NAME_MAX - 1}}}")
RUN_NAME_RULE = f"1 to {RUN_NAME_MAX} letters, digits, '.', '_' or '-', starting with a letter or digit"


class RunNameError(ValueError):
    """A run name that is not a safe path component; the message is one line naming where it came from."""


def check_run_name(name: str, source: str = "--name") -> str:
    """`name` when it is a safe run name (`RUN_NAME_PATTERN`: it becomes part of the run
    directory's name); RunNameError naming `source` (the flag or key) and what would be valid."""
    if not RUN_NAME_PATTERN.fullmatch(name):
        raise RunNameError(f"{source} {name!r}: a run name is {RUN_NAME_RULE} (it becomes part of the run's directory)")
    return name


def stamped(what: str, now: float | None = None, root: Path = RUNS) -> Path:
    """`root/<UTC time>-<what>`: a new run's default directory (`what` is the run's name, or what
    it trains) at `now` (default: the current time)."""
    return root / f"{time.strftime(STAMP_FORMAT, time.gmtime(now))}-{what}"


def stamp_time(run_dir: Path) -> float | None:
    """The Unix time in a run directory's name (`<YYYYmmddTHHMMSSZ>-...`, as `stamped` makes it);
    None when the name does not start with one (a `--run-dir` of the user's choosing)."""
    stamp, dash, _ = run_dir.name.partition("-")
    if not dash:
        return None
    try:
        return float(calendar.timegm(time.strptime(stamp, STAMP_FORMAT)))
    except ValueError:
        return None


@dataclass(frozen=True)
class JobDir:
    """One job's directory: its events, checkpoints, output logs and the worker's lock."""

    path: Path

    @property
    def events(self) -> Path:
        """`events.jsonl`: the worker appends, the cockpit follows."""
        return self.path / EVENTS_FILE

    @property
    def checkpoints(self) -> Path:
        """`checkpoints/`: one `step-<step>-<ns>/` directory per checkpoint."""
        return self.path / CHECKPOINTS

    @property
    def stdout_log(self) -> Path:
        """The worker's stdout, when the cockpit launched it."""
        return self.path / STDOUT_LOG

    @property
    def stderr_log(self) -> Path:
        """The worker's stderr, when the cockpit launched it (its tail explains a crash)."""
        return self.path / STDERR_LOG

    @property
    def lock(self) -> Path:
        """Held by the one worker allowed to use the directory at a time."""
        return self.path / JOB_LOCK

    @property
    def tensorboard(self) -> Path:
        """`tb/`: TensorBoard's logdir for the job, the worker's `tensorboard_log`."""
        return self.path / TENSORBOARD

    @property
    def tensorboard_run(self) -> Path:
        """`tb/PPO_0/`: SB3's scalars, across every start of the job's worker."""
        return self.tensorboard / TB_SB3_RUN

    @property
    def tensorboard_cockpit(self) -> Path:
        """`tb/cockpit/`: the cockpit's scalars for the job (`cockpit.core.export.tensorboard`)."""
        return self.tensorboard / TB_COCKPIT_RUN

    @property
    def videos(self) -> Path:
        """`videos/`: the job's clips, each named for its checkpoint (`clip_for`)."""
        return self.path / VIDEOS

    def clip_for(self, checkpoint: Path, suffix: str = ".mp4") -> Path:
        """`videos/<checkpoint's name><suffix>`: the clip recorded from `checkpoint` (a
        `checkpoints/step-<step>-<ns>/` directory), so the clip names where it came from."""
        return self.videos / f"{checkpoint.name}{suffix}"


@dataclass(frozen=True)
class RunDir:
    """One run's directory (see the module docstring for the layout)."""

    path: Path

    @property
    def run_toml(self) -> Path:
        """The run record, `run.toml`."""
        return self.path / RUN_TOML

    @property
    def samples(self) -> Path:
        """`samples.csv`: one row per sampler tick."""
        return self.path / SAMPLES_CSV

    @property
    def job_samples(self) -> Path:
        """`job_samples.csv`: one row per tick and job."""
        return self.path / JOB_SAMPLES_CSV

    @property
    def gpu_util(self) -> Path:
        """`gpu_util.csv`: every NVML utilization sample."""
        return self.path / GPU_UTIL_CSV

    @property
    def mps_record(self) -> Path:
        """`mps.json`: the MPS control daemon this run started, written while it runs (`--mps`)."""
        return self.path / MPS_RECORD

    @property
    def mps_pipe(self) -> Path:
        """`mps/pipe`: the pipes of an MPS daemon this run starts (its CUDA_MPS_PIPE_DIRECTORY)."""
        return self.path / MPS_DIR / "pipe"

    @property
    def mps_log(self) -> Path:
        """`mps/log`: the logs of an MPS daemon this run starts (its CUDA_MPS_LOG_DIRECTORY)."""
        return self.path / MPS_DIR / "log"

    def mps_gpu_pipe(self, index: int) -> Path:
        """`mps/gpu<index>/pipe`: the pipes of the MPS daemon this run starts for GPU `index` alone."""
        return self.path / MPS_DIR / f"gpu{index}" / "pipe"

    def mps_gpu_log(self, index: int) -> Path:
        """`mps/gpu<index>/log`: the logs of the MPS daemon this run starts for GPU `index` alone."""
        return self.path / MPS_DIR / f"gpu{index}" / "log"

    @property
    def socket(self) -> Path:
        """The control socket's place in the directory (`cockpit.core.feed.control.control_path` falls
        back elsewhere when this path is too long for an AF_UNIX address)."""
        return self.path / SOCKET

    @property
    def lock(self) -> Path:
        """Held by the process that supervises the run, so two never run it at once."""
        return self.path / RUN_LOCK

    @property
    def log(self) -> Path:
        """`cockpit.log`: the run's own output when it runs in the background, and its `--on-done` command's."""
        return self.path / COCKPIT_LOG

    @property
    def jobs(self) -> Path:
        """`jobs/`, holding one directory per job."""
        return self.path / JOBS

    def job(self, job_id: str) -> JobDir:
        """The directory of job `job_id` (`jobs/<id>/`); it may not exist yet."""
        return JobDir(self.jobs / job_id)

    def preset_file(self, n: int) -> Path:
        """`preset-<n>.toml`: the n-th preset applied to the live run (n from 1)."""
        return self.path / f"preset-{n}.toml"
