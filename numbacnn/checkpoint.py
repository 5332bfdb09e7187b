"""Checkpoints: ``np.savez`` files (never pickled) holding weights, architecture, optimizer state and
training progress, written atomically with a format version and a SHA-256 checksum."""
from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._files import UntrustedSize, arrays_digest, check_npz, is_npz, looks_like
from .layers import layer_from_config
from .network import Sequential

FORMAT = "numbacnn-checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not fit; the message says what and why."""


@dataclass
class Checkpoint:
    net: Sequential
    meta: dict[str, Any]
    optimizer_state: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def optimizer(self) -> dict[str, Any] | None:
        return self.meta.get("optimizer")


def _digest(meta_bytes: bytes, arrays: dict[str, np.ndarray]) -> str:
    return arrays_digest(arrays, hashlib.sha256(meta_bytes))


def check_writable(path: str) -> None:
    """Raise OSError now if ``path`` could not be written later (directory missing or read-only)."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(d):
        raise OSError(f"{path}: directory {d} does not exist")
    if os.path.isdir(path):
        raise OSError(f"{path}: is a directory")
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".numbacnn-probe-")
    os.close(fd)
    os.remove(tmp)


def atomic_write(path: str, write) -> None:
    """Call write(fileobj) on a temporary file beside ``path``, fsync it, then rename over ``path``."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-" + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    try:
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # pragma: no cover - directories cannot be fsynced on some filesystems
        pass


def save(net: Sequential, path: str, optimizer=None, **meta: Any) -> None:
    """Save ``net`` (and optionally an optimizer's state plus JSON-able ``meta``) to ``path``."""
    arrays = {f"param/{k}": v for k, v in net.state_dict().items()}
    info: dict[str, Any] = {
        "format": FORMAT, "version": VERSION,
        "layers": [[type(layer).__name__, layer.get_config()] for layer in net.layers],
        "architecture": net.architecture,
        "input_shape": list(net.input_shape) if net.input_shape else None,
        "classes": list(net.classes) if net.classes else None,
        "target_scale": list(net.target_scale) if net.target_scale else None,
        "dropout_rng": [list(layer.generator_state()) for layer in net.all_layers()
                        if layer.draws_random],
        "frozen": net.frozen(),
    }
    if optimizer is not None:
        info["optimizer"] = {"name": optimizer.name, "hyperparameters": optimizer.hyperparameters(),
                             "step": optimizer.step_count}
        for k, v in optimizer.state_dict().items():
            if k != "step":
                arrays[f"opt/{k}"] = v  # host copies, also for a GPU optimizer
    info.update(meta)
    meta_bytes = json.dumps(info, sort_keys=True).encode()
    arrays["__meta__"] = np.frombuffer(meta_bytes, np.uint8)
    arrays["__checksum__"] = np.frombuffer(_digest(meta_bytes, arrays).encode(), np.uint8)
    atomic_write(path, lambda f: np.savez(f, **arrays))  # type: ignore[arg-type]


def load_checkpoint(path: str, architecture: str | None = None) -> Checkpoint:
    """Read and verify a checkpoint; ``architecture`` (if given) must match the saved one."""
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: no such checkpoint file")
    if not is_npz(path):
        raise CheckpointError(f"{path}: not a numbacnn checkpoint (an .npz written by save or "
                              f"train.py --save); it looks like {looks_like(path)}")
    try:
        check_npz(path)  # sizes from the zip directory and the array headers, before any allocation
    except UntrustedSize as e:
        raise CheckpointError(str(e)) from None
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint file") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise CheckpointError(f"{path}: not a readable checkpoint ({e})") from None
    if "__meta__" not in arrays or "__checksum__" not in arrays:
        raise CheckpointError(f"{path}: not a numbacnn checkpoint (no metadata)")
    meta_bytes = arrays.pop("__meta__").tobytes()
    checksum = arrays.pop("__checksum__").tobytes().decode("ascii", "replace")
    if _digest(meta_bytes, {**arrays, "__meta__": np.frombuffer(meta_bytes, np.uint8)}) != checksum:
        raise CheckpointError(f"{path}: checksum mismatch: the file is corrupt or was modified")
    meta = _check_meta(meta_bytes, path)
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a numbacnn checkpoint")
    if meta.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint format version {meta.get('version')} is not "
                              f"supported (this numbacnn reads version {VERSION})")
    if architecture is not None and meta.get("architecture") != architecture:
        raise CheckpointError(f"{path}: saved with architecture {meta.get('architecture')!r}, "
                              f"not {architecture!r}")
    try:
        net = Sequential([layer_from_config(k, cfg) for k, cfg in meta["layers"]])
    except (ValueError, TypeError, KeyError) as e:
        raise CheckpointError(f"{path}: cannot rebuild the network: {e}") from None
    net.architecture = meta.get("architecture")
    net.input_shape = tuple(meta["input_shape"]) if meta.get("input_shape") else None
    net.classes = list(meta["classes"]) if meta.get("classes") else None
    net.target_scale = tuple(meta["target_scale"]) if meta.get("target_scale") else None
    params = {k[len("param/"):]: v for k, v in arrays.items() if k.startswith("param/")}
    for k, v in params.items():
        want = np.int64 if k.endswith("num_batches_tracked") else np.float32
        if v.dtype != want:
            raise CheckpointError(f"{path}: parameter {k!r} has dtype {v.dtype}, expected "
                                  f"{np.dtype(want).name}")
    try:
        net.load_state_dict(params)
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None
    names = {k for k, _ in net.param_slices()}
    for name in meta.get("frozen", []):
        if name not in names:
            raise CheckpointError(f"{path}: the metadata freezes {name!r}, which is not a parameter")
        i, _, pname = name.partition(".")
        net.layers[int(i)].freeze(pname)
    dropouts = [layer for layer in net.all_layers() if layer.draws_random]
    for layer, state in zip(dropouts, meta.get("dropout_rng", [])):
        layer.set_generator_state(*_dropout_state(state, path))
    opt_state = {k[len("opt/"):]: v for k, v in arrays.items() if k.startswith("opt/")}
    return Checkpoint(net, meta, opt_state)


def _is_int(v: Any, low: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _opt_str(v: Any) -> bool:
    return v is None or isinstance(v, str)


# What each metadata field must hold (a missing optional field is fine): checked once, here, so that
# a hand-edited file is one clear error and not a traceback somewhere later.
_META: dict[str, Any] = {
    "format": _opt_str, "version": _is_int, "architecture": _opt_str,
    "layers": lambda v: isinstance(v, list) and all(
        isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], dict) for e in v),
    "input_shape": lambda v: v is None or (isinstance(v, list) and len(v) in (2, 3)
                                           and all(_is_int(d, 1) for d in v)),
    "classes": lambda v: v is None or (isinstance(v, list) and all(isinstance(c, str) for c in v)),
    "target_scale": lambda v: v is None or (isinstance(v, list) and len(v) == 2 and all(_is_num(a) for a in v)
                                            and all(math.isfinite(a) for a in v) and v[1] > 0),
    "dropout_rng": lambda v: isinstance(v, list),
    "frozen": lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v),
    "optimizer": lambda v: isinstance(v, dict) and isinstance(v.get("name"), str)
    and isinstance(v.get("hyperparameters", {}), dict),
    "training": lambda v: isinstance(v, dict),
}
_TRAINING: dict[str, Any] = {
    "architecture": _opt_str, "optimizer_name": _opt_str, "seed": _is_int, "epochs": lambda v: _is_int(v, 1),
    "test_size": lambda v: _is_num(v) and 0 < v < 1, "val_size": lambda v: _is_num(v) and 0 <= v < 1,
    "batch_size": lambda v: _is_int(v, 1), "dataset": _opt_str, "data_fingerprint": _opt_str,
    "lr_schedule": _opt_str, "augment": _opt_str, "label_smoothing": lambda v: _is_num(v) and 0 <= v < 1,
    "early_stopping": _is_int, "trainer": lambda v: v is None or (
        isinstance(v, dict) and _is_int(v.get("epoch")) and _is_int(v.get("step"))
        and isinstance(v.get("rng"), dict) and _opt_dict(v.get("epoch_rng"))
        and isinstance(v.get("partial"), dict) and isinstance(v.get("history"), list)
        and all(isinstance(h, dict) for h in v["history"]) and _is_int(v.get("batch_size"), 1)
        and _is_num(v.get("base_lr", 0.0)) and _opt_str(v.get("lr_schedule"))
        and _is_int(v.get("seed", 0))),
}


def _opt_dict(v: Any) -> bool:
    return v is None or isinstance(v, dict)


def _check_meta(meta_bytes: bytes, path: str) -> dict[str, Any]:
    """The checkpoint's metadata, parsed and checked against _META / _TRAINING."""
    try:
        meta = json.loads(meta_bytes)
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: the checkpoint's metadata is not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: the checkpoint's metadata is a {type(meta).__name__}, not an object")
    for fields, where in ((_META, meta), (_TRAINING, meta.get("training") or {})):
        for key, ok in fields.items():
            if key in where and not ok(where[key]):
                name = key if where is meta else f"training.{key}"
                raise CheckpointError(f"{path}: the checkpoint's metadata field {name!r} holds "
                                      f"{json.dumps(where[key])[:60]}, which is not valid there")
    if "layers" not in meta:
        raise CheckpointError(f"{path}: the checkpoint's metadata has no 'layers'")
    return meta


def _dropout_state(state: Any, path: str) -> tuple[int, int]:
    """A saved dropout generator state as (seed, draws). Checkpoints written before the masks
    were drawn by the kernels hold a numpy bit generator's state: the seed is then drawn from it
    (the masks after resuming such a checkpoint differ from the older version's)."""
    if isinstance(state, dict):
        rng = np.random.default_rng()
        try:
            rng.bit_generator.state = state
        except (TypeError, ValueError, KeyError) as e:
            raise CheckpointError(f"{path}: unreadable dropout generator state ({e})") from None
        return int(rng.integers(2**63)), 0
    if (isinstance(state, list) and len(state) == 2
            and all(isinstance(v, int) and 0 <= v < 2**64 for v in state)):
        return state[0], state[1]
    raise CheckpointError(f"{path}: a dropout generator state must be [seed, draws], got {state!r}")


def load(path: str) -> Sequential:
    """The network stored in a checkpoint written by ``save``."""
    return load_checkpoint(path).net
