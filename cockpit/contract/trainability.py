"""Whether stable-baselines3's PPO can train an env: the verdict `cockpit_training.trainable` prints.

The check runs in a process of its own (`python -m cockpit_training.trainable`, which imports
torch and SB3; the cockpit never does) on the env the worker would build: `gymnasium.make` with
the preset's `env_kwargs`. Its verdict is decided by SB3's own code, never by a list kept here:

- each observation space, and each key of a Dict one, through SB3's preprocessing
  (`get_obs_shape`, `check_for_nested_spaces`), which is what SB3's VecEnvs and policies size
  their buffers and networks by;
- the model the worker builds (`PPO(policy_for(space), ...)`: the policy's supported action
  spaces, its feature extractor), then one reset and one step of the policy's own action.

SB3's `env_checker.check_env` is not the gate: its assertions refuse envs that PPO trains (a
`numpy.float32` reward, say) and its warnings are advice, not refusals.

`Unfit` is what crosses the process, as one JSON line: a list, one entry per preset asked about,
`null` for one that trains. `Unfit.message` turns it into the one line `cockpit run` and `cockpit
fleet` print, naming the env, the space and the usual fix (a wrapper registered in a module of
the user's, trained as `module:EnvId`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

TRAINABLE_MODULE = "cockpit_training.trainable"

Part = Literal["env", "observation", "model", "step"]
_PARTS: tuple[Part, ...] = ("env", "observation", "model", "step")

# What the usual fix looks like, in the one line: the user's own module registers a wrapped env.
REGISTER_HINT = (
    "register the wrapped env in a module of yours (gymnasium.register(id='MyEnv-v0', entry_point=...)) "
    "and train it as mymodule:MyEnv-v0"
)


@dataclass(frozen=True)
class Unfit:
    """Why SB3's PPO cannot train an env, as SB3's own checks found it.

    `part` is where it failed: building the env (`env`), an observation space SB3 does not take
    (`observation`), building the model (`model`: the policy, its action spaces or its network),
    or its first reset and step (`step`). `space` is the offending space's class, qualified by its
    module (`minigrid.core.mission.MissionSpace`); `key` the Dict key that holds it, and `keep`
    the keys SB3 takes; `policy` the SB3 policy the worker would build; `error` SB3's own words,
    `Type: message`, on one line."""

    part: Part
    error: str
    space: str = ""
    key: str | None = None
    keep: tuple[str, ...] = ()
    policy: str = ""

    def to_json(self) -> dict[str, Any]:
        """This verdict as a JSON object (`from_json` gives it back)."""
        return {**dataclasses.asdict(self), "keep": list(self.keep)}

    @classmethod
    def from_json(cls, data: Any) -> Unfit:
        """An `Unfit` from `to_json`'s object; ValueError for anything else."""
        if not isinstance(data, dict) or data.get("part") not in _PARTS or not isinstance(data.get("error"), str):
            raise ValueError(f"not a verdict: {data!r}")
        keep = data.get("keep") or []
        if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
            raise ValueError(f"not a verdict: {data!r}")
        key = data.get("key")
        return cls(
            data["part"],
            data["error"],
            str(data.get("space") or ""),
            None if key is None else str(key),
            tuple(keep),
            str(data.get("policy") or ""),
        )

    def message(self, env_id: str, source: str) -> str:
        """The one line that refuses `env_id`, named as `source` gave it (`--env`, a plan's key)."""
        head = f"{source} {env_id!r}: stable-baselines3 cannot train this env"
        short = self.space.rsplit(".", 1)[-1]
        if self.part == "env":
            return f"{source} {env_id!r}: building it failed: {self.error}"
        if self.part == "observation" and self.key is not None:
            keep = f"gymnasium.wrappers.FilterObservation(env, {list(self.keep)!r})" if self.keep else "a wrapper"
            fix = "minigrid.wrappers.ImgObsWrapper(env)" if self.space.startswith("minigrid.") else keep
            return (
                f"{head}: its observation is a Dict whose key {self.key!r} is a {short} ({self.space}), a space "
                f"SB3 does not take ({self.error}); wrap the env so it observes only what SB3 takes, "
                f"e.g. {fix}; {REGISTER_HINT}"
            )
        if self.part == "observation":
            return (
                f"{head}: its observation space is a {short} ({self.space}), which SB3 does not take "
                f"({self.error}); wrap the env so it observes a Box, Discrete, MultiDiscrete, MultiBinary or a "
                f"flat Dict of them; {REGISTER_HINT}"
            )
        what = "building SB3's PPO" if self.part == "model" else "a first reset and step under SB3's PPO"
        policy = self.policy or "its policy"
        return f"{head}: {what} with {policy} failed: {self.error}; wrap the env to fit, then {REGISTER_HINT}"


def dump_verdicts(verdicts: list[Unfit | None]) -> str:
    """The JSON line the check prints: one entry per preset, `null` where the env trains."""
    return json.dumps([None if v is None else v.to_json() for v in verdicts])


def load_verdicts(line: str, count: int) -> list[Unfit | None]:
    """`dump_verdicts`' line back; ValueError unless it holds `count` verdicts."""
    data = json.loads(line)
    if not isinstance(data, list) or len(data) != count:
        raise ValueError(f"expected {count} verdict(s), got {line[:200]!r}")
    return [None if item is None else Unfit.from_json(item) for item in data]
