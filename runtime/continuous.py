"""Continuous batching: generations that decode together, a new one joining between two steps instead of
waiting for the batch to end (what the server runs; vLLM and TGI serve the same way on GPUs).

Each row keeps its own options (budget, sampling and seed, stop strings and tokens). Joining rows are
prefilled together as one left-padded batch, then their caches are merged with the running batch's: the
shorter side is padded on the left with masked positions, so every row's tokens stay contiguous at the
right end of the cache, exactly as in a left-padded batch of prompts. Positions come from the attention
mask (a row's first real token is position 0 whatever the padding), so a row decodes as it does alone.
A finished row leaves the batch at once, and leading positions that every remaining row masks are cut,
so the cache is never longer than the longest live row.

    step k:    [row a ........ x][row b .... x]          decode 1 token for every live row
    join c:    prefill c ─▶ pad to the batch's length ─▶ [a][b][c]
    b ends:    [a][c]   (the cache keeps only a's and c's rows)

This needs a cache passed in and out (the concat layout); an export with an in-place cache (`optimize`)
decodes its rows in batches formed at arrival instead (`TextGenerator.follow`).
"""

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from onnxformer.runtime.decoding import Feeds, left_pad
from onnxformer.runtime.errors import ConfigError
from onnxformer.runtime.generation_options import GenerationOptions
from onnxformer.runtime.generator import TextGenerator, Update, _find_stop, news
from onnxformer.runtime.sampling import Sampler, SamplingConfig


@dataclass
class _Row:
    """One generation in the batch."""

    handle: Hashable
    budget: int  # most tokens it may take (its max_new_tokens, cut to the context left)
    sampling: SamplingConfig
    stop: tuple[str, ...]
    stop_tokens: frozenset[int]
    rng: np.random.Generator = field(init=False)
    tokens: list[int] = field(default_factory=list)
    steps: int = 0  # tokens drawn, a stop token included
    emitted: int = 0  # characters of its text already given out
    reason: str | None = None

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.sampling.seed)  # as `Sampler` seeds each row


class DecodeBatch:
    """The rows decoding together on one TextGenerator. Not thread-safe: one thread drives it (`join`,
    `step`, `cancel`), as the server's generation worker does."""

    def __init__(self, model: TextGenerator) -> None:
        if model._cache.in_place:
            raise ConfigError(
                "continuous batching needs a cache passed in and out; this export writes its cache in place "
                "(optimize --kv-cache in-place): batch at arrival instead"
            )
        self.model = model
        self.rows: list[_Row] = []
        self._cache: Feeds = {}  # name -> (B, H, P, Dh)
        self._mask = np.zeros((0, 0), np.int64)  # (B, P)
        self._next = np.zeros((0,), np.int64)  # (B,) the token each row feeds next

    def __len__(self) -> int:
        return len(self.rows)

    def join(
        self,
        prompts: Sequence[Sequence[int]],
        options: Sequence[GenerationOptions],
        handles: Sequence[Hashable],
    ) -> dict[Hashable, Update]:
        """Add generations (framed ids, their options, a handle each), prefilled now: each one's first
        update, keyed by handle. Checked like `TextGenerator.follow`; raises before anything runs."""
        model, joining = self.model, []
        requests = [
            model._request([prompt], [model._options(o, {}, text=True)])
            for prompt, o in zip(prompts, options, strict=True)
        ]
        updates: dict[Hashable, Update] = {}
        rows = []
        for handle, request in zip(handles, requests, strict=True):
            budget = model._budgets(request)[0]
            row = _Row(handle, budget, request.sampling[0], request.stop[0], request.stop_tokens)
            if budget <= 0:  # the prompt fills the context: nothing to generate
                updates[handle] = Update("", 0, "length")
                continue
            joining.append(row)
            rows.append(request.rows[0])
        if not joining:
            return updates
        ids, mask = left_pad(rows, model.tokenizer.special_tokens["pad"])  # (N, T)
        logits, cache = model._step(ids, mask, model._cache.empty(len(rows)))  # (N, V)
        assert isinstance(cache, dict)  # the concat layout (checked in __init__)
        self._merge(joining, cache, mask)
        updates.update(self._take(logits, first=len(self.rows) - len(joining)))
        return updates

    def step(self) -> dict[Hashable, Update]:
        """One token for every live row: the updates of the rows with news, keyed by handle."""
        if not self.rows:
            return {}
        self._mask = np.concatenate([self._mask, np.ones((len(self.rows), 1), np.int64)], axis=1)  # (B, P+1)
        logits, cache = self.model._step(self._next[:, None], self._mask, self._cache)  # (B, V)
        assert isinstance(cache, dict)
        self._cache = cache
        return self._take(logits, first=0)

    def cancel(self, handle: Hashable) -> Update | None:
        """End a row now (its client went away): its last update, or None if it is not in the batch."""
        for index, row in enumerate(self.rows):
            if row.handle == handle:
                row.reason = "cancelled"
                self._keep([i for i in range(len(self.rows)) if i != index])
                return Update("", len(row.tokens), "cancelled")
        return None

    # The rows.

    def _take(self, logits: np.ndarray, *, first: int) -> dict[Hashable, Update]:
        """Choose a token for rows first.. from their logits (B - first, V), record it, drop finished rows."""
        updates, tokenizer = {}, self.model.tokenizer
        greedy = np.argmax(logits, axis=-1)  # (B - first,)
        for offset, row_logits in enumerate(logits):  # (V,)
            index = first + offset
            row = self.rows[index]
            if row.sampling.greedy:
                token = int(greedy[offset])
            else:
                token = Sampler._sample_row(row_logits, row.rng, row.sampling)
            self._next[index] = token
            row.steps += 1
            if token in row.stop_tokens:
                row.reason = "stop"
            else:
                row.tokens.append(token)
                if row.stop and _find_stop(tokenizer.decode_generated(row.tokens), row.stop) >= 0:
                    row.reason = "stop"
                elif row.steps >= row.budget:
                    row.reason = "length"
            update, row.emitted = news(tokenizer, row.tokens, row.stop, row.reason, row.emitted)
            if update is not None:
                updates[row.handle] = update
        self._keep([i for i, row in enumerate(self.rows) if row.reason is None])
        return updates

    # The cache.

    def _merge(self, joining: list[_Row], cache: Feeds, mask: np.ndarray) -> None:
        """Append prefilled rows: their cache (N, H, T, Dh) and mask (N, T) padded on the left (or the
        batch's) to one length, then stacked on the batch axis."""
        if not self.rows:
            self.rows, self._cache, self._mask = list(joining), cache, mask
            self._next = np.zeros(len(joining), np.int64)
            return
        length = max(self._mask.shape[1], mask.shape[1])
        self._cache = {
            name: np.concatenate(
                [_left_pad(self._cache[name], length), _left_pad(cache[name], length)], axis=0
            )
            for name in self._cache
        }  # (B + N, H, P, Dh)
        self._mask = np.concatenate([_left_pad(self._mask, length), _left_pad(mask, length)], axis=0)
        self._next = np.concatenate([self._next, np.zeros(len(joining), np.int64)])
        self.rows.extend(joining)

    def _keep(self, indices: list[int]) -> None:
        """Keep only these rows; cut the leading positions that all of them mask."""
        if len(indices) == len(self.rows):
            return
        self.rows = [self.rows[i] for i in indices]
        if not self.rows:
            self._cache, self._mask, self._next = {}, np.zeros((0, 0), np.int64), np.zeros((0,), np.int64)
            return
        mask = self._mask[indices]  # (B', P)
        start = int(np.argmax(mask.any(axis=0)))  # the first position some row still reads
        self._mask = mask[:, start:]
        self._cache = {
            name: np.ascontiguousarray(value[indices, :, start:]) for name, value in self._cache.items()
        }
        self._next = self._next[indices]


def _left_pad(value: np.ndarray, length: int) -> np.ndarray:
    """(B, P) or (B, H, P, Dh) with zeros before position 0 up to `length` positions."""
    axis = 1 if value.ndim == 2 else 2
    missing = length - value.shape[axis]
    if missing == 0:
        return value
    shape = list(value.shape)
    shape[axis] = missing
    return np.concatenate([np.zeros(shape, value.dtype), value], axis=axis)
