"""The polynomial of attnlib.stats.js_kernel's float32 log: fit it, or check the log on every float32 in [2^-24, 4).

Run: python scripts/fit_log_polynomial.py [--degree 7]   (prints Q's float32 coefficients, as js_kernel holds them)
     python scripts/fit_log_polynomial.py --check         (the kernel's log against float64, with and without FMA)
ln(1 + r) = r + r^2 Q(r) on r in [-1/3, 1/3]; Q minimises the largest relative error of ln(1 + r) (Lawson's iteratively
reweighted least squares, which converges to the minimax fit), in float64, then rounded to float32.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

U = 2.0**-24


def fit(degree: int, iterations: int = 300) -> tuple[np.ndarray, float]:
    """(Q's coefficients, lowest power first, float64; their largest relative error of ln(1 + r) in units of u)."""
    r = np.cos(np.linspace(np.pi, 0, 20001)) / 3  # Chebyshev points of [-1/3, 1/3]
    r = r[np.abs(r) > 1e-6]
    exact = np.log1p(r)
    target = (exact - r) / r**2
    scale = r**2 / np.abs(exact)  # the relative error of ln(1 + r) is scale * (Q(r) - target)
    powers = np.vander(r, degree + 1, increasing=True)
    weights = np.ones_like(r)
    for _ in range(iterations):
        w = scale * np.sqrt(weights)
        coefficients = np.linalg.lstsq(powers * w[:, None], target * w, rcond=None)[0]
        error = np.abs((powers @ coefficients - target) * scale)
        weights = weights * error / (weights * error).sum()
    return coefficients, float(error.max() / U)


def check() -> None:
    """Largest relative error of the kernel's log over every float32 in [2^-24, 4), with and without FMA contraction."""
    from numba import njit

    from attnlib.stats.js_kernel import LOG_REL_ERROR, _ln

    def log_loop(fastmath):
        @njit(fastmath=fastmath)
        def loop(x, out):
            for i in range(x.size):
                out[i] = _ln(x[i])

        return loop

    for name, fastmath in (("without FMA", False), ("with FMA contraction", {"contract"})):
        loop, worst, at = log_loop(fastmath), 0.0, 0.0
        for exponent in range(-24, 2):
            first = (exponent + 127) << 23
            x = np.arange(first, first + 2**23, dtype=np.int32).view(np.float32)
            out = np.empty_like(x)
            loop(x, out)
            exact = np.log(x.astype(np.float64))
            rel = np.abs(out - exact) / np.where(exact == 0, 1.0, np.abs(exact))
            if rel.max() > worst:
                worst, at = float(rel.max()), float(x[rel.argmax()])
        print(
            f"{name}: largest relative error {worst / U:.3f} u at x = {at!r} (js_kernel states {LOG_REL_ERROR / U} u)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--degree", type=int, default=7)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if args.check:
        check()
        return
    coefficients, error = fit(args.degree)
    print(f"degree {args.degree}: largest relative error {error:.3f} u before rounding the coefficients to float32")
    for c in coefficients:
        mantissa, exponent = float(np.float32(c)).hex().split("p")
        print(f'"{mantissa.rstrip("0")}p{exponent}",')


if __name__ == "__main__":
    main()
