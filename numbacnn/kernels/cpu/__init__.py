"""CPU kernels (numba njit, parallel over batch items or planes), one operation per module."""
from . import activations as _activations
from . import batchnorm as _batchnorm
from . import conv2d_gemm as _conv2d_gemm
from . import conv2d_grouped as _conv2d_grouped
from . import conv2d_pointwise as _conv2d_pointwise
from . import conv2d_positions as _conv2d_positions
from . import conv2d_wide as _conv2d_wide
from . import conv2d_winograd as _conv2d_winograd
from . import conv2d_winograd4 as _conv2d_winograd4
from . import dense as _dense
from . import normalize as _normalize
from . import pad as _pad
from . import pool as _pool
from ._util import sum_parts
from .activations import (
    add,
    relu_backward,
    relu_forward,
    tanh_backward,
    tanh_forward,
)
from .batch import copy_strided, gather_augment, gather_batch, step_stats
from .batchnorm import batchnorm_backward, batchnorm_fold, batchnorm_forward_eval, batchnorm_forward_train
from .conv2d_gemm import conv2d_backward_gemm, conv2d_forward_gemm
from .conv2d_grouped import conv2d_backward_grouped, conv2d_forward_grouped, depthwise_pitch
from .conv2d_pointwise import conv2d_backward_pointwise, conv2d_forward_pointwise
from .conv2d_positions import conv2d_backward_positions, conv2d_forward_positions, position_filters
from .conv2d_wide import conv2d_backward_wide, conv2d_forward_wide
from .conv2d_winograd import (
    conv2d_backward_winograd,
    conv2d_forward_winograd,
    winograd_filter_gradient,
    winograd_filters,
)
from .conv2d_winograd4 import (
    conv2d_backward_winograd4,
    conv2d_forward_winograd4,
    winograd4_filter_gradient,
    winograd4_filters,
)
from .dense import dense_backward, dense_forward
from .dropout import dropout_advance, dropout_backward, dropout_forward
from .loss import loss_stats, regression_loss, softmax, softmax_cross_entropy
from .normalize import normalize_backward, normalize_forward
from .optim import adam_update, rmsprop_update, sgd_update
from .pad import pad2d_backward, pad2d_forward
from .pool import (
    avgpool2d_backward,
    avgpool2d_forward,
    global_avgpool2d_backward,
    global_avgpool2d_forward,
    maxpool2d_backward,
    maxpool2d_forward,
)

__all__ = [
    "add", "batchnorm_backward", "batchnorm_fold", "batchnorm_forward_eval",
    "batchnorm_forward_train",
    "gather_augment",
    "global_avgpool2d_backward", "global_avgpool2d_forward", "normalize_backward", "normalize_forward",
    "adam_update", "avgpool2d_backward", "avgpool2d_forward", "conv2d_backward_gemm", "conv2d_forward_gemm",
    "conv2d_backward_grouped", "conv2d_forward_grouped", "depthwise_pitch", "conv2d_backward_pointwise",
    "conv2d_forward_pointwise",
    "copy_strided", "gather_batch", "step_stats", "loss_stats", "regression_loss",
    "conv2d_backward_positions", "conv2d_backward_wide", "conv2d_forward_positions", "conv2d_forward_wide",
    "position_filters",
    "conv2d_backward_winograd", "conv2d_forward_winograd", "winograd_filter_gradient", "winograd_filters",
    "conv2d_backward_winograd4", "conv2d_forward_winograd4", "winograd4_filter_gradient", "winograd4_filters",
    "dense_backward", "dense_forward", "pad2d_backward", "pad2d_forward", "dropout_advance",
    "dropout_backward", "dropout_forward",
    "maxpool2d_backward",
    "maxpool2d_forward", "relu_backward", "relu_forward", "rmsprop_update",
    "sgd_update", "softmax",
    "softmax_cross_entropy", "sum_parts", "tanh_backward", "tanh_forward",
]


def _blocks(module, name):
    return getattr(module, name + "_blocks"), getattr(module, name + "_block")


# The parallel kernels an inference program can run in one team region (backend/team.py): each maps to
# (count, block): ``count(*args)`` blocks, ``block(i, *args)`` runs block i (the kernel's parallel_blocks).
TEAM_BLOCKS = {
    relu_forward: _blocks(_activations, "relu_forward"),
    tanh_forward: _blocks(_activations, "tanh_forward"),
    add: _blocks(_activations, "add"),
    batchnorm_forward_eval: _blocks(_batchnorm, "batchnorm_forward_eval"),
    batchnorm_fold: _blocks(_batchnorm, "batchnorm_fold"),
    conv2d_forward_gemm: _blocks(_conv2d_gemm, "conv2d_forward_gemm"),
    conv2d_forward_grouped: _blocks(_conv2d_grouped, "conv2d_forward_grouped"),
    conv2d_forward_pointwise: _blocks(_conv2d_pointwise, "conv2d_forward_pointwise"),
    conv2d_forward_positions: _blocks(_conv2d_positions, "conv2d_forward_positions"),
    conv2d_forward_wide: _blocks(_conv2d_wide, "conv2d_forward_wide"),
    conv2d_forward_winograd: _blocks(_conv2d_winograd, "conv2d_forward_winograd"),
    conv2d_forward_winograd4: _blocks(_conv2d_winograd4, "conv2d_forward_winograd4"),
    dense_forward: _blocks(_dense, "dense_forward"),
    normalize_forward: _blocks(_normalize, "normalize_forward"),
    pad2d_forward: _blocks(_pad, "pad2d_forward"),
    maxpool2d_forward: _blocks(_pool, "maxpool2d_forward"),
    avgpool2d_forward: _blocks(_pool, "avgpool2d_forward"),
    global_avgpool2d_forward: _blocks(_pool, "global_avgpool2d_forward"),
}
# Serial kernels (no parallel region inside) that inference programs call: a team runs them on one
# thread.
TEAM_SERIAL = frozenset({winograd_filters, winograd4_filters, position_filters})
