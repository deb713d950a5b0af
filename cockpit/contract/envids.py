"""Which library runs an env id: envpool when it has the id, gymnasium otherwise.

Light on purpose (envpool and gymnasium, never torch), so `cockpit run`, `recommend`, `tune` and
`fleet` refuse an unknown id before anything starts, with the same message the worker gives.

Importing envpool (which imports gymnasium) takes seconds, so the ids both libraries know when
freshly imported are kept in `$XDG_CACHE_HOME/cockpit/envids.json` (default `~/.cache`), and a known
id is answered from there without importing either. The file holds one entry per `cache_key()`:
the Python prefix and version and the installed versions of envpool and gymnasium, read from
their metadata (no import). Other prefixes' entries are kept (several virtual environments share
one home), the most recent `MAX_ENTRIES` of them.

The cache only ever says yes. gymnasium's registry also holds ids registered at run time (a user's
own envs), which no file can know, so an id the cache lacks is looked up by importing the libraries
exactly as without a cache, and an unknown id gets the same error and suggestions. For the same
reason an entry is written only by a process that imported both libraries itself, here, before
anything could register more ids. The file is replaced atomically; an unreadable, corrupt or
mismatched one is ignored (and rewritten by the next lookup that imports the libraries), and a
cache that cannot be written (read-only home, full disk) is silently done without.

Custom envs. gymnasium's `module:EnvId-v0` form names a module to import, which registers the id
(rl-zoo3's `--gym-packages`). `backend_for` imports it (gymnasium runs every such id) and checks
that the id is then registered; `check_env` also builds the env once with a preset's
`env_kwargs` (envpool's config keys for an envpool id) and closes it, so bad kwargs fail up front.
The module is found on the path as installed, or in the user's working directory: the cockpit's
cwd, which the launcher passes to its workers as `WORKDIR_ENV` (see `ensure_importable`). Nothing
about such ids is cached: the module and its registrations can change between runs.

The gymnasium fallback steps its envs in DummyVecEnv (in the worker, one after another) or
SubprocVecEnv (one process each); `pick_vec_env` is the rule that chooses by what one env step
costs, shared by the worker, which measures a step when it builds its envs, and `recommend`, which
has the probe's figure.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import importlib.metadata
import json
import os
import re
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from cockpit.contract.files import cache_dir, write_atomic

Backend = Literal["envpool", "gymnasium"]
VecEnvKind = Literal["dummy", "subproc"]

CACHE_FILE = "envids.json"
CACHE_FORMAT = 1
MAX_ENTRIES = 8
BACKENDS: tuple[Backend, ...] = ("envpool", "gymnasium")  # in the order they are asked

# The directory a worker imports a `module:EnvId` module from, beside the installed packages: the
# cockpit's cwd, set by the launcher, so a worker started elsewhere still finds the user's module.
WORKDIR_ENV = "COCKPIT_WORKDIR"
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")

# envpool config keys the worker sets (n_envs, seed, thread budget) or its adapter relies on (one
# player, reset infos): a preset's env_kwargs may not set them.
ENVPOOL_RESERVED = (
    "num_envs",
    "batch_size",
    "num_threads",
    "seed",
    "env_seed",
    "env_type",
    "thread_affinity_offset",
    "max_num_players",
    "gym_reset_return_info",
    "base_path",
)

# SubprocVecEnv pays a pipe round trip per env and step (pickling the action and the result, two
# context switches); it is worth it only when stepping the envs in parallel saves more than that.
# Measured twice on a busy 2-core AMD EPYC, 8 envs (`python -m benchmarks.vecenv_choice`, tables in
# docs/environments.md): SubprocVecEnv runs GridWorld (6-9 us a step) at 0.09-0.15x DummyVecEnv's
# SPS, matches it between a 100 and a 200 us step, and is ahead from 200-400 us on (1.06-1.6x).
# 300 us sits above that crossing in both runs.
SUBPROC_MIN_STEP_US = 300.0


class EnvError(ValueError):
    """An env that cannot be trained as given; the message is one line naming where it came from."""


class UnknownEnvError(EnvError):
    """Neither envpool nor gymnasium knows the env id (a `module:EnvId` module failed to import, or
    does not register the id); the message suggests close ids."""


class EnvKwargsError(EnvError):
    """The env cannot be built with the preset's `env_kwargs` (or, for a custom env, at all)."""


def cache_path() -> Path:
    """Where the known env ids are kept: `$XDG_CACHE_HOME/cockpit/envids.json`, `~/.cache` when
    XDG_CACHE_HOME is unset or relative (`files.cache_dir`, as for the costs cache)."""
    return cache_dir() / CACHE_FILE


def _installed(dist: str) -> str:
    try:  # from the installed metadata: importing the library is what the cache saves
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


@functools.cache  # installed versions do not change under a running process (~15 ms to read)
def cache_key() -> str:
    """Everything the ids a fresh import finds depend on, as one string: the Python prefix and
    version, and the installed envpool and gymnasium versions."""
    python = f"{sys.prefix} {sys.version_info.major}.{sys.version_info.minor}"
    return f"python {python} | envpool {_installed('envpool')} | gymnasium {_installed('gymnasium')}"


def _read_entries(path: Path) -> dict[str, dict[str, list[str]]]:
    """The file's well-formed entries by key; {} if it is missing, unreadable or not ours."""
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(raw, dict) or raw.get("format") != CACHE_FORMAT or not isinstance(raw.get("entries"), dict):
        return {}
    entries: dict[str, dict[str, list[str]]] = {}
    for key, entry in raw["entries"].items():
        if isinstance(entry, dict) and all(
            isinstance(entry.get(b), list) and all(isinstance(i, str) for i in entry[b]) for b in BACKENDS
        ):
            entries[key] = {b: entry[b] for b in BACKENDS}
    return entries


@functools.lru_cache(maxsize=4)
def _known(path: Path, key: str, stamp: tuple[int, int, int]) -> dict[str, Backend] | None:
    """Each cached id's backend, envpool's first; None when the file has no entry for `key`.
    `stamp` (inode, size, mtime) is only there so a rewritten file is read again."""
    entry = _read_entries(path).get(key)
    if entry is None:
        return None
    known: dict[str, Backend] = {}
    for backend in reversed(BACKENDS):  # the first backend's ids are written last, so they win
        known.update(dict.fromkeys(entry[backend], backend))
    return known


def _cached() -> dict[str, Backend] | None:
    """The ids the cache knows for this Python and these library versions; None if none."""
    path = cache_path()
    try:
        st = path.stat()
    except OSError:
        return None
    return _known(path, cache_key(), (st.st_ino, st.st_size, st.st_mtime_ns))


def _remember(ids: dict[Backend, frozenset[str]]) -> None:
    """Record what a fresh import of both libraries knows under this `cache_key()`, keeping the
    other keys' entries; a failure to write leaves things as they were, silently."""
    path, key = cache_path(), cache_key()
    entries = _read_entries(path)
    entries.pop(key, None)  # re-inserted last: the entries are kept newest last
    entries[key] = {b: sorted(ids[b]) for b in BACKENDS}
    kept = dict(list(entries.items())[-MAX_ENTRIES:])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"format": CACHE_FORMAT, "entries": kept}, indent=0) + "\n")
    except OSError:
        pass  # a cache is an optimisation: without it, lookups import the libraries as before


@functools.cache
def _envpool_ids() -> frozenset[str]:
    import envpool

    return frozenset(envpool.list_all_envs())


def split_env_id(env_id: str) -> tuple[str | None, str]:
    """(module, id) of gymnasium's `module:EnvId-v0` form; (None, env_id) for a plain id.
    ValueError for a malformed one (gymnasium splits on every colon, so one colon at most)."""
    if ":" not in env_id:
        return None, env_id
    module, _, name = env_id.partition(":")
    if ":" in name or not name or not _MODULE.fullmatch(module):
        raise ValueError(f"{env_id!r} is not module:EnvId (a dotted module name, one colon, an env id)")
    return module, name


def is_custom(env_id: str) -> bool:
    """True for gymnasium's `module:EnvId-v0` form: an env a module of the user's registers."""
    return ":" in env_id


def ensure_importable() -> None:
    """Put the user's working directory (`WORKDIR_ENV`, else this process's cwd) on `sys.path`, after
    everything already there: a module of theirs is found there, and never shadows an installed one.

    Called before a `module:EnvId` module is imported: in the cockpit (whose console script's path
    starts at its own bin directory, not the cwd), the probe and the worker, whose SubprocVecEnv
    children get the worker's `sys.path` from multiprocessing."""
    workdir = os.environ.get(WORKDIR_ENV) or os.getcwd()
    if workdir not in sys.path and os.path.realpath(workdir) not in map(_real, sys.path):
        sys.path.append(workdir)


def _real(entry: str) -> str:
    return os.path.realpath(entry or os.curdir)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _custom_backend(env_id: str, source: str) -> Backend:
    """Import `module:EnvId`'s module and check that the id is registered; UnknownEnvError if not."""
    try:
        module, name = split_env_id(env_id)
    except ValueError as exc:
        raise UnknownEnvError(f"{source} {exc}") from None
    assert module is not None
    ensure_importable()
    try:
        with warnings.catch_warnings():  # the worker's log shows them; here they would break the one line
            warnings.simplefilter("ignore")
            importlib.import_module(module)
    except (Exception, SystemExit) as exc:  # a module's own error, whatever it is, is the user's to see
        raise UnknownEnvError(
            f"{source} {env_id!r}: importing module {module!r} failed: {type(exc).__name__}: {_one_line(exc)}"
        ) from None
    import gymnasium as gym

    if name not in gym.registry:
        close = difflib.get_close_matches(name, list(gym.registry), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(f'{module}:{c}' for c in close)}?" if close else ""
        raise UnknownEnvError(
            f"{source} {env_id!r}: module {module!r} imported, but no env {name!r} is registered "
            f"(register it with gymnasium.register(id={name!r}, entry_point=...) when the module is imported){hint}"
        )
    return "gymnasium"


def backend_for(env_id: str, *, source: str = "--env") -> Backend:
    """Which library will run `env_id`; raises `UnknownEnvError` with suggestions if neither.
    `source` names where the id came from in the message (a flag, or a preset file's key).

    An id the cache knows is answered without importing envpool or gymnasium; any other is looked
    up in the libraries themselves, so ids registered with gymnasium at run time are found. A
    `module:EnvId` id imports its module (never through the cache) and is always gymnasium's."""
    if is_custom(env_id):
        return _custom_backend(env_id, source)
    cached = _cached()
    if cached is not None and env_id in cached:
        return cached[env_id]
    # Only a registry this process imported just now is free of ids registered at run time.
    pristine = cached is None and "envpool" not in sys.modules and "gymnasium" not in sys.modules
    envpool_ids = _envpool_ids()
    import gymnasium as gym

    if pristine:
        _remember({"envpool": envpool_ids, "gymnasium": frozenset(gym.registry)})
    if env_id in envpool_ids:
        return "envpool"
    if env_id in gym.registry:
        return "gymnasium"
    known = sorted(envpool_ids | set(gym.registry))
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
    hint = (
        f"; did you mean {', '.join(close)}?"
        if close
        else "; e.g. CartPole-v1, LunarLander-v3, Pong-v5, Breakout-v5, or module:EnvId-v0 for an env a module of "
        "yours registers"
    )
    raise UnknownEnvError(f"{source} {env_id!r}: neither envpool nor gymnasium has this environment{hint}")


def check_env(
    env_id: str, env_kwargs: Mapping[str, Any], *, source: str = "--env", kwargs_source: str = "env_kwargs"
) -> Backend:
    """`backend_for(env_id)`, and then, for a `module:EnvId` id or when `env_kwargs` is not empty,
    build the env once with `env_kwargs` and close it: a constructor that fails, or a keyword it
    does not take, is an `EnvKwargsError` naming `kwargs_source` and the env's own message.

    For an envpool id, `env_kwargs` are envpool config keys (`max_episode_steps`, Atari's
    `repeat_action_probability`, ...); a key the worker sets itself (`ENVPOOL_RESERVED`) or one
    envpool's env lacks is refused, naming the keys it takes. Without env_kwargs a plain id is
    only looked up, as before: building an Atari env costs a ROM load."""
    backend = backend_for(env_id, source=source)
    if not env_kwargs and not is_custom(env_id):
        return backend
    kwargs = dict(env_kwargs)
    where = f"{kwargs_source} {kwargs}"
    if backend == "envpool":
        _check_envpool_kwargs(env_id, kwargs, where)
        return backend
    import gymnasium as gym

    try:
        with warnings.catch_warnings():  # gymnasium's checker warns about envs that still train
            warnings.simplefilter("ignore")
            env = gym.make(env_id, **kwargs)
    except (Exception, SystemExit) as exc:
        what = f"{where}: building {env_id!r} with them" if kwargs else f"{source} {env_id!r}: building it"
        raise EnvKwargsError(f"{what} failed: {type(exc).__name__}: {_one_line(exc)}") from None
    with contextlib.suppress(Exception):  # it was built, which is what was checked; closing is its own business
        env.close()
    return backend


def _check_envpool_kwargs(env_id: str, kwargs: dict[str, Any], where: str) -> None:
    import envpool

    fields = list(envpool.make_spec(env_id).config._fields)
    takes = [f for f in fields if f not in ENVPOOL_RESERVED]
    reserved = [k for k in kwargs if k in ENVPOOL_RESERVED]
    unknown = [k for k in kwargs if k not in fields]
    if reserved:
        raise EnvKwargsError(
            f"{where}: {', '.join(reserved)} cannot be set for envpool's {env_id}: cockpit "
            "sets it (n_envs, seed and threads come from the preset and the run) or relies on "
            "it"
        )
    if unknown:
        raise EnvKwargsError(
            f"{where}: envpool's {env_id} takes no {', '.join(unknown)}; its config keys are {', '.join(takes)}"
        )
    try:
        pool = envpool.make(env_id, env_type="gymnasium", num_envs=1, batch_size=1, num_threads=1, **kwargs)
    except Exception as exc:  # envpool's pybind errors name no key; ours does
        # pybind's first line, up to its list of signatures: the gist without the C++ types
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(". The following")[0]
        raise EnvKwargsError(f"{where}: envpool's {env_id} refused them: {type(exc).__name__}: {first}") from None
    pool.close()


def pick_vec_env(step_us: float | None, n_envs: int, cores: int) -> tuple[VecEnvKind, str]:
    """The vectorized env the gymnasium fallback steps `n_envs` envs in, given what one env step
    costs (`step_us`, None when unmeasured) and the cores the job may use, with the reason in
    words: SubprocVecEnv when a step costs at least `SUBPROC_MIN_STEP_US` and there are two envs
    and two cores to spread them over, DummyVecEnv otherwise."""
    if n_envs < 2:
        return "dummy", "DummyVecEnv: one env has nothing to step in parallel"
    if cores < 2:
        return "dummy", "DummyVecEnv: the job has one core, so env processes would only take turns on it"
    if step_us is None:
        return "dummy", "DummyVecEnv: the step cost is unmeasured"
    if step_us >= SUBPROC_MIN_STEP_US:
        return "subproc", (
            f"SubprocVecEnv: a step costs {step_us:,.0f} us, at least the {SUBPROC_MIN_STEP_US:,.0f} "
            f"us that makes stepping {n_envs} envs in parallel processes on {cores} cores pay "
            "for their pipes"
        )
    return "dummy", (
        f"DummyVecEnv: a step costs {step_us:,.0f} us, under the {SUBPROC_MIN_STEP_US:,.0f} us at "
        "which parallel env processes pay for their pipes; stepping in the worker is faster"
    )
