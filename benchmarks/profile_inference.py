"""Per-kernel time of a recorded prediction beside onnxruntime's per-node profile, in one process.

Usage: python benchmarks/profile_inference.py [net] [batch] [threads] [rounds]

Each call of the network's recorded inference program is timed on its own (median of repeated
calls), then onnxruntime runs the exported model with profiling on; both lists are printed in
microseconds, with whole predictions of each for scale. Needs the ``[onnx]`` extra. Not part of the
package: a developer's tool for aiming kernel work where onnxruntime is faster (docs/performance.md).
"""
import collections
import json
import os
import sys
import tempfile
import time

import numpy as np

from numbacnn.arch import build_network
from numbacnn.runtime import config as _config


def main() -> None:
    import onnxruntime as ort

    from numbacnn.onnx_export import to_onnx

    name = sys.argv[1] if len(sys.argv) > 1 else "resnet8"
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    _config.set_num_threads(threads)
    net = build_network(name, (1, 28, 28), 10, seed=0)
    x = np.random.default_rng(0).random((batch, 1, 28, 28), dtype=np.float32)
    for _ in range(3):
        net.forward(x)
    program = net._inference(x.shape)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.gettempdir(), "numbacnn_ort_profile")
    session = ort.InferenceSession(to_onnx(net).SerializeToString(), opts,
                                   providers=["CPUExecutionProvider"])
    ours: dict[int, list[float]] = collections.defaultdict(list)
    whole: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(rounds):
        for k, (f, args) in enumerate(program._compiled):
            for _ in range(2):
                f(*args)
            for _ in range(20):
                t0 = time.perf_counter()
                f(*args)
                ours[k].append(time.perf_counter() - t0)
        for label, run in (("onnxruntime", lambda: session.run(None, {"input": x})),
                           ("numbacnn", lambda: net.forward(x))):
            for _ in range(50):
                t0 = time.perf_counter()
                run()
                whole[label].append(time.perf_counter() - t0)
    path = session.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    nodes: dict[str, list[float]] = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            nodes[e["name"][:-len("_kernel_time")]].append(e["dur"])
    print(f"{name} batch {batch} threads {threads}: numbacnn's calls (us, from 5 us)")
    for k, (f, args) in enumerate(program._compiled):
        us = np.median(ours[k]) * 1e6
        if us >= 5:
            shapes = [a.shape for a in args if isinstance(a, np.ndarray) and a.ndim >= 2][:2]
            print(f"{us:9.0f}  {getattr(f, '__qualname__', repr(f)).split('.')[-1]:34s} {shapes}")
    print("onnxruntime's nodes (us)")
    for node, durations in nodes.items():
        print(f"{np.median(durations):9.0f}  {node}")
    print("whole predictions: " + ", ".join(f"{label} {np.median(t) * 1e3:.3f} ms"
                                           for label, t in whole.items()))


if __name__ == "__main__":
    main()
