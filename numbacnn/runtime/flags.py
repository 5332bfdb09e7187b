"""The kernels' compile flags, chosen here: ``config.kernel`` compiles with them and
``prebuilt`` keys the shipped binaries by them."""

# Fast-math without 'nnan'/'ninf': reductions may be reordered and vectorised, but NaN and inf
# keep their IEEE meaning, so max pooling's "NaN is the maximum" and divergence checks still work.
# Without 'contract' too: when the kernels' parallel loops were prange loops (numba compiles their
# bodies again in every kernel that holds one), LLVM fused multiply-adds into FMAs differently in a
# fresh compile and in the code numba's disk cache hands back, so the first run and later runs of
# the same seed gave different weights. Blocks compiled once (parallel.py) no longer differ with it
# (tests/test_prebuilt.py, tests/test_network.py pass with 'contract', 'afn' and 'arcp' on); it stays
# off so that every result keeps its bits (the FMA blocks call llvm.fma themselves).
FASTMATH = set({"nsz", "reassoc"})

# LLVM optimisation level of the kernels (numba's default is 3): about a third less compile time at
# the same training speed (docs/performance.md). Only the kernels' own compilations see it: numba's
# level is restored for everything else.
KERNEL_OPT = 2
