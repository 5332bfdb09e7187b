#!/usr/bin/env python3
"""Train a small CNN on MNIST-like data with numbacnn. ``python train.py --help`` lists the options."""
from numbacnn.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
