"""What one job of a preset costs on this machine, as `cockpit_training.probe` measured it.

`Costs` crosses processes: the probe's output is read into it, cached in costs.toml, and taken by
the advisor, the overlap model and the fleet's projection.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from cockpit.contract.presets import Preset

MIN_GPU_JOB_CORES = 0.25  # the least of a core a GPU job is counted as keeping busy
# The least measured train speedup on more torch threads for which a CPU job takes them: CartPole's
# 64x64 MLP trained 6 % slower on 2 threads than on 1 (its minibatches are too small to split).
MIN_TRAIN_SPEEDUP = 1.05


@dataclass(frozen=True)
class Costs:
    """What one job of a preset costs on this machine, as a probe measured it (microseconds,
    one thread; see `cockpit_training.probe`)."""

    device: str  # where the probe's policy ran: "cpu" or "cuda"
    step_overhead_us: float  # a rollout step's fixed cost, whatever the number of envs
    env_policy_us: float  # what each env adds to a rollout step: its step and its forward
    env_step_us: float  # what each env adds to an env step alone
    train_sample_us: float  # one sample through one training epoch
    # An epoch's fixed cost, whatever its number of minibatches (shuffling the rollout, the
    # train loop's per-epoch bookkeeping), with the train phase's own fixed cost spread over its
    # epochs. 0 in records from before it was measured.
    train_epoch_us: float = 0.0
    # Around the training (what a fleet pays per agent and tier, and per worker process):
    setup_s: float = 0.0  # building the env and the model, as a served worker does for each job
    import_s: float = 0.0  # a fresh process's start to having imported torch, SB3 and the env's library
    episode_steps_max: int = 0  # the env's limit on an episode's steps, 0 for none: bounds scoring
    # Jobs side by side (`cockpit.core.sizing.contention`): a sample's cost over its cost alone, with a
    # core per job and every core busy, and for two jobs time-sharing one core. 1.0: not measured.
    busy_factor: float = 1.0
    shared_factor: float = 1.0
    # On the CPU a job trains on its whole core budget (`cockpit_training.device.torch_threads_for`):
    # one train epoch ran `train_speedup` times faster on `train_threads` torch threads than on one.
    # 1 and 1.0: one thread, or measured on a GPU, where the train phase does not run on the cores.
    train_threads: int = 1
    train_speedup: float = 1.0

    def on_env_threads(self, threads: int) -> Costs:
        """These costs for a job whose envpool steps its envs on `threads` threads (the probe's
        are one thread's, and cockpit gives a job `cores // jobs` of them): each env's own step
        then runs beside the others' and adds `env_step_us / threads` to a rollout step instead of
        all of it, while the rest of its share (its forward pass, the loop's handling of it) stays
        on the job's one Python thread. A Pong job alone on 2 cores steps its 16 envs on 2
        threads: without this the overlap model put it 15 % under what it did."""
        if threads <= 1:
            return self
        saved = self.env_step_us * (1 - 1 / threads)
        return dataclasses.replace(
            self, env_policy_us=max(0.0, self.env_policy_us - saved), env_step_us=self.env_step_us / threads
        )

    @property
    def one_torch_thread(self) -> bool:
        """Whether a CPU job of these costs trains faster on one torch thread than on its budget:
        the probe measured more threads gaining under `MIN_TRAIN_SPEEDUP`. Not where nothing was
        measured: a job then trains on its budget (`cockpit_training.device.torch_threads_for`)."""
        return self.device == "cpu" and self.train_threads > 1 and self.train_speedup < MIN_TRAIN_SPEEDUP

    def train_factor(self, threads: int) -> float:
        """A train sample's cost on `threads` torch threads over its cost on one, by Amdahl's law
        fitted to the measured `train_speedup` at `train_threads`: the serial share
        `s = (1/S - 1/K) / (1 - 1/K)` of the work stays, the rest divides by the threads. 1.0 on a
        GPU, for one thread, where nothing was measured, and where a job keeps one thread
        (`one_torch_thread`)."""
        if self.device != "cpu" or threads <= 1 or self.train_threads <= 1 or self.one_torch_thread:
            return 1.0
        k = self.train_threads
        serial = min(1.0, max(0.0, (1 / self.train_speedup - 1 / k) / (1 - 1 / k)))
        return serial + (1 - serial) / threads

    def on_train_threads(self, threads: int) -> Costs:
        """These costs for a job whose train phase runs on `threads` torch threads (on the CPU
        cockpit gives a job `cores // jobs`, the cores its envpool threads step on in its rollout:
        the two phases never overlap within a job), by `train_factor`. A lone Pong job on 2 cores
        trained in 96 s on two threads where one took 155 s."""
        factor = self.train_factor(threads)
        if factor == 1.0:
            return self
        return dataclasses.replace(
            self, train_sample_us=self.train_sample_us * factor, train_epoch_us=self.train_epoch_us * factor
        )

    def step_us(self, n_envs: int) -> float:
        """One vector step of `n_envs` envs with the policy's forward pass (a rollout's or a
        scoring's)."""
        return self.step_overhead_us + n_envs * self.env_policy_us

    def rollout_us(self, preset: Preset, n_envs: int) -> float:
        """One sample's rollout at `n_envs` envs: its share of the step overhead, its env step
        and forward."""
        return self.step_overhead_us / n_envs + self.env_policy_us

    def train_us(self, preset: Preset, n_envs: int) -> float:
        """One sample's training over the preset's epochs, with its share of each epoch's fixed
        cost (a rollout of `n_envs * n_steps` samples carries it)."""
        return preset.n_epochs * (self.train_sample_us + self.train_epoch_us / (n_envs * preset.n_steps))

    def sample_us(self, preset: Preset, n_envs: int) -> float:
        """One sample's cost at `n_envs` envs: its rollout and its training."""
        return self.rollout_us(preset, n_envs) + self.train_us(preset, n_envs)

    def cores_per_job(self, preset: Preset) -> float:
        """Physical cores one job keeps busy. On the CPU a job's loop steps, infers and trains on
        one core, one thing after another: all of it. With a GPU, its rollout's share of each
        sample (the Python loop, the env steps, launching the forward pass), and never under
        `MIN_GPU_JOB_CORES`: a train phase's Python loop needs the CPU too."""
        if self.device == "cpu":
            return 1.0
        rollout = self.rollout_us(preset, preset.n_envs)
        return min(1.0, max(MIN_GPU_JOB_CORES, rollout / self.sample_us(preset, preset.n_envs)))

    def describe(self) -> str:
        """The measured numbers in one line."""
        return (
            f"a rollout step costs {self.step_overhead_us:,.0f} us + {self.env_policy_us:,.1f} us per env "
            f"(of which its env step {self.env_step_us:,.1f} us), training {self.train_sample_us:,.1f} us "
            f"per sample per epoch + {self.train_epoch_us:,.0f} us per epoch, on the {self.device}"
            f"{self._threads()}; "
            f"side by side a sample costs x{self.busy_factor:.2f} with a core per job, "
            f"x{self.shared_factor:.2f} on a core two jobs share"
        )

    def _threads(self) -> str:
        """What more torch threads did to a train epoch, where the probe measured it (the CPU)."""
        if self.train_threads <= 1:
            return ""
        kept = ", so a job keeps one" if self.one_torch_thread else ""
        return f" (x{self.train_speedup:.2f} as fast on {self.train_threads} torch threads{kept})"


# The least measured gain for which MPS is advised: trials on a shared machine vary by a few per cent.
MIN_MPS_GAIN = 1.05


@dataclass(frozen=True)
class MpsGain:
    """What MPS did for `jobs` parallel jobs of a preset on this machine's GPU, measured side by
    side by `by` (`cockpit tune`, `cockpit run --auto`): their aggregate steps per second without
    MPS and with it. Kept in mps.toml (`cockpit.core.sizing.mps_gains`) beside the probe's costs;
    the advisor recommends `--mps` only from such a measurement."""

    jobs: int
    sps_off: float
    sps_on: float
    by: str
    measured_at: str  # ISO 8601, local time

    @property
    def gain(self) -> float:
        """SPS with MPS over SPS without."""
        return self.sps_on / self.sps_off if self.sps_off > 0 else 0.0

    @property
    def helps(self) -> bool:
        """Whether the gain is one worth advising (at least `MIN_MPS_GAIN`)."""
        return self.gain >= MIN_MPS_GAIN

    def describe(self) -> str:
        """The measurement in one line."""
        return (
            f"x{self.gain:.2f} with MPS for {self.jobs} jobs ({self.sps_off:,.0f} -> {self.sps_on:,.0f} SPS "
            f"together), measured by {self.by} on {self.measured_at[:10]}"
        )
