"""The model families, each composed from the layers: GPT (decoder-only), BERT (encoder-only), T5
(encoder-decoder). `FAMILIES` maps a family name to its model class, config class and presets."""

from typing import Any, NamedTuple

from torch import nn

from onnxformer.builder.families.bert import BERT, BERT_PRESETS, BERTConfig, BERTOutput, mean_pool
from onnxformer.builder.families.gpt import GPT, GPT_PRESETS, GPTConfig, GPTOutput
from onnxformer.builder.families.t5 import T5, T5_PRESETS, T5Config, T5DecoderOutput, T5EncoderOutput


class Family(NamedTuple):
    model: type[nn.Module]
    config: type
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
    "GPTConfig",
    "GPTOutput",
    "T5Config",
    "T5DecoderOutput",
    "T5EncoderOutput",
    "mean_pool",
]
