"""Device selection: "cpu" (default) or "cuda" (numba.cuda; optional, see kernels/cuda)."""
from __future__ import annotations

DEVICES = ("cpu", "cuda")


class DeviceError(RuntimeError):
    """The requested device cannot be used here; the message says why."""


def cuda_available() -> bool:
    """True when numba finds a usable CUDA GPU (or the CUDA simulator is enabled)."""
    try:
        from numba import cuda
        return bool(cuda.is_available())
    except Exception:  # no driver, no toolkit, or numba built without CUDA support
        return False


def check_device(device: str) -> str:
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose 'cpu' or 'cuda'")
    if device == "cuda":
        require_cuda()
    return device


def require_cuda() -> None:
    if not cuda_available():
        raise DeviceError("device 'cuda' was requested, but no CUDA GPU is available on this machine "
                          "(numba.cuda found no driver/device); use device 'cpu'")
