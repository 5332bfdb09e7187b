"""How the coefficients of the CPU GELU kernel's erf (kernels/cpu/activations.py) were obtained.

Usage: python benchmarks/fit_erf.py
Fits erf(z) / z ~= P(s) / Q(s), s = z*z, P of degree 6 and Q of degree 5 with Q(0) = 1, over
[0, 4] (float32 erf is 1 beyond 3.92) by iterated weighted linear least squares in float64, as
benchmarks/fit_tanh.py does for tanh; then evaluates in float32 as the kernel does: erf, GELU
and GELU's derivative (the formula's own derivative, which the backward uses) against float64,
and prints the coefficients and the worst errors. A developer's tool, not part of the package.
"""
import math

import numpy as np

CLAMP = 4.0


def fit(n_p: int = 7, n_q: int = 6, rounds: int = 12) -> tuple[np.ndarray, np.ndarray]:
    z = np.concatenate([np.linspace(1e-4, CLAMP, 20000),
                        CLAMP * (0.5 - 0.5 * np.cos(np.linspace(0, np.pi, 20000)))])
    z = z[z > 0]
    erf = np.vectorize(math.erf)(z)
    s, f = z * z, erf / z
    weight = np.ones_like(z)
    for _ in range(rounds):
        cols = [s ** k for k in range(n_p)] + [-f * s ** k for k in range(1, n_q)]
        a = np.stack(cols, 1)
        scale = np.abs(a).max(0)
        w = weight * z  # absolute error of erf = z * (error of erf / z)
        coef = np.linalg.lstsq(a / scale * w[:, None], f * w, rcond=None)[0] / scale
        p, q = coef[:n_p], np.concatenate([[1.0], coef[n_p:]])
        weight = 1 / np.abs(np.polyval(q[::-1], s))
    return p, q


def _horner(c: np.ndarray, s: np.ndarray) -> np.ndarray:
    out = np.full_like(s, np.float32(c[-1]))
    for v in c[-2::-1]:
        out = out * s + np.float32(v)
    return out


def gelu32(p: np.ndarray, q: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GELU and its derivative in float32, as the kernel computes them."""
    x = x.astype(np.float32)
    z = np.clip(x * np.float32(1 / math.sqrt(2)), np.float32(-CLAMP), np.float32(CLAMP))
    s = z * z
    P, Q = _horner(p, s), _horner(q, s)
    dP, dQ = _horner(p[1:] * np.arange(1, len(p)), s), _horner(q[1:] * np.arange(1, len(q)), s)
    e = z * P / Q
    de = (P + np.float32(2) * s * dP) / Q - np.float32(2) * s * P * dQ / (Q * Q)
    de = np.where(np.abs(x * np.float32(1 / math.sqrt(2))) < CLAMP, de, np.float32(0))
    half = np.float32(0.5)
    r = np.float32(1 / math.sqrt(2))
    return half * x * (np.float32(1) + e), half * (np.float32(1) + e) + half * x * de * r


def main() -> None:
    p, q = fit()
    x = np.linspace(-12, 12, 2_000_001).astype(np.float32)
    x64 = x.astype(np.float64)
    erf = np.vectorize(math.erf)(x64 / math.sqrt(2))
    y_want = 0.5 * x64 * (1 + erf)
    d_want = 0.5 * (1 + erf) + x64 * np.exp(-0.5 * x64 * x64) / math.sqrt(2 * math.pi)
    y, d = gelu32(p, q, x)
    print("P:", ", ".join(repr(float(np.float32(c))) for c in p))
    print("Q:", ", ".join(repr(float(np.float32(c))) for c in q))
    print(f"float32 GELU on [-12, 12]: max abs error {np.abs(y - y_want).max():.2e}, "
          f"max error / max(|y|, 1) {(np.abs(y - y_want) / np.maximum(np.abs(y_want), 1)).max():.2e}")
    print(f"float32 GELU derivative: max abs error {np.abs(d - d_want).max():.2e}")


if __name__ == "__main__":
    main()
