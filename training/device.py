"""Torch device choice, TF32, and the worker's CPU thread budget: the only GPU-specific code.

Several workers share one machine, so each must stay inside its thread budget: OpenMP and MKL get
one thread (set in the environment before numpy or torch load their thread pools), envpool gets
the `--threads` budget, and so does torch on the CPU (`torch_threads_for`); a GPU job's torch gets
one.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from cockpit.contract.workerargs import THREAD_ENV_VARS, DeviceRequest


class DeviceError(ValueError):
    """The requested device cannot be used here; the message says what to use instead."""


def limit_native_threads() -> None:
    """Pin OpenMP/MKL/OpenBLAS pools to one thread; call before numpy or torch is imported."""
    for var in THREAD_ENV_VARS:
        os.environ[var] = "1"


def torch_threads_for(device: str, budget: int | None) -> int:
    """torch's intra-op threads for a job on `device` with a core budget of `budget` (`--threads`;
    None: every CPU this process may use). A CPU job's rollout steps its envs on the budget's
    envpool threads and its train phase runs torch; the two never overlap within a job, so the
    train phase takes the whole budget too (a lone Pong job on 2 cores trained in 96 s with two
    threads where one took 155 s). On a GPU the train phase runs there: one thread drives it."""
    if device != "cpu":
        return 1
    return max(1, budget or len(os.sched_getaffinity(0)))


def apply_torch_threads(threads: int) -> None:
    """Give torch `threads` intra-op threads and one inter-op thread."""
    import torch

    torch.set_num_threads(threads)
    # Only settable before the first parallel op; a second call in one process is harmless.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)


def resolve_device(requested: DeviceRequest) -> str:
    """`cuda` or `cpu` for a request of auto, cpu or cuda; `DeviceError` if CUDA is asked for but absent."""
    import torch

    if requested == "cpu":
        return "cpu"
    available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        build = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device or driver was found"
        raise DeviceError(f"--device cuda: {build}; use --device auto or --device cpu")
    return "cuda" if available else "cpu"


def enable_tf32() -> None:
    """Let matmuls and cuDNN convolutions use TF32 tensor cores (about 2x on Ampere and newer)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")


def cuda_memory(device: Any, cuda: Any = None) -> dict[str, int]:
    """The worker's own CUDA memory on `device` as progress-event fields: `cuda_reserved_bytes`,
    what torch's caching allocator holds now (`torch.cuda.memory_reserved`), and `cuda_peak_bytes`,
    the most it has held (`torch.cuda.max_memory_reserved`); empty when `device` (a torch.device
    or its name) is not CUDA. `cuda` is the torch.cuda module (the default; a test passes a
    stand-in with those two calls)."""
    if str(getattr(device, "type", device)).split(":")[0] != "cuda":
        return {}
    if cuda is None:
        import torch

        cuda = torch.cuda
    return {
        "cuda_reserved_bytes": int(cuda.memory_reserved(device)),
        "cuda_peak_bytes": int(cuda.max_memory_reserved(device)),
    }


def is_cuda_oom(exc: BaseException) -> bool:
    """True when `exc` is torch's CUDA out-of-memory error (its own class, or the older message)."""
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "CUDA out of memory" in str(exc)
    )
