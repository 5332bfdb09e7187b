"""numbacnn: a Numba-compiled CNN trainer for multicore CPUs."""
from ._config import get_num_threads, set_num_threads
from .layers import AvgPool2D, Conv2D, Dense, Dropout, Flatten, Layer, MaxPool2D, ReLU, Tanh
from .network import Sequential, softmax_cross_entropy
from .optimizers import SGD, Adam, Optimizer, RMSProp, make_optimizer

__version__ = "0.1.0"

__all__ = [
    "Adam", "AvgPool2D", "Conv2D", "Dense", "Dropout", "Flatten", "Layer", "MaxPool2D", "Optimizer",
    "RMSProp", "ReLU", "SGD", "Sequential", "Tanh", "get_num_threads", "make_optimizer",
    "set_num_threads", "softmax_cross_entropy",
]
