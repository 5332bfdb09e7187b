"""Compute kernels, one backend per subpackage: ``cpu`` (numba njit) and ``cuda`` (numba.cuda)."""
