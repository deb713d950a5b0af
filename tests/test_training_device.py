"""Device choice and the GPU-only switches, checked on the CPU."""

from __future__ import annotations

import pytest
import torch

from cockpit_training import device


def test_cpu_is_always_available() -> None:
    assert device.resolve_device("cpu") == "cpu"


def test_auto_follows_cuda_availability(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device.resolve_device("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device.resolve_device("auto") == "cuda"
    assert device.resolve_device("cuda") == "cuda"


def test_cuda_without_cuda_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(device.DeviceError, match=r"--device cuda: .*use --device auto or --device cpu"):
        device.resolve_device("cuda")


def test_tf32_switches_are_set() -> None:
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    precision = torch.get_float32_matmul_precision()
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        device.enable_tf32()
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
        torch.set_float32_matmul_precision(precision)


def test_cuda_oom_is_recognised() -> None:
    assert device.is_cuda_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert device.is_cuda_oom(RuntimeError("CUDA out of memory. Tried to allocate 20 MiB"))
    assert not device.is_cuda_oom(RuntimeError("shape mismatch"))
    assert not device.is_cuda_oom(MemoryError())
