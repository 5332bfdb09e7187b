"""CPU kernels (numba njit, parallel over batch items or planes), one operation per module.

A kernel is declared where it is defined, by its decorator (``config.kernel``): ``export=True``
puts it in this namespace (``kernels.cpu.NAME``, what the backends call), ``team="blocks"`` or
``"serial"`` lets a recorded prediction's team region run it (``TEAM_BLOCKS``, ``TEAM_SERIAL``).
This file only imports the modules (all of them); the names, ``__all__`` and the team's tables
derive from the declarations, and tests hold the kernel tier to them (every exported kernel
prebuilt)."""
import importlib
import pkgutil
from typing import Any

from ...runtime.config import declared, team_kernels

for _module in pkgutil.iter_modules(__path__):  # each module declares its kernels as it loads
    importlib.import_module(f"{__name__}.{_module.name}")

_EXPORTS = declared(__name__)
globals().update(_EXPORTS)
__all__ = sorted(_EXPORTS)
# The parallel kernels a recorded prediction can run in one team region (runtime/team.py): each maps
# to (count, block): ``count(*args)`` blocks, ``block(i, *args)`` runs block i (the kernel's
# parallel_blocks); the serial ones (no parallel region inside) a team runs on one thread.
TEAM_BLOCKS, TEAM_SERIAL = team_kernels(__name__)


def __getattr__(name: str) -> Any:  # the declared kernels are set above: this is the rest
    raise AttributeError(f"numbacnn.kernels.cpu has no kernel {name!r} (none is declared export=True so)")
