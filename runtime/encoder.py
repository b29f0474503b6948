"""An "encode" export (BERT): sentence embeddings, similarity, classification and masked-token filling.

Texts are framed as the manifest's `framing.text` says (<cls> + the text's tokens + <sep> for BERT), right
padded with <pad> into batches, segment ids all 0 when the graph takes them, as in training. The graph
returns every head it has at once (manifest `io.encoder.outputs` names them); each method asks ONNX Runtime
only for the output it needs, and says so when the export has no such head. Every export embeds; a
sentence-transformers model such as all-MiniLM-L6-v2 has no classifier (`has_classifier` is False), so it
only embeds. The built-in classifier was trained to tell a well-formed sentence (label 1) from the same
words shuffled (label 0); an imported classifier's labels are its own, known here only by number.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from onnxformer.runtime.decoding import right_pad
from onnxformer.runtime.errors import InputError, ManifestError
from onnxformer.runtime.model import ExportModel, ModelExport, pick

LABELS = {0: "shuffled", 1: "well-formed"}  # the built-in task's labels


@dataclass(frozen=True)
class Classification:
    label: int  # the most probable class id (built-in task: 1 = well-formed, 0 = shuffled)
    probabilities: np.ndarray  # (num_labels,) softmax of the class logits


class TextEncoder(ExportModel):
    """An "encode" export (BERT). Thread-safe: calls share only the ONNX Runtime session and the tokenizer."""

    task = "encode"
    feeds: ClassVar[dict[str, tuple[str, ...]]] = {
        "encoder": ("input_ids", "attention_mask", "token_type_ids")
    }

    def __init__(self, export: ModelExport) -> None:
        super().__init__(export)
        self.dim: int = export.shape.d_model
        self.num_labels: int = export.shape.num_labels or 2
        self._encoder = export.sessions["encoder"]
        self._io = export.io("encoder")
        self.has_classifier: bool = "class_logits" in self._io.outputs
        # An imported checkpoint (manifest extra.source) was not trained on the built-in task.
        self.label_names: dict[int, str] = {} if "source" in export.manifest.extra else dict(LABELS)

    def embed(self, texts: str | list[str], *, batch_size: int = 32, normalize: bool = False) -> np.ndarray:
        """Sentence embeddings (mean of the real tokens' last hidden states): (N, D) for a list of N texts,
        (D,) for one str. An empty text is fine (it is <cls> <sep>).

        `normalize=True` scales each embedding to unit L2 norm (as sentence-transformers'
        `normalize_embeddings`), so a dot product is the cosine similarity; an all-zero embedding stays
        zero."""
        if not isinstance(normalize, bool):
            raise InputError(f"normalize must be True or False, got {normalize!r}")
        single = isinstance(texts, str)
        rows = self._frame([texts] if single else texts)
        vectors = self._run(rows, "sentence_embedding", batch_size)  # (N, D)
        if normalize:
            norms = np.linalg.norm(vectors, axis=-1, keepdims=True)  # (N, 1)
            vectors = vectors / np.maximum(norms, 1e-12)  # (N, D)
        return vectors[0] if single else vectors

    def similarity(self, a: str, b: str) -> float:
        """Cosine similarity of the two texts' embeddings, in [-1, 1]."""
        first, second = self.embed([a, b])  # (D,) each
        norms = float(np.linalg.norm(first) * np.linalg.norm(second))
        return float(first @ second) / max(norms, 1e-12)

    def classify(
        self, texts: str | list[str], *, batch_size: int = 32
    ) -> Classification | list[Classification]:
        """The class of each text (a list in, a list out); an export without a classifier
        (`has_classifier` False) refuses with a ManifestError."""
        single = isinstance(texts, str)
        rows = self._frame([texts] if single else texts)
        probabilities = _softmax(self._run(rows, "class_logits", batch_size))  # (N, num_labels)
        results = [Classification(int(np.argmax(p)), p) for p in probabilities]
        return results[0] if single else results

    def fill_mask(self, text: str, *, top_k: int = 5) -> list[list[tuple[str, float]]]:
        """For each mask token in `text` ("<mask>" in our tokenizers, "[MASK]" in BERT's), left to right,
        the `top_k` likeliest tokens and their probabilities.

        Probabilities are over the whole vocabulary; special tokens are not offered as fillers.
        """
        if not isinstance(text, str):
            raise InputError(f"fill_mask takes one str, got {type(text).__name__}")
        if "mask" not in self.tokenizer.special_tokens:
            raise InputError("this export's tokenizer has no mask token, so it cannot fill masks")
        mask_text = self.tokenizer.token_text(self.tokenizer.special_tokens["mask"])
        if mask_text not in text:
            raise InputError(f"the text has no {mask_text}; mark each word to predict with {mask_text}")
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
        """One output of the encoder (an `io` key such as "sentence_embedding") for every row, in batches
        of `batch_size` sorted by length, in the rows' order (outputs with a sequence axis only join when
        one batch holds every row)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        name = self._io.outputs.get(output)
        if name is None:
            raise ManifestError(
                f"{self.export.manifest.graphs['encoder']} has no {output} output (it returns "
                f"{sorted(self._io.outputs)}); export a checkpoint with that head to use it"
            )
        pad = self.tokenizer.special_tokens["pad"]
        # Longest rows first, so that each batch pads to about its own rows' length (what a batch of mixed
        # lengths costs is its longest row times its size); the results go back in the callers' order.
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i])) if len(rows) > batch_size else None
        ordered = rows if order is None else [rows[i] for i in order]
        parts = []
        for start in range(0, len(ordered), batch_size):
            ids, mask = right_pad(ordered[start : start + batch_size], pad)  # (B, T)
            feeds = pick(self._io, input_ids=ids, attention_mask=mask, token_type_ids=np.zeros_like(ids))
            (value,) = self._encoder.run(feeds, [name])
            parts.append(value)
        joined = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        if order is None:
            return joined
        restored = np.empty_like(joined)
        restored[order] = joined
        return restored

    def _frame(self, texts: Sequence[str]) -> list[list[int]]:
        return self.frame_all(texts, what="text")

    def warm_up(self) -> None:
        self.embed("a")


def _softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in float64."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)
