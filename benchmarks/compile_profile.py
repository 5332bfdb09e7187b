"""Where a cold first run's compile time goes: runs ``train.py ARGS`` (default ``--epochs 1``) in this
process with numba's compile events timed per kernel, and prints the kernels by compile time.

Usage: NUMBA_CACHE_DIR=$(mktemp -d) NUMBACNN_PREBUILT=0 python benchmarks/compile_profile.py [ARGS]
A kernel's time includes the helpers compiled inside it, so times overlap; the first line gives the
run's wall time. A developer's tool, not part of the package.
"""
import collections
import json
import sys
import time

from numba.core import event

times: dict[str, float] = collections.defaultdict(float)
counts: collections.Counter = collections.Counter()


class _Compiles(event.Listener):
    def __init__(self) -> None:
        self.started: dict = {}

    def on_start(self, ev):
        self.started[id(ev.data["dispatcher"]), str(ev.data["args"])] = time.perf_counter()

    def on_end(self, ev):
        d = ev.data["dispatcher"]
        t0 = self.started.pop((id(d), str(ev.data["args"])), None)
        if t0 is not None:
            name = f"{d.py_func.__module__}.{d.py_func.__qualname__}"
            times[name] += time.perf_counter() - t0
            counts[name] += 1


def main() -> None:
    event.register("numba:compile", _Compiles())
    args = sys.argv[1:] or ["--epochs", "1"]
    t0 = time.perf_counter()
    from numbacnn.cli import main as train

    train(args)
    rows = sorted(times.items(), key=lambda kv: -kv[1])
    print(json.dumps({"args": args, "wall_s": round(time.perf_counter() - t0, 1), "functions": len(rows),
                      "by_compile_s": [[k, round(v, 1), counts[k]] for k, v in rows[:40]]}, indent=1))


if __name__ == "__main__":
    main()
