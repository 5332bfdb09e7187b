"""How the coefficients of the CPU tanh kernel (kernels/cpu/activations.py) were obtained.

Usage: python benchmarks/fit_tanh.py
Fits tanh(x) / x ~= P(s) / Q(s), s = x*x, P of degree 6 and Q of degree 3 with Q(0) = 1, over
[0, 9] by iterated weighted linear least squares in float64 (the linearised residual
P - f*Q, reweighted by 1/Q each round, converges towards the relative-error fit), then evaluates
the float32 formula as the kernel does and prints the coefficients and the worst error in ulp.
A developer's tool, not part of the package.
"""
import numpy as np

CLAMP = 9.0


def fit(n_p: int = 7, n_q: int = 4, rounds: int = 12) -> tuple[np.ndarray, np.ndarray]:
    x = np.concatenate([np.linspace(1e-4, CLAMP, 20000),
                        CLAMP * (0.5 - 0.5 * np.cos(np.linspace(0, np.pi, 20000)))])
    x = x[x > 0]
    s, f = x * x, np.tanh(x) / x
    weight = np.ones_like(x)
    for _ in range(rounds):
        cols = [s ** k for k in range(n_p)] + [-f * s ** k for k in range(1, n_q)]
        a = np.stack(cols, 1)
        scale = np.abs(a).max(0)
        w = weight / f  # relative error
        coef = np.linalg.lstsq(a / scale * w[:, None], f * w, rcond=None)[0] / scale
        p, q = coef[:n_p], np.concatenate([[1.0], coef[n_p:]])
        weight = 1 / np.abs(np.polyval(q[::-1], s))
    return p, q


def tanh32(p: np.ndarray, q: np.ndarray, x: np.ndarray) -> np.ndarray:
    t = np.clip(x.astype(np.float32), np.float32(-CLAMP), np.float32(CLAMP))
    s = t * t
    num = np.full_like(s, np.float32(p[-1]))
    for c in p[-2::-1]:
        num = num * s + np.float32(c)
    den = np.full_like(s, np.float32(q[-1]))
    for c in q[-2::-1]:
        den = den * s + np.float32(c)
    return np.clip(t * num / den, np.float32(-1), np.float32(1))


def main() -> None:
    p, q = fit()
    x = np.concatenate([np.linspace(-12, 12, 2_000_001), np.geomspace(1e-30, 1, 100_000)])
    x = x.astype(np.float32)
    want = np.tanh(x.astype(np.float64))
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    err = np.abs(tanh32(p, q, x) - want)
    print("P:", ", ".join(repr(float(np.float32(c))) for c in p))
    print("Q:", ", ".join(repr(float(np.float32(c))) for c in q))
    print(f"float32 evaluation on [-12, 12]: max error {(err / ulp).max():.2f} ulp, "
          f"{err.max():.2e} absolute")


if __name__ == "__main__":
    main()
