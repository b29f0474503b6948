"""Text generation on a "generate" export (GPT): `TextGenerator.load(folder).generate("The cat")`.

Prompts are framed as the manifest's `framing.prompt` says (<s> + the text's tokens for GPT) and left
padded into one batch; the loop is the PyTorch
reference's (`onnxformer.builder.generation.generate`), so greedy and seeded sampling give the same tokens,
and a batch gives what each prompt gives alone. Each row may grow until the model's context (config
max_len, prompt included) is full. Stop tokens end a row and are left out; stop strings end a row and cut
its text at their first occurrence.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, overload

import numpy as np

from onnxformer.runtime.decoding import (
    Collector,
    Feeds,
    Generation,
    Step,
    check_stop_tokens,
    check_token_rows,
    decode_steps,
    left_pad,
    prompt_budgets,
)
from onnxformer.runtime.errors import InputError
from onnxformer.runtime.generation_options import GenerationOptions
from onnxformer.runtime.model import ExportModel, ModelExport, pick
from onnxformer.runtime.sampling import SamplingConfig
from onnxformer.runtime.session import BoundCache
from onnxformer.runtime.tokenizer import REPLACEMENT, TextTokenizer


@dataclass(frozen=True)
class _Request:
    """One call's checked prompts and their options, row by row; built before anything runs."""

    rows: list[list[int]]  # framed prompts
    max_new_tokens: list[int]
    sampling: list[SamplingConfig]
    stop: list[tuple[str, ...]]  # stop strings
    stop_tokens: frozenset[int]  # one set for the whole batch


@dataclass(frozen=True)
class Update:
    """One row's news after a step of `TextGenerator.follow`."""

    text: str  # text that became final at this step ("" when nothing did)
    tokens: int  # tokens generated so far (a stop token is not counted)
    finish_reason: str | None  # on the row's last update: "stop", "length" or "cancelled"; else None


class Following:
    """A batch of generations run step by step (`TextGenerator.follow`): iterating gives, after each
    step, {row: Update} for the rows with news; `cancel(row)` ends a row before the next step (a client
    that went away), from any thread. The rows decode together, each with its own options."""

    def __init__(self, generator: "TextGenerator", request: _Request) -> None:
        self._generator, self._request = generator, request
        self._cancelled: set[int] = set()
        self.prompt_tokens = [len(row) for row in request.rows]

    def cancel(self, row: int) -> None:
        self._cancelled.add(row)

    def __iter__(self) -> Iterator[dict[int, Update]]:
        request, tokenizer = self._request, self._generator.tokenizer
        collector = Collector(self._generator._budgets(request), request.stop_tokens)
        emitted = [0] * len(request.rows)
        ended: set[int] = set()
        for _ in self._generator._loop(request, collector):
            for row in self._cancelled - ended:
                if collector.reasons[row] is None:
                    collector.close(row, "cancelled")
            updates = {}
            for row, reason in enumerate(collector.reasons):
                if row in ended:
                    continue
                update, emitted[row] = news(
                    tokenizer, collector.tokens[row], request.stop[row], reason, emitted[row]
                )
                if update is not None:
                    updates[row] = update
                if reason is not None:
                    ended.add(row)
            if updates:
                yield updates


class TextGenerator(ExportModel):
    """A "generate" export (GPT). Thread-safe: calls share only the ONNX Runtime session and the tokenizer.

    Every method takes the generation options as one `GenerationOptions`, or as its fields by keyword
    (max_new_tokens, temperature, top_k, top_p, seed, stop_tokens; `generate` and `stream` also stop), or
    both (the keywords win). Options left unset take the export's defaults (manifest `generation`);
    temperature 0 is greedy. An option of another task (num_beams) is refused, saying why.
    """

    task = "generate"
    feeds: ClassVar[dict[str, tuple[str, ...]]] = {"decoder": ("input_ids", "attention_mask")}

    def __init__(self, export: ModelExport) -> None:
        super().__init__(export)
        self.defaults = export.generation_defaults()
        # What every text prompt starts with (<s> for GPT, as in training).
        self.prefix: list[int] = [self.tokenizer.special_tokens[name] for name in self.framing.prefix]
        self._decoder = export.sessions["decoder"]
        self._io = export.io("decoder")
        self._cache = export.cache_layout()
        self._outputs = [self._io.outputs["logits"], *self._cache.present_names()]

    @property
    def in_place_cache(self) -> bool:
        """The export writes its KV cache in place (`optimize`): no continuous batching on it."""
        return self._cache.in_place

    @overload
    def generate(self, prompt: str, options: GenerationOptions | None = None, **overrides: Any) -> str: ...
    @overload
    def generate(
        self, prompt: list[str], options: GenerationOptions | None = None, **overrides: Any
    ) -> list[str]: ...
    def generate(
        self, prompt: str | list[str], options: GenerationOptions | None = None, **overrides: Any
    ) -> str | list[str]:
        """The continuation of `prompt` (a str), or of each prompt (a list in, a list out).

        `stop_tokens` replaces the default stop tokens (</s>); `stop` strings end the text before them.
        """
        single = isinstance(prompt, str)
        checked = self._options(options, overrides, text=True)
        request = self._request(self._frame([prompt] if isinstance(prompt, str) else prompt), checked)
        results = self._run(request)
        texts = [
            _cut(self.tokenizer.decode(r.tokens), stop) for r, stop in zip(results, request.stop, strict=True)
        ]
        return texts[0] if single else texts

    def generate_ids(
        self, prompts: Sequence[Sequence[int]], options: GenerationOptions | None = None, **overrides: Any
    ) -> list[Generation]:
        """Generation from framed token ids (<s> included), as the PyTorch reference takes them."""
        return self._run(self._request(prompts, self._options(options, overrides, text=False)))

    def steps(
        self, prompts: Sequence[Sequence[int]], options: GenerationOptions | None = None, **overrides: Any
    ) -> Iterator[Step]:
        """`generate_ids` one step at a time: the logits (B, V) each step chose from and its tokens (B,)."""
        request = self._request(prompts, self._options(options, overrides, text=False))
        return self._loop(request, Collector(self._budgets(request), request.stop_tokens))

    def stream(
        self, prompt: str, options: GenerationOptions | None = None, **overrides: Any
    ) -> Iterator[str]:
        """The continuation of one prompt in pieces as it is produced; the pieces join to `generate`'s text.

        A piece is only given once it is final: a character split across tokens waits for its last byte,
        and text that may be the start of a stop string waits until it is not.
        """
        if not isinstance(prompt, str):
            raise InputError(
                f"stream takes one prompt str, got {type(prompt).__name__}; loop over a list", field="texts"
            )
        checked = self._options(options, overrides, text=True)
        request = self._request(self._frame([prompt]), checked)
        return self._stream(request)  # checked now; runs as the caller iterates

    def follow(
        self, prompts: Sequence[Sequence[int]], options: GenerationOptions | Sequence[GenerationOptions]
    ) -> Following:
        """Generate from framed token ids (what `frame` or `frame_chat` give) with text out, step by step:
        see `Following`. `options` is one value for every prompt or one per prompt (each with its own
        max_new_tokens, sampling and stop strings; the stop tokens must be shared). Checked now."""
        per_row = [options] if isinstance(options, GenerationOptions) else list(options)
        checked = [self._options(row, {}, text=True) for row in per_row]
        return Following(
            self, self._request(prompts, checked[0] if isinstance(options, GenerationOptions) else checked)
        )

    def frame_chat(self, text: str) -> list[int]:
        """The ids of a rendered chat (`onnxformer.runtime.chat`): its tokens as they are, since the
        template writes the framing (the <bos> and role markers) itself; refused past the context."""
        row = self.tokenizer.encode(text, limit=self.max_len)
        if len(row) > self.max_len:
            raise InputError(
                f"the conversation is {len(row)} tokens, but the model reads at most {self.max_len}; "
                "drop earlier messages",
                field="messages",
            )
        if not row:
            raise InputError("the conversation renders to no tokens; send a message", field="messages")
        return row

    # The loop.

    def _step(
        self, ids: np.ndarray, mask: np.ndarray, cache: Feeds | BoundCache
    ) -> tuple[np.ndarray, Feeds | BoundCache]:
        """ids (B, T), mask (B, P + T) -> logits at the last position (B, V), the cache with T more."""
        if isinstance(cache, BoundCache):  # an in-place cache, which the step writes into
            (logits,) = cache.run(pick(self._io, input_ids=ids, attention_mask=mask))
            return np.ascontiguousarray(logits[:, -1]), cache
        feeds = {**pick(self._io, input_ids=ids, attention_mask=mask), **cache}
        outputs = self._decoder.run(feeds, self._outputs)
        return np.ascontiguousarray(outputs[0][:, -1]), self._cache.next_feeds(outputs[1:])

    def _empty_cache(self, ids: np.ndarray, budgets: list[int]) -> Feeds | BoundCache:
        """The first step's cache: empty, or for an in-place cache buffers with room for every step."""
        if not self._cache.in_place:
            return self._cache.empty(len(ids))
        length = ids.shape[1] + max(max(budgets, default=0), 1)  # the prompt, then one token per step
        return self._cache.bind(self._decoder, len(ids), length, self._outputs[:1])

    def _budgets(self, request: _Request) -> list[int]:
        return [
            prompt_budgets([len(row)], max_new_tokens, self.max_len)[0]
            for row, max_new_tokens in zip(request.rows, request.max_new_tokens, strict=True)
        ]

    def _loop(self, request: _Request, collector: Collector) -> Iterator[Step]:
        ids, mask = left_pad(request.rows, self.tokenizer.special_tokens["pad"])  # (B, T)

        def stops_at(row: int, tokens: list[int]) -> bool:
            return (
                bool(request.stop[row])
                and _find_stop(self.tokenizer.decode_generated(tokens), request.stop[row]) >= 0
            )

        return decode_steps(
            self._step,
            ids,
            mask,
            self._empty_cache(ids, collector.budgets),
            collector=collector,
            sampling=request.sampling,
            pad_id=self.tokenizer.special_tokens["pad"],
            stops_at=stops_at if any(request.stop) else None,
        )

    def _run(self, request: _Request) -> list[Generation]:
        collector = Collector(self._budgets(request), request.stop_tokens)
        for _ in self._loop(request, collector):
            pass
        return collector.result()

    def _stream(self, request: _Request) -> Iterator[str]:
        for updates in Following(self, request):
            if 0 in updates and updates[0].text:
                yield updates[0].text

    # Checking inputs.

    def _frame(self, prompts: Sequence[str]) -> list[list[int]]:
        return self.frame_all(prompts, what="prompt")

    def warm_up(self) -> None:
        self.generate_ids([self.frame("a", what="prompt")], max_new_tokens=1, temperature=0)

    def _options(
        self, options: GenerationOptions | None, overrides: dict[str, Any], *, text: bool
    ) -> GenerationOptions:
        """The call's options, checked for this task; `text`: the call returns text (stop strings cut it)."""
        checked = GenerationOptions.of(options, **overrides).check(self.task)
        if not text and checked.stop is not None:
            raise InputError(
                "stop strings cut text, and this call returns token ids; give stop_tokens, or call generate",
                field="stop",
            )
        return checked

    def _request(
        self, prompts: Sequence[Sequence[int]], options: GenerationOptions | Sequence[GenerationOptions]
    ) -> _Request:
        """The checked rows with their options: one value for every row, or one per row."""
        rows = check_token_rows(prompts, vocab_size=self.vocab_size, limit=self.max_len, what="prompt")
        per_row = [options] * len(rows) if isinstance(options, GenerationOptions) else list(options)
        if len(per_row) != len(rows):
            raise InputError(f"{len(per_row)} options for {len(rows)} prompts; give one per prompt")
        resolved = [row.resolve(self.defaults) for row in per_row]
        stop_tokens = {
            check_stop_tokens(row.stop_tokens or (), vocab_size=self.vocab_size) for row in resolved
        }
        if len(stop_tokens) > 1:
            raise InputError("the prompts of one batch must share their stop tokens", field="stop_tokens")
        # `resolve` sets max_new_tokens and stop_tokens from the manifest's generation defaults when unset.
        return _Request(
            rows=rows,
            max_new_tokens=[row.max_new_tokens or 0 for row in resolved],
            sampling=[row.sampling() for row in resolved],
            stop=[row.stop or () for row in resolved],
            stop_tokens=stop_tokens.pop(),
        )


def _find_stop(text: str, stop: tuple[str, ...]) -> int:
    """Where the first stop string starts in `text`, or -1."""
    found = [index for index in (text.find(s) for s in stop) if index >= 0]
    return min(found, default=-1)


def _cut(text: str, stop: tuple[str, ...]) -> str:
    """`text` up to the first stop string."""
    index = _find_stop(text, stop)
    return text if index < 0 else text[:index]


def news(
    tokenizer: TextTokenizer, tokens: list[int], stop: tuple[str, ...], reason: str | None, emitted: int
) -> tuple[Update | None, int]:
    """A row's update after a step, and how many characters of its text are out now: the text that became
    final since the `emitted` first ones; None when there is neither new text nor an end to report.

    A row that ended gives all its text (cut at a stop string); one that goes on holds back a tail that
    the next tokens may still change (`_final_end`, and a trailing run of byte tokens that a ByteFallback
    decoder has not settled)."""
    text = tokenizer.decode_generated(tokens)
    end = len(_cut(text, stop))
    if reason is None:
        settled = tokenizer.settled(tokens)
        stable = text if settled == len(tokens) else tokenizer.decode_generated(tokens[:settled])
        end = min(end, _final_end(stable, stop))
    piece = text[emitted:end] if end > emitted else ""
    if not piece and reason is None:
        return None, emitted
    return Update(piece, len(tokens), reason), max(emitted, end)


def _final_end(text: str, stop: tuple[str, ...]) -> int:
    """How much of `text` can no longer change while generation goes on: not a trailing incomplete
    character (shown as U+FFFD until its last byte comes), nor a tail that may begin a stop string."""
    end = len(text.rstrip(REPLACEMENT))
    hold = 0
    for s in stop:
        for size in range(min(len(s) - 1, end), hold, -1):
            if text[:end].endswith(s[:size]):
                hold = size
                break
    return end - hold
