"""Training the families on the built-in corpus or user data, with exact resume."""

from onnxformer.builder.training.checkpoint import (
    Checkpoint,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from onnxformer.builder.training.trainer import TrainOptions, TrainResult, train

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "TrainOptions",
    "TrainResult",
    "load_checkpoint",
    "save_checkpoint",
    "train",
]
