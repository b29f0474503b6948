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
from onnxformer.runtime.tokenizer import REPLACEMENT


@dataclass(frozen=True)
class _Request:
    """One call's checked prompts and options; built before anything runs."""

    rows: list[list[int]]  # framed prompts
    max_new_tokens: int
    sampling: SamplingConfig
    stop_tokens: frozenset[int]
    stop: tuple[str, ...]  # stop strings


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
        texts = [_cut(self.tokenizer.decode(result.tokens), request.stop) for result in self._run(request)]
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
        return prompt_budgets([len(row) for row in request.rows], request.max_new_tokens, self.max_len)

    def _loop(self, request: _Request, collector: Collector) -> Iterator[Step]:
        ids, mask = left_pad(request.rows, self.tokenizer.special_tokens["pad"])  # (B, T)

        def stops_at(tokens: list[int]) -> bool:
            return _find_stop(self.tokenizer.decode(tokens), request.stop) >= 0

        return decode_steps(
            self._step,
            ids,
            mask,
            self._empty_cache(ids, collector.budgets),
            collector=collector,
            sampling=request.sampling,
            pad_id=self.tokenizer.special_tokens["pad"],
            stops_at=stops_at if request.stop else None,
        )

    def _run(self, request: _Request) -> list[Generation]:
        collector = Collector(self._budgets(request), request.stop_tokens)
        for _ in self._loop(request, collector):
            pass
        return collector.result()

    def _stream(self, request: _Request) -> Iterator[str]:
        collector = Collector(self._budgets(request), request.stop_tokens)
        emitted = 0
        for _ in self._loop(request, collector):
            text = self.tokenizer.decode(collector.tokens[0])
            end = len(_cut(text, request.stop))
            if not collector.done:
                end = min(end, _final_end(text, request.stop))
            if end > emitted:
                yield text[emitted:end]
                emitted = end

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

    def _request(self, prompts: Sequence[Sequence[int]], options: GenerationOptions) -> _Request:
        rows = check_token_rows(prompts, vocab_size=self.vocab_size, limit=self.max_len, what="prompt")
        resolved = options.resolve(self.defaults)
        # `resolve` sets both from the manifest's generation defaults when the call leaves them unset.
        assert resolved.max_new_tokens is not None and resolved.stop_tokens is not None
        return _Request(
            rows=rows,
            max_new_tokens=resolved.max_new_tokens,
            sampling=resolved.sampling(),
            stop_tokens=check_stop_tokens(resolved.stop_tokens, vocab_size=self.vocab_size),
            stop=resolved.stop or (),
        )


def _find_stop(text: str, stop: tuple[str, ...]) -> int:
    """Where the first stop string starts in `text`, or -1."""
    found = [index for index in (text.find(s) for s in stop) if index >= 0]
    return min(found, default=-1)


def _cut(text: str, stop: tuple[str, ...]) -> str:
    """`text` up to the first stop string."""
    index = _find_stop(text, stop)
    return text if index < 0 else text[:index]


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
