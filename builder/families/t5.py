"""T5: an encoder-decoder Transformer for text-to-text tasks (Raffel et al., 2020).

    input_ids -> shared embedding -> N encoder blocks (pre-LN, bidirectional relative bias) -> norm -> memory
    decoder_input_ids -> shared embedding -> N decoder blocks (pre-LN, causal relative bias,
              cross-attention to memory) -> norm -> LM head (tied to the embedding) -> logits

`encode` and `decode` are separate methods: the export makes one graph of each. The cross-attention keys and
values depend only on the encoder output, so `cross_key_values` computes them once per input and `decode`
reuses them at every step; the self-attention cache goes in and out as explicit tensors.
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from onnxformer.builder.families.config import from_preset, validate_common
from onnxformer.builder.layers import DecoderBlock, EncoderBlock, RelativePositionBias
from onnxformer.builder.layers.checks import check_tensor
from onnxformer.builder.layers.embedding import Embeddings, PositionKind, positions_from_mask
from onnxformer.builder.layers.feedforward import Activation
from onnxformer.builder.layers.init import init_transformer_weights
from onnxformer.builder.layers.residual import NormPosition
from onnxformer.runtime.errors import InputError

KeyValue = tuple[torch.Tensor, torch.Tensor]  # (B, H, L, Dh) each

T5_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 256, "max_len": 64},
    "small": {"d_model": 384, "n_layers": 6, "n_heads": 12, "d_ff": 1536, "max_len": 512},
}


@dataclass(frozen=True)
class T5Config:
    vocab_size: int = 512
    d_model: int = 128
    n_layers: int = 3  # encoder and decoder each
    n_heads: int = 4
    d_ff: int = 512
    max_len: int = 64
    dropout: float = 0.1
    position: PositionKind = "relative"
    norm_position: NormPosition = "pre"
    activation: Activation = "relu"
    num_buckets: int = 32
    max_distance: int = 128
    decoder_start_token_id: int = 1  # the tokenizer's <s>
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        validate_common(self)

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
        relative = config.position == "relative"
        buckets = {"num_buckets": config.num_buckets, "max_distance": config.max_distance}
        self.encoder_relative = (
            RelativePositionBias(config.n_heads, bidirectional=True, **buckets) if relative else None
        )
        self.decoder_relative = (
            RelativePositionBias(config.n_heads, bidirectional=False, **buckets) if relative else None
        )
        block_options = {
            "norm_position": config.norm_position,
            "activation": config.activation,
            "dropout": config.dropout,
            "rotary": config.position == "rotary",
        }
        self.encoder_blocks = nn.ModuleList(
            EncoderBlock(config.d_model, config.n_heads, config.d_ff, **block_options)
            for _ in range(config.n_layers)
        )
        self.decoder_blocks = nn.ModuleList(
            DecoderBlock(config.d_model, config.n_heads, config.d_ff, cross_attention=True, **block_options)
            for _ in range(config.n_layers)
        )
        pre = config.norm_position == "pre"
        self.encoder_norm = nn.LayerNorm(config.d_model) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(config.d_model) if pre else nn.Identity()
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embeddings.token.weight
        init_transformer_weights(self, n_layers=config.n_layers)

    def encode(
        self,
        input_ids: torch.Tensor,  # (B, S)
        *,
        attention_mask: torch.Tensor | None = None,  # (B, S)
        need_weights: bool = False,
    ) -> T5EncoderOutput:
        check_tensor(input_ids, "input_ids", dims=("B", "S"))
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        check_tensor(
            attention_mask, "attention_mask", dims=("B", "S"), sizes=dict(enumerate(input_ids.shape))
        )
        length = input_ids.shape[1]
        positions = positions_from_mask(attention_mask, length)  # (B, S)
        hidden = self.embeddings(input_ids, positions)  # (B, S, D)
        bias = None
        if self.encoder_relative is not None:
            bias = self.encoder_relative(length, length, device=hidden.device)  # (1, H, S, S)
        attentions = []
        for block in self.encoder_blocks:
            out = block(
                hidden,
                attention_mask=attention_mask,
                position_bias=bias,
                positions=positions,
                need_weights=need_weights,
            )
            hidden = out.hidden  # (B, S, D)
            if need_weights:
                attentions.append(out.weights)
        return T5EncoderOutput(self.encoder_norm(hidden), tuple(attentions))

    def cross_key_values(self, encoder_hidden: torch.Tensor) -> tuple[KeyValue, ...]:
        """encoder_hidden (B, S, D) -> per decoder layer, the cross-attention (key, value), (B, H, S, Dh)."""
        return tuple(block.cross_attn.project_memory(encoder_hidden) for block in self.decoder_blocks)

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
        check_tensor(decoder_input_ids, "decoder_input_ids", dims=("B", "T"))
        batch, length = decoder_input_ids.shape
        if len(cross_key_values) != len(self.decoder_blocks):
            raise InputError(
                f"cross_key_values has {len(cross_key_values)} layers, the decoder {len(self.decoder_blocks)}"
            )
        if past_key_values is not None and len(past_key_values) != len(self.decoder_blocks):
            raise InputError(
                f"past_key_values has {len(past_key_values)} layers, the decoder {len(self.decoder_blocks)}"
            )
        past = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        if attention_mask is None:
            attention_mask = torch.ones(
                batch, past + length, dtype=torch.long, device=decoder_input_ids.device
            )
        check_tensor(attention_mask, "attention_mask", dims=("B", "S"), sizes={0: batch, 1: past + length})
        positions = positions_from_mask(attention_mask, length)  # (B, T)
        hidden = self.embeddings(decoder_input_ids, positions)  # (B, T, D)
        bias = None
        if self.decoder_relative is not None:
            bias = self.decoder_relative(length, past + length, device=hidden.device)  # (1, H, T, P + T)
        present, self_attentions, cross_attentions = [], [], []
        for index, block in enumerate(self.decoder_blocks):
            past_key, past_value = (None, None) if past_key_values is None else past_key_values[index]
            memory_key, memory_value = cross_key_values[index]
            out = block(
                hidden,
                attention_mask=attention_mask,
                memory_key=memory_key,
                memory_value=memory_value,
                memory_mask=encoder_attention_mask,
                past_key=past_key,
                past_value=past_value,
                position_bias=bias,
                positions=positions,
                need_weights=need_weights,
            )
            hidden = out.hidden  # (B, T, D)
            present.append((out.present_key, out.present_value))
            if need_weights:
                self_attentions.append(out.self_weights)
                cross_attentions.append(out.cross_weights)
        hidden = self.decoder_norm(hidden)  # (B, T, D)
        logits = self.lm_head(hidden)  # (B, T, V)
        return T5DecoderOutput(
            logits, tuple(present), hidden, tuple(self_attentions), tuple(cross_attentions)
        )

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
