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
from typing import ClassVar

import numpy as np

from onnxformer.runtime.decoding import (
    Collector,
    Feeds,
    Generation,
    beam_search,
    check_length_penalty,
    check_max_new_tokens,
    check_stop_tokens,
    check_token_rows,
    decode_steps,
    left_pad,
    log_softmax,
    sampling_config,
    seq2seq_budget,
)
from onnxformer.runtime.errors import InputError
from onnxformer.runtime.model import ExportModel, ModelExport, pick


class TextToText(ExportModel):
    """A "seq2seq" export (T5). Thread-safe: calls share only the ONNX Runtime sessions and the tokenizer."""

    task = "seq2seq"
    feeds: ClassVar[dict[str, tuple[str, ...]]] = {
        "encoder": ("input_ids", "attention_mask"),
        "decoder": ("decoder_input_ids", "decoder_attention_mask", "encoder_attention_mask"),
    }

    def __init__(self, export: ModelExport) -> None:
        super().__init__(export)
        self.defaults = export.manifest.generation
        self.start_token: int = int(self.defaults.decoder_start_token_id)
        self._encoder = export.sessions["encoder"]
        self._decoder = export.sessions["decoder"]
        self._encoder_io = export.io("encoder")
        self._decoder_io = export.io("decoder")
        self._cache = export.cache
        self._logits = self._decoder_io.outputs["logits"]
        self._outputs = [self._logits, *self._cache.present_names()]

    def generate(
        self,
        text: str | list[str],
        *,
        max_new_tokens: int | None = None,
        num_beams: int = 1,
        length_penalty: float = 1.0,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop_tokens: list[int] | None = None,
    ) -> str | list[str]:
        """The output text for `text` (a str), or for each text (a list in, a list out).

        `num_beams=1` decodes greedily or samples (temperature, top_k, top_p, seed; None takes the export's
        defaults); `num_beams > 1` runs beam search, ranking finished outputs by
        sum of log-probabilities / length ** length_penalty, and takes no sampling options.
        """
        single = isinstance(text, str)
        results = self.generate_ids(
            self._frame([text] if single else text),
            max_new_tokens=max_new_tokens,
            num_beams=num_beams,
            length_penalty=length_penalty,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            stop_tokens=stop_tokens,
        )
        texts = [self.tokenizer.decode(result.tokens) for result in results]
        return texts[0] if single else texts

    def generate_ids(
        self,
        sources: Sequence[Sequence[int]],
        *,
        max_new_tokens: int | None = None,
        num_beams: int = 1,
        length_penalty: float = 1.0,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop_tokens: list[int] | None = None,
    ) -> list[Generation]:
        """Generation from framed source ids (</s> included), as the PyTorch reference takes them."""
        if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1:
            raise InputError(f"num_beams must be an integer >= 1 (1 = no beam search), got {num_beams!r}")
        if num_beams > 1:
            given = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
            if any(value is not None for value in given.values()):
                raise InputError(
                    "beam search chooses tokens deterministically; leave temperature, top_k, top_p and seed "
                    "unset, or use num_beams=1 to sample"
                )
            return self.beam_search_ids(
                sources,
                num_beams=num_beams,
                length_penalty=length_penalty,
                max_new_tokens=max_new_tokens,
                stop_tokens=stop_tokens,
            )
        rows, budget, stop = self._check(sources, max_new_tokens, stop_tokens)
        check_length_penalty(length_penalty)
        sampling = sampling_config(
            self.defaults, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed
        )
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
        self,
        sources: Sequence[Sequence[int]],
        *,
        num_beams: int,
        length_penalty: float = 1.0,
        max_new_tokens: int | None = None,
        stop_tokens: list[int] | None = None,
    ) -> list[Generation]:
        """Beam search from framed source ids; each result carries its score. `num_beams=1` is allowed
        here (it equals greedy decoding), while `generate` sends 1 to the greedy loop."""
        if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1:
            raise InputError(f"num_beams must be an integer >= 1, got {num_beams!r}")
        if num_beams > self.vocab_size:
            # Each beam holds a copy of the encoder's keys and values: an unbounded count is unbounded memory.
            raise InputError(
                f"num_beams must be at most the vocabulary size {self.vocab_size}, got {num_beams}"
            )
        rows, budget, stop = self._check(sources, max_new_tokens, stop_tokens)
        penalty = check_length_penalty(length_penalty)
        return beam_search(
            partial(self._step, memory=self._memory(rows, repeat=num_beams)),
            self._cache.empty(len(rows) * num_beams),
            batch=len(rows),
            num_beams=num_beams,
            start_token=self.start_token,
            budget=budget,
            stop_tokens=stop,
            length_penalty=penalty,
        )

    def score_ids(self, source: Sequence[int], target: Sequence[int]) -> float:
        """The log-probability the model gives `target` (ids, e.g. an output + </s>) after the start token,
        for one framed source: the sum over target tokens, teacher forced in one decoder run."""
        (row,) = check_token_rows([source], vocab_size=self.vocab_size, limit=self.max_len, what="source")
        (wanted,) = check_token_rows([target], vocab_size=self.vocab_size, limit=self.max_len, what="target")
        ids = np.array([[self.start_token, *wanted[:-1]]], dtype=np.int64)  # (1, T)
        feeds = {**self._decoder_feeds(ids, np.ones_like(ids), self._memory([row])), **self._cache.empty(1)}
        (logits,) = self._decoder.run(feeds, [self._logits])  # (1, T, V)
        log_probs = log_softmax(logits[0])  # (T, V)
        return float(log_probs[np.arange(len(wanted)), wanted].sum())

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
        self, sources: Sequence[Sequence[int]], max_new_tokens: int | None, stop_tokens: list[int] | None
    ) -> tuple[list[list[int]], int, frozenset[int]]:
        """Checked source rows, the decoding budget, the stop tokens."""
        rows = check_token_rows(sources, vocab_size=self.vocab_size, limit=self.max_len, what="source")
        if max_new_tokens is None:
            max_new_tokens = self.defaults.max_new_tokens
        if stop_tokens is None:
            stop_tokens = list(self.defaults.stop_tokens)
        stop = check_stop_tokens(stop_tokens, vocab_size=self.vocab_size)
        return rows, seq2seq_budget(check_max_new_tokens(max_new_tokens), self.max_len), stop

    def _frame(self, texts: Sequence[str]) -> list[list[int]]:
        if isinstance(texts, Sequence) and not isinstance(texts, str | bytes):
            for index, text in enumerate(texts):
                if text == "":
                    raise InputError(f"text {index} is empty; give the text to transform")
        return self.frame_all(texts, what="text")

    def warm_up(self) -> None:
        self.generate_ids([self.frame("a")], max_new_tokens=1, temperature=0)
