"""Tolerances for float32 results computed two ways (other batchings, thread counts or CPUs), derived once here.

A float32 sum of d terms is within (d - 1) eps sum|terms| of its exact value in any order (eps = 2**-24), so two
orders, two BLAS blockings (set by a batch's shape and the CPU's kernels) or two paddings differ by at most twice that.
Each layer of an encoder is such sums (projections over the hidden size, the feed-forward over the intermediate size,
softmax and LayerNorm normalise them again), so a layer perturbs its output by at most about 2 d eps relatively, d
its longest sum, and L layers by L times that: 2 * 64 * 2 * eps = 1.5e-5 for the tests' tiny models (hidden 32,
intermediate 64, 2 layers). Statistics that are means of ratios of such values (shares, norm shares) inherit it.
Typical differences are far smaller (rounding errors add like a random walk: 1e-8 to 1e-7 measured here).
"""

EPS32 = 2.0**-24
TINY_MODEL_SUM, TINY_MODEL_LAYERS = 64, 2
FORWARD_RTOL = 2 * TINY_MODEL_SUM * TINY_MODEL_LAYERS * EPS32  # tiny models' outputs, two batchings or CPUs
# attnlib.stats.head_distances derives the JS pass's float32 error: <= 4.4 eps * 2 ln(500 n) + eps per row of n tokens, worst
# case (js_row_error); two tilings of the same rows differ by at most twice that, relative to JS values of at least
# 0.05 per row.
JS_RTOL = 2 * (4.4 * EPS32 * 26 + EPS32) / 0.05  # n <= 512: 2 ln(500 n) < 26
