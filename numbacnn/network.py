"""The model: a Sequential stack of layers whose parameters and gradients live in two flat buffers."""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from . import tuning as T
from .backend import Backend, get_backend
from .kernels import cpu as K
from .layers import Layer, Shape, folds_inside, fuse_chain
from .precision import check_precision_device
from .runtime.program import DeviceInference, InferenceProgram

_FLOAT32 = np.dtype(np.float32)
INFERENCE_PROGRAMS = 4  # recorded inference shapes kept per network (least recently used dropped)


# the most parameters a network may have (float32 indices of the flat buffers stay in int32 range)
MAX_PARAMETERS = 2**31 - 1


class Sequential:
    """Layers applied in order; parameter names follow ``torch.nn.Sequential`` ("0.weight", ...).

    Parameters
    ----------
    layers : list of Layer
    seed : int, numpy Generator or None
        Seeds the parameter initialisation (PyTorch's Kaiming-uniform) and the dropout masks.
    """

    def __init__(self, layers: Iterable[Layer], seed: int | np.random.Generator | None = None,
                 device: str = "cpu") -> None:
        self.layers: list[Layer] = list(layers)
        if not self.layers:
            raise ValueError("Sequential needs at least one layer")
        for i, layer in enumerate(self.layers):
            if not isinstance(layer, Layer):
                raise ValueError(f"Sequential: item {i} is {type(layer).__name__}, not a numbacnn layer")
            layer.set_name(f"layer {i} ({layer!r})")
        # One flat buffer for parameters and one for gradients; every layer gets named views.
        self._slots: list[tuple[str, int, str, slice, Shape]] = []
        offset = 0
        for i, layer in enumerate(self.layers):
            for pname, shape in layer.param_shapes().items():
                size = math.prod(int(s) for s in shape)  # Python ints: no overflow on absurd sizes
                self._slots.append((f"{i}.{pname}", i, pname, slice(offset, offset + size), shape))
                offset += size
        if offset > MAX_PARAMETERS:  # refused before anything is allocated
            raise ValueError(f"the network has {offset:,} parameters ({8 * offset / 2**30:,.1f} GiB with "
                             f"their gradients): more than the {MAX_PARAMETERS:,} numbacnn trains")
        # numpy arrays, or numba device arrays after .to("cuda")
        self.params: Any = np.zeros(offset, np.float32)
        self.grads: Any = np.zeros(offset, np.float32)
        self._bind_views()
        self.reset_parameters(seed)
        self._fuse()
        self._can_backward = False
        self.architecture: str | None = None  # the spec it was built from, if any (arch.py)
        self.input_shape: Shape | None = None  # per-example (C, H, W), if known
        self.classes: list[str] | None = None  # class names by output index, if known
        # a regression network's outputs are its targets standardised by (mean, std): train.py's
        # (saved in checkpoints, undone by predict); None for classification
        self.target_scale: tuple[float, float] | None = None
        self.backend: Backend = get_backend("cpu")
        if device != "cpu":
            self.to(device)

    @property
    def device(self) -> str:
        return self.backend.name

    @property
    def precision(self) -> str:
        """The multiplications' precision, "float32" or "bf16" (numbacnn/precision.py)."""
        return self.__dict__.get("_precision", "float32")

    def set_precision(self, precision: str) -> Sequential:
        """Multiply in ``precision`` from now on ("float32" or "bf16"; parameters, gradients and
        checkpoints stay float32). The CPU only: the CUDA kernels have no bf16 products."""
        check_precision_device(precision, self.device)
        if precision != self.precision:
            self._precision = precision
            for layer in self.layers:
                layer.precision = precision
            self._fuse()
        return self

    def bf16_layers(self) -> list[str]:
        """The names of the layers whose multiplications can run in bf16 at this precision (a 3x3
        Winograd convolution: in the batches for which its plan runs F(4x4))."""
        names = []
        for i, layer in enumerate(self.layers):
            subs = [layer, *layer.sublayers()]
            if any(sub.runs_bf16 for sub in subs):
                names.append(layer.name or f"layer {i}")
        return names

    def to(self, device: str) -> Sequential:
        """Move parameters, gradients and all layer work to "cpu" or "cuda" (in place)."""
        from .device import check_device

        check_device(device)
        if device == self.device:
            return self
        new = get_backend(device)
        self.params = new.asarray(self.backend.to_host(self.params))
        self.grads = new.asarray(self.backend.to_host(self.grads))
        self.backend = new
        for layer in self.layers:
            layer.device = device
        self._fuse()
        self._bind_views()
        self._can_backward = False
        return self

    def _fuse(self, enabled: bool = True) -> None:
        """Set up the layers' fusions (``layers.fuse_chain``: conv/BatchNorm + ReLU (+ max pool))."""
        fuse_chain(self.layers, enabled)
        # recorded with the old kernels: dropped
        self._programs: dict[tuple[Shape, int | None], InferenceProgram | DeviceInference] = {}
        self._slices: dict[Shape, int] = {}  # eval_slice by input shape (the fusions decide it)
        # (input shape, program) of the last one-slice CPU prediction of the whole network, which
        # ``forward`` runs without its checks and lookups while nothing else has been run since
        self._last_prediction: tuple[Shape, InferenceProgram | DeviceInference] | None = None

    def _bind_views(self) -> None:
        self._grads_zero_upto = 0  # how much of (this) grads is known to be zeros
        for i, layer in enumerate(self.layers):
            views = [(p, sl, shp) for key, j, p, sl, shp in self._slots if j == i]
            layer.bind({p: self.params[sl].reshape(shp) for p, sl, shp in views},
                       {p: self.grads[sl].reshape(shp) for p, sl, shp in views}, net_views=True)

    def __getstate__(self) -> dict:
        if self.device != "cpu":
            raise TypeError("move the network to the CPU (net.to('cpu')) before pickling it")
        state = self.__dict__.copy()
        state["_programs"] = {}  # recorded calls hold this process's buffers
        state["_slices"] = {}  # the receiving machine's cores decide them
        state["_last_prediction"] = None
        state["grads"] = None  # gradients are scratch: zeros again after unpickling
        state.pop("_start_key", None)  # (keyed by this process's count of freezes)
        return state

    def __setstate__(self, state: dict) -> None:
        # the layers travel without their parameter views: point them back at the flat buffers
        self.__dict__.update(state)
        self.__dict__.setdefault("classes", None)  # pickled before networks knew class names
        self.grads = np.zeros_like(self.params)
        self._bind_views()

    def reset_parameters(self, seed: int | np.random.Generator | None = None) -> None:
        rng = np.random.default_rng(seed)
        for layer in self.layers:
            layer.reset_parameters(rng)
        self.grads[:] = 0.0

    @property
    def n_params(self) -> int:
        return int(self.params.size)

    # --- computation --------------------------------------------------------------------------
    def output_shape(self, in_shape: Shape) -> Shape:
        """Per-example output shape for a per-example input shape, e.g. (1, 28, 28) -> (10,)."""
        shape = tuple(int(s) for s in in_shape)
        for layer in self.layers:
            shape = layer.output_shape(shape)
        return shape

    def _check_x(self, x: np.ndarray) -> np.ndarray:
        if not isinstance(x, np.ndarray):
            raise ValueError(f"input must be a numpy array, got {type(x).__name__}")
        if x.dtype.kind != "f":  # (np.issubdtype costs half a microsecond, a batch-1 call ~20)
            raise ValueError(f"input must be a floating-point array (float32), got dtype {x.dtype}")
        if x.ndim < 2 or x.shape[0] == 0:
            raise ValueError(f"input must be a non-empty batch (N, ...), got shape {x.shape}")
        if self.__dict__.get("_shape_checked") != (x.shape[1:], len(self.layers)):
            self.output_shape(x.shape[1:])  # raises a ValueError naming the layer before any kernel
            self._shape_checked = (x.shape[1:], len(self.layers))  # runs; checked once per shape
            if self.input_shape is None:  # remembered for export and summary
                self.input_shape = tuple(int(s) for s in x.shape[1:])
        if x.dtype is _FLOAT32 and x.flags.c_contiguous:  # (ascontiguousarray costs 0.2 us)
            return x
        return np.ascontiguousarray(x, dtype=np.float32)

    def forward(self, x: np.ndarray, training: bool = False, upto: int | None = None, keep: bool = False,
                visit: Callable[[int, Layer, Any, Any], None] | None = None) -> np.ndarray:
        """Run the layers on x (N, C, H, W) float32; returns a new (N, ...) host array.

        ``training=True`` applies dropout and keeps the caches that ``backward`` needs;
        ``training=False`` runs in slices (``eval_slice``) to bound memory and stay in the caches,
        unless ``keep``: then in one batch, keeping every layer's caches for a following ``backward``
        (inference-mode gradients, such as saliency). ``upto``: run ``self.layers[:upto]`` only
        (``upto=-1``: the features that the last layer reads). ``visit(i, layer, input, output)``
        is called after each layer (arrays of the network's device; implies ``keep``).
        """
        last = self.__dict__.get("_last_prediction")
        if (last is not None and x.__class__ is np.ndarray and x.shape == last[0] and not training
                and upto is None and not keep and visit is None and x.dtype is _FLOAT32):
            # the CPU prediction of one slice of the shape predicted last (a batch-1 prediction
            # of mnistcnn is ~20 us: the checks and lookups below cost 2-3 us of it)
            self._can_backward = False
            return last[1].run(x).copy()
        x = self._check_x(x)
        to_host = self.backend.to_host
        if training or keep or visit is not None:
            h = self.through(self.backend.asarray(x), training, upto, visit)  # copied to the device once
            self._can_backward = upto is None
            return to_host(h).copy()
        self._can_backward = False
        cpu = self.device == "cpu"
        replay = not cpu or self._folds_inside(upto)
        n, size = x.shape[0], self.eval_slice(x.shape[1:]) if cpu and replay else T.EVAL_BATCH
        out = None
        if cpu and replay and n <= size:  # one slice (a batch-1 prediction: every microsecond shows)
            program = self._inference(x.shape, upto)
            if upto is None:
                self._last_prediction = (x.shape, program)
            return program.run(x).copy()
        for lo in range(0, n, size):
            xs = x[lo:lo + size]
            if replay:  # (on a device, a new host array)
                h = self._inference(xs.shape, upto).run(xs)
            else:
                h = to_host(self.through(self.backend.asarray(xs), False, upto))
            if out is None:
                if len(xs) == n:
                    return h.copy()
                out = np.empty((n, *h.shape[1:]), h.dtype)
            out[lo:lo + len(xs)] = h
        assert out is not None
        return out

    def eval_slice(self, in_shape: Shape) -> int:
        """Examples per slice of an inference forward on the CPU for inputs of ``in_shape``: the
        largest power of two (16 to T.EVAL_BATCH) whose widest layer (input and output activations)
        fits T.SLICE_BYTES_PER_CORE per core of the machine (``os.cpu_count``: not the thread count,
        so that the slices, and with them the results, are the same at any thread count)."""
        slices = self.__dict__.setdefault("_slices", {})
        size = slices.get(tuple(in_shape))
        if size is None:
            size = slices[tuple(in_shape)] = self._eval_slice(tuple(in_shape))
        return size

    def _eval_slice(self, in_shape: Shape) -> int:
        widest, shape, start = 0, tuple(in_shape), tuple(in_shape)
        for layer in self.layers:
            if not layer.writes_nothing():  # a new activation begins; the one before ends here
                widest, start = max(widest, math.prod(start) + math.prod(shape)), shape
            shape = layer.output_shape(shape)
        widest = 4 * max(widest, math.prod(start) + math.prod(shape))
        fits = T.SLICE_BYTES_PER_CORE * (os.cpu_count() or 1) // widest
        size = 16
        while size * 2 <= min(fits, T.EVAL_BATCH):
            size *= 2
        return size

    def _folds_inside(self, upto: int | None) -> bool:
        """Whether ``layers[:upto]`` holds every layer that its inference folds reach (a Conv2D's
        BatchNorm2D, and the max pool it pools for), and the last Conv2D before the cut hands its
        output on channel-first (not to a Winograd layer past the cut, ``Fusion.infer_layout``), so that
        the folded forward stops where asked."""
        if upto is None:
            return True
        return folds_inside(self.layers, upto if upto >= 0 else len(self.layers) + upto)

    def _inference(self, shape: Shape, upto: int | None = None) -> InferenceProgram | DeviceInference:
        """The recorded inference forward for input ``shape`` through ``layers[:upto]`` (recorded on
        first use; dropped when the fusions, the device or the parameter buffers change). At most
        ``INFERENCE_PROGRAMS`` are kept, the least recently used dropped first: each holds its
        activations, so callers with many batch sizes would otherwise keep them all."""
        programs = self.__dict__.setdefault("_programs", {})
        self._last_prediction = None
        key = (shape, upto)
        prog = programs.pop(key, None)  # re-inserted below: the dict's order is the use order
        if prog is None or prog.params is not self.params:
            prog = (InferenceProgram if self.device == "cpu" else DeviceInference)(self, shape, upto)
        programs[key] = prog
        while len(programs) > INFERENCE_PROGRAMS:
            del programs[next(iter(programs))]
        return prog

    def through(self, h: Any, training: bool, upto: int | None = None,
                visit: Callable[[int, Layer, Any, Any], None] | None = None,
                inference: bool = False) -> Any:
        """The one loop over the layers' forwards, on arrays of the network's device (no checks,
        no copies: the result is the last layer's buffer). ``forward`` and the training step use it;
        ``inference``: the layers' ``infer`` (BatchNorm folded into convolutions; no backward)."""
        for i, layer in enumerate(self.layers[:upto]):
            out = layer.infer(h) if inference else layer.forward(h, training=training)
            if visit is not None:
                visit(i, layer, h, out)
            h = out
        return h

    def backward_start(self, need_input_grad: bool) -> int:
        """The lowest layer that a backward runs: 0 when the input's gradient is wanted, else the
        first layer with a parameter that trains. Nothing below it trains and nothing needs a
        gradient there, so a frozen trunk (``Layer.freeze``) costs no backward work, and that
        layer skips its input gradient; len(layers) when no parameter trains."""
        if need_input_grad:
            return 0
        if self.__dict__.get("_start_key", (None,))[0] != Layer.freeze_changes:
            start = next((i for i, layer in enumerate(self.layers) if layer.trainable), len(self.layers))
            self._start_key = (Layer.freeze_changes, start)
        return self._start_key[1]

    def through_backward(self, g: Any, need_input_grad: bool) -> Any:
        """The one loop over the layers' backwards, from dL/d(output) on the network's device, down
        to ``backward_start``; the gradients of the parameters below it are zeros."""
        start = self.backward_start(need_input_grad)
        for i in range(len(self.layers) - 1, start - 1, -1):
            g = self.layers[i].backward(g, need_dx=need_input_grad or i > start)
        # the layers below start keep zeros for gradients: written once, when a backward that
        # reached them may have left others (not inside a recorded step or a captured graph)
        end = next((sl.start for _, j, _, sl, _ in self._slots if j >= start), self.grads.size)
        if end > self._grads_zero_upto:
            self.backend.write(self.grads[:end], np.zeros(end, np.float32))
        self._grads_zero_upto = end
        return g if start == 0 else None

    @contextmanager
    def unfused(self) -> Iterator[Sequential]:
        """Within the block every layer runs its own kernels (no conv + ReLU + pool fusion), so that
        each layer's output and a max pool's ``argmax`` are there to read (the report's analysis);
        the same values as the fused layers compute."""
        self._fuse(enabled=False)
        try:
            yield self
        finally:
            self._fuse()
            self._can_backward = False

    __call__ = forward

    def backward(self, dout: np.ndarray, need_input_grad: bool = True) -> np.ndarray | None:
        """Backpropagate dL/d(output); stores every parameter gradient (overwriting) and returns dL/dx.

        With ``need_input_grad=False`` the first layer skips its input gradient and None is returned.
        """
        if not self._can_backward:
            raise RuntimeError("backward needs a preceding forward(x, training=True)")
        g = self.through_backward(dout, need_input_grad)
        return None if g is None else self.backend.to_host(g).copy()

    def set_batch_slice(self, lo: int, hi: int, total: int, in_shape: Shape) -> None:
        """Data parallelism: the next training forward holds examples lo:hi of a batch of ``total``
        with per-example shape ``in_shape`` (dropout then draws the values of those rows of the
        whole batch's masks; see Dropout). With no examples here (lo == hi) the generators skip
        the draw, so that every rank's dropout generators stay in step."""
        _slice_dropouts(self.layers, tuple(in_shape), lo, hi, total)

    def all_layers(self) -> list[Layer]:
        """Every layer, those inside residual blocks included (depth first, in parameter order)."""
        out: list[Layer] = []

        def walk(layers: list[Layer]) -> None:
            for layer in layers:
                out.append(layer)
                walk(layer.sublayers())
        walk(self.layers)
        return out

    def summary(self, input_shape: Shape | None = None, batch_size: int = 64,
                optimizer: str = "adam") -> None:
        """Print one row per layer (output shape, parameters, multiply-adds), the totals and the
        memory of a training step at ``batch_size`` (``numbacnn.summary.summarize`` returns it)."""
        from .summary import summarize

        print(summarize(self, input_shape, batch_size, optimizer))

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Softmax of the logits, (N, n_classes)."""
        logits = self.forward(x, training=False)
        out = np.empty_like(logits)
        K.softmax(out, logits)  # on the host: forward returns host arrays whatever the device
        return out

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Class index with the highest logit, (N,) int64."""
        return np.argmax(self.forward(x, training=False), axis=1)

    # --- parameters ---------------------------------------------------------------------------
    def _views(self, flat: Any) -> dict[str, Any]:
        return {key: flat[sl].reshape(shape) for key, _, _, sl, shape in self._slots}

    def _buffer_views(self) -> dict[str, Any]:
        """The layers' saved non-parameter state (BatchNorm's running statistics) by torch name."""
        return {f"{i}.{k}": v for i, layer in enumerate(self.layers)
                for k, v in layer.named_buffers().items()}

    def param_slices(self) -> list[tuple[str, slice]]:
        """Each parameter's name (as in ``state_dict``) and its slice of the flat ``params`` and
        ``grads`` buffers, in buffer order."""
        return [(key, sl) for key, _, _, sl, _ in self._slots]

    @property
    def freeze_changes(self) -> int:
        """A count that moves whenever any layer is frozen or unfrozen (``Layer.freeze_changes``):
        what follows from the frozen set may be kept while it stays."""
        return Layer.freeze_changes

    def is_frozen(self, name: str) -> bool:
        """Whether parameter ``name`` ("3.weight", "2.body.0.bias") is frozen (``Layer.freeze``)."""
        i, _, pname = name.partition(".")
        return self.layers[int(i)].is_frozen(pname)

    def frozen(self) -> list[str]:
        """The names of the frozen parameters, in buffer order."""
        return [key for key, _ in self.param_slices() if self.is_frozen(key)]

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the parameters, then of the saved buffers (BatchNorm's running statistics),
        named and shaped as in ``torch.nn.Sequential``."""
        views = {**self._views(self.params), **self._buffer_views()}
        return {k: np.array(self.backend.to_host(v)) for k, v in views.items()}

    def grad_dict(self) -> dict[str, np.ndarray]:
        """Copies of the last backward's parameter gradients, same names as ``state_dict``."""
        return {k: np.array(self.backend.to_host(v)) for k, v in self._views(self.grads).items()}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Copy parameters and buffers in; every key must be present with the right shape (nothing
        is changed unless all of them match)."""
        views = {**self._views(self.params), **self._buffer_views()}
        missing = sorted(set(views) - set(state))
        unexpected = sorted(set(state) - set(views))
        if missing or unexpected:
            raise ValueError(f"state dict does not match the network: missing {missing}, "
                             f"unexpected {unexpected}")
        arrays = {}
        for key, view in views.items():
            a = np.asarray(state[key])
            if a.shape != view.shape and not (a.ndim == 0 and view.shape == (1,)):  # torch's counter
                raise ValueError(f"state dict entry {key!r} has shape {a.shape}, the network "
                                 f"expects {view.shape}")
            if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
                raise ValueError(f"state dict entry {key!r} has dtype {a.dtype}, expected float32")
            arrays[key] = a.reshape(view.shape)
        for key, a in arrays.items():
            self.backend.write(views[key], a)

    def __repr__(self) -> str:
        inner = ",\n".join(f"  ({i}): {layer!r}" for i, layer in enumerate(self.layers))
        return f"Sequential(\n{inner}\n)"


def _slice_dropouts(layers: list[Layer], shape: Shape, lo: int, hi: int, total: int) -> Shape:
    """``set_batch_slice`` along a chain of layers (and inside residual blocks); returns the
    chain's per-example output shape."""
    for layer in layers:
        if layer.draws_random:
            if hi > lo:
                layer.set_offset(lo * math.prod(shape))  # type: ignore[attr-defined]  # draws_random
            else:
                layer.skip_draw()  # type: ignore[attr-defined]
        for _, path in layer.paths():
            _slice_dropouts(path, shape, lo, hi, total)
        shape = layer.output_shape(shape)
    return shape
