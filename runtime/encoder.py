"""BERT on an export folder: sentence embeddings, similarity, classification and masked-token filling.

Texts are framed <cls> + the text's tokens + <sep>, right padded with <pad> into batches, segment ids all 0,
as in training. The graph returns every head at once; each method asks ONNX Runtime only for the output it
needs. The built-in classifier was trained to tell a well-formed sentence (label 1) from the same words
shuffled (label 0).
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnxformer.runtime.decoding import right_pad
from onnxformer.runtime.errors import InputError
from onnxformer.runtime.loader import ExportModel, ModelExport

MASK_TEXT = "<mask>"
LABELS = {0: "shuffled", 1: "well-formed"}  # the built-in task's labels


@dataclass(frozen=True)
class Classification:
    label: int  # the most probable class id (built-in task: 1 = well-formed, 0 = shuffled)
    probabilities: np.ndarray  # (num_labels,) softmax of the class logits


class TextEncoder(ExportModel):
    """A BERT export. Thread-safe: calls share only the ONNX Runtime session and the tokenizer."""

    family = "bert"

    def __init__(self, export: ModelExport) -> None:
        super().__init__(export)
        self.dim: int = export.config["d_model"]
        self.num_labels: int = export.config.get("num_labels", 2)
        self._encoder = export.sessions["encoder"]

    def embed(self, texts: str | list[str], *, batch_size: int = 32) -> np.ndarray:
        """Sentence embeddings (mean of the real tokens' last hidden states): (N, D) for a list of N texts,
        (D,) for one str. An empty text is fine (it is <cls> <sep>)."""
        single = isinstance(texts, str)
        rows = self._frame([texts] if single else texts)
        vectors = self._run(rows, "sentence_embedding", batch_size)  # (N, D)
        return vectors[0] if single else vectors

    def similarity(self, a: str, b: str) -> float:
        """Cosine similarity of the two texts' embeddings, in [-1, 1]."""
        first, second = self.embed([a, b])  # (D,) each
        norms = float(np.linalg.norm(first) * np.linalg.norm(second))
        return float(first @ second) / max(norms, 1e-12)

    def classify(
        self, texts: str | list[str], *, batch_size: int = 32
    ) -> Classification | list[Classification]:
        """The class of each text (a list in, a list out)."""
        single = isinstance(texts, str)
        rows = self._frame([texts] if single else texts)
        probabilities = _softmax(self._run(rows, "class_logits", batch_size))  # (N, num_labels)
        results = [Classification(int(np.argmax(p)), p) for p in probabilities]
        return results[0] if single else results

    def fill_mask(self, text: str, *, top_k: int = 5) -> list[list[tuple[str, float]]]:
        """For each "<mask>" in `text`, left to right, the `top_k` likeliest tokens and their probabilities.

        Probabilities are over the whole vocabulary; special tokens are not offered as fillers.
        """
        if not isinstance(text, str):
            raise InputError(f"fill_mask takes one str, got {type(text).__name__}")
        if MASK_TEXT not in text:
            raise InputError(f"the text has no {MASK_TEXT}; mark each word to predict with {MASK_TEXT}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise InputError(f"top_k must be an integer >= 1, got {top_k!r}")
        (row,) = self._frame([text])
        logits = self._run([row], "mlm_logits", 1)[0]  # (T, V)
        candidates = np.array(sorted(set(range(logits.shape[-1])) - self.tokenizer.special_ids))
        results = []
        for position in np.flatnonzero(np.array(row) == self.tokenizer.special_tokens["mask"]).tolist():
            probabilities = _softmax(logits[position])  # (V,)
            best = candidates[np.argsort(-probabilities[candidates], kind="stable")[:top_k]]
            results.append([(self.tokenizer.token_text(int(t)), float(probabilities[t])) for t in best])
        return results

    def _run(self, rows: list[list[int]], output: str, batch_size: int) -> np.ndarray:
        """One output of the encoder for every row, in batches of `batch_size`, joined on axis 0 (outputs
        with a sequence axis only join when one batch holds every row)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        pad = self.tokenizer.special_tokens["pad"]
        parts = []
        for start in range(0, len(rows), batch_size):
            ids, mask = right_pad(rows[start : start + batch_size], pad)  # (B, T)
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            (value,) = self._encoder.run(feeds, [output])
            parts.append(value)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def _frame(self, texts: Sequence[str]) -> list[list[int]]:
        if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
            raise InputError("texts must be a str or a list of str")
        if len(texts) == 0:
            raise InputError("give at least one text")
        special = self.tokenizer.special_tokens
        rows = []
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise InputError(f"text {index} must be a str, got {type(text).__name__}")
            row = [special["cls"], *self.tokenizer.encode(text, limit=self.max_len), special["sep"]]
            if len(row) > self.max_len:
                raise InputError(
                    f"text {index} is {len(row)} tokens with <cls> and <sep>, but the model reads at most "
                    f"{self.max_len}; shorten the text"
                )
            rows.append(row)
        return rows


def _softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in float64."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)
