"""CPU kernels (numba njit, parallel over batch items or planes), one operation per module."""
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
from .conv2d_positions import conv2d_backward_positions, conv2d_forward_positions, position_filters
from .conv2d_wide import conv2d_backward_wide, conv2d_forward_wide
from .conv2d_winograd import (
                          conv2d_backward_winograd,
                          conv2d_forward_winograd,
                          winograd_filter_gradient,
                          winograd_filters,
)
from .dense import dense_backward, dense_forward
from .dropout import dropout_advance, dropout_backward, dropout_forward
from .loss import softmax, softmax_cross_entropy
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

__all__ = [
    "add", "batchnorm_backward", "batchnorm_fold", "batchnorm_forward_eval",
    "batchnorm_forward_train",
    "gather_augment",
    "global_avgpool2d_backward", "global_avgpool2d_forward", "normalize_backward", "normalize_forward",
    "adam_update", "avgpool2d_backward", "avgpool2d_forward", "conv2d_backward_gemm", "conv2d_forward_gemm",
    "copy_strided", "gather_batch", "step_stats",
    "conv2d_backward_positions", "conv2d_backward_wide", "conv2d_forward_positions", "conv2d_forward_wide",
    "position_filters",
    "conv2d_backward_winograd", "conv2d_forward_winograd", "winograd_filter_gradient", "winograd_filters",
    "dense_backward", "dense_forward", "dropout_advance", "dropout_backward", "dropout_forward",
    "maxpool2d_backward",
    "maxpool2d_forward", "relu_backward", "relu_forward", "rmsprop_update",
    "sgd_update", "softmax",
    "softmax_cross_entropy", "sum_parts", "tanh_backward", "tanh_forward",
]
