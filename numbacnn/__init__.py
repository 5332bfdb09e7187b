"""numbacnn: a Numba-compiled CNN trainer for multicore CPUs."""
from .arch import PRESETS, ArchitectureError, build_network, parse_architecture
from .augment import Augment
from .checkpoint import CheckpointError, load, load_checkpoint, save
from .data import DataError, Dataset, load_dataset
from .layers import (
    GELU,
    AvgPool1D,
    AvgPool2D,
    BatchNorm1D,
    BatchNorm2D,
    Concat,
    Conv1D,
    Conv2D,
    Dense,
    DepthwiseConv1D,
    DepthwiseConv2D,
    Dropout,
    Flatten,
    GlobalAvgPool1D,
    GlobalAvgPool2D,
    GlobalMaxPool1D,
    HardSigmoid,
    HardSwish,
    Layer,
    MaxPool1D,
    MaxPool2D,
    Normalize,
    ReLU,
    ReLU6,
    Residual,
    Scale,
    Sigmoid,
    SiLU,
    Tanh,
)
from .loss import softmax_cross_entropy
from .network import Sequential
from .onnx_export import export_onnx
from .optimizers import SGD, Adam, AdamW, Optimizer, RMSProp, make_optimizer
from .runtime.config import get_num_threads, set_num_threads
from .training import DivergenceError, Trainer, TrainingInterrupted, evaluate

__version__ = "0.1.0"


def __getattr__(name: str):
    # scikit-learn takes ~0.7 s to import: load the estimator only when it is asked for
    if name in ("CNNClassifier", "CNNRegressor"):
        from . import estimator
        return getattr(estimator, name)
    raise AttributeError(f"module 'numbacnn' has no attribute {name!r}")

__all__ = [
    "CNNClassifier", "CNNRegressor", "PRESETS", "ArchitectureError", "CheckpointError", "DataError",
    "Dataset",
    "DivergenceError",
    "Trainer", "TrainingInterrupted", "build_network", "evaluate", "load", "load_checkpoint",
    "load_dataset", "parse_architecture", "save",
    "Adam", "AvgPool2D", "Conv2D", "Dense", "Dropout", "Flatten", "Layer", "MaxPool2D", "Optimizer",
    "RMSProp", "ReLU", "SGD", "Sequential", "Tanh", "get_num_threads", "make_optimizer",
    "set_num_threads", "softmax_cross_entropy", "export_onnx",
    "AdamW", "Augment", "GELU", "BatchNorm1D", "BatchNorm2D", "GlobalAvgPool2D", "Normalize", "Residual",
    "Scale", "DepthwiseConv2D", "HardSigmoid", "HardSwish", "ReLU6", "Sigmoid", "SiLU",
    "AvgPool1D", "Concat", "Conv1D", "DepthwiseConv1D", "GlobalAvgPool1D", "GlobalMaxPool1D", "MaxPool1D",
]
