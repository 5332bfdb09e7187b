"""Optimizers over the network's flat parameter buffer: SGD, RMSProp, Adam (torch.optim semantics)."""
from __future__ import annotations

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


class Optimizer:
    """Base: holds the network, the hyperparameters and flat state arrays named in ``state``."""

    name = "optimizer"
    state_names: tuple[str, ...] = ()

    def __init__(self, net: Model, lr: float) -> None:
        if not all(hasattr(net, a) for a in ("params", "grads", "n_params", "backend")):
            raise ValueError(f"{type(self).__name__} needs a numbacnn Sequential, got {type(net).__name__}")
        self.net = net
        self.lr = _check_hparam("lr", lr, 0.0, low_open=True)
        self.step_count = 0
        self.device = net.device
        self.backend = net.backend
        self.state = {k: self.backend.asarray(np.zeros(net.n_params, np.float32))
                      for k in self.state_names}

    def step(self) -> None:
        """Apply one update from the gradients the last ``net.backward`` stored."""
        if self.net.device != self.device:
            raise RuntimeError(f"the network moved to {self.net.device!r} after this optimizer was "
                               f"created on {self.device!r}: create the optimizer after net.to()")
        self.step_count += 1
        self._update()

    def _update(self) -> None:
        raise NotImplementedError

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr}

    def state_dict(self) -> dict[str, Any]:
        """Step count and copies of the state arrays (for checkpoints)."""
        return {"step": self.step_count,
                **{k: np.array(self.backend.to_host(v)) for k, v in self.state.items()}}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        for k in self.state_names:
            if k not in d:
                raise ValueError(f"{self.name} state is missing {k!r}")
            a = np.asarray(d[k])
            if a.shape != self.state[k].shape:
                raise ValueError(f"{self.name} state {k!r} has shape {a.shape}, expected "
                                 f"{self.state[k].shape}")
        for k in self.state_names:
            self.backend.write(self.state[k], np.asarray(d[k]))
        self.step_count = int(d["step"])

    def __repr__(self) -> str:
        hp = ", ".join(f"{k}={v}" for k, v in self.hyperparameters().items())
        return f"{type(self).__name__}({hp})"


class SGD(Optimizer):
    """Mini-batch SGD with optional momentum, Nesterov momentum and L2 weight decay (torch.optim.SGD)."""

    name = "sgd"
    state_names = ("momentum_buffer",)

    def __init__(self, net: Model, lr: float, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, dampening: float = 0.0) -> None:
        super().__init__(net, lr)
        self.momentum = _check_hparam("momentum", momentum, 0.0)
        self.dampening = _check_hparam("dampening", dampening, 0.0, 1.0)
        self.weight_decay = _check_hparam("weight_decay", weight_decay, 0.0)
        self.nesterov = bool(nesterov)
        if self.nesterov and (self.momentum <= 0.0 or self.dampening != 0.0):
            raise ValueError("Nesterov momentum needs momentum > 0 and dampening 0")

    def _update(self) -> None:
        self.backend.sgd_update(self.net.params, self.net.grads, self.state["momentum_buffer"], self.lr,
                                self.momentum, self.dampening, self.weight_decay, self.nesterov,
                                self.step_count == 1)

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "momentum": self.momentum, "nesterov": self.nesterov,
                "weight_decay": self.weight_decay, "dampening": self.dampening}


class RMSProp(Optimizer):
    """RMSProp as torch.optim.RMSprop: eps added outside the square root, optional momentum/centered."""

    name = "rmsprop"
    state_names = ("square_avg", "grad_avg", "momentum_buffer")

    def __init__(self, net: Model, lr: float = 0.01, alpha: float = 0.99, eps: float = 1e-8,
                 momentum: float = 0.0, centered: bool = False, weight_decay: float = 0.0) -> None:
        super().__init__(net, lr)
        self.alpha = _check_hparam("alpha", alpha, 0.0, 1.0)
        self.eps = _check_hparam("eps", eps, 0.0)
        self.momentum = _check_hparam("momentum", momentum, 0.0)
        self.weight_decay = _check_hparam("weight_decay", weight_decay, 0.0)
        self.centered = bool(centered)

    def _update(self) -> None:
        s = self.state
        self.backend.rmsprop_update(self.net.params, self.net.grads, s["square_avg"], s["grad_avg"],
                                    s["momentum_buffer"], self.lr, self.alpha, self.eps,
                                    self.weight_decay, self.momentum, self.centered)

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "alpha": self.alpha, "eps": self.eps, "momentum": self.momentum,
                "centered": self.centered, "weight_decay": self.weight_decay}


class Adam(Optimizer):
    """Adam with bias correction and L2 weight decay added to the gradient (torch.optim.Adam)."""

    name = "adam"
    state_names = ("exp_avg", "exp_avg_sq")

    def __init__(self, net: Model, lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        super().__init__(net, lr)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be a pair of numbers in [0, 1), got {betas!r}")
        self.betas = (_check_hparam("beta1", betas[0], 0.0, 1.0, high_open=True),
                      _check_hparam("beta2", betas[1], 0.0, 1.0, high_open=True))
        self.eps = _check_hparam("eps", eps, 0.0)
        self.weight_decay = _check_hparam("weight_decay", weight_decay, 0.0)

    def _update(self) -> None:
        s = self.state
        self.backend.adam_update(self.net.params, self.net.grads, s["exp_avg"], s["exp_avg_sq"], self.lr,
                                 self.betas[0], self.betas[1], self.eps, self.weight_decay,
                                 self.step_count, self.decoupled)

    decoupled = False  # weight decay as L2 in the gradient (Adam) or as weight shrinking (AdamW)

    def hyperparameters(self) -> dict[str, Any]:
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": self.weight_decay}


class AdamW(Adam):
    """Adam with decoupled weight decay (torch.optim.AdamW): each step first shrinks the weights by
    lr * weight_decay, and the decay never enters the moment estimates. torch's default decay 0.01."""

    name = "adamw"
    decoupled = True

    def __init__(self, net: Model, lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        super().__init__(net, lr, betas, eps, weight_decay)


OPTIMIZERS: dict[str, type[Optimizer]] = {"sgd": SGD, "rmsprop": RMSProp, "adam": Adam, "adamw": AdamW}


def make_optimizer(name: str, net: Model, **kwargs: Any) -> Optimizer:
    """Build an optimizer by name ("sgd", "rmsprop", "adam", "adamw")."""
    key = str(name).lower()
    if key not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[key](net, **kwargs)
