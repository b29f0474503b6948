"""T5: an encoder-decoder Transformer for text-to-text tasks (Raffel et al., 2020).

    input_ids -> shared embedding -> encoder stack: N blocks (pre-LN, bidirectional relative bias) + norm
              -> memory
    decoder_input_ids -> shared embedding -> decoder stack: N blocks (pre-LN, causal relative bias,
              cross-attention to memory) + norm -> LM head (tied to the embedding) -> logits

`encode` and `decode` are separate methods: the export makes one graph of each. The cross-attention keys and
values depend only on the encoder output, so `cross_key_values` computes them once per input and `decode`
reuses them at every step; the self-attention cache goes in and out as explicit tensors.
"""

from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypedDict

import torch
from torch import nn

from onnxformer.builder.families.config import from_preset, layer_options, relative_options, validate_common
from onnxformer.builder.layers.checks import check_positive
from onnxformer.builder.layers.embedding import Embeddings, PositionKind
from onnxformer.builder.layers.init import init_transformer_weights
from onnxformer.builder.layers.options import BlockOptions, FeedForwardOptions, NormOptions
from onnxformer.builder.layers.stacks import (
    DecoderStack,
    EncoderStack,
    KeyValue,
    RelativeOptions,
    final_norm,
    rename_legacy_keys,
)
from onnxformer.runtime.errors import ConfigError

T5_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 256, "max_len": 64},
    "small": {"d_model": 384, "n_layers": 6, "n_heads": 12, "d_ff": 1536, "max_len": 512},
}
# Checkpoint keys from before the stacks ("encoder_blocks.0...", "decoder_norm..." at the top level).
LEGACY_KEYS = {
    f"{stack}_{old}": f"{stack}.{new}"
    for stack in ("encoder", "decoder")
    for old, new in (("blocks.", "blocks."), ("relative.", "relative."), ("norm.", "norm."))
}


@dataclass(frozen=True)
class T5Config:
    vocab_size: int = 512
    d_model: int = 128
    n_layers: int = 3  # encoder layers, and decoder layers unless n_decoder_layers is set
    n_heads: int = 4
    d_ff: int = 512
    max_len: int = 64
    dropout: float = 0.1
    position: PositionKind = "relative"
    num_buckets: int = 32
    max_distance: int = 128
    decoder_start_token_id: int = 1  # the tokenizer's <s>
    tie_embeddings: bool = True
    # T5 v1.0 rescales the decoder output by d_model**-0.5 before its tied head (transformers 5 names it
    # scale_decoder_outputs); our own presets train without it.
    scale_decoder_outputs: bool = False
    n_decoder_layers: int | None = None  # None: n_layers (T5 v1.1 and flan checkpoints may differ)
    block: BlockOptions = field(default_factory=lambda: BlockOptions(ffn=FeedForwardOptions("relu")))

    def __post_init__(self) -> None:
        validate_common(self)
        if self.n_decoder_layers is not None:
            check_positive(n_decoder_layers=self.n_decoder_layers)
        if not isinstance(self.scale_decoder_outputs, bool):
            raise ConfigError(
                f"scale_decoder_outputs must be true or false, got {self.scale_decoder_outputs!r}"
            )

    @property
    def decoder_layers(self) -> int:
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "T5Config":
        return from_preset(cls, T5_PRESETS, name, **overrides)


class T5EncoderOutput(NamedTuple):
    hidden: torch.Tensor  # (B, S, D)
    attentions: tuple[torch.Tensor, ...]  # per layer (B, H, S, S) when need_weights, else ()


class T5DecoderOutput(NamedTuple):
    logits: torch.Tensor  # (B, T, V)
    present: tuple[KeyValue, ...]  # self-attention cache per layer, (B, H, P + T, Dh) each
    hidden: torch.Tensor  # (B, T, D)
    self_attentions: tuple[torch.Tensor, ...]  # per layer (B, H, T, P + T) when need_weights
    cross_attentions: tuple[torch.Tensor, ...]  # per layer (B, H, T, S) when need_weights


class _StackOptions(TypedDict):
    """What the encoder and decoder stacks share, as their keyword arguments."""

    final_norm: NormOptions | None
    relative: RelativeOptions | None
    dropout: float


class T5(nn.Module):
    def __init__(self, config: T5Config) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(
            config.vocab_size,
            config.d_model,
            position=config.position,
            max_len=config.max_len,
            dropout=config.dropout,
        )
        stack: _StackOptions = {
            "final_norm": final_norm(config.block),
            "relative": relative_options(config),
            "dropout": config.dropout,
        }
        sizes = (config.d_model, config.n_heads, config.d_ff)
        self.encoder = EncoderStack(*sizes, layer_options(config, config.n_layers), **stack)
        self.decoder = DecoderStack(
            *sizes, layer_options(config, config.decoder_layers), cross_attention=True, **stack
        )
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embeddings.token.weight
        init_transformer_weights(self, n_layers=config.n_layers)
        self.register_load_state_dict_pre_hook(rename_legacy_keys(LEGACY_KEYS))

    def encode(
        self,
        input_ids: torch.Tensor,  # (B, S)
        *,
        attention_mask: torch.Tensor | None = None,  # (B, S)
        need_weights: bool = False,
    ) -> T5EncoderOutput:
        inputs = self.encoder.prepare(input_ids, attention_mask)
        hidden = self.embeddings(input_ids, inputs.positions)  # (B, S, D)
        out = self.encoder(hidden, inputs, need_weights=need_weights)
        return T5EncoderOutput(out.hidden, out.attentions)

    def cross_key_values(self, encoder_hidden: torch.Tensor) -> tuple[KeyValue, ...]:
        """encoder_hidden (B, S, D) -> per decoder layer, the cross-attention (key, value), (B, H, S, Dh)."""
        return self.decoder.cross_key_values(encoder_hidden)

    def decode(
        self,
        decoder_input_ids: torch.Tensor,  # (B, T)
        *,
        cross_key_values: tuple[KeyValue, ...],  # from cross_key_values(encoder_hidden)
        encoder_attention_mask: torch.Tensor | None = None,  # (B, S)
        attention_mask: torch.Tensor | None = None,  # (B, P + T) decoder tokens, 1 = real
        past_key_values: tuple[KeyValue, ...] | None = None,  # per layer, (B, H, P, Dh) each
        need_weights: bool = False,
    ) -> T5DecoderOutput:
        inputs = self.decoder.prepare(
            decoder_input_ids, attention_mask, past_key_values, name="decoder_input_ids"
        )
        hidden = self.embeddings(decoder_input_ids, inputs.positions)  # (B, T, D)
        out = self.decoder(
            hidden,
            inputs,
            cross_key_values=cross_key_values,
            memory_mask=encoder_attention_mask,
            need_weights=need_weights,
        )
        hidden = out.hidden  # (B, T, D)
        if self.config.scale_decoder_outputs:
            hidden = hidden * self.config.d_model**-0.5  # (B, T, D)
        logits = self.lm_head(hidden)  # (B, T, V)
        return T5DecoderOutput(logits, out.present, out.hidden, out.self_attentions, out.cross_attentions)

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, S)
        decoder_input_ids: torch.Tensor,  # (B, T)
        *,
        attention_mask: torch.Tensor | None = None,  # (B, S)
        decoder_attention_mask: torch.Tensor | None = None,  # (B, T)
    ) -> T5DecoderOutput:
        """Teacher-forced pass for training: encode, then decode every target position at once."""
        memory = self.encode(input_ids, attention_mask=attention_mask).hidden  # (B, S, D)
        return self.decode(
            decoder_input_ids,
            cross_key_values=self.cross_key_values(memory),
            encoder_attention_mask=attention_mask,
            attention_mask=decoder_attention_mask,
        )
