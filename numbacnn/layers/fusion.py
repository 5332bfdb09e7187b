"""Fusion along a chain of layers: which layer applies its neighbour's work (a convolution's ReLU
and max pool, a BatchNorm's ReLU, a residual add's ReLU; at inference a BatchNorm folded into the
convolution before it and channel-last hand-offs between Winograd layers). The only place that
knows pairs of layer types: ``plan`` computes a chain's plan (a ``Fusion`` per layer) from the
layers alone, ``fuse_chain`` gives each layer its part; the layers read ``self.fusion``."""
from __future__ import annotations

from dataclasses import replace

from .activations import ReLU
from .base import NO_FUSION, Fusion, Layer
from .batchnorm import BatchNorm1D, BatchNorm2D
from .conv import Conv2D
from .conv1d import Conv1D
from .pool import MaxPool2D
from .residual import Residual


def fuse_chain(layers: list[Layer], enabled: bool = True) -> None:
    """Give each layer of a chain (a Sequential's, or a residual path's, planned on its own) its
    part of the chain's plan; ``enabled=False`` undoes every fusion."""
    for layer in layers:
        for _, path in layer.paths():
            fuse_chain(path, enabled)
    for layer, part in zip(layers, plan(layers) if enabled else [NO_FUSION] * len(layers)):
        layer.fusion = part


def plan(layers: list[Layer]) -> list[Fusion]:
    """The fusion plan of a chain, a ``Fusion`` per layer (the layers are not changed): a Conv2D or a
    BatchNorm applies the ReLU that follows it (the ReLU then passes through), a residual add too,
    and a Conv2D whose plan can (``fuses_pool``) also a following non-overlapping, unpadded
    MaxPool2D, right after it or after its ReLU (pooled in the GEMM epilogue: the full-size
    activation is never written, read back or backpropagated through, and only the outputs the
    pool reads are computed). At inference a Conv2D also folds a following BatchNorm2D (with its
    ReLU and a max pool after it), and Winograd layers hand each other channel-last activations."""
    parts = [NO_FUSION] * len(layers)

    def update(i: int, **changes: object) -> None:
        parts[i] = replace(parts[i], **changes)  # type: ignore[arg-type]

    for i, layer in enumerate(layers[:-1]):
        relu = isinstance(layer, (Conv2D, BatchNorm2D, Residual)) and isinstance(layers[i + 1], ReLU)
        if relu:
            update(i, relu=True)
            update(i + 1, absorbed=True)
        j = i + 2 if relu else i + 1  # the max pool that may follow, after the ReLU or right after
        pool = _poolable(layer, layers[j] if j < len(layers) else None)
        if pool is not None:
            update(i, pool=pool.kernel_size)
            update(j, absorbed=True)
    # inference only (Layer.infer): Conv2D + BatchNorm2D (+ ReLU (+ max pool)) as one convolution,
    # and Conv1D + BatchNorm1D (+ ReLU) over series
    for i, layer in enumerate(layers[:-1]):
        bn = layers[i + 1]
        if not (type(bn) is (BatchNorm1D if isinstance(layer, Conv1D) else BatchNorm2D)
                and isinstance(layer, Conv2D)):
            continue
        update(i, infer_bn=bn)
        update(i + 1, infer_absorbed=True)
        pool = _poolable(layer, layers[i + 3] if parts[i + 1].relu and i + 3 < len(layers) else None)
        if pool is not None:
            update(i, infer_pool=pool.kernel_size)
            update(i + 3, infer_absorbed=True)
    # inference only: Winograd layers hand each other channel-last activations (Fusion.infer_layout;
    # modern's prediction at batch 1 / 8 / 64: 0.94 / 0.96 / 0.95x the time)
    for i, layer in enumerate(layers):
        if not (isinstance(layer, Conv2D) and layer.plan.channels_last):
            continue
        j = i + 1  # the layer that reads this one's inference output
        while j < len(layers) and _passes_on(layers[j], parts[j], parts[i]):
            j += 1
        after = layers[j] if j < len(layers) else None
        if isinstance(after, Conv2D) and after.plan.channels_last:
            update(i, infer_layout=parts[i].infer_layout | 2)
            update(j, infer_layout=parts[j].infer_layout | 1)
    return parts


def _passes_on(layer: Layer, part: Fusion, conv_part: Fusion) -> bool:
    """Whether ``layer``'s inference passes its input on untouched because the convolution before it
    (its part: ``conv_part``) did its work (a folded BatchNorm2D, a fused ReLU, a fused max pool)."""
    if isinstance(layer, BatchNorm2D):
        return part.infer_absorbed and conv_part.infer_bn is layer
    if isinstance(layer, (ReLU, MaxPool2D)):
        return part.absorbed or part.infer_absorbed
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
    output on channel-first (not to a Winograd layer past the cut, ``Fusion.infer_layout``)."""
    last = None
    for i, layer in enumerate(layers[:cut]):
        reach = 0
        if isinstance(layer, Conv2D):
            last = layer
            if layer.fusion.infer_bn is not None:
                reach = 3 if layer.fusion.infer_pool else 1
        if i + reach >= cut:
            return False
    return last is None or not last.fusion.infer_layout & 2
