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
from .network import Sequential

EXTRA = install_hint("onnx")
OPSET = 17


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError(f"ONNX export needs the onnx package: {EXTRA}") from None
    return onnx


class Graph:
    """The nodes and initializers of a graph being built; layers add theirs (``Layer.onnx``) with
    ``node``, ``param`` and ``chain``. Tensors are named after the layer's place ("h3",
    "h2_body_0"), weights keep their ``state_dict`` names ("3.weight")."""

    def __init__(self, onnx: Any, weights: dict[str, np.ndarray], spatial: int = 2) -> None:
        self.spatial = spatial  # the input's axes after (N, C): 2 for images, 1 for series
        self._make_node = onnx.helper.make_node
        self._from_array = onnx.numpy_helper.from_array
        self.weights = weights
        self.nodes: list = []
        self.inits: list = []
        self.key = ""  # the state_dict prefix of the layer being added ("3", "2.body.0")

    def node(self, op: str, inputs: list[str], hint: str, out_suffix: str = "", name_suffix: str = "",
             **attrs: Any) -> str:
        """Add operator ``op`` on ``inputs``, named ``hint`` + the layer's place; returns its output."""
        tag = self.key.replace(".", "_")
        out = f"h{tag}{out_suffix}"
        self.nodes.append(self._make_node(op, inputs, [out], name=f"{hint}{tag}{name_suffix}", **attrs))
        return out

    def param(self, *names: str, shape: tuple[int, ...] | None = None) -> list[str]:
        """The layer's weights by name as initializers (reshaped to ``shape``); returns their names."""
        full = [f"{self.key}.{n}" for n in names]
        for k in full:
            w = self.weights[k]
            self.inits.append(self._from_array(w if shape is None else w.reshape(shape), k))
        return full

    def const(self, value: float) -> str:
        """A float32 scalar initializer holding ``value``; returns its name."""
        name = f"const{len(self.inits)}"
        self.inits.append(self._from_array(np.array(value, np.float32), name))
        return name

    def chain(self, layers: list, prefix: str, x: str) -> str:
        """Add ``layers`` applied in order to ``x`` (state_dict names ``key + "." + prefix + "i"``,
        or ``prefix + "i"`` at the top); returns the last output's name."""
        outer = self.key
        for i, layer in enumerate(layers):
            self.key = f"{outer}.{prefix}{i}" if outer else f"{prefix}{i}"
            x = layer.onnx(self, x)
        self.key = outer
        return x


def _network_nodes(net: Sequential, x: str, onnx: Any, spatial: int) -> tuple[list, list, str]:
    """ONNX nodes and initializers computing net on tensor ``x`` (``spatial`` axes after (N, C));
    returns (nodes, inits, output)."""
    graph = Graph(onnx, net.state_dict(), spatial)
    out = graph.chain(net.layers, "", x)
    return graph.nodes, graph.inits, out


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
        if len(shape) not in (2, 3):
            raise ValueError(f"input_shape must be (C, H, W) or, for series, (C, L), got {tuple(shape)}")
        k = model.output_shape(shape)[0]  # a ValueError naming the layer if the shape does not fit
        nodes, inits, out = _network_nodes(model, "input", onnx, len(shape) - 1)
        nodes.append(h.make_node("Identity", [out], ["logits"], name="output"))
        graph = h.make_graph(nodes, "numbacnn",
                             [h.make_tensor_value_info("input", T.FLOAT, ["N", *shape])],
                             [h.make_tensor_value_info("logits", T.FLOAT, ["N", k])], inits)
        meta: dict[str, str] = {"architecture": str(model.architecture)}
        if model.classes:
            meta["classes"] = json.dumps(list(model.classes))
    elif hasattr(model, "net_"):
        net = model.net_
        shape = tuple(model.input_shape_)
        last = getattr(model, "channels_last_", False)
        nums = onnx.numpy_helper
        # the estimator's scaling: one (mean, 1/scale) pair, or one per channel, shaped (C, 1, 1)
        # for images, (C, 1) for series
        axes = (-1,) + (1,) * (len(shape) - 1)
        mean = np.asarray(model.x_mean_, np.float64).astype(np.float32).reshape(axes)
        inv = (1.0 / np.asarray(model.x_scale_, np.float64)).astype(np.float32).reshape(axes)
        inits = [nums.from_array(mean, "x_mean"), nums.from_array(inv, "x_inv_scale"),
                 nums.from_array(np.array((-1, shape[1], shape[2], shape[0]) if last else (-1,) + shape,
                                          np.int64), "image_shape")]
        nodes = [h.make_node("Reshape", ["X", "image_shape"], ["rows_as_images"], name="to_images")]
        if last:  # (N, H, W, C) rows -> (N, C, H, W)
            nodes.append(h.make_node("Transpose", ["rows_as_images"], ["nchw"], name="to_nchw",
                                     perm=[0, 3, 1, 2]))
        nodes += [h.make_node("Sub", ["nchw" if last else "rows_as_images", "x_mean"], ["centred"],
                              name="centre"),
                  h.make_node("Mul", ["centred", "x_inv_scale"], ["images"], name="scale")]
        more, more_inits, out = _network_nodes(net, "images", onnx, len(shape) - 1)
        meta = {"architecture": str(net.architecture)}
        if getattr(model, "regression", False):  # the standardised targets mapped back
            inits += [nums.from_array(np.asarray(model.y_scale_, np.float32).reshape(1, -1), "y_scale"),
                      nums.from_array(np.asarray(model.y_mean_, np.float32).reshape(1, -1), "y_mean")]
            nodes += more + [h.make_node("Mul", [out, "y_scale"], ["scaled"], name="unscale"),
                             h.make_node("Add", ["scaled", "y_mean"], ["predictions"], name="uncentre")]
            result = h.make_tensor_value_info("predictions", T.FLOAT, ["N", model.n_outputs_])
        else:
            nodes += more + [h.make_node("Softmax", [out], ["probabilities"], name="softmax", axis=1)]
            result = h.make_tensor_value_info("probabilities", T.FLOAT, ["N", len(model.classes_)])
            meta["classes"] = json.dumps([c.item() if hasattr(c, "item") else str(c) for c in model.classes_])
        graph = h.make_graph(nodes, "numbacnn_estimator",
                             [h.make_tensor_value_info("X", T.FLOAT, ["N", int(np.prod(shape))])],
                             [result], inits + more_inits)
    else:
        raise ValueError("expected a numbacnn Sequential or a fitted CNNClassifier or CNNRegressor, got "
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
