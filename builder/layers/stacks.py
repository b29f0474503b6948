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

Post-LN blocks end normalised already; pre-LN leaves the residual stream un-normalised, so a pre-LN stack
ends with one more norm (GPT-2, Radford et al., 2019, 2.3; Xiong et al., 2020).
"""

from typing import NamedTuple

import torch
from torch import nn

from onnxformer.builder.layers.blocks import DecoderBlock, EncoderBlock
from onnxformer.builder.layers.checks import check_tensor
from onnxformer.builder.layers.embedding import PositionKind, positions_from_mask
from onnxformer.builder.layers.feedforward import Activation
from onnxformer.builder.layers.norms import NormKind, make_norm
from onnxformer.builder.layers.positions import RelativePositionBias, RopeScalingOptions
from onnxformer.builder.layers.residual import NormPosition
from onnxformer.runtime.errors import InputError

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


def _final_norm(d_model: int, norm_position: NormPosition, norm: NormKind, eps: float) -> nn.Module:
    return make_norm(norm, d_model, eps=eps) if norm_position == "pre" else nn.Identity()


def _relative(
    position: PositionKind, n_heads: int, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> RelativePositionBias | None:
    if position != "relative":
        return None
    return RelativePositionBias(
        n_heads, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )


class EncoderStack(nn.Module):
    """N bidirectional encoder blocks: (B, T, D) -> (B, T, D)."""

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        position: PositionKind,
        norm_position: NormPosition,
        activation: Activation,
        dropout: float = 0.0,
        num_buckets: int = 32,
        max_distance: int = 128,
        eps: float = 1e-5,
        norm: NormKind = "layer",
        gated: bool = False,
        attention_bias: bool = True,
        ffn_bias: bool = True,
        n_kv_heads: int | None = None,
        head_dim: int | None = None,
        scale: float | None = None,
        rotary_base: float = 10000.0,
        rope_scaling: RopeScalingOptions | None = None,
    ) -> None:
        super().__init__()
        options = {
            "eps": eps,
            "norm": norm,
            "gated": gated,
            "attention_bias": attention_bias,
            "ffn_bias": ffn_bias,
            "n_kv_heads": n_kv_heads,
            "head_dim": head_dim,
            "scale": scale,
            "rotary_base": rotary_base,
            "rope_scaling": rope_scaling,
        }
        self.relative = _relative(
            position, n_heads, bidirectional=True, num_buckets=num_buckets, max_distance=max_distance
        )
        self.blocks = nn.ModuleList(
            EncoderBlock(
                d_model,
                n_heads,
                d_ff,
                norm_position=norm_position,
                activation=activation,
                dropout=dropout,
                rotary=position == "rotary",
                **options,
            )
            for _ in range(n_layers)
        )
        self.norm = _final_norm(d_model, norm_position, norm, eps)

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
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        cross_attention: bool,
        position: PositionKind,
        norm_position: NormPosition,
        activation: Activation,
        dropout: float = 0.0,
        num_buckets: int = 32,
        max_distance: int = 128,
        eps: float = 1e-5,
        norm: NormKind = "layer",
        gated: bool = False,
        attention_bias: bool = True,
        ffn_bias: bool = True,
        n_kv_heads: int | None = None,
        head_dim: int | None = None,
        scale: float | None = None,
        rotary_base: float = 10000.0,
        rope_scaling: RopeScalingOptions | None = None,
    ) -> None:
        super().__init__()
        options = {
            "eps": eps,
            "norm": norm,
            "gated": gated,
            "attention_bias": attention_bias,
            "ffn_bias": ffn_bias,
            "n_kv_heads": n_kv_heads,
            "head_dim": head_dim,
            "scale": scale,
            "rotary_base": rotary_base,
            "rope_scaling": rope_scaling,
        }
        self.relative = _relative(
            position, n_heads, bidirectional=False, num_buckets=num_buckets, max_distance=max_distance
        )
        self.blocks = nn.ModuleList(
            DecoderBlock(
                d_model,
                n_heads,
                d_ff,
                cross_attention=cross_attention,
                norm_position=norm_position,
                activation=activation,
                dropout=dropout,
                rotary=position == "rotary",
                **options,
            )
            for _ in range(n_layers)
        )
        self.norm = _final_norm(d_model, norm_position, norm, eps)

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
        return tuple(block.cross_attn.project_memory(memory) for block in self.blocks)

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
