"""Which device each job should train on: the overlap model for a mix of CUDA and CPU jobs.

On a workstation with one GPU and many cores, some presets train as fast on the CPU (SB3 warns
that an MLP PPO belongs there), and a job on the CPU leaves the GPU to the others. With the
preset's costs measured on both devices (`cost_probe`, the CPU ones with `--device cpu`), a mix of
`cuda` jobs on the GPU and `cpu` jobs on the cores is predicted from the parts cockpit already
models (`overlap`):

- every job, of either kind, gets cockpit's share of the cores, `threads = cores // (cuda + cpu)`
  (its envpool threads, and on the CPU its torch threads);
- the CPU jobs hold `cpu * threads` cores and run as `cpu_fleet_sps` says on them, with the CPU
  costs on `threads` threads;
- the CUDA jobs are the closed queueing network of `gpu_stations` (the cores left to them, and the
  one GPU), solved by `overlap_sps`, with the CUDA costs.

The aggregate is the sum. `mixes` lists every mix up to a number of jobs; `best_mix` picks the
fastest. Nothing here measures: without both costs there is no mix to predict.
"""

from __future__ import annotations

from dataclasses import dataclass

from cockpit.contract.costs import Costs
from cockpit.contract.envids import backend_for
from cockpit.contract.presets import Preset
from cockpit.core.machine.host import thread_budget
from cockpit.core.sizing.overlap import cpu_fleet_sps, gpu_stations, overlap_sps


@dataclass(frozen=True)
class Mix:
    """`cuda` jobs on the GPU and `cpu` jobs on the cores, and their predicted aggregate SPS."""

    cuda: int
    cpu: int
    sps: float

    @property
    def jobs(self) -> int:
        """All the jobs of the mix."""
        return self.cuda + self.cpu

    @property
    def devices(self) -> str:
        """The mix as `--devices` takes it: `2:cuda,1:cpu`, leaving out a device with no job."""
        return ",".join(f"{n}:{device}" for n, device in ((self.cuda, "cuda"), (self.cpu, "cpu")) if n)

    def describe(self) -> str:
        """`2 on cuda + 1 on the CPU` and its SPS."""
        parts = [f"{n} on {where}" for n, where in ((self.cuda, "cuda"), (self.cpu, "the CPU")) if n]
        return f"{' + '.join(parts)}: {self.sps:,.0f} SPS"


def mix_sps(preset: Preset, cuda_costs: Costs, cpu_costs: Costs, cuda: int, cpu: int, physical_cores: int) -> float:
    """The predicted aggregate SPS of `cuda` jobs on the GPU and `cpu` on the cores (module
    docstring). 0.0 for no job, and for a mix the cores cannot hold: a core at least for each CPU
    job's share, and one left for the CUDA jobs' rollouts."""
    jobs, cores = cuda + cpu, max(1, physical_cores)
    threads = thread_budget(max(1, jobs), cores).threads_per_job
    if jobs <= 0 or cpu * threads > cores or (cuda and cpu * threads >= cores):
        return 0.0
    envpool = backend_for(preset.env) == "envpool"
    total = 0.0
    if cpu:
        on_cpu = cpu_costs.on_train_threads(threads)
        on_cpu = on_cpu.on_env_threads(threads) if envpool else on_cpu
        total += cpu_fleet_sps(on_cpu.sample_us(preset, preset.n_envs), on_cpu, cpu, cpu * threads)
    if cuda:
        on_gpu = cuda_costs.on_env_threads(threads) if envpool else cuda_costs
        total += overlap_sps(gpu_stations(preset, on_gpu, cores - cpu * threads), cuda)
    return total


def mixes(preset: Preset, cuda_costs: Costs, cpu_costs: Costs, physical_cores: int, max_jobs: int) -> list[Mix]:
    """Every mix of 1 to `max_jobs` jobs the cores can hold (`mix_sps` above 0), fastest first; ties
    go to fewer jobs, then fewer on the CPU."""
    out = [
        Mix(cuda, jobs - cuda, mix_sps(preset, cuda_costs, cpu_costs, cuda, jobs - cuda, physical_cores))
        for jobs in range(1, max_jobs + 1)
        for cuda in range(jobs + 1)
    ]
    return sorted((m for m in out if m.sps > 0), key=lambda m: (-m.sps, m.jobs, m.cpu))


def best_mix(preset: Preset, cuda_costs: Costs, cpu_costs: Costs, physical_cores: int, max_jobs: int) -> Mix:
    """The fastest mix of at most `max_jobs` jobs (`mixes`)."""
    return mixes(preset, cuda_costs, cpu_costs, physical_cores, max_jobs)[0]
