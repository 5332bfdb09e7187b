"""ONNX export of a ``Sequential`` or a fitted ``CNNClassifier``, built with the ``onnx`` package's helper
API (the [onnx] extra; never needed at import).

Every layer maps to its standard operator: Conv (strides, pads), MaxPool, AveragePool (counting the
zero padding, as the layer does), Gemm, Relu, Tanh, Flatten, BatchNormalization (running
statistics), GlobalAveragePool + Flatten, Sub + Div (Normalize), and a residual block's paths joined
by Add; Dropout
disappears (inference). Weights
keep their ``state_dict`` names. A network's graph takes "input" (N, C, H, W) float32 and returns
"logits" (N, K). An estimator's graph takes the rows the estimator takes, flattened to (N, C*H*W)
float32 features, applies its scaling and reshape, and returns "probabilities" (N, K) equal to
``predict_proba``; column k is the class ``classes_[k]``, listed in the model's metadata ("classes",
JSON), as a network's class names are when it has them.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from ._text import install_hint
from .layers import (
    AvgPool2D,
    BatchNorm2D,
    Conv2D,
    Dense,
    Dropout,
    Flatten,
    GlobalAvgPool2D,
    MaxPool2D,
    Normalize,
    ReLU,
    Residual,
    Tanh,
)
from .network import Sequential

EXTRA = install_hint("onnx")
OPSET = 17


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError(f"ONNX export needs the onnx package: {EXTRA}") from None
    return onnx


class _Helpers:
    def __init__(self, onnx: Any) -> None:
        self.make_node = onnx.helper.make_node
        self.from_array = onnx.numpy_helper.from_array


def _pads(p: tuple[int, int]) -> list[int]:
    return [p[0], p[1], p[0], p[1]]  # ONNX: begins of every axis, then ends


def _network_nodes(net: Sequential, x: str, onnx: Any) -> tuple[list, list, str]:
    """ONNX nodes and initializers computing net on tensor ``x``; returns (nodes, inits, output)."""
    nodes: list = []
    inits: list = []
    out = _chain(net.layers, "", x, net.state_dict(), _Helpers(onnx), nodes, inits)
    return nodes, inits, out


def _chain(layers: list, prefix: str, x: str, weights: dict[str, np.ndarray], h: _Helpers, nodes: list,
           inits: list) -> str:
    """Append the nodes of ``layers`` (state_dict names ``prefix + "i."``) applied to ``x``;
    returns the output's name."""
    for i, layer in enumerate(layers):
        key = f"{prefix}{i}"
        tag = key.replace(".", "_")
        out = f"h{tag}"

        def init(*names: str, key: str = key) -> list[str]:
            inits.extend(h.from_array(weights[f"{key}.{n}"], f"{key}.{n}") for n in names)
            return [f"{key}.{n}" for n in names]
        if isinstance(layer, Conv2D):
            nodes.append(h.make_node("Conv", [x, *init("weight", "bias")], [out], name=f"conv{tag}",
                                     kernel_shape=list(layer.kernel_size), strides=list(layer.stride),
                                     pads=_pads(layer.padding)))
        elif isinstance(layer, Dense):
            nodes.append(h.make_node("Gemm", [x, *init("weight", "bias")], [out], name=f"dense{tag}",
                                     transB=1))
        elif isinstance(layer, BatchNorm2D):  # BatchNorm1D too: ONNX takes (N, C) and (N, C, L)
            nodes.append(h.make_node("BatchNormalization",
                                     [x, *init("weight", "bias", "running_mean", "running_var")], [out],
                                     name=f"batchnorm{tag}", epsilon=layer.eps))
        elif isinstance(layer, (MaxPool2D, AvgPool2D)):
            kw: dict[str, Any] = dict(kernel_shape=list(layer.kernel_size), strides=list(layer.stride),
                                      pads=_pads(layer.padding))
            if isinstance(layer, AvgPool2D):
                kw["count_include_pad"] = 1
            op = "MaxPool" if isinstance(layer, MaxPool2D) else "AveragePool"
            nodes.append(h.make_node(op, [x], [out], name=f"pool{tag}", **kw))
        elif isinstance(layer, GlobalAvgPool2D):
            nodes.append(h.make_node("GlobalAveragePool", [x], [f"{out}_4d"], name=f"gap{tag}"))
            nodes.append(h.make_node("Flatten", [f"{out}_4d"], [out], name=f"gap{tag}_flatten", axis=1))
        elif isinstance(layer, Residual):
            body = _chain(layer.body, f"{key}.body.", x, weights, h, nodes, inits)
            short = x if layer.shortcut is None else _chain(layer.shortcut, f"{key}.shortcut.", x,
                                                             weights, h, nodes, inits)
            nodes.append(h.make_node("Add", [body, short], [out], name=f"residual{tag}"))
        elif isinstance(layer, Normalize):  # (x - mean) / std, the statistics shaped (C, 1, 1)
            c = layer.num_channels
            inits.extend(h.from_array(weights[f"{key}.{n}"].reshape(c, 1, 1), f"{key}.{n}")
                         for n in ("mean", "std"))
            nodes.append(h.make_node("Sub", [x, f"{key}.mean"], [f"{out}_centred"], name=f"centre{tag}"))
            nodes.append(h.make_node("Div", [f"{out}_centred", f"{key}.std"], [out], name=f"scale{tag}"))
        elif isinstance(layer, (ReLU, Tanh)):
            op = "Relu" if isinstance(layer, ReLU) else "Tanh"
            nodes.append(h.make_node(op, [x], [out], name=f"act{tag}"))
        elif isinstance(layer, Flatten):
            nodes.append(h.make_node("Flatten", [x], [out], name=f"flatten{tag}", axis=1))
        elif isinstance(layer, Dropout):
            continue  # identity at inference
        else:
            raise ValueError(f"no ONNX operator for {layer!r}")
        x = out
    return x


def to_onnx(model: Any, input_shape: tuple[int, int, int] | None = None) -> Any:
    """The ``onnx.ModelProto`` of a Sequential or a fitted CNNClassifier (checked by onnx.checker).

    A network's per-example input shape (C, H, W) is ``input_shape`` when given, else the one it
    remembers (from its first batch, or its checkpoint)."""
    onnx = _onnx()
    h, T = onnx.helper, onnx.TensorProto
    if isinstance(model, Sequential):
        shape = model.input_shape if input_shape is None else tuple(int(s) for s in input_shape)
        if shape is None:
            raise ValueError("the network does not know its input shape: run it on a batch first "
                             "(net.forward(x)), or pass input_shape=(C, H, W)")
        if len(shape) != 3:
            raise ValueError(f"input_shape must be (C, H, W), got {tuple(shape)}")
        c, hh, ww = shape
        k = model.output_shape(shape)[0]  # a ValueError naming the layer if the shape does not fit
        nodes, inits, out = _network_nodes(model, "input", onnx)
        nodes.append(h.make_node("Identity", [out], ["logits"], name="output"))
        graph = h.make_graph(nodes, "numbacnn",
                             [h.make_tensor_value_info("input", T.FLOAT, ["N", c, hh, ww])],
                             [h.make_tensor_value_info("logits", T.FLOAT, ["N", k])], inits)
        meta: dict[str, str] = {"architecture": str(model.architecture)}
        if model.classes:
            meta["classes"] = json.dumps(list(model.classes))
    elif hasattr(model, "net_"):
        net = model.net_
        shape = tuple(model.input_shape_)
        c, hh, ww = shape
        last = getattr(model, "channels_last_", False)
        nums = onnx.numpy_helper
        # the estimator's scaling: one (mean, 1/scale) pair, or one per channel, shaped (C, 1, 1)
        mean = np.asarray(model.x_mean_, np.float64).astype(np.float32).reshape(-1, 1, 1)
        inv = (1.0 / np.asarray(model.x_scale_, np.float64)).astype(np.float32).reshape(-1, 1, 1)
        inits = [nums.from_array(mean, "x_mean"), nums.from_array(inv, "x_inv_scale"),
                 nums.from_array(np.array((-1, hh, ww, c) if last else (-1,) + shape, np.int64),
                                 "image_shape")]
        nodes = [h.make_node("Reshape", ["X", "image_shape"], ["rows_as_images"], name="to_images")]
        if last:  # (N, H, W, C) rows -> (N, C, H, W)
            nodes.append(h.make_node("Transpose", ["rows_as_images"], ["nchw"], name="to_nchw",
                                     perm=[0, 3, 1, 2]))
        nodes += [h.make_node("Sub", ["nchw" if last else "rows_as_images", "x_mean"], ["centred"],
                              name="centre"),
                  h.make_node("Mul", ["centred", "x_inv_scale"], ["images"], name="scale")]
        more, more_inits, out = _network_nodes(net, "images", onnx)
        nodes += more + [h.make_node("Softmax", [out], ["probabilities"], name="softmax", axis=1)]
        graph = h.make_graph(nodes, "numbacnn_classifier",
                             [h.make_tensor_value_info("X", T.FLOAT, ["N", int(np.prod(shape))])],
                             [h.make_tensor_value_info("probabilities", T.FLOAT, ["N", len(model.classes_)])],
                             inits + more_inits)
        meta = {"architecture": str(net.architecture),
                "classes": json.dumps([c.item() if hasattr(c, "item") else str(c) for c in model.classes_])}
    else:
        raise ValueError("expected a numbacnn Sequential or a fitted CNNClassifier, got "
                         f"{type(model).__name__}")
    opsets = [h.make_opsetid("", OPSET)]
    # the oldest IR version that opset needs (8), not the onnx package's newest: an onnxruntime
    # older than the onnx package rejects a newer IR version (onnx 1.23 writes 14, onnxruntime 1.30
    # reads up to 13)
    proto = h.make_model(graph, opset_imports=opsets, producer_name="numbacnn",
                         ir_version=h.find_min_ir_version_for(opsets))
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(proto)
    return proto


def export_onnx(model: Any, path: str, input_shape: tuple[int, int, int] | None = None) -> None:
    """Write ``to_onnx(model, input_shape)`` to ``path``."""
    onnx = _onnx()
    onnx.save_model(to_onnx(model, input_shape), path)
