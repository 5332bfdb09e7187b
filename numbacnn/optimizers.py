"""Optimizers over the network's flat parameter buffer: SGD, RMSProp, Adam (torch.optim semantics).

An update runs over runs of the flat buffer: the whole buffer when every parameter trains with the
optimizer's settings, else each stretch of adjacent trainable parameters that share a group
(``groups``: a learning-rate scale and a weight decay of their own); frozen parameters
(``Layer.freeze``) are skipped, their state left untouched."""
from __future__ import annotations

import fnmatch
import math
from typing import Any, Protocol

import numpy as np


class Model(Protocol):
    """What an optimizer uses of a network (numbacnn's ``Sequential``): its flat parameter and
    gradient buffers, where they live and the backend that updates them."""

    @property
    def params(self) -> Any: ...
    @property
    def grads(self) -> Any: ...
    @property
    def n_params(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def backend(self) -> Any: ...
    def param_slices(self) -> list[tuple[str, slice]]: ...
    def is_frozen(self, name: str) -> bool: ...
    @property
    def freeze_changes(self) -> int: ...
    def _buffer_views(self) -> dict[str, Any]: ...


GROUP_KEYS = ("params", "lr_scale", "weight_decay")


def _check_groups(groups: Any, net: Model) -> list[dict[str, Any]]:
    """Parameter groups as given to an optimizer, checked: a list of dicts, each with "params" (a
    list of ``state_dict`` names or shell patterns, "*.bias"), and "lr_scale" (> 0, the group's
    learning rate over the optimizer's, default 1) and/or "weight_decay" (default the optimizer's).
    A parameter belongs to the first group with a matching pattern; every group must match one."""
    if groups is None:
        return []
    if not isinstance(groups, (list, tuple)):
        raise ValueError(f"groups must be a list of dicts, got {type(groups).__name__}")
    names = [k for k, _ in net.param_slices()]
    out = []
    for j, g in enumerate(groups):
        if not isinstance(g, dict) or not isinstance(g.get("params"), (list, tuple)) or not g["params"]:
            raise ValueError(f"group {j}: expected a dict with a non-empty list of parameter names or "
                             f"patterns under 'params', got {g!r}")
        unknown = [k for k in g if k not in GROUP_KEYS]
        if unknown:
            raise ValueError(f"group {j}: unknown key {unknown[0]!r}; a group takes "
                             f"{', '.join(GROUP_KEYS)}")
        patterns = [str(p) for p in g["params"]]
        if not any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns):
            raise ValueError(f"group {j}: {', '.join(patterns)} matches no parameter of the network "
                             f"(its parameters are named like {', '.join(names[:3])}, ...)")
        checked: dict[str, Any] = {"params": patterns}
        if "lr_scale" in g:
            checked["lr_scale"] = _check_hparam(f"group {j} lr_scale", g["lr_scale"], 0.0,
                                                low_open=True)
        if "weight_decay" in g:
            checked["weight_decay"] = _check_hparam(f"group {j} weight_decay", g["weight_decay"], 0.0)
        out.append(checked)
    return out



def _check_hparam(name: str, value: Any, low: float = 0.0, high: float = math.inf,
                  low_open: bool = False, high_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    bad_low = v <= low if low_open else v < low
    bad_high = v >= high if high_open else v > high
    if not math.isfinite(v) or bad_low or bad_high:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise ValueError(f"{name} must lie in {lo}{low}, {high}{hi}, got {value!r}")
    return v


def _check_lookahead(v: Any) -> dict[str, Any] | None:
    if v is None or v is False:
        return None
    if not isinstance(v, dict) or not set(v) <= {"k", "alpha", "buffers"}:
        raise ValueError(f"lookahead must be a dict with k, alpha and buffers, got {v!r}")
    k = v.get("k", 5)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"lookahead k must be a positive integer, got {k!r}")
    buffers = v.get("buffers", False)
    if not isinstance(buffers, bool):
        raise ValueError(f"lookahead buffers must be True or False, got {buffers!r}")
    return {"k": int(k), "alpha": _check_hparam("lookahead alpha", v.get("alpha", 0.5), 0.0, 1.0),
            "buffers": buffers}


class Optimizer:
    """Base: holds the network, the hyperparameters and flat state arrays named in ``state``."""

    name = "optimizer"
    state_names: tuple[str, ...] = ()
    nonnegative: tuple[str, ...] = ()  # state arrays that are means of squares

    weight_decay = 0.0

    def __init__(self, net: Model, lr: float, groups: list[dict[str, Any]] | None = None,
                 lookahead: dict[str, Any] | None = None) -> None:
        """``groups``: parameter groups (see ``_check_groups``). ``lookahead``: wrap the updates in
        Lookahead (Zhang et al., 2019), ``{"k": 5, "alpha": 0.5, "buffers": False}``: every k steps
        the slow weights move alpha of the way to the fast ones, and the fast ones restart from
        there; ``buffers``: BatchNorm's running statistics too (as airbench does). ``alpha`` may be
        changed between steps (a schedule); the slow weights are part of ``state_dict``."""
        if not all(hasattr(net, a) for a in ("params", "grads", "n_params", "backend", "param_slices")):
            raise ValueError(f"{type(self).__name__} needs a numbacnn Sequential, got {type(net).__name__}")
        self.net = net
        self.lr = _check_hparam("lr", lr, 0.0, low_open=True)
        self.groups = _check_groups(groups, net)
        self.step_count = 0
        self.device = net.device
        self.backend = net.backend
        self.state = {k: self.backend.asarray(np.zeros(net.n_params, np.float32))
                      for k in self.state_names}
        self.lookahead = _check_lookahead(lookahead)
        if self.lookahead:
            self.state["slow"] = self.backend.asarray(np.array(self.backend.to_host(net.params)))
            if self.lookahead["buffers"]:
                host = [np.asarray(self.backend.to_host(v), np.float32).ravel()
                        for v in self._float_buffers()]
                self.state["slow_buffers"] = self.backend.asarray(
                    np.concatenate(host) if host else np.zeros(0, np.float32))

    def step(self) -> None:
        """Apply one update from the gradients the last ``net.backward`` stored."""
        if self.net.device != self.device:
            raise RuntimeError(f"the network moved to {self.net.device!r} after this optimizer was "
                               f"created on {self.device!r}: create the optimizer after net.to()")
        self.step_count += 1
        for part, lr_scale, weight_decay in self.parts():
            decay = self.weight_decay if weight_decay is None else weight_decay
            self._update(part, self.lr * lr_scale, decay)
        if self.lookahead and self.step_count % self.lookahead["k"] == 0:
            self.sync(self.lookahead["alpha"])

    def sync(self, alpha: float) -> None:
        """Lookahead's synchronisation now: slow += alpha * (fast - slow), fast = slow (alpha 0:
        the network takes the slow weights, as at the end of airbench's training)."""
        if not self.lookahead:
            raise ValueError(f"{self.name}: no lookahead to synchronise (create it with lookahead=...)")
        run = self.backend.run
        run("lookahead_sync", self.net.params, self.state["slow"], float(alpha))
        if self.lookahead["buffers"]:
            offset = 0
            for v in self._float_buffers():
                flat = v.reshape(-1)
                run("lookahead_sync", flat, self.state["slow_buffers"][offset:offset + flat.size],
                    float(alpha))
                offset += flat.size

    def _float_buffers(self) -> list[Any]:
        """The network's float32 saved buffers (BatchNorm's running statistics), in state_dict order."""
        return [v for v in self.net._buffer_views().values() if np.dtype(v.dtype) == np.float32]

    def parts(self) -> list[tuple[slice, float, float | None]]:
        """The runs of the flat buffers that an update covers: (slice, learning-rate scale, weight
        decay or None for the optimizer's own), adjacent parameters with the same settings joined,
        frozen ones left out. Kept until a layer is frozen or unfrozen (at batch 1 working them out
        again took a fifth of a lenet5 step)."""
        kept = self.__dict__.get("_parts")
        if kept is not None and kept[0] == self.net.freeze_changes:
            return kept[1]
        runs: list[tuple[slice, float, float | None]] = []
        for name, sl in self.net.param_slices():
            if self.net.is_frozen(name):
                continue
            group = next((g for g in self.groups
                          if any(fnmatch.fnmatchcase(name, p) for p in g["params"])), {})
            scale, decay = group.get("lr_scale", 1.0), group.get("weight_decay")
            if runs and runs[-1][0].stop == sl.start and runs[-1][1:] == (scale, decay):
                runs[-1] = (slice(runs[-1][0].start, sl.stop), scale, decay)
            else:
                runs.append((sl, scale, decay))
        self._parts = (self.net.freeze_changes, runs)
        return runs

    def _update(self, part: slice, lr: float, weight_decay: float) -> None:
        """One update of the parameters in ``part`` of the flat buffers."""
        raise NotImplementedError

    def _views(self, part: slice, *names: str) -> list[Any]:
        """The parameters, gradients and the named state arrays in ``part``."""
        return [self.net.params[part], self.net.grads[part], *(self.state[k][part] for k in names)]

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, **self._groups_hp()}

    def _groups_hp(self) -> dict[str, Any]:
        """The groups and lookahead settings, for every optimizer's ``hyperparameters``."""
        return {**({"groups": [dict(g) for g in self.groups]} if self.groups else {}),
                **({"lookahead": dict(self.lookahead)} if self.lookahead else {})}

    def state_dict(self) -> dict[str, Any]:
        """Step count and copies of the state arrays (for checkpoints)."""
        return {"step": self.step_count,
                **{k: np.array(self.backend.to_host(v)) for k, v in self.state.items()}}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s output, checked whole before anything changes (ValueError
        naming the entry): every state array present, float32, of its shape, finite (the second
        moments not negative), no unknown names, and a whole step count."""
        unknown = sorted(set(d) - {"step"} - set(self.state))
        if unknown:
            raise ValueError(f"{self.name} state has unknown entries {', '.join(map(repr, unknown))} "
                             f"(it holds {', '.join(map(repr, self.state)) or 'none'})")
        step = d.get("step")
        if not (isinstance(step, (int, np.integer)) and not isinstance(step, bool) and 0 <= step < 2**53):
            raise ValueError(f"{self.name} step count must be a whole number in [0, 2^53), got {step!r}")
        for k in self.state:
            if k not in d:
                raise ValueError(f"{self.name} state is missing {k!r}")
            a = np.asarray(d[k])
            if a.shape != self.state[k].shape:
                raise ValueError(f"{self.name} state {k!r} has shape {a.shape}, expected "
                                 f"{self.state[k].shape}")
            if a.dtype != np.float32:
                raise ValueError(f"{self.name} state {k!r} has dtype {a.dtype}, expected float32")
            if not np.isfinite(a).all():
                raise ValueError(f"{self.name} state {k!r} holds NaN or infinite values")
            if k in self.nonnegative and (a < 0).any():
                raise ValueError(f"{self.name} state {k!r} holds negative values (a mean of squares)")
        for k in self.state:
            self.backend.write(self.state[k], np.asarray(d[k]))
        self.step_count = int(step)

    def __repr__(self) -> str:
        hp = ", ".join(f"{k}={v}" for k, v in self.hyperparameters().items())
        return f"{type(self).__name__}({hp})"


class SGD(Optimizer):
    """Mini-batch SGD with optional momentum, Nesterov momentum and L2 weight decay (torch.optim.SGD)."""

    name = "sgd"
    state_names = ("momentum_buffer",)

    def __init__(self, net: Model, lr: float, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, dampening: float = 0.0,
                 groups: list[dict[str, Any]] | None = None,
                 lookahead: dict[str, Any] | None = None) -> None:
        super().__init__(net, lr, groups, lookahead)
        self.momentum = _check_hparam("momentum", momentum, 0.0)
        self.dampening = _check_hparam("dampening", dampening, 0.0, 1.0)
        self.weight_decay = _check_hparam("weight_decay", weight_decay, 0.0)
        self.nesterov = bool(nesterov)
        if self.nesterov and (self.momentum <= 0.0 or self.dampening != 0.0):
            raise ValueError("Nesterov momentum needs momentum > 0 and dampening 0")

    def _update(self, part: slice, lr: float, weight_decay: float) -> None:
        self.backend.run("sgd_update", *self._views(part, "momentum_buffer"), lr, self.momentum,
                         self.dampening, weight_decay, self.nesterov, self.step_count == 1)

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "momentum": self.momentum, "nesterov": self.nesterov,
                "weight_decay": self.weight_decay, "dampening": self.dampening, **self._groups_hp()}


class RMSProp(Optimizer):
    """RMSProp as torch.optim.RMSprop: eps added outside the square root, optional momentum/centered."""

    name = "rmsprop"
    state_names = ("square_avg", "grad_avg", "momentum_buffer")
    nonnegative = ("square_avg",)

    def __init__(self, net: Model, lr: float = 0.01, alpha: float = 0.99, eps: float = 1e-8,
                 momentum: float = 0.0, centered: bool = False, weight_decay: float = 0.0,
                 groups: list[dict[str, Any]] | None = None,
                 lookahead: dict[str, Any] | None = None) -> None:
        super().__init__(net, lr, groups, lookahead)
        self.alpha = _check_hparam("alpha", alpha, 0.0, 1.0)
        self.eps = _check_hparam("eps", eps, 0.0)
        self.momentum = _check_hparam("momentum", momentum, 0.0)
        self.weight_decay = _check_hparam("weight_decay", weight_decay, 0.0)
        self.centered = bool(centered)

    def _update(self, part: slice, lr: float, weight_decay: float) -> None:
        self.backend.run("rmsprop_update", *self._views(part, "square_avg", "grad_avg", "momentum_buffer"),
                         lr, self.alpha, self.eps, weight_decay, self.momentum, self.centered)

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "alpha": self.alpha, "eps": self.eps, "momentum": self.momentum,
                "centered": self.centered, "weight_decay": self.weight_decay, **self._groups_hp()}


class Adam(Optimizer):
    """Adam with bias correction and L2 weight decay added to the gradient (torch.optim.Adam)."""

    name = "adam"
    state_names = ("exp_avg", "exp_avg_sq")
    nonnegative = ("exp_avg_sq",)

    def __init__(self, net: Model, lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0,
                 groups: list[dict[str, Any]] | None = None,
                 lookahead: dict[str, Any] | None = None) -> None:
        super().__init__(net, lr, groups, lookahead)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be a pair of numbers in [0, 1), got {betas!r}")
        self.betas = (_check_hparam("beta1", betas[0], 0.0, 1.0, high_open=True),
                      _check_hparam("beta2", betas[1], 0.0, 1.0, high_open=True))
        self.eps = _check_hparam("eps", eps, 0.0)
        self.weight_decay = _check_hparam("weight_decay", weight_decay, 0.0)

    def _update(self, part: slice, lr: float, weight_decay: float) -> None:
        self.backend.run("adam_update", *self._views(part, "exp_avg", "exp_avg_sq"), lr, self.betas[0],
                         self.betas[1], self.eps, weight_decay, self.step_count, bool(self.decoupled))

    decoupled = False  # weight decay as L2 in the gradient (Adam) or as weight shrinking (AdamW)

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": self.weight_decay,
                **self._groups_hp()}


class AdamW(Adam):
    """Adam with decoupled weight decay (torch.optim.AdamW): each step first shrinks the weights by
    lr * weight_decay, and the decay never enters the moment estimates. torch's default decay 0.01."""

    name = "adamw"
    decoupled = True

    def __init__(self, net: Model, lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01,
                 groups: list[dict[str, Any]] | None = None,
                 lookahead: dict[str, Any] | None = None) -> None:
        super().__init__(net, lr, betas, eps, weight_decay, groups, lookahead)


OPTIMIZERS: dict[str, type[Optimizer]] = {"sgd": SGD, "rmsprop": RMSProp, "adam": Adam, "adamw": AdamW}


def make_optimizer(name: str, net: Model, **kwargs: Any) -> Optimizer:
    """Build an optimizer by name ("sgd", "rmsprop", "adam", "adamw")."""
    key = str(name).lower()
    if key not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[key](net, **kwargs)
