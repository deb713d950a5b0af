"""Reading TOML on every Python cockpit supports: the standard library's `tomllib` from 3.11, and
on 3.10 the `tomli` package it grew from (a dependency there, pyproject.toml). Everything that reads
TOML, in cockpit, its tests and its benchmarks, takes `tomllib` from here."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

__all__ = ["tomllib"]
