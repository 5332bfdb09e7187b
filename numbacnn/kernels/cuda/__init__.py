"""CUDA kernels (numba.cuda) with the names and meanings of the CPU kernels.

Argument order follows the CPU kernels (outputs, then inputs and parameters, then sizes), minus the
CPU-only workspaces (im2col caches, per-chunk gradient parts): on the GPU every output element
has its own thread that gathers what it needs, so there are no partial sums to reduce.
Importing this package needs numba.cuda but no GPU; launching needs a GPU or NUMBA_ENABLE_CUDASIM=1.
"""
import warnings as _warnings

import numpy as _np

if not hasattr(_np, "row_stack"):  # numba-cuda (0.30) registers np.row_stack, which numpy 2.5 removed:
    _np.row_stack = _np.vstack     # without it no kernel compiles there (seen on a GPU)

import importlib as _importlib
import pkgutil as _pkgutil
from typing import Any as _Any

from ...runtime.config import declared as _declared

for _module in _pkgutil.iter_modules(__path__):  # each launcher is @declare'd as its module loads
    _importlib.import_module(f"{__name__}.{_module.name}")

# numba warns at every launch of a grid under 2 blocks per multiprocessor; this package's small
# grids (one block of statistics, a few tiles of a small layer) are meant, and their warnings
# would bury a user's output
_warnings.filterwarnings("ignore", message=r"Grid size \d+ will likely result in GPU under-utilization")

_EXPORTS = _declared(__name__)
globals().update(_EXPORTS)
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> _Any:  # the declared launchers are set above
    raise AttributeError(f"numbacnn.kernels.cuda has no kernel {name!r} (none is declared so)")
