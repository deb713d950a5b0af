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
"""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
import json
import os
import sys
from pathlib import Path
from typing import Any, Literal

from cockpit.contract.files import write_atomic

Backend = Literal["envpool", "gymnasium"]

CACHE_FILE = "envids.json"
CACHE_FORMAT = 1
MAX_ENTRIES = 8
BACKENDS: tuple[Backend, ...] = ("envpool", "gymnasium")  # in the order they are asked


class UnknownEnvError(ValueError):
    """Neither envpool nor gymnasium knows the env id; the message suggests close ids."""


def cache_path() -> Path:
    """Where the known env ids are kept: `$XDG_CACHE_HOME/cockpit/envids.json`, `~/.cache` when
    XDG_CACHE_HOME is unset or relative (as the XDG spec says, and as the costs cache does)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "cockpit" / CACHE_FILE


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


def backend_for(env_id: str, *, source: str = "--env") -> Backend:
    """Which library will run `env_id`; raises `UnknownEnvError` with suggestions if neither.
    `source` names where the id came from in the message (a flag, or a preset file's key).

    An id the cache knows is answered without importing envpool or gymnasium; any other is looked
    up in the libraries themselves, so ids registered with gymnasium at run time are found."""
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
        f"; did you mean {', '.join(close)}?" if close else "; e.g. CartPole-v1, LunarLander-v3, Pong-v5, Breakout-v5"
    )
    raise UnknownEnvError(f"{source} {env_id!r}: neither envpool nor gymnasium has this environment{hint}")
