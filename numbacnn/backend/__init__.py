"""Backends: one object per device offering the same operations (``base.Backend``); layers,
optimizers and the model call their backend and never branch on the device."""
from __future__ import annotations

from .base import Backend, ConvGeometry, ConvPlan, Workspace


def get_backend(device: str) -> Backend:
    """The backend of "cpu" or "cuda" (imported on first use; "cuda" needs numba.cuda, not a GPU)."""
    if device == "cpu":
        from .cpu import CpuBackend
        return CpuBackend.instance()
    if device == "cuda":
        from .cuda import CudaBackend
        return CudaBackend.instance()
    raise ValueError(f"unknown device {device!r}; choose 'cpu' or 'cuda'")


__all__ = ["Backend", "ConvGeometry", "ConvPlan", "Workspace", "get_backend"]
