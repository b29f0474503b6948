"""Attention masks as boolean tensors broadcastable to the logits (B, H, T, S); True means "may attend".

Padding masks follow the Hugging Face convention for inputs: `attention_mask` (B, S) holds 1 for a real
token and 0 for padding. The causal mask is built from positions, not from a fixed triangle, so the same
code serves a first step (P = 0) and cached steps (P > 0) with dynamic sizes in the exported graph.

A sliding window of W keeps the keys fewer than W slots from the query, itself included: causal, its last W
keys (Mistral); bidirectional, W - 1 on each side (ModernBERT's local attention, `window_mask`).
"""

import torch


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """attention_mask (B, S) of 0/1 -> (B, 1, 1, S) bool, True on real tokens."""
    return (attention_mask != 0)[:, None, None, :]  # (B, 1, 1, S)


def causal_mask(
    query_length: int, key_length: int, *, device: torch.device, window: int | None = None
) -> torch.Tensor:
    """(1, 1, T, S) bool: query i (at absolute position S - T + i) sees keys 0 .. S - T + i, or with a
    sliding `window` only the last `window` of them, itself included (keys S - T + i - window + 1 ..).

    With a cache the queries are the last T of the S positions, so the past P = S - T keys are all visible
    (within the window). Positions here are slots of the key sequence, padding included, as in
    transformers' sliding-window mask (its cache positions): a left-padded row's window counts its pads.
    """
    past = key_length - query_length
    query_pos = torch.arange(query_length, device=device) + past  # (T,)
    key_pos = torch.arange(key_length, device=device)  # (S,)
    # "not after" rather than `<=`: the same mask, but tract 0.23 miscompiles an exported LessOrEqual of
    # two ranges when the past folds to 0 (wrong broadcast shape, or a panic at T=1); Greater + Not is safe.
    visible = ~(key_pos[None, :] > query_pos[:, None])  # (T, S)
    if window is not None:
        visible = visible & (key_pos[None, :] > query_pos[:, None] - window)  # (T, S): the last `window`
    return visible[None, None]  # (1, 1, T, S)


def window_mask(query_length: int, key_length: int, *, device: torch.device, window: int) -> torch.Tensor:
    """(1, 1, T, S) bool: query i (at absolute position S - T + i) sees the keys fewer than `window` slots
    away on either side, itself included: |k - q| < window.

    transformers' bidirectional sliding window (masking_utils' `sliding_window_bidirectional_overlay`,
    `abs(q_idx - kv_idx) <= sliding_window`) is this with window = its sliding_window + 1, the + 1
    ModernBERT's attention adds for flash attention's inclusive bound. Positions are slots, padding
    included, as there.
    """
    past = key_length - query_length
    query_pos = torch.arange(query_length, device=device) + past  # (T,)
    key_pos = torch.arange(key_length, device=device)  # (S,)
    # Greater on both sides (no LessOrEqual: see causal_mask on tract) rather than Abs of a difference.
    after = key_pos[None, :] > query_pos[:, None] - window  # (T, S): not `window` or more before
    before = query_pos[:, None] > key_pos[None, :] - window  # (T, S): not `window` or more after
    return (after & before)[None, None]  # (1, 1, T, S)


def combine(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of the masks that are given (None means no restriction)."""
    result = None
    for mask in masks:
        if mask is not None:
            result = mask if result is None else result & mask
    return result
