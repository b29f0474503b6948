"""The numpy decoding loop shared by TextGenerator (GPT) and TextToText (T5), and beam search.

The loop is the PyTorch reference's (`onnxformer.builder.generation`) step for step, so the runtime picks
the same tokens: prompts are left padded, the first step runs the whole prompt, every later step feeds one
token per row with the KV cache; a row closes at a stop token or when its budget is spent, and a closed row
is fed the pad token with mask 0 so its positions stop advancing. What differs between families is only
how one step runs, which the caller passes in as a `StepFn`.

Shape legend: B batch, K beams, T new tokens this step, P past length, V vocabulary, H heads, Dh head width.
"""

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from onnxformer.runtime.errors import InputError
from onnxformer.runtime.manifest import KVCache
from onnxformer.runtime.sampling import Sampler, SamplingConfig
from onnxformer.runtime.session import BoundCache, Session

Feeds = dict[str, np.ndarray]
CacheT = TypeVar("CacheT")  # what a step takes and returns as the cache: `Feeds`, or a `BoundCache`
# (ids (B, T), mask (B, P + T), cache) -> (logits at the last position (B, V), cache for the next step)
StepFn = Callable[[np.ndarray, np.ndarray, CacheT], tuple[np.ndarray, CacheT]]


@dataclass(frozen=True)
class Generation:
    tokens: list[int]  # new tokens, without the stop token
    finish_reason: str  # "stop" (a stop token or stop string), "length" (budget or context full)
    score: float | None = None  # beam search only: sum of log-probabilities / length ** length_penalty


@dataclass(frozen=True)
class Step:
    logits: np.ndarray  # (B, V) at the last position, what the tokens were chosen from
    chosen: np.ndarray  # (B,) the token each row drew (closed rows' draws are ignored)


@dataclass(frozen=True)
class CacheLayout:
    """The KV-cache tensors of an export (manifest `kv_cache`): their names, the empty cache of the first
    step, and one step's `present.*` outputs as the next step's `past.*` inputs."""

    spec: KVCache

    @property
    def layers(self) -> int:
        return self.spec.layers

    @property
    def heads(self) -> int:
        """The key/value heads (H in every cache tensor's (B, H, P, Dh))."""
        return self.spec.kv_heads

    @property
    def head_dim(self) -> int:
        return self.spec.head_dim

    def past_names(self) -> list[str]:
        return self.spec.past_names()

    def present_names(self) -> list[str]:
        return self.spec.present_names()

    def cross_names(self) -> list[str]:
        return self.spec.cross_names()

    def empty(self, batch: int) -> Feeds:
        """The cache before the first step: past length 0."""
        shape = (batch, self.spec.kv_heads, 0, self.spec.head_dim)  # (B, H, 0, Dh)
        return {name: np.zeros(shape, np.float32) for name in self.past_names()}

    def next_feeds(self, presents: Sequence[np.ndarray]) -> Feeds:
        """The `present.*` outputs of one step (in `present_names` order) as the next step's `past.*`."""
        return dict(zip(self.past_names(), presents, strict=True))

    @property
    def in_place(self) -> bool:
        """Past and present are one buffer written in place (manifest layout `max_sequence`)."""
        return self.spec.in_place

    def bind(self, session: Session, batch: int, length: int, outputs: list[str]) -> BoundCache:
        """An in-place cache for `length` positions on `session` (a `BoundCache`, whose `run` also
        returns `outputs`)."""
        shape = (batch, self.spec.kv_heads, length, self.spec.head_dim)
        pairs = list(zip(self.past_names(), self.present_names(), strict=True))
        return BoundCache(session, pairs, shape, outputs)


def with_room(feeds: Feeds, spec: KVCache, new: int) -> Feeds:
    """Concat-layout feeds (past (B, H, P, Dh)) for an in-place graph: each past followed by `new` empty
    positions, the buffer the graph writes the step's keys and values into."""
    padded = dict(feeds)
    for name in spec.past_names():
        past = feeds[name]
        room = np.zeros((*past.shape[:2], new, past.shape[3]), past.dtype)
        padded[name] = np.concatenate([past, room], axis=2)
    return padded


def check_token_rows(
    rows: Sequence[Sequence[int]], *, vocab_size: int, limit: int | None, what: str, field: str = "texts"
) -> list[list[int]]:
    """Framed token rows as lists of ints, refused before ONNX Runtime sees them (CUDA may clamp bad ids).
    An error's field is `field` for the whole, `field[i]` for row i."""
    if isinstance(rows, str | bytes) or not _is_list(rows):
        raise InputError(f"give a list of {what}s, each a list of token ids", field=field)
    if len(rows) == 0:
        raise InputError(f"give at least one {what}", field=field)
    checked = []
    for index, row in enumerate(rows):
        at = f"{field}[{index}]"
        if isinstance(row, str | bytes) or not _is_list(row):
            raise InputError(
                f"{what} {index} must be a list of token ids, got {type(row).__name__}", field=at
            )
        if len(row) == 0:
            raise InputError(f"{what} {index} is empty; it needs at least one token (e.g. <s>)", field=at)
        if any(isinstance(t, bool) or not isinstance(t, int | np.integer) for t in row):
            raise InputError(f"{what} {index} must hold integer token ids only", field=at)
        ids = [int(t) for t in row]
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:
            raise InputError(
                f"{what} {index} has token ids {bad[:5]} outside the vocabulary 0 .. {vocab_size - 1}; "
                "encode text with the export's tokenizer",
                field=at,
            )
        if limit is not None and len(ids) > limit:
            raise InputError(
                f"{what} {index} has {len(ids)} tokens but the model's context is {limit}; shorten it",
                field=at,
            )
        checked.append(ids)
    return checked


def _is_list(value: Any) -> bool:
    """A sequence or a numpy array with at least one axis (a 0-d array has no length)."""
    if isinstance(value, np.ndarray):
        return value.ndim >= 1
    return isinstance(value, Sequence)


def check_stop_tokens(stop_tokens: Collection[int], *, vocab_size: int) -> frozenset[int]:
    """Stop token ids (checked ints >= 0, from GenerationOptions) within the vocabulary."""
    bad = [t for t in stop_tokens if not 0 <= t < vocab_size]
    if bad:
        raise InputError(
            f"stop_tokens must be token ids in 0 .. {vocab_size - 1}, got {bad[:10]}", field="stop_tokens"
        )
    return frozenset(stop_tokens)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of token ids -> ids (B, T) and mask (B, T), int64, padding on the left."""
    width = max(len(row) for row in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)  # (B, T)
    mask = np.zeros((len(rows), width), dtype=np.int64)  # (B, T)
    for index, row in enumerate(rows):
        if len(row):
            ids[index, width - len(row) :] = row
            mask[index, width - len(row) :] = 1
    return ids, mask


def right_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of token ids -> ids (B, T) and mask (B, T), int64, padding on the right."""
    width = max(len(row) for row in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)  # (B, T)
    mask = np.zeros((len(rows), width), dtype=np.int64)  # (B, T)
    for index, row in enumerate(rows):
        ids[index, : len(row)] = row
        mask[index, : len(row)] = 1
    return ids, mask


def prompt_budgets(lengths: Sequence[int], max_new_tokens: int, max_len: int) -> list[int]:
    """Each row may grow until its own context is full: the last token generated needs no position."""
    return [min(max_new_tokens, max_len - length + 1) for length in lengths]


def seq2seq_budget(max_new_tokens: int, max_len: int) -> int:
    """The decoder's context is max_len positions, the start token included."""
    return min(max_new_tokens, max_len)


class Collector:
    """Per-row token lists that close at a stop token, when the row's budget of steps is spent, or when
    the caller closes them (stop strings)."""

    def __init__(self, budgets: Sequence[int], stop_tokens: Collection[int]) -> None:
        self.budgets = list(budgets)
        self.tokens: list[list[int]] = [[] for _ in budgets]
        self.reasons: list[str | None] = ["length" if b <= 0 else None for b in budgets]
        self.stop = frozenset(stop_tokens)
        self.steps = 0

    def add(self, chosen: np.ndarray) -> list[int]:
        """Record one step's tokens (B,); returns the rows that took a token."""
        self.steps += 1
        grew = []
        for row, token in enumerate(chosen.tolist()):
            if self.reasons[row] is not None:
                continue
            if token in self.stop:
                self.reasons[row] = "stop"
                continue
            self.tokens[row].append(token)
            grew.append(row)
            if self.steps >= self.budgets[row]:
                self.reasons[row] = "length"
        return grew

    def close(self, row: int, reason: str) -> None:
        self.reasons[row] = reason

    def open_rows(self) -> np.ndarray:
        """(B,) int64: 1 for rows still generating, 0 for closed ones."""
        return np.array([reason is None for reason in self.reasons], dtype=np.int64)

    @property
    def done(self) -> bool:
        return all(reason is not None for reason in self.reasons)

    def result(self) -> list[Generation]:
        return [Generation(t, r or "length") for t, r in zip(self.tokens, self.reasons, strict=True)]


def decode_steps(
    step: StepFn[CacheT],
    ids: np.ndarray,  # (B, T) the first step's tokens (left-padded prompts, or the start token)
    mask: np.ndarray,  # (B, T)
    cache: CacheT,  # the empty cache, past length 0
    *,
    collector: Collector,
    sampling: SamplingConfig | Sequence[SamplingConfig],  # one for every row, or one per row
    pad_id: int,
    stops_at: Callable[[int, list[int]], bool] | None = None,
) -> Iterator[Step]:
    """Run the loop, yielding after each step; `collector` holds the tokens so far and, at the end, the
    result. `stops_at(row, tokens)` closes a row with reason "stop" (stop strings); checked for rows that
    grew. A row the caller closes between steps (`collector.close`) takes no more tokens."""
    sampler = Sampler(sampling, len(ids))
    while not collector.done:
        logits, cache = step(ids, mask, cache)  # (B, V)
        chosen = sampler(logits)  # (B,)
        grew = collector.add(chosen)
        if stops_at is not None:
            for row in grew:
                if stops_at(row, collector.tokens[row]):
                    collector.close(row, "stop")
        yield Step(logits, chosen)
        still_open = collector.open_rows()  # (B,)
        ids = np.where(still_open == 1, chosen, pad_id)[:, None].astype(np.int64)  # (B, 1)
        mask = np.concatenate([mask, still_open[:, None]], axis=1)  # (B, P + 1)


def sequence_score(log_prob: float, length: int, length_penalty: float) -> float:
    """Beam search's ranking of a finished hypothesis: sum of log-probabilities / length ** penalty."""
    return log_prob / (length**length_penalty) if length > 0 else 0.0


def log_softmax(logits: np.ndarray) -> npt.NDArray[np.float64]:
    """(..., V) -> (..., V) float64 log-probabilities."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    log_probs: npt.NDArray[np.float64] = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return log_probs


@dataclass
class _Hypotheses:
    """The finished hypotheses of one input: (score, tokens, reason), in the order they finished."""

    finished: list[tuple[float, list[int], str]]

    def complete(self, num_beams: int, best_running: float, length: int, length_penalty: float) -> bool:
        """Whether no running beam (best summed log-probability `best_running`) is likely to do better."""
        if best_running == -np.inf:  # no beam is running
            return True
        if len(self.finished) < num_beams:
            return False
        worst_kept = sorted((score for score, _, _ in self.finished), reverse=True)[num_beams - 1]
        return worst_kept >= sequence_score(best_running, length, length_penalty)

    def best(self) -> Generation:
        score, tokens, reason = max(self.finished, key=lambda item: item[0])  # first of equal scores
        return Generation(tokens, reason, score)


def beam_search(
    step: StepFn[Feeds],
    cache: Feeds,  # the empty cache for B * K rows; every array's first axis is the row
    *,
    batch: int,
    num_beams: int,
    start_token: int,
    budget: int,
    stop_tokens: Collection[int],
    length_penalty: float = 1.0,
) -> list[Generation]:
    """Keep the `num_beams` best partial outputs of each input, row b * K + k for beam k of input b.

    Each step scores every (beam, next token) by the beam's summed log-probability plus the token's, and
    keeps the K best that do not end in a stop token. A stop token among the K best candidates finishes
    that hypothesis, scored by `sequence_score` with its length counting the stop token. An input is done
    once K hypotheses finished and the best running beam, scored at its current length, does not beat the
    worst of the K best finished ones (Hugging Face's default `early_stopping=False` rule); at the budget,
    the running beams finish with reason "length". With K = 1 this is exactly greedy decoding: a stop token
    ranked first finishes the only hypothesis and outscores every running candidate.
    """
    width = batch * num_beams
    stop = frozenset(stop_tokens)
    scores = np.full((batch, num_beams), -np.inf)  # (B, K) summed log-probabilities
    scores[:, 0] = 0.0  # one live beam at first, so the K first expansions are distinct
    beams: list[list[list[int]]] = [[[] for _ in range(num_beams)] for _ in range(batch)]
    results = [_Hypotheses([]) for _ in range(batch)]
    done = [budget <= 0] * batch
    ids = np.full((width, 1), start_token, dtype=np.int64)  # (B * K, 1)
    mask = np.ones((width, 1), dtype=np.int64)  # (B * K, 1)
    for length in range(1, budget + 1):  # tokens in each beam after this step
        if all(done):
            break
        logits, cache = step(ids, mask, cache)  # (B * K, V)
        vocab = logits.shape[-1]
        totals = (scores.reshape(-1, 1) + log_softmax(logits)).reshape(batch, num_beams * vocab)  # (B, K*V)
        source = np.tile(np.arange(num_beams), (batch, 1))  # (B, K) which beam each new beam extends
        next_ids = np.full((batch, num_beams), start_token, dtype=np.int64)  # (B, K)
        next_scores = np.full((batch, num_beams), -np.inf)  # (B, K)
        next_beams: list[list[list[int]]] = []
        for b in range(batch):
            kept: list[list[int]] = []
            if not done[b]:
                # Stable: of equal scores the lower (beam, token) comes first, as argmax's first maximum.
                order = np.argsort(-totals[b], kind="stable")[: 2 * num_beams]
                for rank, flat in enumerate(order.tolist()):
                    beam, token = divmod(flat, vocab)
                    total = float(totals[b, flat])
                    if total == -np.inf:
                        break
                    if token in stop:
                        if rank < num_beams:
                            tokens = beams[b][beam]
                            score = sequence_score(total, len(tokens) + 1, length_penalty)
                            results[b].finished.append((score, tokens, "stop"))
                        continue
                    k = len(kept)
                    source[b, k], next_ids[b, k], next_scores[b, k] = beam, token, total
                    kept.append([*beams[b][beam], token])
                    if len(kept) == num_beams:
                        break
                done[b] = results[b].complete(num_beams, max(next_scores[b]), length, length_penalty)
            next_beams.append(kept + [[] for _ in range(num_beams - len(kept))])
        beams, scores = next_beams, next_scores
        rows = (np.arange(batch)[:, None] * num_beams + source).reshape(-1)  # (B * K,)
        cache = {name: value[rows] for name, value in cache.items()}  # reorder by the beam extended
        ids = next_ids.reshape(-1, 1)  # (B * K, 1)
        mask = np.concatenate([mask, np.ones((width, 1), dtype=np.int64)], axis=1)  # (B * K, P + 1)
    for b in range(batch):
        if not done[b]:
            for k in range(num_beams):
                if scores[b, k] > -np.inf:
                    tokens = beams[b][k]
                    score = sequence_score(float(scores[b, k]), len(tokens), length_penalty)
                    results[b].finished.append((score, tokens, "length"))
        if not results[b].finished:  # budget 0
            results[b].finished.append((0.0, [], "length"))
    return [hypotheses.best() for hypotheses in results]
