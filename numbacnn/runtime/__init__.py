"""The JIT runtime: how the kernels are compiled, loaded, run in parallel and replayed.

Nothing here knows a layer's arithmetic; the kernels (``numbacnn/kernels``) and the layers above them
use it. Importing this package imports none of its modules (each is imported where it is used, so
the kernels can import ``config`` and ``parallel`` without pulling in what sits above them).

- ``flags``: the kernels' compile flags (fast-math set, optimisation level): one place, hashed into
  the kernel tier's stamp.
- ``config``: the ``@kernel`` decorator (numba's ``njit`` with those flags and the tiered cache)
  and the kernel declaration (``export=``, ``team=``: what ``kernels/cpu/__init__.py`` and
  ``kernels/cuda/__init__.py`` derive their namespaces and team tables from); thread control and the
  kernels' BLAS.
- ``parallel``: ``parallel_blocks(count, block, args)``, the kernels' one parallel loop (a block per
  iteration, ordered reductions outside it: the same bits for any thread count).
- ``prebuilt``, ``compile``: the kernel tier, numba's cache files built ahead by ``python -m numbacnn
  compile`` (``compile.workloads`` runs every specialisation the presets, optimizers, estimators
  and plans reach) and looked up by the stamp of the kernel sources, ``parallel``, ``team_region``
  and ``flags``.
- ``calls``: ``launch(fn, *args)``, through which every kernel call goes, and ``capture()``, which
  records them.
- ``program``: a training step or a prediction recorded once (``calls.capture``) and replayed
  through the kernels' compiled entry points; on a GPU, captured as a CUDA graph.
- ``team``, ``team_region``: a recorded prediction's calls run in one OpenMP parallel region (the
  schedule with its barriers, and the compiled region that runs it).

docs/architecture.md draws how these fit with the backends, layers and the trainer.
"""
