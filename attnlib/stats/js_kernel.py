"""The JS head distances' inner loop (METHODS §4): sums of s ln s, s = p_a + p_b, over pairs of float32 rows (numba).

numpy's float32 log is a libm-style call per value on a CPU without AVX-512 (1.7 ns a value on an AVX2 EPYC, 0.1 ns
with numpy's AVX-512 log), and the head map needs one per pair of heads per attention cell. Here the log is integer
and float32 operations on the value's bits (no libm call), so LLVM vectorises it with the add and the product in one
loop (8 lanes of AVX2 here: 0.39 ns per value), and a second loop sums each tile row in float64. numba is imported with
this module, which attnlib.stats.head_distances imports on first use (0.3-0.5 s); compiled code is cached beside the module
(cache=True), so only the first call on a machine compiles (2-3.5 s), later processes read it back (about 0.5 s).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

# ln x = n ln 2 + ln(1 + r) with x = 2^n (1 + r), 1 + r in [2/3, 4/3): the bits of x minus those of 2/3 give n in the
# exponent field and, added back to 2/3's bits, the mantissa 1 + r; r = (1 + r) - 1 is exact (Sterbenz).
# ln(1 + r) = r + r^2 Q(r), Q of degree 7: the minimax fit of the relative error of ln(1 + r) on [-1/3, 1/3]
# (scripts/fit_log_polynomial.py: 0.44 u, u = 2^-24) rounded to float32. Evaluated in float32 (Estrin's scheme; FMA
# where the CPU has it), the computed log of every float32 x in [2^-24, 4) is within 2.82 u of ln x relatively
# (2.24 u with FMA contraction; n ln 2's rounding dominates), checked on every one of them by
# scripts/fit_log_polynomial.py --check and on a sample of every binade by tests/test_head_distances.py. Valid for
# positive normal x (the smoothed maps' sums are >= 0.002 / n).
LOG_REL_ERROR = 2.9 * 2.0**-24
_TWO_THIRDS_BITS = np.int32(0x3F2AAAAB)  # float32 2/3, rounded up
_MANTISSA = np.int32(0x007FFFFF)
_LN2 = np.float32(np.log(2))
_Q = tuple(
    np.float32(float.fromhex(h))
    for h in (
        "-0x1.ffffd6p-2",
        "0x1.5554fap-2",
        "-0x1.001480p-2",
        "0x1.99d428p-3",
        "-0x1.5032eap-3",
        "0x1.1ea256p-3",
        "-0x1.3b2846p-3",
        "0x1.1f4284p-3",
    )
)
_Q0, _Q1, _Q2, _Q3, _Q4, _Q5, _Q6, _Q7 = _Q
_ONE = np.float32(1)


@intrinsic
def _bits(typingctx, x):
    """The int32 whose bits are float32 x's."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def _float(typingctx, i):
    """The float32 whose bits are int32 i's."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@njit(inline="always")
def _ln(x):
    """Natural log of a positive normal float32, in float32 ops that vectorise (np.int32 keeps numba off int64)."""
    shifted = np.int32(_bits(x) - _TWO_THIRDS_BITS)  # type: ignore[call-arg]  # numba adds typingctx
    n = np.float32(np.int32(shifted >> np.int32(23)))
    r = _float(np.int32(np.int32(shifted & _MANTISSA) + _TWO_THIRDS_BITS)) - _ONE
    r2 = r * r
    q = ((_Q0 + _Q1 * r) + (_Q2 + _Q3 * r) * r2) + ((_Q4 + _Q5 * r) + (_Q6 + _Q7 * r) * r2) * (r2 * r2)
    return (n * _LN2 + r) + r2 * q


@njit(nogil=True, cache=True, fastmath={"contract"})
def s_log_s(a, b, out):
    """out[j] = s ln s with s = a[j] + b[j] in float32 (1-D float32 arrays of one length)."""
    for j in range(out.size):
        s = a[j] + b[j]
        out[j] = s * _ln(s)


@njit(nogil=True, cache=True, fastmath={"reassoc"})
def _sum64(x):
    """Float64 sum of a float32 array, in any order (reassoc lets LLVM vectorise it)."""
    total = 0.0
    for j in range(x.size):
        total += np.float64(x[j])
    return total


@njit(nogil=True, cache=True)
def pair_sums(p, start, stop):
    """[K, K] float64, upper triangle and diagonal: sum over columns start:stop of s ln s, s = p[a] + p[b] (p [K, N])."""
    k = p.shape[0]
    out = np.zeros((k, k))
    terms = np.empty(stop - start, np.float32)
    for a in range(k):
        row = p[a, start:stop]
        for b in range(a, k):
            s_log_s(row, p[b, start:stop], terms)
            out[a, b] = _sum64(terms)
    return out
