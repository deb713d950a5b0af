"""The search behind `cockpit tune`: a hill climb over parallel jobs x n_envs (x batch size).

Pure: it proposes configurations and is told what each measured; the caller runs the trials.
It starts from the advisor's static pick and tries the neighbours of the best configuration so
far (one job more or fewer and twice or half the envs, together or alone), moving whenever a
neighbour beats the best by `MIN_GAIN`; it ends when no untried neighbour is left or the caller's
budget runs out.
Short trials on a busy machine are noisy, so the caller then measures the leaders again
(`leaders()`) and the answer is the best mean. An exhaustive grid measures every point; the
climb measures the few on its path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cockpit.contract.presets import largest_divisor_at_most

MIN_GAIN = 0.02  # a neighbour must beat the best by this much: trials are noisy


@dataclass(frozen=True, order=True)
class Config:
    """One point of the search: `jobs` parallel jobs of `n_envs` envs, minibatches of `batch_size`."""

    jobs: int
    n_envs: int
    batch_size: int

    def label(self) -> str:
        """How a table names it."""
        return f"{self.jobs} x {self.n_envs} envs, batch {self.batch_size}"


@dataclass(frozen=True)
class Space:
    """The bounds of the search and how a batch size follows n_envs."""

    max_jobs: int
    max_envs: int
    n_steps: int
    batch_cap: int  # the preset's batch size: the largest minibatch the climb will use
    min_envs: int = 1

    def config(self, jobs: int, n_envs: int) -> Config | None:
        """A valid configuration, or None outside the bounds. The batch is the largest divisor
        of the rollout (n_envs x n_steps) at or under the cap, at least 2."""
        if not (1 <= jobs <= self.max_jobs and self.min_envs <= n_envs <= self.max_envs):
            return None
        batch = largest_divisor_at_most(n_envs * self.n_steps, self.batch_cap)
        return Config(jobs, n_envs, batch) if batch >= 2 else None

    def grid(self) -> list[Config]:
        """Every configuration with n_envs a power of two: what an exhaustive search measures."""
        envs, n = [], 1
        while n <= self.max_envs:
            if n >= self.min_envs:
                envs.append(n)
            n *= 2
        return [c for jobs in range(1, self.max_jobs + 1) for e in envs if (c := self.config(jobs, e))]

    def neighbours(self, c: Config) -> list[Config]:
        """Both at once first (one job more and twice the envs), then one job more, twice the
        envs, and the same downwards. The diagonal first: on a machine with room to spare, more
        jobs and more envs usually pay together, and a short budget affords only a few steps."""
        candidates = [
            self.config(c.jobs + 1, c.n_envs * 2),
            self.config(c.jobs + 1, c.n_envs),
            self.config(c.jobs, c.n_envs * 2),
            self.config(c.jobs - 1, c.n_envs // 2),
            self.config(c.jobs - 1, c.n_envs),
            self.config(c.jobs, c.n_envs // 2),
        ]
        return [n for n in candidates if n is not None]


@dataclass
class HillClimb:
    """Propose with `next()`, report with `measured()`; `best` is the answer so far."""

    space: Space
    start: Config
    min_gain: float = MIN_GAIN
    results: dict[Config, float] = field(default_factory=dict)  # the mean of each one's trials
    samples: dict[Config, list[float]] = field(default_factory=dict)
    best: Config | None = None

    def next(self) -> Config | None:
        """The next configuration to measure, or None when the climb is over."""
        if self.best is None:
            return self.start if self.start not in self.results else None
        for candidate in self.space.neighbours(self.best):
            if candidate not in self.results:
                return candidate
        return None

    def measured(self, config: Config, sps: float) -> None:
        """Record a trial; during the climb the best moves only for a clear gain, and once a
        configuration has been measured again the best is the highest mean."""
        self.samples.setdefault(config, []).append(sps)
        self.results[config] = sum(self.samples[config]) / len(self.samples[config])
        if len(self.samples[config]) > 1:
            self.best = max(self.results, key=lambda c: self.results[c])
        elif self.best is None or sps > self.results[self.best] * (1 + self.min_gain):
            self.best = config

    def leaders(self, count: int = 2) -> list[Config]:
        """The `count` configurations with the highest means so far, best first."""
        return sorted(self.results, key=lambda c: self.results[c], reverse=True)[:count]
