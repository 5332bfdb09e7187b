"""The CPU side's tuning constants, in one table: which plan a convolution runs, how a batch is cut
into blocks, how long idle threads spin, how large inference slices are. Each entry says what it
decides, why the value (one line), and how to measure it: its ``measure:`` line is the arguments of
``python benchmarks/tune.py``, which times a network's training step (its prediction with
``--inference``) for each value given, interleaved in one process (``--list`` prints every entry;
a ``measure:`` line that starts with ``python`` is a command of its own). How the values were
found, machine by machine: docs/performance.md. The plans read the values through this module
(``tuning.NAME``), so a measurement or a test may set one for the run.

The decisions depend on the layer's and the batch's shapes only, never the thread count: results
are bitwise the same on any number of threads whatever the table holds. Constants that kernels
compile in (block sizes, tile widths) stay beside their kernels: numba's cache keys on a kernel's
own source file, so a value here would not recompile them.
"""

# --- which plan (backend/cpu.py) ----------------------------------------------------------------
# Filters of at least POSITIONS_MIN_CKK floats (C_in * KH * KW) run position-major ("positions").
# why: from there a position-major GEMM beats im2col + BLAS ("wide"); below it loses 1.3-2x.
# measure: POSITIONS_MIN_CKK 100 200 --arch "conv(32,3),relu" --input 12,28,28
POSITIONS_MIN_CKK = 100
# ... and at least POSITIONS_MIN_CHANNELS input channels.
# why: one or two input channels leave the position-major blocks too little to reuse.
# measure: POSITIONS_MIN_CHANNELS 3 1 --arch "conv(32,11),relu" --input 1,28,28
POSITIONS_MIN_CHANNELS = 3
# Stride-1 filters of at most DIRECT_MAX_CKK floats are computed directly ("direct"), no im2col.
# why: short filters gain nothing from a GEMM; past 64 floats im2col + BLAS wins.
# measure: DIRECT_MAX_CKK 64 0 --arch lenet5 --input 1,28,28
DIRECT_MAX_CKK = 64
# 3x3 stride-1 layers of at least WINOGRAD_MIN_CHANNELS channels in and out run Winograd.
# why: narrower layers' transforms cost more than the multiply-adds they save.
# measure: WINOGRAD_MIN_CHANNELS 24 16 --arch "conv(16,3,padding=1),relu" --input 16,28,28
WINOGRAD_MIN_CHANNELS = 24
# 1x1 stride-1 layers of at least POINTWISE_MIN_CHANNELS input channels run as a GEMM an example.
# why: a 1x1 convolution is a GEMM; "direct" runs its input gradient through im2col and col2im.
# measure: POINTWISE_MIN_CHANNELS 1 1000000 --arch dscnn --input 1,49,10 --batch 100
POINTWISE_MIN_CHANNELS = 1
# Same-size stride-1 depthwise layers at most DEPTHWISE_FLAT_MAX_WIDTH columns wide take their
# backward on flat planes read in place; wider ones on padded wide rows.
# why: a narrow plane's padded copy is scalar stores that stall the dots' vector loads (25 x 5:
# 1.5x faster flat); from 32 columns the copy vectorises and the wide rows' shared loads win.
# measure: DEPTHWISE_FLAT_MAX_WIDTH 24 0 --arch dscnn --input 1,49,10 --batch 100
DEPTHWISE_FLAT_MAX_WIDTH = 24

# --- how a batch is cut (backend/cpu_conv.py) ---------------------------------------------------
# A batch holds at least MIN_BLOCKS blocks where the rows allow.
# why: one example alone still keeps several cores busy.
# measure: MIN_BLOCKS 4 1 --arch mnistcnn --input 1,28,28 --batch 1
MIN_BLOCKS = 4
# The fewest positions a "positions" backward GEMM piece may have.
# why: thinner pieces lose more to the calls than the BLAS's small-matrix kernels win.
# measure: MIN_GEMM_ROWS 8 1 --arch modern --input 1,28,28 --batch 64
MIN_GEMM_ROWS = 8
# The "gemm" plan's parts of the batch hold about GEMM_PART_COLUMNS output positions at least.
# why: short series (10-40 positions an example) make one GEMM of several examples, not tiny ones.
# measure: GEMM_PART_COLUMNS 64 1 --arch mnist1dcnn --input 1,40 --batch 100
GEMM_PART_COLUMNS = 64

# --- Winograd F(2x2, 3x3) (conv2d_winograd.py) -------------------------------------------------
# A forward block holds about WINOGRAD_TILES 2x2 output tiles (whole tile rows).
# why: its 16 GEMMs stay within the small-matrix kernels and its transforms in L2.
# measure: WINOGRAD_TILES 64 128 --arch mnistcnn --input 1,28,28 --batch 128
WINOGRAD_TILES = 64
# The weight gradient's GEMMs sum over up to WINOGRAD_DW_TILES tiles.
# why: fewer flushes of the 16 transforms; 512 ran no faster with twice the workspace.
# measure: WINOGRAD_DW_TILES 256 512 --arch mnistcnn --input 1,28,28 --batch 128
WINOGRAD_DW_TILES = 256
# Layers of at least WINOGRAD_DW_WIDE = C_in * C_out sum over WINOGRAD_DW_TILES whatever the BLAS.
# why: each flush of a wide layer re-reads megabytes of transforms; narrower ones then leave L2.
# measure: WINOGRAD_DW_WIDE 65536 1000000000 --arch "conv(256,3,padding=1),relu" --input 256,7,7 --batch 256
WINOGRAD_DW_WIDE = 256 * 256
# Training calls with fewer tiles in the batch run "positions".
# why: below it the per-block overheads outweigh the saved multiply-adds.
# measure: WINOGRAD_MIN_TILES 24 48 --arch mnistcnn --input 1,28,28 --batch 1
WINOGRAD_MIN_TILES = 24
# Inference calls (no backward) run Winograd from WINOGRAD_INFER_MIN_TILES tiles.
# why: the filters' transforms are packed once for inference, so fewer tiles pay.
# measure: WINOGRAD_INFER_MIN_TILES 16 24 --arch resnet8 --input 3,32,32 --batch 1 --inference
WINOGRAD_INFER_MIN_TILES = 16
# Outputs of fewer than WINOGRAD_MIN_AREA positions run "positions" unless the layer has
# WINOGRAD_WIDE_CHANNELS channels in and out.
# why: small outputs of narrow layers gain about nothing, and Winograd's kernels cost compile time.
# measure: WINOGRAD_MIN_AREA 100 0 --arch compact --input 1,8,8 --batch 16
WINOGRAD_MIN_AREA = 100
# why: layers this wide gain on small outputs too (resnet8's 64 -> 64 on 7 x 7).
# measure: WINOGRAD_WIDE_CHANNELS 64 1000 --arch resnet8 --input 3,32,32 --batch 1 --inference
WINOGRAD_WIDE_CHANNELS = 64
# Training on an odd output side (its last tiles partly empty) runs Winograd where at least
# WINOGRAD_ODD_MIN_USED of the tiles' outputs are used (7 x 7: 49 of 64; 15 x 15: 225 of 256; not
# 5 x 5 or 3 x 3) ...
# why: below it the empty outputs' work outweighs what the tiles save.
# measure: WINOGRAD_ODD_MIN_USED 0.75 0.5 --arch "conv(64,3,padding=1),relu" --input 64,5,5 --batch 128
WINOGRAD_ODD_MIN_USED = 0.75
# ... and the batch has WINOGRAD_ODD_MIN_TILES tiles.
# why: the half-empty tiles' work pays back only in large batches.
# measure: WINOGRAD_ODD_MIN_TILES 512 100000000 --arch "conv(64,3,padding=1),relu" --input 64,7,7 --batch 32
WINOGRAD_ODD_MIN_TILES = 512

# --- Winograd F(4x4, 3x3) (conv2d_winograd4.py) ------------------------------------------------
# F(4x4) takes layers of at least WINOGRAD4_MIN_CHANNELS channels in and out (the output channels a
# multiple of 16) ...
# why: narrower layers' larger transforms cost more than the 2.25x fewer multiply-adds save.
# measure: WINOGRAD4_MIN_CHANNELS 24 1000 --arch mnistcnn --input 1,28,28 --batch 64
WINOGRAD4_MIN_CHANNELS = 24
# ... whose 4x4 tiles take at most WINOGRAD4_MAX_WORK of the 2x2 tiles' multiply-adds ...
# why: on sides that fit 2x2 tiles better (5 x 5, 9 x 9) the 4x4 tiles' padding costs more.
# measure: WINOGRAD4_MAX_WORK 1.0 2.0 --arch "conv(64,3,padding=1),relu" --input 64,9,9 --batch 64
WINOGRAD4_MAX_WORK = 1.0
# ... in batches of at least WINOGRAD4_MIN_EXAMPLES examples ...
# why: its blocks take whole examples, so a batch of one runs on one thread.
# measure: WINOGRAD4_MIN_EXAMPLES 8 1 --arch mnistcnn --input 1,28,28 --batch 1 --inference
WINOGRAD4_MIN_EXAMPLES = 8
# ... and WINOGRAD4_MIN_TILES tiles.
# why: fewer tiles than this leave its blocks' overheads unpaid.
# measure: WINOGRAD4_MIN_TILES 16 64 --arch "conv(64,3,padding=1),relu" --input 64,7,7 --batch 8
WINOGRAD4_MIN_TILES = 16
# Its forward blocks take about WINOGRAD4_TILES tiles.
# why: as WINOGRAD_TILES: the block's GEMMs small, its transforms in L2.
# measure: WINOGRAD4_TILES 64 128 --arch mnistcnn --input 1,28,28 --batch 128
WINOGRAD4_TILES = 64
# Its weight gradient sums over up to WINOGRAD4_DW_TILES tiles per GEMM ...
# why: as WINOGRAD_DW_TILES: fewer flushes of the 36 transforms.
# measure: WINOGRAD4_DW_TILES 256 64 --arch mnistcnn --input 1,28,28 --batch 128
WINOGRAD4_DW_TILES = 256
# ... in at least WINOGRAD4_MIN_PARTS parts of the batch.
# why: each part's transformed gradient is 36 C_in C_out floats: fewer, larger parts than GRAD_PARTS.
# measure: WINOGRAD4_MIN_PARTS 16 64 --arch mnistcnn --input 1,28,28 --batch 128
WINOGRAD4_MIN_PARTS = 16

# --- threads and inference slices (runtime/config.py, network.py) -------------------------------------
# An idle OpenMP thread spins SPIN_COUNT times before it sleeps (libgomp's GOMP_SPINCOUNT; its own
# default, 300,000, is near a millisecond), unless the user set a wait policy.
# why: a step's many short regions then leave the core to other processes in the gaps, at no cost
# to an idle machine's steps (3,000 cost batch-1 inference 5-11 %).
# measure: python benchmarks/spin_ab.py --spin 5000 (and benchmarks/company.py for two runs at once)
SPIN_COUNT = 5000
# forward(training=False) on a large array runs slices of at most EVAL_BATCH examples ...
# why: bounds the workspaces a prediction keeps (they are held per recorded shape).
# measure: EVAL_BATCH 256 1024 --arch mnistcnn --input 1,28,28 --batch 2048 --inference
EVAL_BATCH = 256
# ... fewer where the widest layer's activations would pass SLICE_BYTES_PER_CORE per core.
# why: slices of networks with large activations stay in the caches.
# measure: SLICE_BYTES_PER_CORE 3145728 1000000000000 --arch modern --input 1,28,28 --batch 256 --inference
SLICE_BYTES_PER_CORE = 3 << 20
