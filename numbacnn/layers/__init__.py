"""Layers: own their parameters, gradients and forward caches; validate shapes before any kernel runs.

One module per operation family (conv, pool, dense, activations, dropout, flatten, batchnorm,
normalize, residual); ``base`` holds the ``Layer`` interface and the registry, ``fusion`` the
fusions along a chain. Parametrised layers get their arrays from ``Sequential`` (views into one
flat buffer) or from ``initialize(rng)`` when used alone. Buffers returned by
``forward``/``backward`` are reused by the next call with the same batch size: copy them if you
keep them (``Sequential`` does).
"""
from .activations import GELU, HardSigmoid, HardSwish, ReLU, ReLU6, Scale, Sigmoid, SiLU, Tanh
from .base import LAYER_TYPES, TOKENS, Layer, Shape, layer_from_config, register
from .batchnorm import BatchNorm1D, BatchNorm2D
from .conv import Conv2D, DepthwiseConv2D
from .dense import Dense
from .dropout import Dropout
from .flatten import Flatten
from .fusion import folds_inside, fuse_chain
from .normalize import Normalize
from .pool import AvgPool2D, GlobalAvgPool2D, MaxPool2D
from .residual import Residual

__all__ = [
    "LAYER_TYPES", "TOKENS", "AvgPool2D", "BatchNorm1D", "BatchNorm2D", "Conv2D", "Dense",
    "DepthwiseConv2D", "Dropout", "Flatten", "GELU", "GlobalAvgPool2D", "HardSigmoid", "HardSwish",
    "Layer", "MaxPool2D", "Normalize", "ReLU", "ReLU6", "Residual", "Scale", "Shape", "SiLU", "Sigmoid",
    "Tanh", "folds_inside", "fuse_chain", "layer_from_config", "register",
]
