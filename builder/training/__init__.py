"""Training the families on the built-in corpus or user data, with exact resume."""

from onnxformer.builder.training.checkpoint import (
    Checkpoint,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from onnxformer.builder.training.defaults import TRAINING, FamilyTraining
from onnxformer.builder.training.model_config import read_model_config
from onnxformer.builder.training.options import CHANGEABLE_ON_RESUME, TrainOptions
from onnxformer.builder.training.trainer import TrainResult, train

__all__ = [
    "CHANGEABLE_ON_RESUME",
    "TRAINING",
    "Checkpoint",
    "CheckpointError",
    "FamilyTraining",
    "TrainOptions",
    "TrainResult",
    "load_checkpoint",
    "read_model_config",
    "save_checkpoint",
    "train",
]
