"""CUDA kernels (numba.cuda) with the names and meanings of the CPU kernels.

Argument order follows the CPU kernels (outputs, then inputs and parameters, then sizes), minus the
CPU-only workspaces (im2col caches, per-chunk gradient parts): on the GPU every output element
has its own thread that gathers what it needs, so there are no partial sums to reduce.
Importing this package needs numba.cuda but no GPU; launching needs a GPU or NUMBA_ENABLE_CUDASIM=1.
"""
import warnings as _warnings

import numpy as _np

if not hasattr(_np, "row_stack"):  # numba-cuda (0.30) registers np.row_stack, which numpy 2.5 removed:
    _np.row_stack = _np.vstack     # without it no kernel compiles there (seen on a GPU, 2026-11-26)

from .activations import (
                          add,
                          copy_strided,
                          relu_backward,
                          relu_forward,
                          tanh_backward,
                          tanh_forward,
)
from .batchnorm import batchnorm_backward, batchnorm_fold, batchnorm_forward_eval, batchnorm_forward_train
from .conv2d_gather import conv2d_backward_gather, conv2d_forward_gather
from .conv2d_grouped import conv2d_backward_grouped, conv2d_forward_grouped
from .conv2d_tiled import conv2d_backward_tiled, conv2d_forward_tiled, dw_workspace_size
from .dense import dense_backward, dense_forward
from .dropout import dropout_advance, dropout_backward, dropout_forward
from .loss import loss_stats, regression_loss, softmax, softmax_cross_entropy, step_stats
from .normalize import normalize_backward, normalize_forward
from .optim import adam_update, rmsprop_update, sgd_update
from .pool import (
                   avgpool2d_backward,
                   avgpool2d_forward,
                   global_avgpool2d_backward,
                   global_avgpool2d_forward,
                   maxpool2d_backward,
                   maxpool2d_forward,
)

# numba warns at every launch of a grid under 2 blocks per multiprocessor; this package's small
# grids (one block of statistics, a few tiles of a small layer) are meant, and their warnings
# would bury a user's output
_warnings.filterwarnings("ignore", message=r"Grid size \d+ will likely result in GPU under-utilization")

__all__ = [
    "copy_strided",
    "add", "batchnorm_backward", "batchnorm_fold", "batchnorm_forward_eval",
    "batchnorm_forward_train",
    "global_avgpool2d_backward", "global_avgpool2d_forward", "normalize_backward", "normalize_forward",
    "adam_update", "avgpool2d_backward", "avgpool2d_forward", "conv2d_backward_gather",
    "conv2d_forward_gather", "conv2d_backward_grouped", "conv2d_forward_grouped",
    "conv2d_backward_tiled", "conv2d_forward_tiled", "dw_workspace_size",
    "dense_backward", "dense_forward", "dropout_advance", "dropout_backward", "dropout_forward",
    "maxpool2d_backward",
    "maxpool2d_forward", "relu_backward", "relu_forward", "rmsprop_update", "sgd_update",
    "loss_stats", "regression_loss", "softmax", "softmax_cross_entropy", "step_stats", "tanh_backward",
    "tanh_forward",
]
