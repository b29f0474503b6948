"""Text to text on a "seq2seq" export (T5): `TextToText.load(folder).generate("some source text")`.

Sources are framed as the manifest's `framing.source` says (the text's tokens + </s> for T5) and left
padded. The encoder runs once per call and also returns each decoder layer's cross-attention keys and
values, which every decoder step reuses; the decoder starts from `generation.decoder_start_token_id` (<s>)
with the self-attention cache and stops at </s>. Greedy and seeded sampling follow the PyTorch reference
(`onnxformer.builder.generation.generate_seq2seq`) token for token; `num_beams > 1` runs beam search
(`onnxformer.runtime.decoding.beam_search`) on the same graphs.
"""

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar, overload

import numpy as np

from onnxformer.runtime.decoding import (
    Collector,
    Feeds,
    Generation,
    beam_search,
    check_stop_tokens,
    check_token_rows,
    decode_steps,
    left_pad,
    log_softmax,
    seq2seq_budget,
)
from onnxformer.runtime.errors import InputError, ManifestError
from onnxformer.runtime.generation_options import SAMPLING, GenerationOptions
from onnxformer.runtime.model import ExportModel, ModelExport, pick


class TextToText(ExportModel):
    """A "seq2seq" export (T5). Thread-safe: calls share only the ONNX Runtime sessions and the tokenizer.

    Every method takes the generation options as one `GenerationOptions`, or as its fields by keyword
    (max_new_tokens, num_beams, length_penalty, temperature, top_k, top_p, seed, stop_tokens), or both
    (the keywords win). `num_beams=1` decodes greedily or samples, options left unset taking the export's
    defaults (manifest `generation`); `num_beams > 1` runs beam search, ranking finished outputs by
    sum of log-probabilities / length ** length_penalty, and takes no sampling options. An option of
    another task (stop strings) is refused, saying why.
    """

    task = "seq2seq"
    feeds: ClassVar[dict[str, tuple[str, ...]]] = {
        "encoder": ("input_ids", "attention_mask"),
        "decoder": ("decoder_input_ids", "decoder_attention_mask", "encoder_attention_mask"),
    }

    def __init__(self, export: ModelExport) -> None:
        super().__init__(export)
        self.defaults = export.generation_defaults()
        start = self.defaults.decoder_start_token_id
        if start is None:  # the manifest's checks require it of a seq2seq export
            raise ManifestError(
                f"manifest.json: generation.decoder_start_token_id is missing; the {self.task!r} task needs "
                "it; re-export the folder"
            )
        self.start_token: int = int(start)
        self._encoder = export.sessions["encoder"]
        self._decoder = export.sessions["decoder"]
        self._encoder_io = export.io("encoder")
        self._decoder_io = export.io("decoder")
        self._cache = export.cache_layout()
        self._logits = self._decoder_io.outputs["logits"]
        self._outputs = [self._logits, *self._cache.present_names()]

    @overload
    def generate(self, text: str, options: GenerationOptions | None = None, **overrides: Any) -> str: ...
    @overload
    def generate(
        self, text: list[str], options: GenerationOptions | None = None, **overrides: Any
    ) -> list[str]: ...
    def generate(
        self, text: str | list[str], options: GenerationOptions | None = None, **overrides: Any
    ) -> str | list[str]:
        """The output text for `text` (a str), or for each text (a list in, a list out)."""
        single = isinstance(text, str)
        checked = GenerationOptions.of(options, **overrides).check(self.task)
        results = self.generate_ids(self._frame([text] if isinstance(text, str) else text), checked)
        texts = [self.tokenizer.decode(result.tokens) for result in results]
        return texts[0] if single else texts

    def generate_ids(
        self, sources: Sequence[Sequence[int]], options: GenerationOptions | None = None, **overrides: Any
    ) -> list[Generation]:
        """Generation from framed source ids (</s> included), as the PyTorch reference takes them."""
        checked = GenerationOptions.of(options, **overrides).check(self.task)
        if checked.num_beams > 1:
            return self.beam_search_ids(sources, checked)
        rows, budget, stop = self._check(sources, checked)
        sampling = checked.resolve(self.defaults).sampling()
        batch = len(rows)
        collector = Collector([budget] * batch, stop)
        steps = decode_steps(
            partial(self._step, memory=self._memory(rows)),
            np.full((batch, 1), self.start_token, dtype=np.int64),  # (B, 1)
            np.ones((batch, 1), dtype=np.int64),  # (B, 1)
            self._cache.empty(batch),
            collector=collector,
            sampling=sampling,
            pad_id=self.export.special["pad"],
        )
        for _ in steps:
            pass
        return collector.result()

    def beam_search_ids(
        self, sources: Sequence[Sequence[int]], options: GenerationOptions | None = None, **overrides: Any
    ) -> list[Generation]:
        """Beam search from framed source ids; each result carries its score. `num_beams=1` is allowed
        here (it equals greedy decoding), while `generate` sends 1 to the greedy loop."""
        checked = GenerationOptions.of(options, **overrides).check(self.task)
        given = [name for name in SAMPLING if getattr(checked, name) is not None]
        if given:
            raise InputError(
                f"beam search chooses tokens deterministically; leave {', '.join(given)} unset",
                field=given[0],
            )
        if checked.num_beams > self.vocab_size:
            # Each beam holds a copy of the encoder's keys and values: an unbounded count is unbounded memory.
            raise InputError(
                f"num_beams must be at most the vocabulary size {self.vocab_size}, got {checked.num_beams}",
                field="num_beams",
            )
        rows, budget, stop = self._check(sources, checked)
        return beam_search(
            partial(self._step, memory=self._memory(rows, repeat=checked.num_beams)),
            self._cache.empty(len(rows) * checked.num_beams),
            batch=len(rows),
            num_beams=checked.num_beams,
            start_token=self.start_token,
            budget=budget,
            stop_tokens=stop,
            length_penalty=checked.length_penalty,
        )

    def score_ids(self, source: Sequence[int], target: Sequence[int]) -> float:
        """The log-probability the model gives `target` (ids, e.g. an output + </s>) after the start token,
        for one framed source: the sum over target tokens, teacher forced in one decoder run."""
        (row,) = check_token_rows([source], vocab_size=self.vocab_size, limit=self.max_len, what="source")
        (wanted,) = check_token_rows(
            [target], vocab_size=self.vocab_size, limit=self.max_len, what="target", field="target"
        )
        log_probs = log_softmax(self._teacher_forced(row, wanted))  # (T, V)
        return float(log_probs[np.arange(len(wanted)), wanted].sum())

    def target_logits(self, source: Sequence[int], target: Sequence[int]) -> np.ndarray:
        """The decoder's logits (T, V) over `target` (ids) teacher forced after the start token, for one
        framed source: row t is the distribution of target[t]."""
        (row,) = check_token_rows([source], vocab_size=self.vocab_size, limit=self.max_len, what="source")
        (wanted,) = check_token_rows(
            [target], vocab_size=self.vocab_size, limit=self.max_len, what="target", field="target"
        )
        return self._teacher_forced(row, wanted)

    def _teacher_forced(self, row: list[int], wanted: list[int]) -> np.ndarray:
        ids = np.array([[self.start_token, *wanted[:-1]]], dtype=np.int64)  # (1, T)
        feeds = {**self._decoder_feeds(ids, np.ones_like(ids), self._memory([row])), **self._cache.empty(1)}
        (logits,) = self._decoder.run(feeds, [self._logits])  # (1, T, V)
        return np.asarray(logits[0])  # (T, V)

    def _memory(self, rows: list[list[int]], *, repeat: int = 1) -> Feeds:
        """Encode once: the encoder mask and every layer's cross keys/values, each row repeated `repeat`
        times in a row (beam k of source b is row b * repeat + k)."""
        ids, mask = left_pad(rows, self.export.special["pad"])  # (B, S)
        names = self._cache.cross_names()
        feeds = pick(self._encoder_io, input_ids=ids, attention_mask=mask)
        outputs = self._encoder.run(feeds, names)  # (B, H, S, Dh) each
        memory = {"encoder_attention_mask": mask, **dict(zip(names, outputs, strict=True))}
        if repeat > 1:
            memory = {name: np.repeat(value, repeat, axis=0) for name, value in memory.items()}
        return memory

    def _step(
        self, ids: np.ndarray, mask: np.ndarray, cache: Feeds, *, memory: Feeds
    ) -> tuple[np.ndarray, Feeds]:
        """ids (B, T), mask (B, P + T) -> logits at the last position (B, V), the cache with T more."""
        outputs = self._decoder.run({**self._decoder_feeds(ids, mask, memory), **cache}, self._outputs)
        return np.ascontiguousarray(outputs[0][:, -1]), self._cache.next_feeds(outputs[1:])

    def _decoder_feeds(self, ids: np.ndarray, mask: np.ndarray, memory: Feeds) -> Feeds:
        """The decoder's feeds: its tokens (B, T) and mask (B, P + T), the source's mask (B, S) and the
        encoder's cross keys and values (`memory`)."""
        cross = {name: memory[name] for name in self._cache.cross_names()}
        named = pick(
            self._decoder_io,
            decoder_input_ids=ids,
            decoder_attention_mask=mask,
            encoder_attention_mask=memory["encoder_attention_mask"],
        )
        return {**named, **cross}

    def _check(
        self, sources: Sequence[Sequence[int]], options: GenerationOptions
    ) -> tuple[list[list[int]], int, frozenset[int]]:
        """Checked source rows, the decoding budget, the stop tokens (the export's unless given)."""
        rows = check_token_rows(sources, vocab_size=self.vocab_size, limit=self.max_len, what="source")
        resolved = options.resolve(self.defaults)
        # `resolve` sets both from the manifest's generation defaults when the call leaves them unset.
        assert resolved.max_new_tokens is not None and resolved.stop_tokens is not None
        stop = check_stop_tokens(resolved.stop_tokens, vocab_size=self.vocab_size)
        return rows, seq2seq_budget(resolved.max_new_tokens, self.max_len), stop

    def _frame(self, texts: Sequence[str]) -> list[list[int]]:
        if isinstance(texts, Sequence) and not isinstance(texts, str | bytes):
            for index, text in enumerate(texts):
                if text == "":
                    raise InputError(
                        f"text {index} is empty; give the text to transform", field=f"texts[{index}]"
                    )
        return self.frame_all(texts, what="text")

    def warm_up(self) -> None:
        self.generate_ids([self.frame("a")], max_new_tokens=1, temperature=0)
