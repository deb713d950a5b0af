"""Command-line parsing shared by `cockpit` and the training worker.

Bad input must produce one line naming the flag and what would be valid, then exit code 2;
argparse's default prints the whole usage block first, which buries the message.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: `prog: error: message (see prog --help)`, exit 2."""

    def error(self, message: str) -> NoReturn:
        """Print the one-line error and exit 2."""
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def int_at_least(minimum: int, wanted: str) -> Callable[[str], int]:
    """argparse type: an integer >= `minimum`, underscores allowed; a bad one is refused as
    "expected `wanted`". The type for a flag whose consumer checks the same minimum, so that the
    two share one constant rather than drift."""

    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
        return value

    return parse


positive_int = int_at_least(1, "a positive integer")
"""argparse type: an integer > 0, underscores allowed (`1_000_000`)."""

non_negative_int = int_at_least(0, "an integer >= 0")
"""argparse type: an integer >= 0."""


def gpu_indices(text: str) -> tuple[int, ...]:
    """argparse type: GPU indices separated by commas (`0,2`), each an integer >= 0, none twice.
    Whether the machine has them is checked where NVML is known (`runspec.build_spec`)."""
    try:
        indices = tuple(int(part) for part in text.split(","))
    except ValueError:
        indices = (-1,)
    if any(index < 0 for index in indices):
        raise argparse.ArgumentTypeError(f"expected GPU indices such as 0,2 (integers >= 0), got {text!r}")
    twice = sorted({index for index in indices if indices.count(index) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"GPU {twice[0]} is given twice in {text!r}: name each GPU once")
    return indices


def device_mix(text: str) -> tuple[str, ...]:
    """argparse type: `--devices 2:cuda,1:cpu`, how many of the run's parallel jobs train on each
    device, as one device per slot in that order (`("cuda", "cuda", "cpu")`). Whether the machine
    has a GPU, and the count against --jobs, are checked in `runspec.build_spec`."""
    slots: list[str] = []
    for part in text.split(","):
        count, _, device = part.strip().partition(":")
        if device not in ("cuda", "cpu") or not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(
                f"expected COUNT:DEVICE pairs such as 2:cuda,1:cpu (DEVICE cuda or cpu, COUNT >= 1), got {text!r}"
            )
        slots += [device] * int(count)
    return tuple(slots)


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (`0`, `600`, `1_800`); not nan or inf."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        value = -1.0
    if not 0.0 <= value < float("inf"):  # also refuses nan, which compares false
        raise argparse.ArgumentTypeError(f"expected a number of seconds, 0 or more, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (`300`, `0.5`, `1_800`); not nan or inf."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        value = 0.0
    if not 0.0 < value < float("inf"):  # also refuses nan, which compares false
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value
