"""Layers: own their parameters, gradients and forward caches; validate shapes before any kernel runs.

One module per operation family (conv, conv1d, pool, pool1d, dense, activations, dropout, flatten,
batchnorm, normalize, residual, concat; ``block``: what the last two share); ``base`` holds the
``Layer`` interface and the registry, ``fusion`` the fusions along a chain. Parametrised layers get
their arrays from ``Sequential`` (views into one flat buffer) or from ``initialize(rng)`` when used
alone. Buffers returned by
``forward``/``backward`` are reused by the next call with the same batch size: copy them if you
keep them (``Sequential`` does).
"""
from .activations import GELU, HardSigmoid, HardSwish, ReLU, ReLU6, Scale, Sigmoid, SiLU, Tanh
from .base import LAYER_TYPES, TOKENS, Layer, Shape, layer_from_config, register
from .batchnorm import BatchNorm1D, BatchNorm2D
from .concat import Concat
from .conv import Conv2D, DepthwiseConv2D
from .conv1d import Conv1D, DepthwiseConv1D
from .dense import Dense
from .dropout import Dropout
from .flatten import Flatten
from .fusion import folds_inside, fuse_chain
from .normalize import Normalize
from .pool import AvgPool2D, GlobalAvgPool2D, MaxPool2D
from .pool1d import AvgPool1D, GlobalAvgPool1D, GlobalMaxPool1D, MaxPool1D
from .residual import Residual

__all__ = [
    "LAYER_TYPES", "TOKENS", "AvgPool1D", "AvgPool2D", "BatchNorm1D", "BatchNorm2D", "Concat", "Conv1D",
    "Conv2D", "Dense", "DepthwiseConv1D", "DepthwiseConv2D", "Dropout", "Flatten", "GELU", "GlobalAvgPool1D",
    "GlobalAvgPool2D", "GlobalMaxPool1D", "HardSigmoid", "HardSwish", "Layer", "MaxPool1D", "MaxPool2D",
    "Normalize", "ReLU", "ReLU6", "Residual", "Scale", "Shape", "SiLU", "Sigmoid", "Tanh", "folds_inside",
    "fuse_chain", "layer_from_config", "register",
]
