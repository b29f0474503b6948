"""The graphs of a whole-model export, per family: tensor-in/tuple-out wrappers and their input specs.

Names follow Optimum and transformers.js: `input_ids`, `attention_mask`, `past_key_values.{i}.key/value`
in, `logits`, `present.{i}.key/value` out. Axis names: batch, sequence (new tokens), past_sequence,
total_sequence (past + new), encoder_sequence.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from onnxformer.builder.families import BERT, GPT, T5

KeyValues = tuple[tuple[torch.Tensor, torch.Tensor], ...]

PAST_KEY, PAST_VALUE = "past_key_values.{i}.key", "past_key_values.{i}.value"
PRESENT_KEY, PRESENT_VALUE = "present.{i}.key", "present.{i}.value"
CROSS_KEY, CROSS_VALUE = "cross_key_values.{i}.key", "cross_key_values.{i}.value"
CACHE_AXES = ("batch", None, "past_sequence", None)


def cache_names(pattern_key: str, pattern_value: str, layers: int) -> list[str]:
    return [p.format(i=i) for i in range(layers) for p in (pattern_key, pattern_value)]


def flatten(pairs: KeyValues) -> list[torch.Tensor]:
    return [tensor for pair in pairs for tensor in pair]


class GPTDecoder(nn.Module):
    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, past_key_values):  # (B,T), (B,P+T), per layer (B,H,P,Dh)
        out = self.model(input_ids, attention_mask=attention_mask, past_key_values=past_key_values)
        return out.logits, *flatten(out.present)


class GPTAttentions(nn.Module):
    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):  # (B, T) x2 -> logits, per layer (B, H, T, T)
        out = self.model(input_ids, attention_mask=attention_mask, need_weights=True)
        return out.logits, *out.attentions


class BERTEncoder(nn.Module):
    def __init__(self, model: BERT) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):  # (B, T) x3
        out = self.model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.hidden, out.sentence_embedding, out.mlm_logits, out.class_logits


class BERTAttentions(nn.Module):
    def __init__(self, model: BERT) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):  # (B, T) x3 -> per layer (B, H, T, T)
        out = self.model(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, need_weights=True
        )
        return tuple(out.attentions)


class T5Encoder(nn.Module):
    """The encoder and, computed once per input, every decoder layer's cross-attention keys and values."""

    def __init__(self, model: T5) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):  # (B, S) x2 -> (B, S, D), per layer (B, H, S, Dh)
        hidden = self.model.encode(input_ids, attention_mask=attention_mask).hidden
        return hidden, *flatten(self.model.cross_key_values(hidden))


class T5Decoder(nn.Module):
    def __init__(self, model: T5) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        decoder_input_ids,  # (B, T)
        decoder_attention_mask,  # (B, P + T)
        encoder_attention_mask,  # (B, S)
        cross_key_values,  # per layer (B, H, S, Dh) x2
        past_key_values,  # per layer (B, H, P, Dh) x2
    ):
        out = self.model.decode(
            decoder_input_ids,
            cross_key_values=cross_key_values,
            encoder_attention_mask=encoder_attention_mask,
            attention_mask=decoder_attention_mask,
            past_key_values=past_key_values,
        )
        return out.logits, *flatten(out.present)


class T5Attentions(nn.Module):
    def __init__(self, model: T5) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):  # (B, S), (B, S), (B, T)
        encoded = self.model.encode(input_ids, attention_mask=attention_mask, need_weights=True)
        decoded = self.model.decode(
            decoder_input_ids,
            cross_key_values=self.model.cross_key_values(encoded.hidden),
            encoder_attention_mask=attention_mask,
            need_weights=True,
        )
        return *encoded.attentions, *decoded.cross_attentions


@dataclass(frozen=True)
class GraphSpec:
    role: str  # "decoder", "encoder", "attentions"
    filename: str
    build: Callable[[nn.Module], nn.Module]
    example: Callable[[Any, int], dict[str, Any]]  # (model, batch) -> forward kwargs at trace sizes
    dim_names: Callable[[int], dict[str, tuple[str | None, ...]]]  # layers -> flattened input axes
    output_names: Callable[[int], list[str]]  # layers -> output names


def _ids(model: nn.Module, batch: int, length: int) -> torch.Tensor:
    return torch.randint(7, model.config.vocab_size, (batch, length))


def _cache(model: nn.Module, batch: int, length: int) -> KeyValues:
    c = model.config
    shape = (batch, c.n_heads, length, c.d_model // c.n_heads)
    return tuple((torch.randn(shape), torch.randn(shape)) for _ in range(c.n_layers))


TRACE_BATCH, TRACE_LENGTH, TRACE_PAST, TRACE_SOURCE = 2, 5, 3, 6


def gpt_graphs() -> list[GraphSpec]:
    return [
        GraphSpec(
            "decoder",
            "decoder.onnx",
            GPTDecoder,
            lambda m, b: {
                "input_ids": _ids(m, b, TRACE_LENGTH),
                "attention_mask": torch.ones(b, TRACE_PAST + TRACE_LENGTH, dtype=torch.long),
                "past_key_values": _cache(m, b, TRACE_PAST),
            },
            lambda n: {
                "input_ids": ("batch", "sequence"),
                "attention_mask": ("batch", "total_sequence"),
                **dict.fromkeys(cache_names(PAST_KEY, PAST_VALUE, n), CACHE_AXES),
            },
            lambda n: ["logits", *cache_names(PRESENT_KEY, PRESENT_VALUE, n)],
        ),
        GraphSpec(
            "attentions",
            "attentions.onnx",
            GPTAttentions,
            lambda m, b: {
                "input_ids": _ids(m, b, TRACE_LENGTH),
                "attention_mask": torch.ones(b, TRACE_LENGTH, dtype=torch.long),
            },
            lambda n: {"input_ids": ("batch", "sequence"), "attention_mask": ("batch", "sequence")},
            lambda n: ["logits", *(f"attentions.{i}" for i in range(n))],
        ),
    ]


def _bert_inputs(m: nn.Module, b: int) -> dict[str, Any]:
    return {
        "input_ids": _ids(m, b, TRACE_LENGTH),
        "attention_mask": torch.ones(b, TRACE_LENGTH, dtype=torch.long),
        "token_type_ids": torch.zeros(b, TRACE_LENGTH, dtype=torch.long),
    }


_BERT_AXES = dict.fromkeys(("input_ids", "attention_mask", "token_type_ids"), ("batch", "sequence"))


def bert_graphs() -> list[GraphSpec]:
    return [
        GraphSpec(
            "encoder",
            "encoder.onnx",
            BERTEncoder,
            _bert_inputs,
            lambda n: _BERT_AXES,
            lambda n: ["last_hidden_state", "sentence_embedding", "mlm_logits", "class_logits"],
        ),
        GraphSpec(
            "attentions",
            "attentions.onnx",
            BERTAttentions,
            _bert_inputs,
            lambda n: _BERT_AXES,
            lambda n: [f"attentions.{i}" for i in range(n)],
        ),
    ]


def t5_graphs() -> list[GraphSpec]:
    source_axes = ("batch", "encoder_sequence")
    cross_axes = ("batch", None, "encoder_sequence", None)
    return [
        GraphSpec(
            "encoder",
            "encoder.onnx",
            T5Encoder,
            lambda m, b: {
                "input_ids": _ids(m, b, TRACE_SOURCE),
                "attention_mask": torch.ones(b, TRACE_SOURCE, dtype=torch.long),
            },
            lambda n: {"input_ids": source_axes, "attention_mask": source_axes},
            lambda n: ["last_hidden_state", *cache_names(CROSS_KEY, CROSS_VALUE, n)],
        ),
        GraphSpec(
            "decoder",
            "decoder.onnx",
            T5Decoder,
            lambda m, b: {
                "decoder_input_ids": _ids(m, b, TRACE_LENGTH),
                "decoder_attention_mask": torch.ones(b, TRACE_PAST + TRACE_LENGTH, dtype=torch.long),
                "encoder_attention_mask": torch.ones(b, TRACE_SOURCE, dtype=torch.long),
                "cross_key_values": _cache(m, b, TRACE_SOURCE),
                "past_key_values": _cache(m, b, TRACE_PAST),
            },
            lambda n: {
                "decoder_input_ids": ("batch", "sequence"),
                "decoder_attention_mask": ("batch", "total_sequence"),
                "encoder_attention_mask": source_axes,
                **dict.fromkeys(cache_names(CROSS_KEY, CROSS_VALUE, n), cross_axes),
                **dict.fromkeys(cache_names(PAST_KEY, PAST_VALUE, n), CACHE_AXES),
            },
            lambda n: ["logits", *cache_names(PRESENT_KEY, PRESENT_VALUE, n)],
        ),
        GraphSpec(
            "attentions",
            "attentions.onnx",
            T5Attentions,
            lambda m, b: {
                "input_ids": _ids(m, b, TRACE_SOURCE),
                "attention_mask": torch.ones(b, TRACE_SOURCE, dtype=torch.long),
                "decoder_input_ids": _ids(m, b, TRACE_LENGTH),
            },
            lambda n: {
                "input_ids": source_axes,
                "attention_mask": source_axes,
                "decoder_input_ids": ("batch", "sequence"),
            },
            lambda n: [
                *(f"encoder_attentions.{i}" for i in range(n)),
                *(f"cross_attentions.{i}" for i in range(n)),
            ],
        ),
    ]


GRAPHS: dict[str, Callable[[], list[GraphSpec]]] = {"gpt": gpt_graphs, "bert": bert_graphs, "t5": t5_graphs}
