"""`cockpit-pod`: the container image's entrypoint, so that a pod that restarts goes on by itself.

`cockpit-pod run [RUN FLAGS] [-- SCRIPT]` and `cockpit-pod fleet PLAN.toml [FLEET FLAGS]` run
`cockpit run` or `cockpit fleet`, always headless, against one run directory on the pod's volume:
`--run-dir` when given, else `$COCKPIT_RUNS` (default `/runs`) / the `--name`, the fleet plan's
`name`, or `run`. Then, by what that directory holds:

- nothing of a run (no run.toml): the run starts there;
- the same run, unfinished (interrupted, or left `running` by a pod that was killed): it is resumed,
  every job from its newest checkpoint, with nothing typed. "The same" is the command line: the
  run.toml of a run the pod started records the command it was started with, and each resume
  records it again (`--typed`), so a pod started again with the same command finds its own run;
- the same run, ended (done or failed): nothing to do, said in one line, with the run's own exit
  code (0, 1), so a restart policy does not train it twice;
- another run: one line naming it and exit 2; the directory is left as it is.

Before it resumes, the directory must pass `trust.untrusted` (yours, and writable by nobody else,
nor its run.toml; else one line and exit 2), and the commands its run.toml recorded (`--on-done`,
a script's command) are printed, one line each: the resume runs them (docs/security.md).

The process becomes `cockpit` itself (exec), so the container's stop signal reaches the run, which
checkpoints its jobs. Flags that a resume takes from run.toml (the preset, env, target, seeds,
agents and name of a run; the plan and name of a fleet) are left out when resuming; those that
each session takes afresh (`--no-tensorboard`, `--gpus`, `--mps`, `--jobs`, ...) are passed on.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cockpit.contract.fleetplan import PlanError, load_plan
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import RunRecordError, read
from cockpit.contract.runspec import ConfigError
from cockpit.contract.states import RunStatus
from cockpit.contract.trust import recorded_commands, untrusted

RUNS_ENV = "COCKPIT_RUNS"
DEFAULT_RUNS = Path("/runs")
USAGE = "cockpit-pod run [RUN FLAGS] [-- SCRIPT] | cockpit-pod fleet PLAN.toml [FLEET FLAGS]"
# The flags a resume of each command refuses (run.toml or fleet.db has them), and whether each takes a value.
RECORDED = {
    "run": {
        "--agents": True,
        "--preset": True,
        "--env": True,
        "--timesteps": True,
        "--episodes": True,
        "--seed": True,
        "--run-dir": True,
        "--name": True,
    },
    "fleet": {"--run-dir": True, "--name": True},
}
REFUSED = ("--resume", "--dry-run", "--from")  # the pod decides whether to resume; a dry run trains nothing


@dataclass(frozen=True)
class PodStep:
    """What the pod does: exec `cockpit` with `argv`, or (`argv` None) say `note` and exit with `code`."""

    argv: list[str] | None
    note: str = ""
    code: int = 0


def _value(words: Sequence[str], flag: str) -> str | None:
    """The value of `flag` in `words` (`--flag V` or `--flag=V`), before any `--`; None without it."""
    for i, word in enumerate(words):
        if word == "--":
            break
        if word == flag and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def _without(words: Sequence[str], flags: dict[str, bool]) -> list[str]:
    """`words` without `flags` (and the value of each that takes one), and without a script after `--`."""
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        if word == "--":
            break
        name = word.split("=", 1)[0]
        if name in flags:
            skip = flags[name] and "=" not in word
            continue
        out.append(word)
    return out


def _run_dir(verb: str, words: Sequence[str], runs: Path) -> tuple[Path, list[str]]:
    """The run directory and the command's words with `--run-dir` in them (`$COCKPIT_RUNS`/NAME when not given)."""
    given = _value(words, "--run-dir")
    if given is not None:
        return Path(given), list(words)
    name = _value(words, "--name")
    if name is None and verb == "fleet":
        try:
            name = load_plan(Path(words[0])).name
        except PlanError as exc:
            raise ConfigError(str(exc)) from exc
        except OSError as exc:
            raise ConfigError(f"{words[0]}: {exc.strerror or exc}") from exc
    run_dir = runs / (name or "run")
    split = words.index("--") if "--" in words else len(words)
    return run_dir, [*words[:split], "--run-dir", str(run_dir), *words[split:]]


def pod_step(argv: Sequence[str], runs: Path) -> PodStep:
    """What `cockpit-pod ARGV` does with run directories under `runs` (the module docstring);
    ConfigError (one line) for a command it cannot carry out."""
    if not argv or argv[0] not in ("run", "fleet"):
        raise ConfigError(f"give the command to keep going: {USAGE}")
    verb, words = argv[0], list(argv[1:])
    refused = [flag for flag in REFUSED if flag in [w.split("=", 1)[0] for w in words[: _split(words)]]]
    if refused:
        raise ConfigError(f"{refused[0]}: cockpit-pod starts or resumes the run in its directory itself; drop it")
    if verb == "fleet" and (not words or words[0].startswith("-")):
        raise ConfigError(f"fleet: give the plan first: {USAGE}")
    run_dir, words = _run_dir(verb, words, runs)
    _check_writable(run_dir)
    split = _split(words)
    start = [verb, *words[:split], *([] if "--headless" in words[:split] else ["--headless"]), *words[split:]]
    typed = ["cockpit", *start]  # what run.toml records of the start (`--typed` keeps it on each resume)
    if not RunDir(run_dir).run_toml.exists():
        return PodStep(start)
    problem = untrusted(run_dir)
    if problem is not None:  # resumed by itself, as root on many pods: a run directory is code (contract.trust)
        raise ConfigError(problem)
    try:
        recorded = read(run_dir)
    except RunRecordError as exc:
        raise ConfigError(f"{run_dir}: holds a run.toml cockpit cannot read ({exc}); give another --run-dir") from exc
    if recorded.command != " ".join(typed):
        raise ConfigError(
            f"{run_dir} holds another run ({recorded.command}); give another --run-dir or "
            "--name, or move that directory away"
        )
    if recorded.status in (RunStatus.DONE, RunStatus.FAILED):
        code = 0 if recorded.status is RunStatus.DONE else 1
        return PodStep(
            None, f"cockpit-pod: the run in {run_dir} already ended ({recorded.status}): nothing to do", code
        )
    kept = _without(words[1:] if verb == "fleet" else words, RECORDED[verb])
    if "--headless" not in kept:
        kept.append("--headless")
    said = [f"cockpit-pod: resuming {run_dir}: {line}" for line in recorded_commands(recorded.config)]
    return PodStep(
        [verb, "--resume", str(run_dir), *kept, "--typed", json.dumps(typed)],
        "\n".join([f"cockpit-pod: resuming the run in {run_dir} ({recorded.status} when it stopped)", *said]),
    )


def _check_writable(run_dir: Path) -> None:
    """ConfigError (one line) when this user cannot make or write `run_dir`: a volume mounted over
    /runs from a host directory keeps the host's owner, often root, while the image runs as uid
    1000. The nearest existing directory on its path is the one that must be writable."""
    existing = run_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        owner = existing.stat().st_uid
        raise ConfigError(
            f"{existing} is not writable by uid {os.getuid()} (it belongs to uid {owner}), so the "
            f"run cannot go in {run_dir}: on the host, chown {os.getuid()} that directory, or mount a "
            "volume the image's user owns"
        )


def _split(words: Sequence[str]) -> int:
    """Where a script's command begins (`--`), or the end."""
    return words.index("--") if "--" in words else len(words)


def main(argv: Sequence[str] | None = None) -> int:
    """`cockpit-pod`: exec `cockpit` as `pod_step` says; 2 with one line on bad input, or the
    ended run's own code."""
    runs = Path(os.environ.get(RUNS_ENV) or DEFAULT_RUNS)
    try:
        step = pod_step(list(sys.argv[1:] if argv is None else argv), runs)
    except ConfigError as exc:
        print(f"cockpit-pod: error: {exc}", file=sys.stderr)
        return 2
    if step.note:
        print(step.note, file=sys.stderr, flush=True)
    if step.argv is None:
        return step.code
    os.execv(sys.executable, [sys.executable, "-m", "cockpit", *step.argv])
    return 0  # not reached: exec replaced this process
