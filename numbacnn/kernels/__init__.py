"""Compute kernels, one backend per subpackage: ``cpu`` (numba njit) and ``cuda`` (numba.cuda)."""


def kernels_for(device: str):
    """The kernel module of a device: ``kernels.cpu`` or ``kernels.cuda`` (imported on demand)."""
    if device == "cuda":
        from . import cuda
        return cuda
    from . import cpu
    return cpu
