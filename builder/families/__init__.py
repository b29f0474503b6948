"""The model families, each composed from the layers: GPT (decoder-only), BERT (encoder-only), T5
(encoder-decoder). `FAMILIES` maps a family name to its model class, config class and presets."""

from collections.abc import Callable
from typing import Any, NamedTuple

from onnxformer.builder.families.bert import BERT, BERT_PRESETS, BERTConfig, BERTOutput, mean_pool
from onnxformer.builder.families.gpt import GPT, GPT_PRESETS, GPTConfig, GPTOutput
from onnxformer.builder.families.t5 import T5, T5_PRESETS, T5Config, T5DecoderOutput, T5EncoderOutput

FamilyModel = GPT | BERT | T5  # a model of one of the families
FamilyConfig = GPTConfig | BERTConfig | T5Config


class Family(NamedTuple):
    # The model class. Each takes its own config class, a pairing one table of families cannot express:
    # hence Any for the config it is given.
    model: Callable[[Any], FamilyModel]
    config: type[FamilyConfig]
    presets: dict[str, dict[str, Any]]


FAMILIES: dict[str, Family] = {
    "gpt": Family(GPT, GPTConfig, GPT_PRESETS),
    "bert": Family(BERT, BERTConfig, BERT_PRESETS),
    "t5": Family(T5, T5Config, T5_PRESETS),
}

__all__ = [
    "BERT",
    "FAMILIES",
    "GPT",
    "T5",
    "BERTConfig",
    "BERTOutput",
    "Family",
    "FamilyConfig",
    "FamilyModel",
    "GPTConfig",
    "GPTOutput",
    "T5Config",
    "T5DecoderOutput",
    "T5EncoderOutput",
    "mean_pool",
]
