"""Writes container/requirements.txt, the hash-locked set the image installs cockpit's dependencies
from (`pip install --require-hashes`), or checks it (`--check`).

    .venv/bin/python benchmarks/container/lock.py           # resolve and write the lock
    .venv/bin/python benchmarks/container/lock.py --check   # exit 0 if the lock still fits pyproject

The lock holds every distribution `cockpit[tensorboard,mlflow]` needs on Linux x86_64 for the
Pythons the image is built on (3.11: Debian bookworm, the container check's base; 3.12: Ubuntu
24.04, the CUDA base), each `name==version` with the SHA-256 of each wheel those Pythons take, plus
setuptools to build cockpit itself. It is resolved by pip (`install --dry-run --report`, wheels
only, for the target Python and platform; the hashes are the index's own) from wherever this
machine's pip looks. torch is left out: its build (CPU or CUDA) is the image's `TORCH_INDEX`
choice, installed in a layer of its own by version; what torch itself needs (sympy, networkx, ...)
is locked here, resolved against the CPU build of the same version.

`--check` needs no index: it fails, in one line, where pyproject's dependencies changed since the
lock was written (their digest is in its header), where a direct dependency is missing from the
lock or locked outside its range, or where an entry is not `==` with at least one sha256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cockpit.contract.files import write_atomic
from cockpit.contract.toml import tomllib

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "container" / "requirements.txt"
EXTRAS = ("tensorboard", "mlflow")
# The image's Pythons and the glibc each base has: 2.36 (bookworm), 2.39 (Ubuntu 24.04).
TARGETS = (("3.11", 36), ("3.12", 39))
TORCH = "torch==2.13.0+cpu"  # the CPU build the check installs; torch's own dependencies are the same
LEFT_OUT = frozenset({"torch"})  # the TORCH_INDEX layer's
BUILD = "setuptools>=68"  # pyproject's build-system; cockpit is built with --no-build-isolation
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)\s*$")


def inputs(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The requirements the lock is made from: pyproject's dependencies, those of the image's
    extras and the build backend, in pyproject's order."""
    project = tomllib.loads(pyproject.read_text())["project"]
    found = list(project["dependencies"])
    for extra in EXTRAS:
        found += project["optional-dependencies"][extra]
    return [*found, BUILD]


def digest(requirements: list[str]) -> str:
    """A short SHA-256 of the lock's inputs, recorded in its header to tell a stale lock."""
    return hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:16]


def _platforms(glibc_minor: int) -> list[str]:
    """The wheel platform tags a glibc 2.`glibc_minor` x86_64 Python takes, best first (pip does not
    widen a `--platform` given to it as the Python it runs under does)."""
    tags = [f"manylinux_2_{minor}_x86_64" for minor in range(glibc_minor, 16, -1)]
    return [*tags, "manylinux2014_x86_64", "linux_x86_64"]


def _report(python: str, glibc_minor: int, requirements: list[str], *, no_deps: bool) -> list[dict[str, object]]:
    """pip's installation report for `requirements` on that Python and platform (wheels only)."""
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "req.txt"
        req.write_text("\n".join(requirements) + "\n")
        out = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(out), "--only-binary=:all:", "--implementation", "cp", "--python-version", python,
               *(f"--platform={p}" for p in _platforms(glibc_minor)), "--target", str(Path(tmp) / "t"),
               *(["--no-deps"] if no_deps else []), "-r", str(req)]  # fmt: skip
        # The machine-wide constraints of a development box (a torch cap) are no part of the lock.
        env = {**os.environ, "PIP_CONSTRAINT": ""}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
            raise SystemExit(f"lock.py: pip could not resolve for Python {python}: {' '.join(errors)[-600:]}")
        installs: list[dict[str, object]] = json.loads(out.read_text())["install"]
        return installs


def resolve() -> dict[str, tuple[str, set[str]]]:
    """{name: (version, sha256s)}: resolved for the first Python, then the same versions' wheels
    for the others, so every image gets the same versions."""
    wanted = [r for r in inputs() if canonicalize_name(Requirement(r).name) not in LEFT_OUT]
    locked: dict[str, tuple[str, set[str]]] = {}
    first, *rest = TARGETS
    pins: list[str] = []
    for python, glibc_minor in [first, *rest]:
        reqs = pins or [TORCH, *wanted]
        for item in _report(python, glibc_minor, reqs, no_deps=bool(pins)):
            meta, info = item["metadata"], item["download_info"]
            assert isinstance(meta, dict) and isinstance(info, dict)
            name = canonicalize_name(str(meta["name"]))
            if name in LEFT_OUT:
                continue
            sha = info.get("archive_info", {}).get("hashes", {}).get("sha256")
            if not sha:
                raise SystemExit(f"lock.py: the index gave no sha256 for {name} ({info.get('url')})")
            locked.setdefault(name, (str(meta["version"]), set()))[1].add(str(sha))
        if not pins:
            pins = [f"{name}=={version}" for name, (version, _) in sorted(locked.items())]
    return locked


def render(locked: dict[str, tuple[str, set[str]]], requirements: list[str]) -> str:
    """The lock file's text."""
    lines = [
        "# cockpit's dependencies for the image, every wheel by its SHA-256 (pip install --require-hashes).",
        "# Written by benchmarks/container/lock.py; run it again after changing pyproject's dependencies.",
        f"# inputs: {digest(requirements)}",
    ]
    for name, (version, hashes) in sorted(locked.items()):
        lines.append(f"{name}=={version} \\")
        lines += [
            f"    --hash=sha256:{h}" + (" \\" if i < len(hashes) - 1 else "") for i, h in enumerate(sorted(hashes))
        ]
    return "\n".join(lines) + "\n"


def check(lock: Path = LOCK, pyproject: Path = ROOT / "pyproject.toml") -> str | None:
    """None if `lock` fits `pyproject`; else the one line that says why not."""
    requirements = inputs(pyproject)
    if not lock.exists():
        return f"{lock} is missing: run benchmarks/container/lock.py"
    text = lock.read_text()
    if f"# inputs: {digest(requirements)}\n" not in text:
        return (
            f"{lock} is stale: pyproject's dependencies changed since it was written; run benchmarks/container/lock.py"
        )
    entries: dict[str, str] = {}
    for entry in text.replace("\\\n", " ").splitlines():
        if not entry.strip() or entry.startswith("#"):
            continue
        m = ENTRY.match(entry)
        if not m:
            return f"{lock}: not `name==version --hash=sha256:...`: {entry[:120]}"
        entries[canonicalize_name(m.group(1))] = m.group(2)
    for raw in requirements:
        req = Requirement(raw)
        name = canonicalize_name(req.name)
        if name in LEFT_OUT or (req.marker is not None and not req.marker.evaluate({"python_version": "3.11"})):
            continue
        if name not in entries:
            return f"{lock}: {req.name} (pyproject: {raw}) is not locked; run benchmarks/container/lock.py"
        if not req.specifier.contains(entries[name], prereleases=True):
            return f"{lock}: {req.name}=={entries[name]} is outside pyproject's {raw}"
    return None


def main(argv: list[str] | None = None) -> int:
    """`lock.py` writes the lock (exit 0, or 1 with pip's error); `--check` exits 0 or 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="check the lock against pyproject, offline")
    parser.add_argument("--lock", type=Path, default=LOCK, help="the lock file (default container/requirements.txt)")
    args = parser.parse_args(argv)
    if args.check:
        why = check(args.lock)
        print(why or f"{args.lock}: fits pyproject's dependencies", file=sys.stderr if why else sys.stdout)
        return 1 if why else 0
    requirements = inputs()
    locked = resolve()
    write_atomic(args.lock, render(locked, requirements))
    print(f"{args.lock}: {len(locked)} distributions, {sum(len(h) for _, h in locked.values())} hashes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
