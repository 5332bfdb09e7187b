"""Fusion along a chain of layers: which layer applies its neighbour's work (a convolution's ReLU
and max pool, a BatchNorm's ReLU, a residual add's ReLU; at inference a BatchNorm folded into the
convolution before it and channel-last hand-offs between Winograd layers). The only place that
knows pairs of layer types; the layers read the flags it sets in their forward and backward."""
from __future__ import annotations

from .activations import ReLU
from .base import Layer
from .batchnorm import BatchNorm2D
from .conv import Conv2D
from .pool import MaxPool2D
from .residual import Residual


def fuse_chain(layers: list[Layer], enabled: bool = True) -> None:
    """Fusions along a chain of layers (a Sequential's, or a residual path's): a Conv2D or a
    BatchNorm applies the ReLU that follows it (the ReLU then passes through), and a Conv2D whose
    plan can (``fuses_pool``) also a following non-overlapping, unpadded MaxPool2D (pooled in the
    GEMM epilogue: the full-size activation is never written, read back or backpropagated
    through). ``enabled=False`` undoes them all."""
    for layer in layers:
        if isinstance(layer, (Conv2D, BatchNorm2D, Residual)):
            layer.fused_relu = False
        if isinstance(layer, Conv2D):
            layer.fused_pool = None
            layer.infer_bn, layer.infer_pool, layer.infer_layout = None, None, 0
        if isinstance(layer, BatchNorm2D):
            layer.infer_folded = False
        if isinstance(layer, (ReLU, MaxPool2D)):
            layer.fused = False
        if isinstance(layer, MaxPool2D):
            layer.infer_fused = False
        for _, path in layer.paths():
            fuse_chain(path, enabled)
    if not enabled:
        return
    for i, layer in enumerate(layers[:-1]):
        relu = layers[i + 1]
        if isinstance(layer, Residual) and isinstance(relu, ReLU):  # the add applies it
            layer.fused_relu = relu.fused = True
            continue
        if not (isinstance(layer, (Conv2D, BatchNorm2D)) and isinstance(relu, ReLU)):
            continue
        layer.fused_relu = True
        relu.fused = True
        pool = _poolable(layer, layers[i + 2] if i + 2 < len(layers) else None)
        if pool is not None:
            layer.fused_pool = pool.kernel_size  # type: ignore[union-attr]  # a Conv2D (_poolable)
            pool.fused = True
    # inference only (Layer.infer): Conv2D + BatchNorm2D (+ ReLU (+ max pool)) as one convolution
    for i, layer in enumerate(layers[:-1]):
        bn = layers[i + 1]
        if not (isinstance(layer, Conv2D) and type(bn) is BatchNorm2D):
            continue
        layer.infer_bn = bn
        bn.infer_folded = True
        pool = _poolable(layer, layers[i + 3] if bn.fused_relu and i + 3 < len(layers) else None)
        if pool is not None:
            layer.infer_pool = pool.kernel_size
            pool.infer_fused = True
    # inference only: Winograd layers hand each other channel-last activations (Conv2D.infer_layout;
    # modern's prediction at batch 1 / 8 / 64: 0.94 / 0.96 / 0.95x the time)
    for i, layer in enumerate(layers):
        if not (isinstance(layer, Conv2D) and layer.plan.channels_last):
            continue
        j = i + 1  # the layer that reads this one's inference output
        while j < len(layers) and _passes_on(layers[j], layer):
            j += 1
        after = layers[j] if j < len(layers) else None
        if isinstance(after, Conv2D) and after.plan.channels_last:
            layer.infer_layout |= 2
            after.infer_layout |= 1


def _passes_on(layer: Layer, conv: Conv2D) -> bool:
    """Whether ``layer``'s inference passes its input on untouched because ``conv`` before it did
    its work (a folded BatchNorm2D, a fused ReLU, a fused max pool)."""
    if isinstance(layer, BatchNorm2D):
        return layer.infer_folded and conv.infer_bn is layer
    if isinstance(layer, ReLU):
        return layer.fused
    if isinstance(layer, MaxPool2D):
        return layer.infer_fused or layer.fused
    return False


def _poolable(conv: Layer, pool: Layer | None) -> MaxPool2D | None:
    """``pool`` when ``conv`` is a Conv2D whose plan can apply it in its epilogue (a
    non-overlapping, unpadded MaxPool2D whose window fits the plan's argmax offsets), else None."""
    if (isinstance(conv, Conv2D) and conv.plan.fuses_pool and isinstance(pool, MaxPool2D)
            and pool.padding == (0, 0) and pool.stride == pool.kernel_size
            and pool.kernel_size[0] * pool.kernel_size[1] <= conv.plan.max_fused_window):
        return pool
    return None


def folds_inside(layers: list[Layer], cut: int) -> bool:
    """Whether ``layers[:cut]`` holds every layer that its inference folds reach (a Conv2D's
    BatchNorm2D, and the max pool it pools for), and the last Conv2D before the cut hands its
    output on channel-first (not to a Winograd layer past the cut, ``infer_layout``)."""
    last = None
    for i, layer in enumerate(layers[:cut]):
        reach = 0
        if isinstance(layer, Conv2D):
            last = layer
            if layer.infer_bn is not None:
                reach = 3 if layer.infer_pool else 1
        if i + reach >= cut:
            return False
    return last is None or not last.infer_layout & 2
