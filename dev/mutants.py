"""Plant known bugs one at a time in a temporary copy of the package and check that the tests catch each.

    python dev/mutants.py -j 2         # every mutant, two at a time
    python dev/mutants.py -k dense     # mutants whose name contains "dense"
    python dev/mutants.py --start 55   # resume a long run at the 55th mutant
    python dev/mutants.py --changed    # those of files changed since HEAD (--changed origin/main: a branch)
    python dev/mutants.py --list

First numbacnn/, tests/ and train.py are copied to a temporary base (with the numba cache, file
times kept), and a control run there checks that every selected test passes on the unchanged code
(one pytest per test file); where a CPU kernel mutant uses that file it runs without the kernel tier
(NUMBACNN_PREBUILT=0), so numba's cache in the base holds every kernel those tests reach. Then for
each mutant: copy the base, replace one piece of source text, and run the focused tests named beside
it there (PYTHONPATH points at the copy). A mutant is *caught* when those tests fail. A CPU kernel
mutant runs without the tier (its sources changed) and drops the cached kernels of the changed file
and of every kernel file importing it, directly or not (numba does not notice a changed helper in
another file): only those recompile. Exit status 1 when a mutant survives, a mutant no longer
applies to the source, or the control fails. Not part of the default test run.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Mutant:
    name: str
    path: str | tuple[str, ...]  # relative to the repository root; the same change in each
    old: str
    new: str
    tests: list[str]  # pytest arguments, relative to the copy
    replace_all: bool = False
    inside: str = ""  # a function or class ("Class.method" too): old is looked for in its source only


def _span(src: str, name: str) -> tuple[int, int] | None:
    """Character offsets of the definition ``name`` ("f", "Class", "Class.method") in src, or None."""
    import ast

    nodes: list = ast.parse(src).body
    node = None
    for part in name.split("."):
        node = next((n for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            return None
        nodes = node.body
    lines = src.splitlines(keepends=True)
    start = sum(map(len, lines[:node.lineno - 1]))
    return start, start + sum(map(len, lines[node.lineno - 1:node.end_lineno]))


def plant(m: Mutant, src: str) -> str | None:
    """src with the mutant's change, or None where its text (inside its function) is not found."""
    lo, hi = 0, len(src)
    if m.inside:
        span = _span(src, m.inside)
        if span is None:
            return None
        lo, hi = span
    body = src[lo:hi]
    if m.old not in body:
        return None
    body = body.replace(m.old, m.new) if m.replace_all else body.replace(m.old, m.new, 1)
    return src[:lo] + body + src[hi:]


K = "numbacnn/kernels/cpu/"
RT = "numbacnn/runtime/"
K2 = "numbacnn/kernels/cuda/"
TEAM = RT + "team_region.py"  # compiled like the CPU kernels (and in the kernel tier)
PARALLEL = RT + "parallel.py"  # compiled into every kernel that runs in parallel
W = K + "conv2d_winograd.py"
W4 = K + "conv2d_winograd4.py"


def _host_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " amx_bf16" in f.read()
    except OSError:
        return False


M = Mutant
MUTANTS = [
    # modern layers and recipe
    M("modern: BatchNorm's running variance takes the biased batch variance", K + "batchnorm.py",
      "momentum * var * M / (M - 1)", "momentum * var",
      ["tests/test_modern.py", "-k", "batchnorm_matches_oracle"], inside="batchnorm_forward_train_part"),
    M("modern: BatchNorm backward drops the mean's gradient", K + "batchnorm.py",
      "b1 = np.float32(g_sum / M) if batch_stats else zero", "b1 = zero",
      ["tests/test_modern.py", "-k", "finite_differences"], inside="batchnorm_backward_part"),
    M("modern: BatchNorm's fused ReLU does not mask the gradient sums", K + "batchnorm.py",
      "            if relu and not ys[i] > zero:\n                g = zero\n            part +=",
      "            part +=", ["tests/test_modern.py", "-k", "finite_differences"],
      inside="batchnorm_backward_part"),
    M("modern: a residual block's input gradient counts the body twice", "numbacnn/layers/residual.py",
      "short = grads[1] if self.shortcut else dy", "short = grads[0]",
      ["tests/test_modern.py", "-k", "finite_differences"], inside="Residual.backward"),
    M("modern: flips mirror one column off", K + "batch.py",
      "qs = (W - 1 - q if flip else q) - sx", "qs = (W - q if flip else q) - sx",
      ["tests/test_modern.py", "-k", "augmentation"], inside="gather_augment_part"),
    M("modern: label smoothing spreads eps over the K - 1 wrong classes", K + "loss.py",
      "uniform = smoothing / K", "uniform = smoothing / (K - 1)",
      ["tests/test_modern.py", "-k", "finite_differences"], inside="softmax_cross_entropy_part"),
    M("modern: AdamW does not shrink the weights", K + "optim.py",
      "shrink = np.float32(1.0 - lr * weight_decay if decoupled else 1.0)", "shrink = np.float32(1.0)",
      ["tests/test_modern.py", "-k", "adamw"], inside="adam_update_part"),
    M("modern: one-cycle warms up over a quarter of the steps", "numbacnn/training.py",
      "pct_start: float = 0.3", "pct_start: float = 0.25", ["tests/test_modern.py", "-k", "onecycle"],
      inside="onecycle"),
    M("modern: early stopping keeps the last epoch's weights", "numbacnn/training.py",
      "            trainer.net.load_state_dict(self.best_state)", "            pass",
      ["tests/test_modern.py", "-k", "early_stopping"], inside="EarlyStopping.on_train_end"),
    M("inference: the BatchNorm fold drops the conv bias's scaling", K + "batchnorm.py",
      "bf[c] = a * b[c] + shift", "bf[c] = b[c] + shift",
      ["tests/test_program.py", "-k", "folded"], inside="batchnorm_fold_block"),
    M("data: Normalize's backward multiplies by std", K + "normalize.py",
      "dxs[i] = dys[i] / k", "dxs[i] = dys[i] * k",
      ["tests/test_own_data.py", "-k", "oracle_and_finite"], inside="normalize_backward_part"),
    M("data: the image-folder cache ignores modification times", "numbacnn/data/folders.py",
      "{st.st_size}|{st.st_mtime_ns}", "{st.st_size}|", ["tests/test_own_data.py", "-k", "cache"],
      inside="_key"),
    M("data: CIFAR rows are read as HWC", "numbacnn/data/cifar.py",
      "return data.reshape(-1, 3, 32, 32), labels",
      "return data.reshape(-1, 32, 32, 3).transpose(0, 3, 1, 2), labels",
      ["tests/test_own_data.py", "-k", "cifar_batches"], inside="_batch"),
    M("data: the estimator scales colour with one mean for all channels", "numbacnn/estimator.py",
      "        if c > 1:\n", "        if c > 99:\n", ["tests/test_own_data.py", "-k", "channels_last"],
      inside="_CNNEstimator._set_scaling"),
    # dense layers with several feature blocks (every preset's first Dense layer)
    M("dense weight gradient: later blocks read the first block of x", K + "dense.py",
      "gf, o0, F_out, xf, i0, F_in,", "gf, o0, F_out, xf, 0, F_in,",
      ["tests/test_kernels.py", "-k", "dense"], inside="dense_backward_block"),
    M("dense weight gradient: later blocks read the first block of dout", K + "dense.py",
      "gf, o0, F_out, xf, i0, F_in,", "gf, 0, F_out, xf, i0, F_in,",
      ["tests/test_kernels.py", "-k", "dense"], inside="dense_backward_block"),
    M("dense input gradient: later blocks read the first block of W", K + "dense.py",
      "wf, i0, F_in, r1 - r0,", "wf, 0, F_in, r1 - r0,",
      ["tests/test_kernels.py", "-k", "dense"], inside="dense_backward_block"),
    M("dense input gradient: later row blocks read the first rows of dout", K + "dense.py",
      "gf, r0 * F_out, F_out,", "gf, 0, F_out,", ["tests/test_kernels.py", "-k", "dense"],
      inside="dense_backward_block"),
    M("dense forward: later blocks use the first block of W", K + "dense.py",
      "wf, j0 * F_in, F_in, j1 - j0", "wf, 0, F_in, j1 - j0",
      ["tests/test_kernels.py", "-k", "dense"], inside="_forward_tile"),
    M("dot blocks: the overlapping last block of columns dropped", K + "microkernel.py",
      "    for c in range(0, N, C):", "    for c in range(0, N - C + 1, C):",
      ["tests/test_kernels.py", "-k", "dot_rows or dense"], inside="dot_rows"),
    M("dot blocks: the reduction's last T % 16 terms left out", K + "microkernel.py",
      "cgutils.for_range_slice(builder, start, count, const(1))",
      "cgutils.for_range_slice(builder, start, start, const(1))",
      ["tests/test_kernels.py", "-k", "dot_rows or dense"], inside="_dot_block"),
    M("gemm_nn_add: the 16-column block after the 32-column ones left out", K + "microkernel.py",
      "    if w16 > w32:\n", "    if w16 > w32 + 99:\n",
      ["tests/test_kernels.py", "-k", "gemm_nn_add or positions"], inside="gemm_nn_add"),
    M("gemm_nn_add: OpenBLAS's rest overwrites instead of adding", K + "microkernel.py",
      "np.float32(0.0) if first else np.float32(1.0), yf, y0 + w16, ys)",
      "np.float32(0.0), yf, y0 + w16, ys)",
      ["tests/test_kernels.py", "-k", "gemm_nn_add or positions"], inside="gemm_nn_add"),
    M("gemm_tn: the 4 x 64 blocks stop a row short", K + "microkernel.py",
      "_block(TN_ROWS_4, 4, True, True)", "_block(TN_ROWS_4 - 1, 4, True, True)",
      ["tests/test_kernels.py", "-k", "gemm_tn or dense"]),
    M("gemm_tn: every chunk of the reduction overwrites the one before", K + "microkernel.py",
      "ws, kc, first and k0 == 0)", "ws, kc, first)",
      ["tests/test_kernels.py", "-k", "gemm_tn or dense"], inside="gemm_tn"),
    M("team of no thread count: 2 threads whatever numba's count", TEAM,
      "                                   numba_threads, team_size)",
      "                                   ir.Constant(i32, 2), team_size)",
      ["tests/test_program.py", "-k", "team"], inside="_team_region"),
    M("repeated predictions: the last program taken for any shape of as many dimensions",
      "numbacnn/network.py",
      "x.shape == last[0] and not training", "x.ndim == len(last[0]) and not training",
      ["tests/test_network.py", "-k", "repeated"], inside="Sequential.forward"),
    M("dense forward: later row blocks read the first rows of x", K + "dense.py",
      "xf, r0 * F_in, F_in,", "xf, 0, F_in,", ["tests/test_kernels.py", "-k", "dense"],
      inside="_forward_tile"),
    M("dense bias gradient from the first example only", K + "dense.py",
      "        for n in range(N):\n            s += dout[n, j]",
      "        for n in range(1):\n            s += dout[n, j]",
      ["tests/test_kernels.py", "-k", "dense"], inside="dense_backward"),
    # pooling: ties, routing, fused epilogues
    M("max pool 2x2: ties go to the last maximum", K + "pool.py",
      "            if v1 > best:", "            if v1 >= best:", ["tests/test_kernels.py", "-k", "maxpool"],
      inside="_maxpool_plane_2x2"),
    M("fused conv+ReLU+pool: ties go to the later column", K + "_conv_epilogue.py",
      "t01 = v1 > v0", "t01 = v1 >= v0", ["tests/test_gradients.py", "-k", "every_path"], inside="max2x2"),
    M("fused wide backward: every example of a chunk routes through its first example's argmax",
      K + "conv2d_wide.py", "dout[n], y[n], argmax[n], Wp", "dout[n], y[n], argmax[n0], Wp",
      ["tests/test_gradients.py", "-k", "every_path"], inside="conv2d_backward_wide_part"),
    # direct convolutions (conv2d_direct.py): taps per pass, channel pairs, first example
    M("direct rows: the 3-tap pass drops its last tap from the second channel", K + "conv2d_direct.py",
      "yb[j] += b0 * x0 + b1 * x1 + b2 * x2\n", "yb[j] += b0 * x0 + b1 * x1\n",
      ["tests/test_kernels.py", "-k", "forward_backward_match_oracle"], inside="direct_rows"),
    M("direct rows: an odd last channel's twin overwrites it", K + "conv2d_direct.py",
      "rb = cb if cb != co else Co", "rb = cb",
      ["tests/test_kernels.py", "-k", "forward_backward_match_oracle"], inside="direct_rows"),
    M("direct weight gradient: one tap's sums as a fast-math reduction (fresh and cached differ)",
      K + "conv2d_direct.py", "        a0, b0 = _one_tap_sums(ga, gb, xs, L)",
      "        for j in range(L):\n            a0 += ga[j] * xs[j]\n            b0 += gb[j] * xs[j]",
      ["tests/test_prebuilt.py", "-k", "from_numba_s_cache"], inside="_tap_sums"),
    M("direct weight gradient: an odd last channel's twin is added twice", K + "conv2d_direct.py",
      "                        if cb != co:", "                        if True:",
      ["tests/test_kernels.py", "-k", "forward_backward_match_oracle"], inside="direct_weight_grad"),
    M("direct weight gradient: the 3-tap pass's last tap reads the middle column", K + "conv2d_direct.py",
      "            a2 += p * x2\n            b0", "            a2 += p * x1\n            b0",
      ["tests/test_kernels.py", "-k", "forward_backward_match_oracle"], inside="_tap_sums"),
    M("direct weight gradient: every example overwrites (only the last one counts)", K + "conv2d_wide.py",
      "KH, KW, Wp, L, g0 + e == 0)", "KH, KW, Wp, L, True)",
      ["tests/test_gradients.py", "-k", "every_path"], inside="conv2d_backward_wide_part"),
    M("fused positions backward: routes through the first example's argmax", K + "conv2d_positions.py",
      "dout[n], y[n], argmax[n], OW", "dout[n], y[n], argmax[n0], OW",
      ["tests/test_gradients.py", "-k", "every_path"], inside="conv2d_backward_positions_part"),
    M("max pool backward: plane overwritten instead of accumulated", K + "pool.py",
      "            d[a[oy, ox]] += g[oy, ox]", "            d[a[oy, ox]] = g[oy, ox]",
      ["tests/test_gradients.py", "-k", "overlap or every_path"], inside="maxpool2d_backward_part"),
    M("fused ReLU backward: mask ignored", K + "_conv_epilogue.py",
      "dst[ox] = src[ox] if (not relu or yr[ox] > zero) else zero", "dst[ox] = src[ox]",
      ["tests/test_gradients.py", "-k", "every_path"], inside="wide_grad"),
    # reductions and determinism
    M("gradient parts follow the thread count (reduction order changes with threads)",
      "numbacnn/backend/cpu_conv.py", "return _config.grad_parts(n)",
      "return min(n, 4 * _config.get_num_threads())", ["tests/test_network.py", "-k", "threads"],
      inside="CpuConvPlan.grad_parts"),
    M("gradient parts overlap (an example counted twice, another skipped)", K + "_util.py",
      "return (c * n) // parts, ((c + 1) * n) // parts",
      "return (c * n) // parts, min(n, (c * n) // parts + 2)",
      ["tests/test_gradients.py", "-k", "mean_of_per_example"], inside="part_bounds"),
    M("conv backward in chunks of 8 examples again (16 parts at batch 128)", RT + "config.py",
      "return max(1, min(n, GRAD_PARTS))", "return max(1, -(-n // 8))",
      ["tests/test_kernels.py", "-k", "parts"], inside="grad_parts"),
    M("part sums skip the last part", K + "_util.py",
      "        for p in range(1, P):\n            src",
      "        for p in range(1, P - 1):\n            src",
      ["tests/test_gradients.py", "-k", "mean_of_per_example"], inside="sum_parts_part"),
    M("part sums: the bias skips the last part", K + "_util.py",
      "            for p in range(1, P):\n                s +=",
      "            for p in range(1, P - 1):\n                s +=",
      ["tests/test_kernels.py", "-k", "sum_parts"], inside="sum_parts_part"),
    M("part sums: the weight written in the parts' own order", K + "_util.py",
      "dw[d0 + b * s2 + c * s3] = acc[r0 + b * C + c]",
      "dw[t * R + b * C + c] = acc[r0 + b * C + c]",
      ["tests/test_kernels.py", "-k", "sum_parts"], inside="sum_parts_part"),
    M("fused ReLU + pool: the argmax marks zero maxima as passed", K + "_conv_epilogue.py",
      "return k if not relu or best > np.float32(0.0) else -1 - k",
      "return k if not relu or best >= np.float32(0.0) else -1 - k",
      ["tests/test_gradients.py", "-k", "every_path"], inside="marked"),
    M("fused pool without ReLU: negative maxima pass no gradient", K + "_conv_epilogue.py",
      "return k if not relu or best > np.float32(0.0) else -1 - k",
      "return k if best > np.float32(0.0) else -1 - k",
      ["tests/test_kernels.py", "-k", "fusion_matches_oracle"], inside="marked"),
    M("fused pool without ReLU: the 2x2 windows clamped at zero all the same", K + "conv2d_positions.py",
      "                    if relu:\n                        v0 = v0 if v0 > zero else zero",
      "                    if True:\n                        v0 = v0 if v0 > zero else zero",
      ["tests/test_kernels.py", "-k", "fusion_matches_oracle"], inside="_epilogue_positions"),
    M("fused pool without ReLU: the general scan clamps at zero", K + "_conv_epilogue.py",
      "                    if relu:\n                        v = v if not v < zero else zero",
      "                    if True:\n                        v = v if not v < zero else zero",
      ["tests/test_kernels.py", "-k", "fusion_matches_oracle or propagates_nan"], inside="pool_scan"),
    M("fused pool without ReLU: inference's window maximum clamps at zero", K + "conv2d_positions.py",
      "return v if not relu or v > np.float32(0.0) else np.float32(0.0)",
      "return v if v > np.float32(0.0) else np.float32(0.0)",
      ["tests/test_kernels.py", "-k", "fusion_matches_oracle"], inside="_window_max"),
    M("fusion: a max pool right after a convolution is not fused", "numbacnn/layers/fusion.py",
      "j = i + 2 if relu else i + 1", "j = i + 2",
      ["tests/test_kernels.py", "-k", "only_where_it_is_exact"], inside="plan"),
    M("softmax: the sum of exponentials not shifted by the row maximum", K + "loss.py",
      "s += np.exp(np.float64(row[k] - m))", "s += np.exp(np.float64(row[k]))",
      ["tests/test_kernels.py", "-k", "softmax"], inside="row_max_and_exp_sum"),
    M("loss gradient not divided by the batch size", K + "loss.py",
      "inv_n = 1.0 / N", "inv_n = 1.0", ["tests/test_kernels.py", "-k", "softmax"],
      inside="softmax_cross_entropy_part"),
    M("optimizers: the state keeps its subnormal values", K + "optim.py",
      "    return np.float32(0.0) if abs(x) < _TINY else x", "    return x",
      ["tests/test_network.py", "-k", "flushed"]),
    M("optimizers: Adam's second moment not flushed", K + "optim.py",
      "vi = _flushed(b2 * vs[i] + (np.float32(1.0) - b2) * d * d)",
      "vi = b2 * vs[i] + (np.float32(1.0) - b2) * d * d",
      ["tests/test_network.py", "-k", "flushed"]),
    M("optimizers: centered RMSProp's variance not flushed", K + "optim.py",
      "avg = np.sqrt(_flushed(sq - ga * ga)) + e", "avg = np.sqrt(sq - ga * ga) + e",
      ["tests/test_network.py", "-k", "flushed"]),
    M("SGD Nesterov step uses plain momentum", K + "optim.py",
      "(d + mom * b if nesterov else b)", "(b if nesterov else b)",
      ["tests/test_network.py", "-k", "formulas"], inside="sgd_update_part"),
    # the command line
    M("CLI ignores --nesterov", "numbacnn/runconfig.py", "nesterov=args.nesterov", "nesterov=False",
      ["tests/test_cli.py", "-k", "reach_the_optimizer"], inside="_new_optimizer"),
    M("CLI ignores --weight-decay", "numbacnn/runconfig.py", '"weight_decay": wd}',
      '"weight_decay": 0.0}', ["tests/test_cli.py", "-k", "reach_the_optimizer"], inside="_new_optimizer"),
    M("CLI default sgd learning rate changed", "numbacnn/runconfig.py", '"sgd": 0.05', '"sgd": 0.01',
      ["tests/test_cli.py", "-k", "reach_the_optimizer"]),
    M("CLI default batch size on other data changed", "numbacnn/runconfig.py",
      '"epochs": 10, "batch_size": 64', '"epochs": 10, "batch_size": 32',
      ["tests/test_cli.py", "-k", "defaults_for_non_digits"]),
    M("resume under the cosine schedule without restoring the base lr", "numbacnn/training.py",
      '        self.base_lr = float(st.get("base_lr", self.base_lr))\n', "",
      ["tests/test_cli.py", "-k", "cosine"], inside="Trainer.load_state"),
    M("resume takes the checkpoint's seed silently", "numbacnn/runconfig.py",
      '(("batch_size", "batch_size"), ("seed", "seed"))', '(("batch_size", "batch_size"),)',
      ["tests/test_cli.py", "-k", "refuses"], inside="_resume_meta"),
    M("resume does not check the data", "numbacnn/runconfig.py",
      'tmeta.get("data_fingerprint", fingerprint) != fingerprint', "False",
      ["tests/test_cli.py", "-k", "refuses"], inside="configure"),
    M("--evaluate reports the training split", "numbacnn/cli.py",
      "loss, acc = evaluate(ck.net, ds.x_test, ds.y_test, parallel=dp, tta=args.tta)",
      "loss, acc = evaluate(ck.net, ds.x_train, ds.y_train, parallel=dp, tta=args.tta)",
      ["tests/test_cli.py", "-k", "evaluate_prints"], inside="_evaluate"),
    M("auto picks compact only below 16x16", "numbacnn/arch.py", "max(input_shape[1:]) <= 16",
      "max(input_shape[1:]) < 16", ["tests/test_cli.py", "-k", "auto_architecture"], inside="resolve_preset"),
    # distributed training and the estimator on Dask
    M("distributed: local gradients not scaled to the global batch", "numbacnn/training.py",
      "            dlogits *= np.float32(len(share) / len(idx))", "            pass",
      ["tests/test_distributed.py", "-k", "bitwise and sgd"], inside="Trainer._parallel_step"),
    M("Winograd on every small output of a narrow layer", "numbacnn/backend/cpu_conv.py",
      "oh * ow < T.WINOGRAD_MIN_AREA", "oh * ow < 0", ["tests/test_kernels.py", "-k", "falls_back"],
      inside="WinogradPlan._runs_f2"),
    M("row blocks chosen by the thread count", "numbacnn/backend/cpu_conv.py",
      "return min(rows, max(blocks, -(-T.MIN_BLOCKS // n)))",
      "return min(rows, __import__('numba').get_num_threads())",
      ["tests/test_network.py", "-k", "identical_for"], inside="positions_blocks"),
    M("a channel block stops one channel short", "numbacnn/kernels/cpu/conv2d_wide.py",
      "        t = numba.get_thread_id()\n        cf = cols[t]",
      "        c1 -= S > 1\n        t = numba.get_thread_id()\n        cf = cols[t]",
      ["tests/test_kernels.py", "-k", "fusion_matches_oracle or forward_backward_match"],
      inside="conv2d_forward_wide_block"),
    M("a row block's GEMM covers one output row short", "numbacnn/kernels/cpu/conv2d_positions.py",
      "        Lb = (r1 - r0) * U * OW\n", "        Lb = (r1 - r0) * U * OW - (S > 1) * OW\n",
      ["tests/test_kernels.py", "-k", "fusion_matches_oracle or forward_backward_match"],
      inside="conv2d_forward_positions_block"),
    # Winograd F(2x2, 3x3) and the backward's GEMM pieces
    M("winograd: the filter transform's middle row adds g1 twice", W,
      "_half3(work[(12 + c) * M + j0:(12 + c) * M + j1], g0, g1, g2, 1)",
      "_half3(work[(12 + c) * M + j0:(12 + c) * M + j1], g0, g1, g1, 1)",
      ["tests/test_kernels.py", "-k", "forward_backward_match and winograd"], inside="winograd_filters"),
    M("winograd: the input transform's second column subtracts", W,
      "_add(vf[(k + 1) * s + o:(k + 1) * s + o + n], o0, e1)",
      "_sub(vf[(k + 1) * s + o:(k + 1) * s + o + n], o0, e1)",
      ["tests/test_kernels.py", "-k", "forward_backward_match and winograd"], inside="_input_tiles"),
    M("winograd: the input gradient's filters are not rotated", "numbacnn/backend/cpu_conv.py",
      "launch(K.winograd_filters, u2, weight, True,",
      "launch(K.winograd_filters, u2, weight.transpose(1, 0, 2, 3).copy(), False,",
      ["tests/test_kernels.py", "-k", "forward_backward_match and winograd"], inside="WinogradPlan.backward"),
    # bfloat16 (precision "bf16")
    M("bf16: rounding drops ties-to-even (ties round up)", "numbacnn/kernels/cpu/bf16.py",
      "(b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1)))", "(b + np.uint32(0x8000))",
      ["tests/test_bf16.py", "-k", "ties_to_even"], inside="_bf16_bits"),
    M("bf16: pairs packed with the odd row in the low half", "numbacnn/kernels/cpu/bf16.py",
      "_bf16_bits(even[j]) | (_bf16_bits(odd[j]) << np.uint32(16))",
      "_bf16_bits(odd[j]) | (_bf16_bits(even[j]) << np.uint32(16))",
      ["tests/test_bf16.py", "-k", "pack_pairs or gemm_pairs"], inside="pack_pairs"),
    M("bf16: the emulated block reads the low term from the high half", "numbacnn/kernels/cpu/bf16.py",
      "builder.bitcast(builder.shl(xs, sixteen), vec)", "builder.bitcast(builder.and_(xs, high), vec)",
      ["tests/test_bf16.py", "-k", "emulated"], inside="_pair_block"),
    M("bf16: gemm_pairs' chunks restart the sums", "numbacnn/kernels/cpu/bf16.py",
      "w0 + k0 * ws + 2 * c0, ws, kc, first and k0 == 0)", "w0 + k0 * ws + 2 * c0, ws, kc, first)",
      ["tests/test_bf16.py", "-k", "gemm_pairs"], inside="gemm_pairs", replace_all=True),
    M("winograd4 bf16: the forward's GEMMs leave out the last pair of channels", W4,
      "Uh, k * Ci * Co, 2 * Co, TB, Co, Ci // 2, True)",
      "Uh, k * Ci * Co, 2 * Co, TB, Co, Ci // 2 - 1, True)",
      ["tests/test_bf16.py", "-k", "winograd4"], inside="_gemms4_pairs", replace_all=True),
    M("winograd4 bf16: the weight gradient drops an odd last tile", W4,
      "T2 = (TB + 1) // 2", "T2 = TB // 2",
      ["tests/test_bf16.py", "-k", "winograd4"], inside="_weight_gemms4_pairs"),
    M("winograd4 bf16: the input gradient's GEMMs take the forward's filters", W4,
      "_gemms4_pairs(mx, KMX, vh, KVX, U2h,", "_gemms4_pairs(mx, KMX, vh, KVX, U2h[::-1].copy(),",
      ["tests/test_bf16.py", "-k", "winograd4"], inside="conv2d_backward_winograd4_part"),
    # AMX's tiles (tdpbf16ps): only where this machine runs them (elsewhere their tests skip)
    *([M("AMX: a step of 16 pairs where the reduction is 8 pairs longer", K + "bf16.py",
         "kp = 16 if K2 % 16 == 0 else 8", "kp = 16 if K2 % 8 == 0 else 8",
         ["tests/test_bf16.py", "-k", "gemm_tiles"], inside="gemm_tiles"),
       M("AMX: the second row block reads the first block's rows", K + "bf16.py",
         "builder.add(builder.mul(rs16, c(a)), builder.mul(s, step_x))",
         "builder.add(builder.mul(rs16, c(0)), builder.mul(s, step_x))",
         ["tests/test_bf16.py", "-k", "gemm_tiles"], inside="_tile_block"),
       M("AMX: the rows past the last 16 are left out", K + "bf16.py",
         "for rows in (16, M - whole):", "for rows in (16, 16 * (M > whole)):",
         ["tests/test_bf16.py", "-k", "gemm_tiles"], inside="gemm_tiles"),
       M("winograd4 AMX: the weight gradient's pair rows past the tiles are not zeroed", W4,
         "mp[k * KQ + T2 * 2 * Co:k * KQ + T16 * Co] = 0", "pass",
         ["tests/test_bf16.py", "-k", "winograd4 or scratch"], inside="_weight_gemms4_pairs"),
       M("winograd4 AMX: the transposed tiles keep what lay past the last", K + "bf16.py",
         "out[T:T1] = 0", "pass", ["tests/test_bf16.py", "-k", "winograd4 or round_transposed"],
         inside="round_transposed")] if _host_has_amx() else []),
    # Winograd F(4x4, 3x3)
    M("winograd4: A^T's last row takes 7 m3 for 8 m3", W4,
      "x3, _F(8.0), x4, _F(-8.0), x5, _F(1.0))", "x3, _F(7.0), x4, _F(-8.0), x5, _F(1.0))",
      ["tests/test_kernels.py", "-k", "winograd4"], inside="_at"),
    M("winograd4: the filter transform's packed panels swapped", W4,
      "Uf[((k * (B // P) + p) * A + a) * P:", "Uf[((k * (B // P) + (B // P - 1 - p)) * A + a) * P:",
      ["tests/test_kernels.py", "-k", "winograd4"], inside="winograd4_filters"),
    M("winograd4: the weight gradient's GEMMs overwrite the collected tiles", W4,
      "k * KM, Co, Ci, Co, TB, first)", "k * KM, Co, Ci, Co, TB, True)",
      ["tests/test_kernels.py", "-k", "winograd4"], inside="_weight_gemms4"),
    M("winograd4: the input gradient reads the gradient plane unpadded", W4,
      "_plane4(gp, gf[:Co * L].reshape((Co, OH, OW)), 2 - PH, 2 - PW, Hg, Wg)",
      "_plane4(gp, gf[:Co * L].reshape((Co, OH, OW)), 1 - PH // 2, 2 - PW, Hg, Wg)",
      ["tests/test_kernels.py", "-k", "winograd4"], inside="conv2d_backward_winograd4_part"),
    M("winograd4: the transforms compiled with fast-math (fresh and cached compiles differ)", W4,
      "@kernel(fastmath=False)", "@kernel()", ["tests/test_prebuilt.py", "-k", "from_numba_s_cache"],
      replace_all=True),
    M("winograd4: the plan takes layers whose 4x4 tiles do more work", "numbacnn/backend/cpu_conv.py",
      "36 * th4 * tw4 <= T.WINOGRAD4_MAX_WORK * 16 * th2 * tw2", "36 * th4 * tw4 <= 3 * 16 * th2 * tw2",
      ["tests/test_kernels.py", "-k", "winograd4_runs"], inside="WinogradPlan._runs_f4"),
    M("winograd4: the plan takes batches of one example", "numbacnn/backend/cpu_conv.py",
      "n >= T.WINOGRAD4_MIN_EXAMPLES and", "n >= 1 and",
      ["tests/test_kernels.py", "-k", "winograd4_runs"], inside="WinogradPlan._runs_f4"),
    M("winograd4: the weight gradient's parts follow the thread count", "numbacnn/backend/cpu_conv.py",
      "parts = min(_config.grad_parts(n), max(T.WINOGRAD4_MIN_PARTS, -(-n * th * tw // cap)))",
      "parts = min(_config.grad_parts(n), max(T.WINOGRAD4_MIN_PARTS * __import__('numba').get_num_threads()"
      " // 2, -(-n * th * tw // cap)))",
      ["tests/test_network.py", "-k", "identical_for"], inside="WinogradPlan._backward4"),
    M("winograd: the weight gradient's GEMMs overwrite the collected tiles", W,
      "vf, k * KV, Ci, Co, Ci, TB, first)", "vf, k * KV, Ci, Co, Ci, TB, True)",
      ["tests/test_kernels.py", "-k", "forward_backward_match"], inside="_weight_gemms"),
    M("winograd: wide layers' weight gradients keep the small-matrix limit", "numbacnn/backend/cpu_conv.py",
      "if ci % 16 == 0 and ci * co >= T.WINOGRAD_DW_WIDE:", "if False:",
      ["tests/test_kernels.py", "-k", "wide_winograd"], inside="dw_tiles"),
    M("winograd: a wide layer's weight gradient drops the tiles past the first GEMM", W,
      "                _weight_gemms(duf, mf, vf, Co, Ci, filled, KM, KV, first)\n"
      "                first = False", "                first = True",
      ["tests/test_kernels.py", "-k", "wide_winograd"], inside="conv2d_backward_winograd_part"),
    M("winograd: the gradient tiles read the output one column left", W,
      "col = OX + b  #", "col = OX + b - 1  #",
      ["tests/test_kernels.py", "-k", "forward_backward_match and winograd"], inside="_gradient_tiles"),
    M("winograd: the output's odd columns come from the even slots", K + "conv2d_positions.py",
      "return ox if half == 0 else (ox & 1) * half + (ox >> 1)", "return ox if half == 0 else ox >> 1",
      ["tests/test_kernels.py", "-k", "winograd"], inside="_slot"),
    M("winograd: tile-row blocks chosen by the thread count", "numbacnn/backend/cpu_conv.py",
      "        return max(1, T.WINOGRAD_TILES // tw)",
      "        return max(1, T.WINOGRAD_TILES // tw // __import__('numba').get_num_threads())",
      ["tests/test_network.py", "-k", "identical_for"], inside="WinogradPlan.block_rows"),
    M("winograd: the plane keeps the columns past its width", W,
      "for j in range(min(W, Wt - PW)):  # columns past", "for j in range(W):  # columns past",
      ["tests/test_kernels.py", "-k", "fusion_matches_oracle and winograd"], inside="_plane"),
    M("winograd: the input gradient's uncomputed columns keep old values", W,
      "dx[n][:, :Hx, Wx:] = np.float32(0.0)", "pass",
      ["tests/test_kernels.py", "-k", "fusion_matches_oracle and winograd"],
      inside="conv2d_backward_winograd_part"),
    M("direct 3x3: a channel quad's later input channels overwrite its second row", K + "conv2d_direct.py",
      "                y1[j] += (b0", "                y1[j] = (b0",
      ["tests/test_kernels.py", "-k", "forward_backward_match"], inside="_quad3x3"),
    M("packed weights: a record never notices a change of the weights", K + "_util.py",
      "if seen[n] == 1 and _bits_diff(seen, 0, w) == 0:", "if seen[n] == 1:",
      ["tests/test_program.py", "-k", "packed_weights"], inside="unchanged"),
    M("inference replays: a view of the input keeps reading the recording buffer", RT + "program.py",
      "a[k] = x if view is None else np.ndarray(view[1], np.float32, x, view[0], view[2])",
      "a[k] = x if view is None else np.ndarray(view[1], np.float32, self.x, view[0], view[2])",
      ["tests/test_program.py", "-k", "where_it_lies"], inside="InferenceProgram._read"),
    M("wide epilogue: inference pools without a window's second row", K + "conv2d_wide.py",
      "orow[px] = max(max(r0[i], r0[i + 1]), max(r1[i], r1[i + 1]))",
      "orow[px] = max(r0[i], r0[i + 1])",
      ["tests/test_kernels.py", "-k", "fusion_matches_oracle"], inside="_epilogue_pool"),
    M("grouped forward: every output channel reads the first group", K + "conv2d_grouped.py",
      "c0 = (co // (Co // groups)) * cig", "c0 = 0 * cig",
      ["tests/test_gradients.py", "-k", "grouped"], inside="conv2d_forward_grouped_block"),
    M("grouped input gradient: dilation ignored along the rows", K + "conv2d_grouped.py",
      "ih = oh * SH - PT + kh * DH", "ih = oh * SH - PT + kh",
      ["tests/test_gradients.py", "-k", "grouped"], inside="_dx_block"),
    M("grouped weight gradient: a part loses its last example", K + "conv2d_grouped.py",
      "n0, n1 = N * p // P, N * (p + 1) // P", "n0, n1 = N * p // P, max(N * p // P, N * (p + 1) // P - 1)",
      ["tests/test_gradients.py", "-k", "grouped"], inside="_dw_block"),
    M("grouped backward: the fused ReLU's mask not applied", K + "conv2d_grouped.py",
      "        src = g\n    wide = ", "        src = dy\n    wide = ",
      ["tests/test_gradients.py", "-k", "grouped"], inside="conv2d_backward_grouped"),
    M("depthwise backward: a multiplier's second filter's input gradient overwrites the first's",
      K + "conv2d_grouped.py", "_gather3x3(dp, ge, w[co, 0], RS, CS, M, k == 0)",
      "_gather3x3(dp, ge, w[co, 0], RS, CS, M, True)", ["tests/test_grouped.py", "-k", "depthwise"],
      inside="_depthwise_backward_block"),
    M("depthwise backward: the taps' sums read the next kernel row", K + "conv2d_grouped.py",
      "xp, kh * RS, DW, KW, ge, M, L, 1, L)", "xp, (kh + 1) * RS, DW, KW, ge, M, L, 1, L)",
      ["tests/test_grouped.py", "-k", "depthwise"], inside="_depthwise_backward_block"),
    M("depthwise forward: the 3x3 pass drops its last tap", K + "conv2d_grouped.py",
      "acc[j] = v + w8 * x8[j]", "acc[j] = v", ["tests/test_grouped.py", "-k", "depthwise"],
      inside="_taps3x3"),
    M("depthwise flat forward: the edge planes' copy loses its zero margin", K + "conv2d_grouped.py",
      "xp[before + j] = src[base + j]", "xp[j] = src[base + j]", ["tests/test_grouped.py", "-k", "flat"],
      inside="_edge_copy"),
    M("depthwise flat forward: the 3x3 pass's last tap not masked", K + "conv2d_grouped.py",
      "out[j] = v + (t if m8[j] else z)", "out[j] = v + t", ["tests/test_grouped.py", "-k", "flat"],
      inside="_masked_taps3x3"),
    M("depthwise flat forward: the 3x3 pass's middle row read a column late", K + "conv2d_grouped.py",
      "s3, s4, s5 = src[o + R:o + R + P], src[o + R + C:o + R + C + P]",
      "s3, s4, s5 = src[o + R + 1:o + R + 1 + P], src[o + R + C:o + R + C + P]",
      ["tests/test_grouped.py", "-k", "flat"], inside="_masked_taps3x3"),
    M("depthwise flat forward: the taps past a plane's edge not masked", K + "conv2d_grouped.py",
      "out[j] += t if m[j] else z", "out[j] += t", ["tests/test_grouped.py", "-k", "flat"],
      inside="_masked_taps"),
    M("depthwise flat forward: the masks' columns read as rows", "numbacnn/backend/cpu_conv.py",
      "c = iw + (np.arange(kw) * dw - left)[:, None]", "c = iw + (np.arange(kw) * dh - top)[:, None]",
      ["tests/test_grouped.py", "-k", "flat"], inside="depthwise_masks"),
    M("depthwise flat backward: the input gradient's filters not flipped", K + "conv2d_grouped.py",
      "wf = w[co, 0, ::-1, ::-1]", "wf = w[co, 0]", ["tests/test_grouped.py", "-k", "flat"],
      inside="conv2d_backward_depthwise_flat_block"),
    M("depthwise flat backward: the flipped filters' masks padded as the forward's",
      "numbacnn/backend/cpu_conv.py",
      '("bmasks", (kh - 1) * dh - pt, (kw - 1) * dw - pl)', '("bmasks", pt, pl)',
      ["tests/test_grouped.py", "-k", "flat"], inside="depthwise_masks"),
    M("depthwise flat backward: the weight gradient's columns past the edge not zeroed",
      K + "conv2d_grouped.py",
      "gm[j] = gc[j] if cm[j] else z", "gm[j] = gc[j]", ["tests/test_grouped.py", "-k", "flat"],
      inside="conv2d_backward_depthwise_flat_block"),
    M("depthwise flat backward: the weight gradient's dots over every row", K + "conv2d_grouped.py",
      "lo, hi = max(0, PT - kh * DH), min(H, H + PT - kh * DH)", "lo, hi = 0, H",
      ["tests/test_grouped.py", "-k", "flat"], inside="conv2d_backward_depthwise_flat_block"),
    M("depthwise flat backward: the gradient's edge copy with the input's margins", K + "conv2d_grouped.py",
      "HW, ahead, back)", "HW, back, ahead)", ["tests/test_grouped.py", "-k", "flat"],
      inside="conv2d_backward_depthwise_flat_block"),
    M("depthwise flat backward: a part's examples overwrite each other's bias sums", K + "conv2d_grouped.py",
      "acc[base + R] += flat[(base + R) * 2 + 1]", "acc[base + R] = flat[(base + R) * 2 + 1]",
      ["tests/test_grouped.py", "-k", "flat"], inside="conv2d_backward_depthwise_flat_block"),
    M("padded plan: the input gradient cropped a row too low", K + "pad.py",
      "src = gs[r + PT, PL:PL + W]", "src = gs[r + PT + 1, PL:PL + W]",
      ["tests/test_grouped.py", "-k", "uneven_padding"], inside="pad2d_backward_block"),
    M("pointwise weight gradient: a part's examples overwrite each other", K + "conv2d_pointwise.py",
      "beta = np.float32(0.0) if n == n0 else np.float32(1.0)", "beta = np.float32(0.0)",
      ["tests/test_gradients.py", "-k", "grouped"], inside="_pointwise_dw_block"),
    M("pointwise input gradient: the fused ReLU's mask not applied", K + "conv2d_pointwise.py",
      "src = g if relu else dy", "src = dy", ["tests/test_gradients.py", "-k", "grouped"],
      inside="_pointwise_dx_block"),
    M("gates: SiLU's gradient drops its second term", K + "gates.py",
      "d = s * (one + v * (one - s))", "d = s",
      ["tests/test_gradients.py", "-k", "grouped"], inside="gate_backward_block"),
    M("gates: hard swish's ramp off by a factor", K + "gates.py",
      "v / three + half", "v / six + half",
      ["tests/test_gradients.py", "-k", "grouped"], inside="gate_backward_block"),
    M("gemm im2col: a strided run reads consecutive inputs", K + "conv2d_gemm.py",
      "numba.uint64(SW), numba.uint64(x_hi - x_lo))", "numba.uint64(1), numba.uint64(x_hi - x_lo))",
      ["tests/test_kernels.py", "-k", "forward_backward_match"], inside="im2col"),
    M("gemm col2im: the input gradient lands on consecutive inputs", K + "conv2d_gemm.py",
      "xf[dst + i * numba.uint64(SW)] += cf[src + i]", "xf[dst + i] += cf[src + i]",
      ["tests/test_kernels.py", "-k", "forward_backward_match"], inside="col2im"),
    M("gemm forward: the FMA blocks miss the last input channel's taps", K + "conv2d_gemm.py",
      "gemm_nn(yf, 0, ld, wf, 0, ckk, cf, 0, ld, Co, cn, ckk)",
      "gemm_nn(yf, 0, ld, wf, 0, ckk, cf, 0, ld, Co, cn, ckk - 1)",
      ["tests/test_kernels.py", "-k", "forward_backward_match"], inside="conv2d_forward_gemm_block"),
    M("gemm backward: every example of a part takes the first one's input gradient", K + "conv2d_gemm.py",
      "col2im(dx[n0 + e], df, e * OHW, ld,", "col2im(dx[n0 + e], df, 0, ld,",
      ["tests/test_series.py", "-k", "parts_of_the_batch"], inside="conv2d_backward_gemm_part"),
    M("positions epilogue: the biased transposes forget the fused ReLU", K + "conv2d_positions.py",
      "ytf, p0 * Co + c0, Co, b, c0, relu)", "ytf, p0 * Co + c0, Co, b, c0, False)",
      ["tests/test_kernels.py", "-k", "unpooled_conv_relu"], inside="_epilogue_rows"),
    M("positions epilogue: every block of 16 channels takes the first 16 biases", K + "conv2d_positions.py",
      "ytf, p0 * Co + c0, Co, b, c0, relu)", "ytf, p0 * Co + c0, Co, b, 0, relu)",
      ["tests/test_kernels.py", "-k", "unpooled_conv_relu"], inside="_epilogue_rows"),
    M("positions backward: a weight GEMM piece starts over instead of accumulating",
      K + "conv2d_positions.py",
      "kn, g0 == 0 and k0 == 0)", "kn, g0 == 0)",
      ["tests/test_kernels.py", "-k", "forward_backward_match"], inside="conv2d_backward_positions_part"),
    M("dropout: Philox's second key constant", "numbacnn/kernels/cpu/dropout.py",
      "np.uint64(0xBB67AE85)", "np.uint64(0xBB67AE86)", ["tests/test_kernels.py", "-k", "philox"]),
    M("dropout: the masks ignore the offset of the process's values", "numbacnn/kernels/cpu/dropout.py",
      "    off = state[2]\n", "    off = state[3]\n", ["tests/test_kernels.py", "-k", "oracle_masks"],
      inside="dropout_forward_part"),
    M("dropout: the blocks counted without the offset of the process's values", K + "dropout.py",
      "    off = state[2]\n", "    off = state[3]\n", ["tests/test_kernels.py", "-k", "oracle_masks"],
      inside="dropout_forward"),
    M("dropout: Philox's high product word shifted by 31", "numbacnn/kernels/cpu/dropout.py",
      "np.uint32(p1 >> _S32)", "np.uint32(p1 >> np.uint64(31))", ["tests/test_kernels.py", "-k", "philox"],
      inside="philox4x32"),
    M("dropout: a block's masks read its words from the start where its first value is inside a group",
      K + "dropout.py", "lo, hi = max(np.int64(0), base), min(np.int64(M), base + 4 * G)",
      "lo, hi = np.int64(0), min(np.int64(M), base + 4 * G)", ["tests/test_kernels.py", "-k", "oracle_masks"],
      inside="dropout_forward_part"),
    M("distributed: each rank draws its own dropout masks", "numbacnn/network.py",
      "layer.set_offset(lo * math.prod(shape))", "layer.set_offset(0)",
      ["tests/test_distributed.py", "-k", "bitwise and sgd"], inside="_slice_dropouts"),
    M("distributed: every rank compiles from a cold cache", "numbacnn/distributed.py",
      "        if self.local_rank == 0:\n            compile_step()",
      "        if True:\n            compile_step()",
      ["tests/test_distributed.py", "-k", "compiles"], inside="DataParallel.compile_once"),
    M("pickles carry the gradient buffer", "numbacnn/network.py",
      '        state["grads"] = None', "        pass", ["tests/test_dask.py", "-k", "pickles"],
      inside="Sequential.__getstate__"),
    # the report and the export
    M("routing: the analysis forward keeps the fusion (no argmax of the fused pools)",
      "numbacnn/layers/fusion.py",
      "plan(layers) if enabled else", "plan(layers) if True else",
      ["tests/test_report.py", "-k", "oracle"], inside="fuse_chain"),
    M("fused pool backward: the window offset split with the window height", K + "_conv_epilogue.py",
      "inv = np.int32(65536 // PKW + 1)", "inv = np.int32(65536 // PKH + 1)",
      ["tests/test_kernels.py", "-k", "fusion"], inside="wide_grad_pooled"),
    M("ONNX: average pooling excludes the padding", "numbacnn/layers/pool.py",
      '"AveragePool", count_include_pad=1)', '"AveragePool", count_include_pad=0)', ["tests/test_onnx.py"],
      inside="AvgPool2D.onnx"),
    # data, layers, estimator
    M("fractional labels truncated to integers", "numbacnn/data/__init__.py",
      "if not np.isfinite(y).all() or (y != np.round(y)).any():", "if not np.isfinite(y).all():",
      ["tests/test_data.py", "-k", "fractional"], inside="as_labels"),
    M("padding='same' accepted with stride 2", "numbacnn/layers/conv.py",
      "if s != (1, 1):", "if False:",
      ["tests/test_network.py", "-k", "bad_inputs"], inside="_padding"),
    M("estimator standardises with the median, not the mean", "numbacnn/estimator.py",
      "self.x_mean_ = float(np.mean(X, dtype=np.float64))", "self.x_mean_ = float(np.median(X))",
      ["tests/test_estimator.py", "-k", "standardised"], inside="_CNNEstimator._set_scaling"),
    M("estimator maps predictions to the wrong class labels", "numbacnn/estimator.py",
      "return self.classes_[np.argmax(logits, axis=1)]",
      "return self.classes_[::-1][np.argmax(logits, axis=1)]",
      ["tests/test_estimator.py", "-k", "string_labels"], inside="CNNClassifier.predict"),
    # recorded steps
    M("batch gather reads row i instead of row idx[i]", K + "batch.py",
      "    src = x[idx[i]]", "    src = x[i]", ["tests/test_kernels.py", "-k", "gather"],
      inside="gather_batch_part"),
    M("batch gather: labels of row i instead of row idx[i]", K + "batch.py",
      "    labels[i] = y[idx[i]]", "    labels[i] = y[i]", ["tests/test_kernels.py", "-k", "gather"],
      inside="gather_batch_part"),
    M("step statistics: ties go to the last largest logit", K + "batch.py",
      "            if row[k] > row[best]:", "            if row[k] >= row[best]:",
      ["tests/test_kernels.py", "-k", "gather"], inside="step_stats"),
    M("a replayed step dispatches every kernel call again", RT + "program.py",
      "return fn if overload is None else overload.entry_point", "return fn",
      ["tests/test_program.py", "-k", "runs_no"], inside="entry_point"),
    M("a replayed step leaves the dropout generator where it was", RT + "program.py",
      "return [(entry_point(f, args), args) for f, args in calls]",
      "return [(entry_point(f, args), args) for f, args in calls if 'advance' not in f.__name__]",
      ["tests/test_program.py", "-k", "same_bits"], inside="compiled"),
    M("recording takes other threads' kernel calls too", RT + "calls.py",
      "_tape = threading.local()", "_tape = type('Tape', (), {'calls': None})()",
      ["tests/test_program.py", "-k", "thread"]),
    # the kernels' parallel loop
    M("parallel loop: a block that fails in a thread goes unreported", PARALLEL,
      "                    call(builder.sub(first, one))\n", "",
      ["tests/test_parallel.py", "-k", "raises"], inside="_parallel_blocks"),
    M("parallel loop: each part stops one block short", PARALLEL,
      "hi = b.sdiv(b.mul(total, b.add(part, ir.Constant(i64, 1))), parts)",
      "hi = b.sub(b.sdiv(b.mul(total, b.add(part, ir.Constant(i64, 1))), parts), ir.Constant(i64, 1))",
      ["tests/test_parallel.py", "-k", "once"], inside="_parallel_blocks"),
    M("parallel loop: a cached kernel loads without binding its blocks", PARALLEL,
      "            library._reload_init.add(\n", "            set().add(\n",
      ["tests/test_parallel.py", "-k", "cached"], inside="_parallel_blocks"),
    # cold start
    M("prebuilt kernels' stamp leaves out the JIT flags in _flags.py", RT + "prebuilt.py",
      "    h.update(repr((sorted(_flags.FASTMATH), _flags.KERNEL_OPT)).encode())\n", "",
      ["tests/test_prebuilt.py", "-k", "stamp"], inside="source_stamp"),
    M("prebuilt kernels' stamp leaves out the runtime files beside the kernels", RT + "prebuilt.py",
      "files += [os.path.join(PACKAGE, *parts) for parts in _RUNTIME]", "files.sort()",
      ["tests/test_prebuilt.py", "-k", "stamp"], inside="source_stamp"),
    M("prebuilt kernels run on a CPU that lacks one of the level's features", RT + "prebuilt.py",
      "if all(host.get(f, False) for f in LEVELS[level])",
      "if any(host.get(f, False) for f in LEVELS[level])",
      ["tests/test_prebuilt.py", "-k", "host"], inside="host_levels"),
    M("prebuilt kernels looked up after numba's own cache, which the compiler fills", RT + "prebuilt.py",
      "if cres is not None or self.building:", "if self.building:",
      ["tests/test_prebuilt.py", "-k", "from_numba_s_cache"], inside="TieredCache.load_overload"),
    M("stratified split rounds class shares down", "numbacnn/data/__init__.py",
      'extra = np.argsort(-(quota - take), kind="stable")', 'extra = np.argsort(quota - take, kind="stable")',
      ["tests/test_data.py", "-k", "stratified"], inside="stratified_split"),
    M("FMA blocks: the register transpose stores odd rows with the even ones", K + "_util.py",
      "builder.store(rows[r], row(bases[r & 1], dstride, r >> 1), align=4)",
      "builder.store(rows[r], row(bases[0], dstride, r >> 1), align=4)",
      ["tests/test_kernels.py", "-k", "fma_blocks"], inside="_transposer"),
    M("FMA blocks: the unpooled epilogue drops the bias", K + "conv2d_positions.py",
      "                dst = o[co, oy]\n                bias = b[co]",
      "                dst = o[co, oy]\n                bias = zero",
      ["tests/test_kernels.py", "-k", "unpooled_conv_relu"], inside="_epilogue_positions"),
    M("FMA blocks: the input gradient's plane is padded one row short", K + "conv2d_positions.py",
      "_transpose_planes(gpf, gf, PG, e * L, Co, OH, OW, QH, QW, 0, OH + 2 * QH)",
      "_transpose_planes(gpf, gf, PG, e * L, Co, OH, OW, QH, QW, 0, OH + QH)",
      ["tests/test_kernels.py", "-k", "conv2d_forward_backward_match_oracle and 20-18-48"],
      inside="conv2d_backward_positions_part"),
    M("residual: the fused ReLU's add keeps negative sums", K + "activations.py",
      "            ys[i] = v if not v < zero else zero", "            ys[i] = v",
      ["tests/test_kernels.py", "-k", "add_relu"], inside="_add_block"),
    M("inference pool by transposes: a window's second row read one position left",
      K + "conv2d_positions.py",
      "rd = ytf[(jb + OW) * Co:(jb + OW) * Co + Co]\n            q = ",
      "rd = ytf[(jb + OW - 1) * Co:(jb + OW - 1) * Co + Co]\n            q = ",
      ["tests/test_kernels.py", "-k", "pool_by_transposes"], inside="pool2x2_transposed"),
    M("inference pool by transposes: pooled rows written from the block's first row",
      K + "conv2d_positions.py",
      "    _channel_rows(of, R, r0, PW, work, Co, P)", "    _channel_rows(of, R, 0, PW, work, Co, P)",
      ["tests/test_kernels.py", "-k", "pool_by_transposes"], inside="pool2x2_transposed"),
    M("inference slices count the activations that fused layers never write", "numbacnn/network.py",
      "if not layer.writes_nothing():  # a new activation begins", "if True:  # a new activation begins",
      ["tests/test_network.py", "-k", "widest_written"], inside="Sequential._eval_slice"),
    M("team: no barrier between dependent calls", RT + "team.py",
      "        if out.order:\n            out.add(-1)", "        if False:\n            out.add(-1)",
      ["tests/test_program.py", "-k", "team"], inside="schedule"),
    M("team: a serial call after a parallel one it depends on, in the same interval",
      RT + "team.py",
      "                else:\n                    after = max(after, interval + 1)",
      "                else:\n                    after = max(after, interval)",
      ["tests/test_program.py", "-k", "team"], inside="schedule"),
    M("team: blocks split one short at the end of each thread's share", TEAM,
      "hi = b.sdiv(b.mul(n, b.add(tid, one)), team)",
      "hi = b.sub(b.sdiv(b.mul(n, b.add(tid, one)), team), one)",
      ["tests/test_program.py", "-k", "team"], inside="_team_region"),
    M("team: a kernel that fails inside the region goes unreported", TEAM,
      "builder.store_atomic(builder.add(row, ir.Constant(row.type, 1)), failure",
      "builder.store_atomic(ir.Constant(row.type, 0), failure",
      ["tests/test_program.py", "-k", "kernel_error"], inside="_note_failure"),
    M("team: the input's patched pointer misses a view's offset", TEAM,
      "_poke(patches[k, 0], base + patches[k, 1])", "_poke(patches[k, 0], base)",
      ["tests/test_program.py", "-k", "team"], inside="run"),
    M("fold record: running_mean left out of the comparison", K + "_util.py",
      "| _bits_diff(seen, n4, e) |", "| np.int32(0) |",
      ["tests/test_kernels.py", "-k", "fold_skips"], inside="unchanged_many"),
    M("fold record: a fold that writes does not count", K + "batchnorm.py",
      "        version[0] += 1\n", "        version[0] += 0\n",
      ["tests/test_program.py", "-k", "packed_weights_follow"], inside="batchnorm_fold_block"),
    M("fold record: a packing made at one count trusts every later one", K + "_util.py",
      "    if seen[1] == 1 and seen[0] == version[0]:\n        return True",
      "    if seen[1] == 1:\n        return True",
      ["tests/test_program.py", "-k", "packed_weights_follow"], inside="same_version"),
    M("unpooled rows by transposes: positions left in Winograd's slot order", K + "conv2d_positions.py",
      "            j = oy * pitch + _slot(ox, half)", "            j = oy * pitch + ox",
      ["tests/test_kernels.py", "-k", "unpooled_rows"], inside="rows_transposed"),
    M("unpooled rows by transposes: the block's rows written from the output's first row",
      K + "conv2d_positions.py",
      "    _channel_rows(of, R, r0, OW, work, Co, rows * OW)",
      "    _channel_rows(of, R, 0, OW, work, Co, rows * OW)",
      ["tests/test_kernels.py", "-k", "unpooled_rows"], inside="rows_transposed"),
    M("Winograd GEMM blocks: the rows left over after the big blocks dropped", K + "microkernel.py",
      "        if p < M:  # the rows left over", "        if p + 1 < M:  # the rows left over",
      ["tests/test_kernels.py", "-k", "gemm_blocks or unpooled_rows"], inside="_gemm_nn"),
    M("Winograd GEMM blocks: a leftover block one row too tall", K + "microkernel.py",
      "_strided_rows(M - p, V,", "_strided_rows(M - p + 1, V,",
      ["tests/test_kernels.py", "-k", "gemm_blocks"], inside="_gemm_nn"),
    M("narrow positions rows: the last block of 16 positions left out", K + "conv2d_positions.py",
      "        for p in range(0, P, 16):\n            p0 = min(p, P - 16)  # the last",
      "        for p in range(0, P - 15, 16):\n            p0 = min(p, P - 16)  # the last",
      ["tests/test_kernels.py", "-k", "conv2d_forward_backward_match_oracle and 130-12-5-6"],
      inside="_channel_rows"),
    M("channel-last chains: a forward cut inside a chain returns channel-last features",
      "numbacnn/layers/fusion.py", "return last is None or not last.fusion.infer_layout & 2", "return True",
      ["tests/test_kernels.py", "-k", "channel_last_activations"], inside="folds_inside"),
    M("channel-last chains: the pooled epilogue writes every block from the first row",
      K + "conv2d_positions.py",
      "q = ((r0 + py) * PW + px) * Co if nhwc", "q = (py * PW + px) * Co if nhwc",
      ["tests/test_kernels.py", "-k", "channel_last_activations"], inside="pool2x2_transposed"),
    M("channel-last chains: the unpooled epilogue writes every block from the first row",
      K + "conv2d_positions.py",
      "q = ((r0 + oy) * OW + ox) * Co if nhwc", "q = (oy * OW + ox) * Co if nhwc",
      ["tests/test_kernels.py", "-k", "channel_last_activations"], inside="rows_transposed"),
    M("channel-last chains: the plane puts odd columns among the even ones", K + "conv2d_winograd.py",
      "copy_run(pf, u((d0 + (col & 1) * Wh + (col >> 1)) * C), xf",
      "copy_run(pf, u((d0 + (col >> 1)) * C), xf",
      ["tests/test_kernels.py", "-k", "channel_last_activations"], inside="_plane_nhwc"),
    M("channel-last chains: the exact epilogue's rows mirrored on the way", K + "conv2d_winograd.py",
      "= rows[0, co, r, c]", "= rows[0, co, r, RW - 1 - c]",
      ["tests/test_kernels.py", "-k", "channel_last_activations"], inside="conv2d_forward_winograd_block"),
    M("channel-last chains: a positions fallback's output left channel-first", "numbacnn/backend/cpu_conv.py",
      "            if layout & 2:\n                yl", "            if False:\n                yl",
      ["tests/test_kernels.py", "-k", "channel_last_activations"], inside="WinogradPlan._forward"),
    M("weight packings: folded and plain weights share one buffer", "numbacnn/backend/cpu_conv.py",
      'return key if version is None else key + "_folded"', "return key",
      ["tests/test_kernels.py", "-k", "never_taken"], inside="_packing"),
    M("Winograd in inference: the training threshold of tiles", "numbacnn/backend/cpu_conv.py",
      ">= T.WINOGRAD_INFER_MIN_TILES\n", ">= T.WINOGRAD_MIN_TILES\n",
      ["tests/test_kernels.py", "-k", "falls_back"], inside="WinogradPlan._runs_f2"),
    M("Winograd on odd sides: inference counts only whole tiles", "numbacnn/backend/cpu_conv.py",
      "            return n * th * tw >= T.WINOGRAD_INFER_MIN_TILES",
      "            return n * (oh // 2) * (ow // 2) >= T.WINOGRAD_INFER_MIN_TILES",
      ["tests/test_kernels.py", "-k", "falls_back"], inside="WinogradPlan._runs_f2"),
    M("Winograd on odd sides: inference keeps the training rule", "numbacnn/backend/cpu_conv.py",
      "        if not backward:\n            return n * th * tw",
      "        if False:\n            return n * th * tw",
      ["tests/test_kernels.py", "-k", "falls_back"], inside="WinogradPlan._runs_f2"),
    M("Winograd: the forward leaves its choice on the plan", "numbacnn/backend/cpu_conv.py",
      "        variant = self.variant(shape, pool, backward)\n",
      "        variant = self.last = self.variant(shape, pool, backward)\n",
      ["tests/test_layout.py", "-k", "forward_to_backward"], inside="WinogradPlan._forward"),
    M("Winograd: the backward asks for inference's choice", "numbacnn/backend/cpu_conv.py",
      'variant = self.variant(ws["x"].shape, pool, True)',
      'variant = self.variant(ws["x"].shape, pool, False)',
      ["tests/test_kernels.py", "-k", "falls_back"], inside="WinogradPlan.backward"),
    M("team: GELU declared without its team form", "numbacnn/kernels/cpu/activations.py",
      '@kernel(export=True, team="blocks")\ndef gelu_forward(', "@kernel(export=True)\ndef gelu_forward(",
      ["tests/test_program.py", "-k", "every_preset and airbench94"]),
    M("team: a concatenation's copies declared without their team form", "numbacnn/kernels/cpu/batch.py",
      '@kernel(fastmath=False, export=True, team="blocks")\ndef copy_strided(',
      "@kernel(fastmath=False, export=True)\ndef copy_strided(",
      ["tests/test_program.py", "-k", "every_preset and inceptiontime"]),
    M(".ts: resampling pads instead", "numbacnn/data/series.py",
      'if fit == "resample" and len(v) != target:', "if False:",
      ["tests/test_series_data.py", "-k", "resampled"], inside="read_ts"),
    M("Winograd from 32 channels again", "numbacnn/tuning.py",
      "WINOGRAD_MIN_CHANNELS = 24", "WINOGRAD_MIN_CHANNELS = 32",
      ["tests/test_kernels.py", "-k", "from_24_channels"]),
    M("Winograd training on odd sides whatever share of the tiles is used", "numbacnn/backend/cpu_conv.py",
      "return oh * ow >= T.WINOGRAD_ODD_MIN_USED * 4 * th * tw and", "return",
      ["tests/test_kernels.py", "-k", "falls_back"], inside="WinogradPlan._runs_f2"),
    M("Winograd training on odd sides from the even sides' tile count", "numbacnn/backend/cpu_conv.py",
      ">= T.WINOGRAD_ODD_MIN_TILES\n", ">= T.WINOGRAD_MIN_TILES\n",
      ["tests/test_kernels.py", "-k", "falls_back"], inside="WinogradPlan._runs_f2"),
    # the benchmark's timing and the recorded programs' CUDA graphs
    M("bench: inference timed from its third run, while its team region is built", "numbacnn/bench.py",
      "for _ in range(TEAM_AFTER + 2):", "for _ in range(2):", ["tests/test_bench.py", "-k", "team"],
      inside="_bench_config"),
    M("program: a refused CUDA graph capture is tried again every run", RT + "program.py",
      "        return graph or False", "        return graph",
      ["tests/test_program.py", "-k", "refused"], inside="DeviceRuns._capture"),
    M("program: a device program captures its graph on every run", RT + "program.py",
      "        if self.graph is None and self.runs:", "        if self.runs:",
      ["tests/test_program.py", "-k", "device_runs"], inside="DeviceRuns.__call__"),
    # CUDA kernels (in the simulator where there is no GPU; the graphs need one)
    M("cuda: a pool's first reader of an input is one window early", K2 + "_launch.py",
      "int64(uint32(i + P - K) // uint32(S)) + 1", "int64(uint32(i + P - K) // uint32(S))",
      ["tests/cuda_checks.py", "-k", "layer_matches_oracle"], inside="readers"),
    M("cuda: the tiled forward swaps an output's row and column", K2 + "conv2d_tiled.py",
      "oy, ox = cp // OW, cp % OW", "ox, oy = cp // OW, cp % OW",
      ["tests/cuda_checks.py", "-k", "tiles_and_chunks"], inside="_kernels"),
    M("cuda: the weight gradient's chunk tree keeps one half", K2 + "conv2d_tiled.py",
      "buf[r, lane] += buf[r + half, lane]", "buf[r, lane] = buf[r + half, lane]",
      ["tests/cuda_checks.py", "-k", "tiles_and_chunks"], inside="_sum_parts"),
    M("cuda: the gather plan computes a frozen weight's gradient anyway", K2 + "conv2d_gather.py",
      "    if need_dw:\n        _backward_dw", "    if True:\n        _backward_dw",
      ["tests/cuda_checks.py", "-k", "frozen_weight"], inside="conv2d_backward_gather"),
    M("cuda: the tiled plan computes a frozen weight's gradient anyway", K2 + "conv2d_tiled.py",
      "    if not need_dw:\n        zero_fill(dw)", "    if False:\n        zero_fill(dw)",
      ["tests/cuda_checks.py", "-k", "frozen_weight"], inside="conv2d_backward_tiled"),
    M("cuda: Dense computes a frozen weight's gradient anyway", K2 + "dense.py",
      "    if need_dw:\n        _gemm", "    if True:\n        _gemm",
      ["tests/cuda_checks.py", "-k", "frozen_weight"], inside="dense_backward"),
    M("bench: training is compared with PyTorch's NCHW only", "numbacnn/bench.py", "a / max(b, c)", "a / b",
      ["tests/test_bench.py", "-k", "layouts"]),
    M("bench: PyTorch's thread count is left as a configuration set it", "numbacnn/bench.py",
      "            torch_mod.set_num_threads(before[1])", "            pass",
      ["tests/test_bench.py", "-k", "layouts"], inside="_threads"),
    M("bench: a GPU row's percentage column prints nothing", "numbacnn/bench.py",
      """return f"{'-':>5}" if fraction is None""", """return f"{'':>5}" if fraction is None""",
      ["tests/test_bench.py", "-k", "dash"], inside="_percent"),
    M("config: host compiles on AVX-512 keep LLVM's 256-bit preference", RT + "config.py",
      'host.flatten() + ",-prefer-256-bit"', "host.flatten()",
      ["tests/test_prebuilt.py", "-k", "512_bit"], inside="_wide_vectors"),
    M("onnx: the export declares the onnx package's newest IR version", "numbacnn/onnx_export.py",
      "producer_name=\"numbacnn\",\n                         ir_version=h.find_min_ir_version_for(opsets))",
      "producer_name=\"numbacnn\")", ["tests/test_onnx.py", "-k", "ir_version"], inside="to_onnx"),

    # trust: hostile folders, caches, checkpoints, numbers; tests that check a whole range or both ways
    M("trust: links to folders are followed", "numbacnn/data/folders.py",
      "os.walk(directory, followlinks=False)", "os.walk(directory, followlinks=True)",
      ["tests/test_trust.py", "-k", "links"], inside="_pictures_under"),
    M("trust: a class folder that is a link is followed", "numbacnn/data/folders.py",
      "e.is_dir(follow_symlinks=False)", "e.is_dir()", ["tests/test_trust.py", "-k", "links"],
      inside="_class_dirs"),
    M("trust: the loader does not refuse pictures over the bomb limit", "numbacnn/data/folders.py",
      "    if limit and img.size[0] * img.size[1] > limit:", "    if False:",
      ["tests/test_trust.py", "-k", "bomb"], inside="_refuse_bomb"),
    M("trust: 16-bit grey is clipped, not scaled", "numbacnn/data/folders.py",
      "    if img.mode not in WIDE_GREY:", "    if True:", ["tests/test_trust.py", "-k", "16_bit"],
      inside="_eight_bit"),
    M("trust: EXIF orientation ignored", "numbacnn/data/folders.py",
      "    if _orientation(img) == 1:\n        return img", "    if True:\n        return img",
      ["tests/test_trust.py", "-k", "exif"], inside="_upright"),
    M("trust: a cache with the right key is used whatever its arrays", "numbacnn/data/folders.py",
      "    return data if fits else None", "    return data", ["tests/test_trust.py", "-k", "cache"],
      inside="_read_cache"),
    M("trust: a failed cache write leaves its temporary file", "numbacnn/data/folders.py",
      "            os.unlink(tmp)", "            pass", ["tests/test_trust.py", "-k", "cache"],
      inside="_write_cache"),
    M("trust: checkpoint metadata is not checked", "numbacnn/checkpoint.py",
      "    meta = _check_meta(meta_bytes, path)", "    meta = json.loads(meta_bytes)",
      ["tests/test_trust.py", "-k", "metadata"], inside="load_checkpoint"),
    M("trust: augmentation terms have no upper bound", "numbacnn/augment.py",
      "            elif int(m.group(2)) > MAX_SHIFT:", "            elif False:",
      ["tests/test_trust.py", "-k", "augment_terms"], inside="Augment.parse"),
    M("guards: random shifts drawn from [-s, s-1]", "numbacnn/augment.py",
      "rng.integers(-self.shift, self.shift + 1, size=(m, 2)",
      "rng.integers(-self.shift, self.shift, size=(m, 2)",
      ["tests/test_training_guards.py", "-k", "every_shift"], inside="Augment.draw"),
    M("guards: early stopping ignores its monitor's direction", "numbacnn/training.py",
      'sign = 1.0 if self.monitor == "val_loss" else -1.0', "sign = 1.0",
      ["tests/test_training_guards.py", "-k", "direction"], inside="EarlyStopping.on_epoch_end"),
    M("guards: train.py saves the last epoch after early stopping", "numbacnn/cli.py",
      "        checkpoint(trainer)  # saves the best epoch's weights (every rank holds them)\n", "",
      ["tests/test_training_guards.py", "-k", "checkpoint_saved"], inside="_train"),
    M("guards: a test split is labelled by its own class list", "numbacnn/data/folders.py",
      "out += [(p, classes.index(name)) for p in pics]",
      "out += [(p, _class_dirs(part_root).index(name)) for p in pics]",
      ["tests/test_trust.py", "-k", "test_split_without"], inside="scan"),
    M("guards: ONNX BatchNorm keeps ONNX's default epsilon", "numbacnn/layers/batchnorm.py",
      '"batchnorm", epsilon=self.eps)', '"batchnorm")', ["tests/test_onnx.py", "-k", "epsilon"],
      inside="BatchNorm2D.onnx"),
    M("company: libgomp's default spin", "numbacnn/tuning.py",
      "SPIN_COUNT = 5000", "SPIN_COUNT = 300000",
      ["tests/test_company.py", "-k", "two_trainings or idle_threads"]),
    M("company: threads ignore OMP_NUM_THREADS", RT + "config.py",
      "    if env.isdigit() and int(env) > 0:\n        n = min(n, int(env))\n", "",
      ["tests/test_company.py", "-k", "default_threads"], inside="default_threads"),
    M("company: OMP_NUM_THREADS read at every fit (Dask's leak into the client's environment counts)",
      RT + "config.py", 'env = _OMP_NUM_THREADS.split(",")[0].strip()',
      'env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()',
      ["tests/test_dask.py", "-k", "equals_n_jobs"], inside="default_threads"),
    # GELU, parameters, Lookahead, augmentation, test-time augmentation, the airbench94 recipe
    M("gelu: the derivative drops the 1/sqrt(2) of erf's argument", K + "activations.py",
      "dxs[i] = dys[i] * (half * (one + e) + half * v * de * r)",
      "dxs[i] = dys[i] * (half * (one + e) + half * v * de)", ["tests/test_gelu.py"],
      inside="_gelu_grad_block"),
    M("gelu: beyond the clamp erf is the fit's residue, not +-1", K + "activations.py",
      "return t * np.float32(0.25), np.float32(0.0)", "return t * p / q, np.float32(0.0)",
      ["tests/test_gelu.py", "-k", "oracle"], inside="_erf_parts"),
    M("gelu: ONNX uses 1/sqrt(2) rounded to 0.7", "numbacnn/layers/activations.py",
      'step("Mul", x, 0.7071067811865476, "_z")', 'step("Mul", x, 0.7, "_z")',
      ["tests/test_gelu.py", "-k", "onnx"], inside="GELU.onnx"),
    M("frozen parameters are updated anyway", "numbacnn/optimizers.py",
      "            if self.net.is_frozen(name):\n                continue\n",
      "            if self.net.is_frozen(name):\n                pass\n",
      ["tests/test_params.py", "-k", "frozen"], inside="Optimizer.parts"),
    M("frozen weight: the layer asks for its gradient anyway", "numbacnn/layers/conv.py",
      'not self.is_frozen("weight"), self.fusion.relu', "True, self.fusion.relu",
      ["tests/test_gradients.py", "-k", "frozen_weight"], inside="Conv2D.backward"),
    M("frozen weight: the gemm plan's dW GEMM runs anyway", K + "conv2d_gemm.py",
      "    if need_dw:  # dW", "    if True:  # dW",
      ["tests/test_gradients.py", "-k", "frozen_weight"], inside="conv2d_backward_gemm_part"),
    M("frozen weight: the wide plan's dW GEMM runs anyway", K + "conv2d_wide.py",
      "if need_dw and not direct:", "if not direct:", ["tests/test_gradients.py", "-k", "frozen_weight"],
      inside="conv2d_backward_wide_part"),
    M("frozen weight: the wide plan leaves its parts as the last backward wrote them", K + "conv2d_wide.py",
      "    if not need_dw:\n        dwf[:] = zero\n", "", ["tests/test_gradients.py", "-k", "frozen_weight"],
      inside="conv2d_backward_wide_part"),
    M("frozen weight: the direct plan's weight gradient runs anyway", K + "conv2d_wide.py",
      "if need_dw and direct:", "if direct:", ["tests/test_gradients.py", "-k", "frozen_weight"],
      inside="conv2d_backward_wide_part"),
    M("frozen weight: the positions plan's dW GEMMs run anyway", K + "conv2d_positions.py",
      "range(0, G * L if need_dw else 0, KB)", "range(0, G * L, KB)",
      ["tests/test_gradients.py", "-k", "frozen_weight"], inside="conv2d_backward_positions_part"),
    M("frozen weight: the Winograd plan's dW GEMMs run anyway", K + "conv2d_winograd.py",
      "TD = TH if need_dw else 0", "TD = TH",
      ["tests/test_gradients.py", "-k", "frozen_weight"], inside="conv2d_backward_winograd_part"),
    M("frozen weight: Dense computes dW anyway", K + "dense.py",
      "n_o = -(-F_out // ob) if need_dw else 0", "n_o = -(-F_out // ob)",
      ["tests/test_gradients.py", "-k", "frozen_weight"], replace_all=True),
    M("optimizer: the update's parts kept across a freeze", "numbacnn/optimizers.py",
      "if kept is not None and kept[0] == self.net.freeze_changes:", "if kept is not None:",
      ["tests/test_params.py", "-k", "follow_a_freeze"], inside="Optimizer.parts"),
    M("optimizer groups: lr_scale ignored", "numbacnn/optimizers.py",
      "self._update(part, self.lr * lr_scale, decay)", "self._update(part, self.lr, decay)",
      ["tests/test_params.py", "-k", "groups"], inside="Optimizer.step"),
    M("lookahead: the slow weights move (1 - alpha) of the way", K + "optim.py",
      "s = ss[i] + a * (fs[i] - ss[i])", "s = fs[i] + a * (ss[i] - fs[i])",
      ["tests/test_params.py", "-k", "lookahead"], inside="lookahead_sync_part"),
    M("translate: reflection repeats the border pixel", K + "batch.py",
      "rs = -rs if rs < 0 else (2 * H - 2 - rs if rs >= H else rs)",
      "rs = -rs - 1 if rs < 0 else (2 * H - 1 - rs if rs >= H else rs)",
      ["tests/test_modern.py", "-k", "reflect"], inside="gather_augment_part"),
    M("alternating flips do not alternate", "numbacnn/augment.py",
      "flips = (_example_bits(seed, idx) ^ (epoch & 1)).astype(np.bool_)",
      "flips = _example_bits(seed, idx).astype(np.bool_)", ["tests/test_modern.py", "-k", "reflect"],
      inside="Augment.draw"),
    M("tta: the translated views move one pixel down only", "numbacnn/tta.py",
      "(0.125, (1, 1), False), (0.125, (1, 1), True)", "(0.125, (1, 0), False), (0.125, (1, 0), True)",
      ["tests/test_tta.py", "-k", "by_hand"]),
    M("triangle: the warm-up ends at 30 %", "numbacnn/training.py",
      "def triangle(step: int, total: int, warmup: float = 0.23,",
      "def triangle(step: int, total: int, warmup: float = 0.3,",
      ["tests/test_recipes.py", "-k", "triangle"], inside="triangle"),
    M("airbench94: BatchNorm biases at the base learning rate", "numbacnn/recipes.py",
      '"lr_scale": h["bias_scaler"]', '"lr_scale": 1.0', ["tests/test_recipes.py", "-k", "published"],
      inside="airbench94_optimizer"),
    M("airbench94: Lookahead from the first step", "numbacnn/recipes.py",
      'epoch >= AIRBENCH94["lookahead_epochs"]:', "epoch >= 0:",
      ["tests/test_recipes.py", "-k", "airbench_s_loop"], inside="_Airbench94Schedule._alpha"),
    M("airbench94: the network keeps its fast weights at an epoch's end", "numbacnn/recipes.py",
      "        if self.started:\n            self.opt.sync(0.0)\n", "",
      ["tests/test_recipes.py", "-k", "airbench_s_loop"], inside="_Airbench94Schedule.on_epoch_end"),
    M("cuda shards: the last shard repeats the convolution checks", "tests/test_cuda.py",
      'f"not ({_TRAINING} or {_CONVS})"', 'f"not ({_TRAINING})"',
      ["tests/test_cuda.py", "-k", "shards_cover"]),
    M("whitening: eigenvectors in ascending order", "numbacnn/layers/conv.py",
      "values, vectors = values[::-1], vectors[:, ::-1]", "pass",
      ["tests/test_init.py", "-k", "decorrelate"], inside="Conv2D.init_whitening"),
    M("frozen trunk: the backward runs every layer", "numbacnn/network.py",
      "        if need_input_grad:\n            return 0\n", "        return 0\n",
      ["tests/test_params.py", "-k", "frozen_trunk"], inside="Sequential.backward_start"),
    M("frozen trunk: the skipped layers keep the gradients of an earlier backward", "numbacnn/network.py",
      "        if end > self._grads_zero_upto:", "        if False:",
      ["tests/test_params.py", "-k", "frozen_trunk"], inside="Sequential.through_backward"),
    M("frozen trunk: a recorded step replays across a freeze", RT + "program.py",
      "        elif self.calls is None or frozen != self._frozen:", "        elif self.calls is None:",
      ["tests/test_params.py", "-k", "recorded_steps_follow"], inside="StepProgram.step"),
    M("frozen weight: a recorded step records anew only when the backward's extent changes",
      RT + "program.py", "Layer.freeze_changes", "self.net.backward_start(False)",
      ["tests/test_params.py", "-k", "recorded_steps_follow"], replace_all=True),
    M("estimator: SGD built without its nesterov parameter", "numbacnn/estimator.py",
      'kwargs.update(momentum=h["momentum"], nesterov=h["nesterov"])',
      'kwargs.update(momentum=h["momentum"])',
      ["tests/test_recipes.py", "-k", "estimator"], inside="_CNNEstimator._make_trainer"),
    M("estimator recipe: max_epochs and tta overridden even where the user gave them",
      "numbacnn/estimator.py",
      "if name not in _RECIPE_OPTIONAL or own[name] == defaults[name]}}", "if True}}",
      ["tests/test_recipes.py", "-k", "estimator"], inside="CNNClassifier._settings"),
    M("channels-last images: height and width swapped on the way to NCHW", "numbacnn/data/__init__.py",
      "x = x.transpose(0, 3, 1, 2)", "x = x.transpose(0, 3, 2, 1)",
      ["tests/test_own_data.py", "-k", "own_format"], inside="as_images"),
    M("estimator: channels-last X scaled in the caller's own array", "numbacnn/estimator.py",
      '.transpose(0, 3, 1, 2).astype(np.float32, order="C")',
      ".transpose(0, 3, 1, 2)\n            x = np.ascontiguousarray(x, np.float32)",
      ["tests/test_estimator.py", "-k", "never_written"], inside="_CNNEstimator._images"),
    M("estimator airbench94: images in [0, 1] divided by 255 as well", "numbacnn/estimator.py",
      "255.0 if float(np.max(X)) > 1.0 else 1.0", "255.0", ["tests/test_recipes.py", "-k", "airbench94_as"],
      inside="_CNNEstimator._set_scaling"),
    M("estimator airbench94: its schedule's callback left out", "numbacnn/estimator.py",
      "callbacks=[schedule, _Stopping(self, stop=False)]", "callbacks=[_Stopping(self, stop=False)]",
      ["tests/test_recipes.py", "-k", "airbench94_as"], inside="CNNClassifier._fit_airbench94"),
    M("resnet8 recipe: its flags applied without Nesterov", "numbacnn/recipes.py",
      '"momentum": 0.9, "nesterov": True,', '"momentum": 0.9,',
      ["tests/test_recipes.py", "-k", "resnet8_recipe"]),
    # series: the 1-D layers, the .ts reader, regression
    M("conv1d: causal padding put on the right", "numbacnn/layers/conv1d.py",
      "return span, 0", "return 0, span", ["tests/test_series.py", "-k", "causal or random_conv1d"],
      inside="_series_padding"),
    M("conv1d: an even window's extra 'same' zero on the left", "numbacnn/layers/conv1d.py",
      "return span // 2, span - span // 2", "return span - span // 2, span // 2",
      ["tests/test_series.py", "-k", "random_conv1d or series_network or even_window"],
      inside="_series_padding"),
    M("conv1d: the output length ignores the stride", "numbacnn/layers/conv1d.py",
      "(length + left + right - span) // self.stride[1] + 1", "(length + left + right - span) + 1",
      ["tests/test_series.py", "-k", "random_conv1d"], inside="Conv1D.output_shape"),
    M("maxpool1d: its padding dropped from the kernels' window", "numbacnn/layers/pool1d.py",
      "return 1, self.kernel, 1, self.step, 0, self.pad",
      "return 1, self.kernel, 1, self.step, 0, 0",
      ["tests/test_series.py", "-k", "series_network"], inside="_Pool1D.window"),
    M("global max pool 1-D: the last value left out of the maximum", "numbacnn/layers/pool1d.py",
      "argmax, x4, 1, length, 1, length, 0, 0)", "argmax, x4, 1, length - 1, 1, length, 0, 0)",
      ["tests/test_series.py", "-k", "series_network"], inside="GlobalMaxPool1D.forward"),
    M("normalize: series standardised over their channels, not per channel", "numbacnn/layers/normalize.py",
      "axes = (0, *range(2, x.ndim))", "axes = (0, 1) if x.ndim == 3 else (0, 2, 3)",
      ["tests/test_series.py", "-k", "normalize_fits"]),
    M("regression loss: the gradient averaged over the batch only", "numbacnn/kernels/cpu/loss.py",
      "scale = 1.0 / (N * K)", "scale = 1.0 / N", ["tests/test_regressor.py", "-k", "losses_match"],
      inside="regression_loss"),
    M("huber: the linear part's gradient loses its sign", "numbacnn/kernels/cpu/loss.py",
      "g = delta if r > 0 else -delta", "g = delta", ["tests/test_regressor.py", "-k", "losses_match"],
      inside="regression_loss"),
    M("regressor: predictions left standardised", "numbacnn/estimator.py",
      "out = z * self.y_scale_ + self.y_mean_", "out = z", ["tests/test_regressor.py", "-k", "units"],
      inside="CNNRegressor.predict"),
    M(".ts: labels numbered from 1", "numbacnn/data/series.py",
      "index = {c: k for k, c in enumerate(classes)}", "index = {c: k + 1 for k, c in enumerate(classes)}",
      ["tests/test_series_data.py", "-k", "reads_channels"], inside="read_ts"),
    M(".ts: unequal cases padded at their start", "numbacnn/data/series.py",
      "x[i_case, ch, :k] = v[:k]", "x[i_case, ch, target - k:] = v[:k]",
      ["tests/test_series_data.py", "-k", "unequal"], inside="read_ts"),
    M(".ts: missing values kept as NaN whatever the fill", "numbacnn/data/series.py",
      "x[np.isnan(x)] = np.float32(fill)", "pass", ["tests/test_series_data.py", "-k", "missing"],
      inside="read_ts"),
    M("concat: the third branch's input gradient left out", "numbacnn/layers/concat.py",
      "        for g in grads[2:]:\n", "        for g in grads[2:2]:\n",
      ["tests/test_series.py", "-k", "branch_concatenations"], inside="Concat.backward"),
    M("concat: every branch's gradient read from the first channels", "numbacnn/layers/concat.py",
      'self.backend.run("copy_strided", g.reshape(n, c, 1, rest), dy4[:, at:at + c])',
      'self.backend.run("copy_strided", g.reshape(n, c, 1, rest), dy4[:, 0:c])',
      ["tests/test_series.py", "-k", "branch_concatenations"], inside="Concat.backward"),
    M("conv1d inference fold: the BatchNorm's ReLU dropped", "numbacnn/layers/conv1d.py",
      "bn.fusion.relu, None, backward=False,", "False, None, backward=False,",
      ["tests/test_series.py", "-k", "folds_batchnorm"], inside="Conv1D.infer"),
    M("file sizes: an array header's claim left unchecked", "numbacnn/_files.py",
      "                if need > have:\n", "                if False:\n",
      ["tests/test_trust.py", "-k", "sizes_read_from_files"], inside="check_npz"),
    M("outputs: a link to an input not seen as the input", "numbacnn/_files.py",
      "os.path.samefile(out, path)", "os.path.abspath(out) == os.path.abspath(path)",
      ["tests/test_trust.py", "-k", "output_that_names_an_input"], inside="overwrites"),
    M("outputs: a .ts file's test file not among what it reads", "numbacnn/data/__init__.py",
      "reads=lambda p: [p, *filter(None, [_test_beside(p)])]", "reads=lambda p: [p]",
      ["tests/test_trust.py", "-k", "output_that_names_an_input"]),
    M("outputs: --save over --data allowed", "numbacnn/cli.py",
      'inputs = [("--data", f) for f in input_files(args.data, args.labels)]', "inputs = []",
      ["tests/test_trust.py", "-k", "output_that_names_an_input"], inside="_check_args"),
    M("complex images taken as real", "numbacnn/data/__init__.py",
      "    if np.issubdtype(x.dtype, np.complexfloating):\n", "    if False:\n",
      ["tests/test_trust.py", "-k", "complex_valued"], inside="as_images"),
    M("image folder: a FIFO opened as a picture", "numbacnn/data/folders.py",
      "        if not stat.S_ISREG(mode):\n", "        if False:\n",
      ["tests/test_trust.py", "-k", "fifo_named_like"], inside="_open_regular"),
    M("image folder: the pictures' memory not checked", "numbacnn/data/folders.py",
      "if have is not None and need > have:", "if False:",
      ["tests/test_trust.py", "-k", "cannot_fit"], inside="_check_fits"),
    M("training step: its memory floor not checked", "numbacnn/runconfig.py",
      "if have is not None and floor > have:", "if False:",
      ["tests/test_trust.py", "-k", "cannot_fit"], inside="_check_batch"),
    M("image folder cache: the arrays' digest not compared", "numbacnn/data/folders.py",
      'if str(z["digest"]) != arrays_digest(arrays):', "if False:",
      ["tests/test_trust.py", "-k", "another_shape_is_rebuilt"], inside="_read_cache"),
    M("npz: an encrypted member's error escapes", "numbacnn/_files.py",
      "NotImplementedError,\n            RuntimeError) as e:", "NotImplementedError) as e:",
      ["tests/test_reliability.py", "-k", "encrypted_or_unknown"], inside="check_npz"),
    M("resume: an optimizer state's dtype not checked", "numbacnn/optimizers.py",
      "            if a.dtype != np.float32:\n", "            if False:\n",
      ["tests/test_trust.py", "-k", "hand_edited_training"], inside="Optimizer.load_state_dict"),
    M("resume: unknown optimizer state entries ignored", "numbacnn/optimizers.py",
      "        if unknown:\n", "        if False:\n",
      ["tests/test_trust.py", "-k", "hand_edited_training"], inside="Optimizer.load_state_dict"),
    M("resume: a saved generator state not tried", "numbacnn/training.py",
      "np.random.default_rng(0).bit_generator.state = v", "pass",
      ["tests/test_trust.py", "-k", "hand_edited_training"], inside="Trainer.check_state"),
    M("resume: the mid-epoch step not held against the epoch", "numbacnn/training.py",
      'if st["step"] > steps or (st["step"] > 0 and seen == 0):', "if False:",
      ["tests/test_trust.py", "-k", "hand_edited_training"], inside="Trainer.check_state"),
    M("resume: missing hyperparameters take defaults", "numbacnn/runconfig.py",
      "            if missing:", "            if False:",
      ["tests/test_trust.py", "-k", "hand_edited_training"], inside="configure"),
    M("gzip: the header's size no cap on the decompression", "numbacnn/data/__init__.py",
      "limit = min(limit, cap(out))", "limit = limit", ["tests/test_trust.py", "-k", "endless_and_exploding"],
      inside="_read_bytes"),
    M("format registry: options checked against nothing", "numbacnn/data/__init__.py",
      "extra = opts.given() - fmt.takes", "extra: set[str] = set()",
      ["tests/test_series_data.py", "-k", "registry"], inside="load_dataset"),
    M("scale: the backward forgets the factor", "numbacnn/layers/activations.py",
      'self.backend.run("scale", dx, dy, self.factor)',
      'self.backend.run("scale", dx, dy, 1.0)',
      ["tests/test_params.py", "-k", "scale_multiplies"], inside="Scale._apply_backward"),
]


def _copy_tree(src: str, dst: str) -> None:
    for name in ("numbacnn", "tests"):
        shutil.copytree(os.path.join(src, name), os.path.join(dst, name), copy_function=shutil.copy2)
    shutil.copy2(os.path.join(src, "train.py"), dst)
    shared = os.path.join(ROOT, "..", "shared")
    if os.path.isdir(shared):  # tests look for ../shared/data beside the repository
        os.symlink(os.path.abspath(shared), os.path.join(os.path.dirname(dst), "shared"))


def _paths(m: Mutant) -> tuple[str, ...]:
    return (m.path,) if isinstance(m.path, str) else m.path


def _kernel_paths(m: Mutant) -> list[str]:
    """The mutant's files that numbacnn compiles (the CPU kernels, the team region's runtime and the
    kernels' parallel loop)."""
    return [rel for rel in _paths(m) if rel.startswith(K) or rel in (TEAM, PARALLEL)]


def kernel_dependents(folder: str, changed: set[str]) -> set[str]:
    """The CPU kernel modules (names in ``folder``) whose compiled code includes one of ``changed``:
    those and, directly or not, every module that imports from them (``from .name import``)."""
    imports = {}
    for f in os.listdir(folder):
        if f.endswith(".py") and f != "__init__.py":
            with open(os.path.join(folder, f)) as fh:
                imports[f[:-3]] = set(re.findall(r"^from \.(\w+) import", fh.read(), re.M))
    out = set(changed)
    while True:
        more = {mod for mod, deps in imports.items() if deps & out} - out
        if not more:
            return out
        out |= more


def _pytest(copy: str, args: list[str], timeout: float, no_tier: bool = False) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=copy, PYTHONDONTWRITEBYTECODE="1")
    env.pop("NUMBA_CACHE_DIR", None)  # numba's cache beside the copy's sources, where the base filled it
    if no_tier:
        env["NUMBACNN_PREBUILT"] = "0"
    if "tests/cuda_checks.py" in args and shutil.which("nvidia-smi") is None:
        env.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # the CUDA kernels' checks in the simulator
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *args]
    try:
        r = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "timed out"
    lines = (r.stdout + r.stderr).strip().splitlines()
    return r.returncode, lines[-1] if lines else ""


def _run_one(base: str, m: Mutant, timeout: float) -> tuple[int, str]:
    with tempfile.TemporaryDirectory(prefix="numbacnn-mutant-") as tmp:
        copy = os.path.join(tmp, "repo")
        _copy_tree(base, copy)
        for rel in _paths(m):
            path = os.path.join(copy, rel)
            with open(path) as f:
                planted = plant(m, f.read())
            if planted is None:
                where = f"{m.inside} in {rel}" if m.inside else rel
                return -2, f"the mutant's text is no longer in {where}"
            with open(path, "w") as f:
                f.write(planted)
        kernels = _kernel_paths(m)
        if PARALLEL in kernels:  # in every parallel kernel, the tests' own included: drop every cached one
            for cached in glob.glob(os.path.join(copy, "**", "__pycache__", "*.nb[ic]"), recursive=True):
                os.remove(cached)
        for rel in kernels:
            folder = os.path.dirname(os.path.join(copy, rel))
            for mod in kernel_dependents(folder, {os.path.basename(rel)[:-3]}):
                for cached in glob.glob(os.path.join(folder, "__pycache__", f"{mod}.*.nb[ic]")):
                    os.remove(cached)
        return _pytest(copy, m.tests, timeout, no_tier=bool(kernels))


def _changed_files(ref: str) -> set[str]:
    """Files that differ from ``ref`` (committed since, or changed in the working tree), and new ones."""
    out = set()
    for cmd in (["git", "diff", "--name-only", ref], ["git", "ls-files", "--others", "--exclude-standard"]):
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise SystemExit(f"mutants.py: error: {' '.join(cmd)}: {r.stderr.strip()}")
        out.update(r.stdout.split())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-k", default="", help="only mutants whose name contains this text")
    p.add_argument("--list", action="store_true")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per pytest run")
    p.add_argument("--start", type=int, default=1, help="skip the selected mutants before this number")
    p.add_argument("-j", "--jobs", type=int, default=1, help="mutants planted and tested at once (each "
                   "in its own copy; on 2 cores, 2 finish the list in about half the time)")
    p.add_argument("--changed", nargs="?", const="HEAD", metavar="REF",
                   help="only mutants of files changed since REF (default HEAD: the uncommitted changes), "
                        "or whose tests changed")
    p.add_argument("--kind", choices=("all", "kernel", "other"), default="all",
                   help="only the CPU kernel mutants (they recompile: the costly ones), or only the others; "
                        "to share a run between machines")
    p.add_argument("--skip-tests", default="", metavar="FILE,...",
                   help="leave out mutants whose tests are in these files (e.g. where an extra is missing)")
    args = p.parse_args(argv)
    chosen = [m for m in MUTANTS if args.k.lower() in m.name.lower()][max(args.start, 1) - 1:]
    if args.changed:
        changed = _changed_files(args.changed)
        chosen = [m for m in chosen if changed & {*_paths(m), m.tests[0]}]
    if args.kind != "all":
        chosen = [m for m in chosen if bool(_kernel_paths(m)) == (args.kind == "kernel")]
    skip = {os.path.normpath(f) for f in args.skip_tests.split(",") if f}
    chosen = [m for m in chosen if os.path.normpath(m.tests[0]) not in skip]
    if args.list:  # and whether each still applies to the sources (without running anything)
        stale = 0
        for m in chosen:
            ok = all(plant(m, open(os.path.join(ROOT, rel)).read()) is not None for rel in _paths(m))
            stale += not ok
            print(f"{'' if ok else 'STALE  '}{m.name}  [{m.path}{' ' + m.inside if m.inside else ''}; "
                  f"{' '.join(m.tests)}]")
        return 1 if stale else 0
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="numbacnn-mutants-") as tmp:
        base = os.path.join(tmp, "repo")
        _copy_tree(ROOT, base)
        # control: the selected tests pass on the unchanged code (one run per test file), in the base,
        # without the tier where a kernel mutant will use them: numba's cache there fills with those kernels
        by_file: dict[str, list[Mutant]] = {}
        for m in chosen:
            by_file.setdefault(m.tests[0], []).append(m)
        sels = []
        for test_file, ms in by_file.items():
            keys = [m.tests[2] if len(m.tests) > 2 else "" for m in ms]
            sels.append(([test_file] + (["-k", " or ".join(f"({k})" for k in keys)] if all(keys) else []),
                         any(_kernel_paths(m) for m in ms)))
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for (sel, _), (rc, last) in zip(sels, pool.map(
                    lambda s: _pytest(base, s[0], args.timeout, no_tier=s[1]), sels)):
                if rc != 0:
                    print(f"control failed: {' '.join(sel)}: {last}")
                    return 1
        print(f"control: the selected tests pass on the unchanged code ({len(by_file)} files, "
              f"{time.perf_counter() - t_start:.0f} s)", flush=True)
        survivors = 0

        def run(m: Mutant) -> tuple[int, str, float]:
            t0 = time.perf_counter()
            rc, last = _run_one(base, m, args.timeout)
            return rc, last, time.perf_counter() - t0

        with ThreadPoolExecutor(max(1, args.jobs)) as pool:  # each job waits on its own pytest process
            futures = {pool.submit(run, m): (i, m) for i, m in enumerate(chosen, 1)}
            for future in as_completed(futures):  # printed as they finish, numbered in list order
                i, m = futures[future]
                rc, last, seconds = future.result()
                verdict = {0: "MISSED", -1: "TIMEOUT", -2: "STALE", 5: "NO TESTS"}.get(rc, "caught")
                survivors += verdict != "caught"
                print(f"[{i:2}/{len(chosen)}] {verdict:6} {seconds:5.0f} s  {m.name}"
                      + (f"  ({last})" if verdict != "caught" else ""), flush=True)
    print(f"{len(chosen) - survivors} of {len(chosen)} planted bugs caught "
          f"in {time.perf_counter() - t_start:.0f} s")
    return 1 if survivors else 0


if __name__ == "__main__":
    raise SystemExit(main())
