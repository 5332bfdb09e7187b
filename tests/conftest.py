"""Shared fixtures: a seeded RNG and helpers to run single layers."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MNIST_DIR = os.path.join(ROOT, "..", "shared", "data", "mnist")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)
