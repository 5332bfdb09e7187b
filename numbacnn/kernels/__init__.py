"""Compute kernels, one backend per subpackage: ``cpu`` (numba njit) and ``cuda`` (numba.cuda); the
objects that call them are in ``numbacnn.backend``."""
