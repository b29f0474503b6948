"""Encoder and decoder stacks: N blocks, the relative bias they share, the final norm, and the defaults for
the attention mask, the positions and the past length (the Annotated Transformer's Encoder(layer, N) and
Decoder(layer, N), which own their N layers and the last LayerNorm).

    tokens ─► family's embeddings ─► stack: block 1 ─► ... ─► block N ─► [final LN] ─► family's head
                                            ▲ mask, positions, relative bias (computed once, shared),
                                            │ past key/values in, present out (decoder)

A family calls `stack.prepare(ids, attention_mask, past)` first: it checks the inputs, fills in the
defaults and counts the positions of the new tokens from the mask (real tokens only, so a left-padded row
starts at 0 as it would alone). The embeddings use those positions for the absolute encodings; the stack
uses them for rotary ones.

A stack takes its widths, one `BlockOptions` per layer (a per-layer pattern is a tuple of different
values) and its final norm. Post-LN blocks end normalised already; pre-LN leaves the residual stream
un-normalised, so a pre-LN stack ends with one more norm (GPT-2, Radford et al., 2019, 2.3; Xiong et al.,
2020): `final_norm(options)` says which.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from onnxformer.builder.layers.blocks import DecoderBlock, EncoderBlock
from onnxformer.builder.layers.checks import check_tensor
from onnxformer.builder.layers.embedding import positions_from_mask
from onnxformer.builder.layers.norms import make_norm
from onnxformer.builder.layers.options import BlockOptions, NormOptions
from onnxformer.builder.layers.positions import RelativePositionBias
from onnxformer.runtime.errors import ConfigError, InputError

KeyValue = tuple[torch.Tensor, torch.Tensor]  # (B, Hkv, L, Dh) each


class StackInputs(NamedTuple):
    attention_mask: torch.Tensor  # (B, P + T) 1 = real token, 0 = padding
    positions: torch.Tensor  # (B, T) positions of the new tokens, counting real tokens only
    past_key_values: tuple[KeyValue, ...] | None  # per layer, (B, H, P, Dh) each


class EncoderStackOutput(NamedTuple):
    hidden: torch.Tensor  # (B, T, D) after the final norm
    attentions: tuple[torch.Tensor, ...]  # per layer (B, H, T, T) when need_weights, else ()


class DecoderStackOutput(NamedTuple):
    hidden: torch.Tensor  # (B, T, D) after the final norm
    present: tuple[KeyValue, ...]  # per layer, (B, H, P + T, Dh) each
    self_attentions: tuple[torch.Tensor, ...]  # per layer (B, H, T, P + T) when need_weights, else ()
    cross_attentions: tuple[torch.Tensor, ...]  # per layer (B, H, T, S) when need_weights and cross


@dataclass(frozen=True)
class RelativeOptions:
    """T5's relative position buckets (positions.py), one bias table per stack shared by its layers."""

    num_buckets: int = 32
    max_distance: int = 128


def final_norm(options: BlockOptions) -> NormOptions | None:
    """The norm a stack of such blocks ends with: the blocks' own for pre-LN, none for post-LN."""
    return options.norm if options.residual.position == "pre" else None


def _norm(d_model: int, norm: NormOptions | None) -> nn.Module:
    if norm is None:
        return nn.Identity()
    return make_norm(norm.kind, d_model, eps=norm.eps, weight_offset=norm.weight_offset, bias=norm.bias)


def _layers(layers: Sequence[BlockOptions]) -> tuple[BlockOptions, ...]:
    layers = tuple(layers)
    if not layers or not all(isinstance(item, BlockOptions) for item in layers):
        raise ConfigError(f"a stack takes one BlockOptions per layer (at least one), got {layers!r}")
    return layers


def _relative(
    relative: RelativeOptions | None, n_heads: int, *, bidirectional: bool
) -> RelativePositionBias | None:
    if relative is None:
        return None
    return RelativePositionBias(
        n_heads,
        bidirectional=bidirectional,
        num_buckets=relative.num_buckets,
        max_distance=relative.max_distance,
    )


class EncoderStack(nn.Module):
    """N bidirectional encoder blocks: (B, T, D) -> (B, T, D)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        layers: Sequence[BlockOptions],
        *,
        final_norm: NormOptions | None,
        relative: RelativeOptions | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.relative = _relative(relative, n_heads, bidirectional=True)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, options, dropout=dropout) for options in _layers(layers)
        )
        self.norm = _norm(d_model, final_norm)

    def prepare(
        self,
        input_ids: torch.Tensor,  # (B, T)
        attention_mask: torch.Tensor | None,  # (B, T) or None for "no padding"
        *,
        name: str = "input_ids",
    ) -> StackInputs:
        check_tensor(input_ids, name, dims=("B", "T"))
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)  # (B, T)
        sizes = dict(enumerate(input_ids.shape))
        check_tensor(attention_mask, "attention_mask", dims=("B", "T"), sizes=sizes)
        return StackInputs(attention_mask, positions_from_mask(attention_mask, input_ids.shape[1]), None)

    def forward(
        self,
        hidden: torch.Tensor,  # (B, T, D) embedded tokens
        inputs: StackInputs,  # from prepare
        *,
        need_weights: bool = False,
    ) -> EncoderStackOutput:
        length = hidden.shape[1]
        bias = None if self.relative is None else self.relative(length, length, device=hidden.device)
        attentions = []
        for block in self.blocks:
            out = block(
                hidden,
                attention_mask=inputs.attention_mask,
                position_bias=bias,  # (1, H, T, T), shared by every layer
                positions=inputs.positions,
                need_weights=need_weights,
            )
            hidden = out.hidden  # (B, T, D)
            if need_weights:
                attentions.append(out.weights)
        return EncoderStackOutput(self.norm(hidden), tuple(attentions))


class DecoderStack(nn.Module):
    """N causal decoder blocks with a KV cache, cross-attending to an encoder's output when `cross`."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        layers: Sequence[BlockOptions],
        *,
        cross_attention: bool,
        final_norm: NormOptions | None,
        relative: RelativeOptions | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.relative = _relative(relative, n_heads, bidirectional=False)
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model, n_heads, d_ff, options, cross_attention=cross_attention, dropout=dropout)
            for options in _layers(layers)
        )
        self.norm = _norm(d_model, final_norm)

    def _check_layers(self, what: str, values: tuple | None) -> None:
        if values is not None and len(values) != len(self.blocks):
            raise InputError(f"{what} has {len(values)} layers, the decoder {len(self.blocks)}")

    def prepare(
        self,
        input_ids: torch.Tensor,  # (B, T) new tokens
        attention_mask: torch.Tensor | None,  # (B, P + T) over past and new tokens, or None
        past_key_values: tuple[KeyValue, ...] | None,  # per layer, (B, H, P, Dh) each
        *,
        name: str = "input_ids",
    ) -> StackInputs:
        check_tensor(input_ids, name, dims=("B", "T"))
        batch, length = input_ids.shape
        self._check_layers("past_key_values", past_key_values)
        past = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        if attention_mask is None:
            attention_mask = torch.ones(batch, past + length, dtype=torch.long, device=input_ids.device)
        check_tensor(attention_mask, "attention_mask", dims=("B", "S"), sizes={0: batch, 1: past + length})
        return StackInputs(attention_mask, positions_from_mask(attention_mask, length), past_key_values)

    def cross_key_values(self, memory: torch.Tensor) -> tuple[KeyValue, ...]:
        """memory (B, S, D) -> per layer, the cross-attention (key, value), (B, H, S, Dh) each: they depend
        only on the encoder output, so a decoding loop computes them once per input."""
        pairs = []
        for block in self.blocks:
            assert isinstance(block, DecoderBlock)  # the stack's own blocks
            if block.cross_attn is None:
                raise InputError(
                    "this decoder stack has no cross-attention; build it with cross_attention=True"
                )
            pairs.append(block.cross_attn.project_memory(memory))
        return tuple(pairs)

    def forward(
        self,
        hidden: torch.Tensor,  # (B, T, D) embedded new tokens
        inputs: StackInputs,  # from prepare
        *,
        cross_key_values: tuple[KeyValue, ...] | None = None,  # from cross_key_values(memory)
        memory_mask: torch.Tensor | None = None,  # (B, S) 1 = real source token
        need_weights: bool = False,
    ) -> DecoderStackOutput:
        self._check_layers("cross_key_values", cross_key_values)
        length, total = hidden.shape[1], inputs.attention_mask.shape[1]
        bias = None if self.relative is None else self.relative(length, total, device=hidden.device)
        present, self_attentions, cross_attentions = [], [], []
        for index, block in enumerate(self.blocks):
            past = inputs.past_key_values
            past_key, past_value = (None, None) if past is None else past[index]
            memory_key, memory_value = (None, None) if cross_key_values is None else cross_key_values[index]
            out = block(
                hidden,
                attention_mask=inputs.attention_mask,
                memory_key=memory_key,
                memory_value=memory_value,
                memory_mask=memory_mask,
                past_key=past_key,
                past_value=past_value,
                position_bias=bias,  # (1, H, T, P + T), shared by every layer
                positions=inputs.positions,
                need_weights=need_weights,
            )
            hidden = out.hidden  # (B, T, D)
            present.append((out.present_key, out.present_value))
            if need_weights:
                self_attentions.append(out.self_weights)
                if out.cross_weights is not None:
                    cross_attentions.append(out.cross_weights)
        return DecoderStackOutput(
            self.norm(hidden), tuple(present), tuple(self_attentions), tuple(cross_attentions)
        )


def rename_legacy_keys(renames: dict[str, str]):
    """A load_state_dict pre-hook mapping checkpoint keys written before the stacks existed
    ("blocks.0.ffn..." at the model's top level) to their names now ("decoder.blocks.0.ffn...")."""

    def hook(module, state_dict, prefix, *args) -> None:
        for key in list(state_dict):
            if not key.startswith(prefix):
                continue
            local = key[len(prefix) :]
            for old, new in renames.items():
                if local.startswith(old):
                    state_dict[prefix + new + local[len(old) :]] = state_dict.pop(key)
                    break

    return hook
