"""One entry of numbacnn/tuning.py at several values, timed in one process: a network's training
step (as ``Trainer.fit`` takes it) or, with ``--inference``, its prediction, for each value, in
interleaved blocks; prints the median steps a second of each value and its ratio to the first.

    python benchmarks/tune.py NAME VALUE [VALUE ...] --arch SPEC --input C,H,W | C,L
        [--batch 64] [--threads 2] [--rounds 5] [--block 0.5] [--inference] [--classes 10]
    python benchmarks/tune.py --list      # every entry: value, why, and its measure line

Each value gets its own network (seed 0, the same weights), built and first run with the value
set, so plans chosen once see it; the value is set again before each of its blocks, so choices
made per call see it too. A developer's tool, not part of the package.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from numbacnn import tuning
from numbacnn.runtime import config as _config


def entries() -> list[tuple[str, str, str, str]]:
    """(name, value, why, measure) for every constant of numbacnn/tuning.py, from its source."""
    out, why, measure = [], "", ""
    with open(tuning.__file__, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# why: "):
                why = line[7:].strip()
            elif line.startswith("# measure: "):
                measure = line[11:].strip()
            elif line[:1].isupper() and " = " in line:
                name = line.split(" = ")[0]
                out.append((name, repr(getattr(tuning, name)), why, measure))
                why, measure = "", ""
    return out


def _value(text: str, like: object) -> object:
    return float(text) if isinstance(like, float) else int(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("name", nargs="?")
    p.add_argument("values", nargs="*")
    p.add_argument("--list", action="store_true")
    p.add_argument("--arch")
    p.add_argument("--input")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--block", type=float, default=0.5)
    p.add_argument("--inference", action="store_true")
    p.add_argument("--classes", type=int, default=10)
    args = p.parse_args(argv)
    if args.list:
        for name, value, why, measure in entries():
            print(f"{name} = {value}\n  why: {why}\n  measure: {measure}")
        return 0
    known = {e[0] for e in entries()}
    if args.name not in known or len(args.values) < 2 or not args.arch or not args.input:
        p.error(f"give a name of numbacnn/tuning.py ({', '.join(sorted(known))}), two values or more, "
                f"--arch and --input")
    import numbacnn as nc

    _config.set_num_threads(args.threads)
    saved = getattr(tuning, args.name)
    values = [_value(v, saved) for v in args.values]
    shape = tuple(int(v) for v in args.input.split(","))
    rng = np.random.default_rng(0)
    x = rng.random((args.batch, *shape), dtype=np.float32)
    y = rng.integers(0, args.classes, args.batch)
    runs = []
    try:
        for v in values:
            setattr(tuning, args.name, v)
            net = nc.build_network(args.arch, shape, args.classes, seed=0)
            opt = nc.SGD(net, lr=0.01, momentum=0.9)
            trainer = nc.Trainer(net, opt, batch_size=args.batch, progress=False)
            step = ((lambda net=net: net.forward(x, training=False)) if args.inference
                    else (lambda trainer=trainer: trainer.train_step(x, y)))
            for _ in range(3):  # compiles, records the step, warms the caches
                step()
            runs.append(step)
        rates: list[list[float]] = [[] for _ in values]
        for _ in range(args.rounds):
            for i, (v, step) in enumerate(zip(values, runs)):
                setattr(tuning, args.name, v)
                n, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < args.block:
                    step()
                    n += 1
                rates[i].append(n / (time.perf_counter() - t0))
    finally:
        setattr(tuning, args.name, saved)
    what = "predictions" if args.inference else "training steps"
    print(f"{args.name} on {args.arch} {args.input}, batch {args.batch}, {args.threads} threads, "
          f"{args.rounds} rounds: {what} a second (median), ratio to {args.values[0]}")
    base = statistics.median(rates[0])
    for v, r in zip(args.values, rates):
        m = statistics.median(r)
        print(f"  {v:>12}: {m:10.1f} /s  {m / base:5.2f}x  (rounds {min(r):.1f}-{max(r):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
