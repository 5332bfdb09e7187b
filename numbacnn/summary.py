"""A network's summary: one row per layer (output shape, parameters, multiply-adds), the totals,
and the memory of a training step, measured by running one on a copy of the network.

``net.summary()`` prints it; ``python -m numbacnn summary --arch SPEC --input C,H,W`` builds a
network and prints its summary.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .layers import Layer

Shape = tuple[int, ...]


@dataclass
class Row:
    name: str  # state_dict prefix ("3", "3.body.0")
    layer: str  # repr of the layer
    output_shape: Shape  # per example
    params: int
    macs: int  # per example (0 for a block's own row: its layers have theirs)
    depth: int  # nesting inside residual blocks


@dataclass
class Summary:
    rows: list[Row]
    input_shape: Shape
    params: int
    buffers: int  # saved, not trained (BatchNorm's running statistics, Normalize's statistics)
    macs: int  # forward multiply-adds per example
    batch_size: int
    optimizer: str
    memory: dict[str, int] | None  # bytes of a training step: parameters, gradients, ...

    def __str__(self) -> str:
        head = ("layer", "output shape", "params", "mult-adds")
        cells = [(f"{'  ' * r.depth}{r.name}  {r.layer}", "x".join(map(str, r.output_shape)),
                  f"{r.params:,}", f"{r.macs:,}" if r.macs else "-") for r in self.rows]
        widths = [max(len(c[i]) for c in [head, *cells]) for i in range(4)]

        def line(c: tuple[str, ...]) -> str:
            return "  ".join([c[0].ljust(widths[0])] + [v.rjust(w) for v, w in zip(c[1:], widths[1:])])
        rule = "-" * len(line(head))
        out = [f"input {'x'.join(map(str, self.input_shape))}", line(head), rule, *map(line, cells), rule,
               f"parameters: {self.params:,} ({_mb(4 * self.params)})"
               + (f"; saved statistics: {self.buffers:,} values" if self.buffers else ""),
               f"forward: {self.macs:,} multiply-adds per image ({2 * self.macs / 1e6:.1f} MFLOP)"]
        if self.memory:
            parts = ", ".join(f"{k} {_mb(v)}" for k, v in self.memory.items() if k != "total")
            out.append(f"training step at batch {self.batch_size} ({self.optimizer}): "
                       f"{_mb(self.memory['total'])} ({parts})")
        return "\n".join(out)


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 / 10 else f"{n / 2**10:.1f} KB"


def _rows(layers: list[Layer], shape: Shape, prefix: str, depth: int, rows: list[Row]) -> Shape:
    for i, layer in enumerate(layers):
        name = f"{prefix}{i}"
        out = layer.output_shape(shape)
        own = sum(math.prod(s) for s in layer.param_shapes().values())
        if layer.paths():  # a block: its parameters are counted in its layers' rows
            rows.append(Row(name, f"{type(layer).__name__} ({own:,} parameters in the rows below)", out, 0, 0,
                            depth))
            for path_name, path in layer.paths():
                _rows(path, shape, f"{name}.{path_name}.", depth + 1, rows)
        else:
            rows.append(Row(name, repr(layer), out, own, layer.macs(shape), depth))
        shape = out
    return shape


def summarize(net: Any, input_shape: Shape | None = None, batch_size: int = 64,
              optimizer: str = "adam", memory: bool = True) -> Summary:
    """The summary of ``net`` on per-example inputs of ``input_shape`` (default: the shape it
    knows). ``memory`` (CPU networks): run one training step at ``batch_size`` on a copy of the
    network and add up what it holds: parameters, gradients, the optimizer's state, and every
    layer's activations, caches and workspaces."""
    shape = tuple(int(s) for s in (input_shape or net.input_shape or ()))
    if len(shape) not in (2, 3):
        raise ValueError("the network does not know its input shape: run it on a batch first, or "
                         "pass input_shape=(C, H, W) (series: (C, L))")
    rows: list[Row] = []
    _rows(net.layers, shape, "", 0, rows)
    buffers = sum(int(np.size(v)) for v in net._buffer_views().values())
    macs = sum(r.macs for r in rows)
    used = _step_memory(net, shape, batch_size, optimizer) if memory and net.device == "cpu" else None
    return Summary(rows, shape, net.n_params, buffers, macs, batch_size, optimizer, used)


def _step_memory(net: Any, shape: Shape, batch_size: int, optimizer: str) -> dict[str, int]:
    from .loss import softmax_cross_entropy
    from .optimizers import make_optimizer

    twin = copy.deepcopy(net)  # the step changes running statistics and dropout generators
    opt = make_optimizer(optimizer, twin, lr=1e-3)
    x = np.zeros((batch_size, *shape), np.float32)
    logits = twin.forward(x, training=True)
    _, d = softmax_cross_entropy(logits, np.zeros(batch_size, np.int64))
    twin.backward(d, need_input_grad=False)
    parts = {"parameters": int(twin.params.nbytes), "gradients": int(twin.grads.nbytes),
             "optimizer state": sum(int(v.nbytes) for v in opt.state.values()),
             "activations and workspaces": sum(_nbytes(layer._buffers) for layer in twin.all_layers())}
    return {**parts, "total": sum(parts.values())}


def _nbytes(ws: Any) -> int:
    """Bytes of a workspace's arrays, those of the workspaces nested in it (a plan's inner plan's)
    included."""
    return sum(int(v.nbytes) if hasattr(v, "nbytes") else _nbytes(v) for v in ws.values())
