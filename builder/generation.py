"""PyTorch reference decoding loops with the explicit KV cache. The runtime is held to these.

`generate` (GPT) left-pads a batch of prompts, runs the prompt once, then feeds one token per step with the
cache; `generate_seq2seq` (T5) encodes once, computes the cross-attention keys/values once, then decodes
step by step with the self-attention cache. Token choice uses the runtime's numpy `Sampler`, so the two
loops share one sampling procedure (see onnxformer.runtime.sampling for what that guarantees).
"""

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from onnxformer.builder.families import GPT, T5
from onnxformer.runtime.errors import InputError
from onnxformer.runtime.sampling import Sampler, SamplingConfig

GREEDY = SamplingConfig(temperature=0.0)


@dataclass(frozen=True)
class Generation:
    tokens: list[int]  # new tokens, without the stop token
    finish_reason: str  # "stop" (a stop token), "length" (max_new_tokens or the context is full)


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


def _left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, T)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


class _Collector:
    """Per-row token lists that close at a stop token or when the row's budget of steps is spent."""

    def __init__(self, budgets: Sequence[int], stop_tokens: Collection[int]) -> None:
        self.budgets = list(budgets)
        self.tokens: list[list[int]] = [[] for _ in budgets]
        self.reasons: list[str | None] = ["length" if b <= 0 else None for b in budgets]
        self.stop = set(stop_tokens)
        self.steps = 0

    def add(self, chosen: np.ndarray) -> None:
        self.steps += 1
        for row, token in enumerate(chosen.tolist()):
            if self.reasons[row] is not None:
                continue
            if token in self.stop:
                self.reasons[row] = "stop"
                continue
            self.tokens[row].append(token)
            if self.steps >= self.budgets[row]:
                self.reasons[row] = "length"

    def feed(self, chosen: np.ndarray, mask: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Record the chosen tokens (B,); return the next step's ids (B, 1) and mask (B, P + 1).

        Closed rows feed padding with mask 0, so their positions stop advancing and stay in range.
        """
        self.add(chosen)
        still_open = torch.tensor([reason is None for reason in self.reasons], dtype=torch.long)  # (B,)
        ids = torch.where(still_open.bool(), torch.from_numpy(chosen), pad_id)[:, None]  # (B, 1)
        return ids, torch.cat([mask, still_open[:, None]], dim=1)

    @property
    def done(self) -> bool:
        return all(reason is not None for reason in self.reasons)

    def result(self) -> list[Generation]:
        return [Generation(t, r or "length") for t, r in zip(self.tokens, self.reasons, strict=True)]


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
    # Each row may grow until its own context is full: the last token generated needs no position.
    budgets = [min(max_new_tokens, limit - len(prompt) + 1) for prompt in prompts]
    sampler = Sampler(sampling, len(prompts))
    collector = _Collector(budgets, stop_tokens)
    past = None
    while not collector.done:
        out = model(ids, attention_mask=mask, past_key_values=past)
        chosen = sampler(out.logits[:, -1].float().numpy())  # (B,)
        past = out.present
        ids, mask = collector.feed(chosen, mask, pad_id)
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
    # The decoder's context is max_len positions, the start token included.
    collector = _Collector([min(max_new_tokens, model.config.max_len)] * batch, stop_tokens)
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
        ids, mask = collector.feed(chosen, mask, pad_id)
    return collector.result()
