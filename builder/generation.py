"""PyTorch reference decoding loops with the explicit KV cache. The runtime is held to these.

`generate` (GPT) left-pads a batch of prompts, runs the prompt once, then feeds one token per step with
the cache; `generate_seq2seq` (T5) encodes once, computes the cross-attention keys/values once, then decodes
step by step with the self-attention cache. Token choice uses the runtime's numpy `Sampler`, so the two
loops share one sampling procedure (see onnxformer.runtime.sampling for what that guarantees). The
bookkeeping is the runtime's own too (onnxformer.runtime.decoding: `left_pad`, `Collector`), so the
reference and the runtime cannot drift apart.
"""

from collections.abc import Collection, Sequence

import numpy as np
import torch

from onnxformer.builder.families import GPT, T5
from onnxformer.runtime.decoding import Collector, Generation, left_pad, prompt_budgets, seq2seq_budget
from onnxformer.runtime.errors import InputError
from onnxformer.runtime.sampling import Sampler, SamplingConfig

GREEDY = SamplingConfig(temperature=0.0)
__all__ = ["GREEDY", "Generation", "generate", "generate_seq2seq"]


def _check_request(
    prompts: Sequence[Sequence[int]], limit: int | None, what: str, max_new_tokens: int
) -> None:
    if max_new_tokens < 0:
        raise InputError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if not prompts:
        raise InputError(f"give at least one {what}")
    for index, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise InputError(f"{what} {index} is empty; it needs at least one token (e.g. <s>)")
        if limit is not None and len(prompt) > limit:
            raise InputError(f"{what} {index} has {len(prompt)} tokens, the model's context is {limit}")


def _left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The runtime's left padding, as tensors: ids (B, T) and mask (B, T)."""
    ids, mask = left_pad(rows, pad_id)  # (B, T) each
    return torch.from_numpy(ids), torch.from_numpy(mask)


def _next_step(
    collector: Collector, chosen: np.ndarray, mask: torch.Tensor, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Record the chosen tokens (B,) in the runtime's collector; return the next step's ids (B, 1) and mask
    (B, P + 1). Closed rows feed padding with mask 0, so their positions stop advancing and stay in range
    (what onnxformer.runtime.decoding.decode_steps does)."""
    collector.add(chosen)
    still_open = torch.from_numpy(collector.open_rows())  # (B,)
    ids = torch.where(still_open.bool(), torch.from_numpy(chosen), pad_id)[:, None]  # (B, 1)
    return ids, torch.cat([mask, still_open[:, None]], dim=1)


@torch.no_grad()
def generate(
    model: GPT,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    stop_tokens: Collection[int] = (),
    pad_id: int = 0,
) -> list[Generation]:
    """Continue each prompt (token ids) by up to max_new_tokens, stopping a row at a stop token."""
    model.eval()
    limit = model.config.max_len
    _check_request(prompts, limit, "prompt", max_new_tokens)
    ids, mask = _left_pad(prompts, pad_id)  # (B, T)
    collector = Collector(prompt_budgets([len(p) for p in prompts], max_new_tokens, limit), stop_tokens)
    sampler = Sampler(sampling, len(prompts))
    past = None
    while not collector.done:
        out = model(ids, attention_mask=mask, past_key_values=past)
        chosen = sampler(out.logits[:, -1].float().numpy())  # (B,)
        past = out.present
        ids, mask = _next_step(collector, chosen, mask, pad_id)
    return collector.result()


@torch.no_grad()
def generate_seq2seq(
    model: T5,
    sources: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    stop_tokens: Collection[int] = (),
    pad_id: int = 0,
) -> list[Generation]:
    """Text to text: encode each source once, then decode from decoder_start_token_id with the cache."""
    model.eval()
    _check_request(sources, None, "source", max_new_tokens)
    source_ids, source_mask = _left_pad(sources, pad_id)  # (B, S)
    memory = model.encode(source_ids, attention_mask=source_mask).hidden  # (B, S, D)
    cross = model.cross_key_values(memory)
    batch = len(sources)
    ids = torch.full((batch, 1), model.config.decoder_start_token_id, dtype=torch.long)  # (B, 1)
    sampler = Sampler(sampling, batch)
    collector = Collector([seq2seq_budget(max_new_tokens, model.config.max_len)] * batch, stop_tokens)
    past = None
    mask = torch.ones(batch, 1, dtype=torch.long)  # (B, 1)
    while not collector.done:
        out = model.decode(
            ids,
            cross_key_values=cross,
            encoder_attention_mask=source_mask,
            attention_mask=mask,
            past_key_values=past,
        )
        chosen = sampler(out.logits[:, -1].float().numpy())  # (B,)
        past = out.present
        ids, mask = _next_step(collector, chosen, mask, pad_id)
    return collector.result()
