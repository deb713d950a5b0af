"""Reading TOML on every Python cockpit supports: the standard library's `tomllib` from 3.11, and
on 3.10 the `tomli` package it grew from (a dependency there, pyproject.toml). Everything that reads
TOML, in cockpit, its tests and its benchmarks, takes `tomllib` from here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

__all__ = ["read_cache_table", "tomllib"]


def read_cache_table(path: Path) -> dict[str, Any]:
    """A cache file's TOML table; {} when it is missing or unreadable, for a cache is rebuilt by its
    next write (costs.toml, mps.toml)."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return {}
