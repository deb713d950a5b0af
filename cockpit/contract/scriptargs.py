"""A user's own training command as a job: `cockpit run [FLAGS] -- python train.py --seed {seed}`.

The command is a template. In each job's copy `{seed}`, `{job_id}` and `{job_dir}` are replaced
by the job's; any other `{name}` is refused up front (`check_template`), so a typo cannot start
every job with a literal `{sed}`. Other braces (a JSON argument, say) are left as they are.

The launcher starts it under the guard (`python -m cockpit_training.guard -- COMMAND`, see
`ScriptArgs.command`), with the job's directory, seed and id in the environment (`JOB_DIR_ENV`,
`SEED_ENV`, `JOB_ID_ENV`) and the job's share of the thread budget in `THREAD_ENV_VARS`.
`CockpitCallback()` finds its job through `JOB_DIR_ENV`.

Exit 0 is done; any other exit is a crash, restarted by the run's restart policy. Resuming after a
restart is the script's own business (its own checkpoints, in `{job_dir}` if it likes).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cockpit.contract.workerargs import THREAD_ENV_VARS

GUARD_MODULE = "cockpit_training.guard"
JOB_DIR_ENV = "COCKPIT_JOB_DIR"
SEED_ENV = "COCKPIT_SEED"
JOB_ID_ENV = "COCKPIT_JOB_ID"
FIELDS = ("seed", "job_id", "job_dir")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_PYTHONS = re.compile(r"python[0-9.]*$")


class ScriptError(ValueError):
    """A command that cannot start a job; the message is one line naming what is wrong."""


def check_template(argv: Sequence[str]) -> None:
    """Raise ScriptError unless `argv` is a command that can start: not empty, its program found
    (on PATH or as a file), a `python SCRIPT.py` script present, and only known placeholders."""
    if not argv:
        raise ScriptError("--: give the command to run after it, e.g. -- python train.py --seed {seed}")
    for word in argv:
        for name in _PLACEHOLDER.findall(word):
            if name not in FIELDS:
                known = ", ".join("{" + f + "}" for f in FIELDS)
                raise ScriptError(f"-- {' '.join(argv)}: unknown placeholder {{{name}}} in {word!r}; use {known}")
    program = argv[0]
    if shutil.which(program) is None and not (os.sep in program and Path(program).is_file()):
        raise ScriptError(f"-- {program}: no such command (not on PATH, and not a file)")
    if _PYTHONS.match(Path(program).name) and len(argv) > 1 and argv[1].endswith(".py"):
        script = Path(argv[1])
        if not _PLACEHOLDER.search(argv[1]) and not script.is_file():
            raise ScriptError(f"-- {program} {argv[1]}: no such file in {Path.cwd()}")


def script_label(template: Sequence[str]) -> str:
    """A command's short name, where views show a run's env: the script a Python command runs
    (`python examples/train.py ...` gives `train.py`), else the program's name."""
    if len(template) > 1 and _PYTHONS.match(Path(template[0]).name) and template[1].endswith(".py"):
        return Path(template[1]).name
    return Path(template[0]).name if template else ""


def substitute(word: str, values: dict[str, str]) -> str:
    """`word` with each known `{name}` replaced by `values[name]`; other braces untouched."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), word)


@dataclass(frozen=True)
class ScriptArgs:
    """One job of a script run: the command template and what fills it in."""

    job_dir: Path
    job_id: str
    seed: int
    template: tuple[str, ...]
    threads: int = 1  # the job's share of the thread budget, for its native thread pools

    @property
    def values(self) -> dict[str, str]:
        """What the placeholders stand for in this job."""
        return {"seed": str(self.seed), "job_id": self.job_id, "job_dir": os.path.abspath(self.job_dir)}

    @property
    def argv(self) -> tuple[str, ...]:
        """The user's command for this job, placeholders filled in."""
        values = self.values
        return tuple(substitute(word, values) for word in self.template)

    def command(self, python: str) -> list[str]:
        """The command line that runs this job: the guard (which follows the cockpit's death and
        takes the command's process group with it), then the user's command."""
        return [python, "-m", GUARD_MODULE, "--", *self.argv]

    def environment(self) -> dict[str, str]:
        """The variables this job's process gets on top of a worker's environment."""
        return {
            JOB_DIR_ENV: os.path.abspath(self.job_dir),
            SEED_ENV: str(self.seed),
            JOB_ID_ENV: self.job_id,
            **{var: str(self.threads) for var in THREAD_ENV_VARS},
        }
