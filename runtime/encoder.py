"""An "encode" export (BERT): sentence embeddings, similarity, classification and masked-token filling.

Texts are framed as the manifest's `framing.text` says (<cls> + the text's tokens + <sep> for BERT), right
padded with <pad> into batches, segment ids all 0 when the graph takes them, as in training. The graph
returns every head it has at once (manifest `io.encoder.outputs` names them); each method asks ONNX Runtime
only for the output it needs, and says so when the export has no such head. Every export embeds; a
sentence-transformers model such as all-MiniLM-L6-v2 has no classifier (`has_classifier` is False), so it
only embeds. The built-in classifier was trained to tell a well-formed sentence (label 1) from the same
words shuffled (label 0); an imported classifier's labels are its own, known here only by number.

A text longer than `max_length` ids (the framing's `max_length`: a sentence-transformers folder's
max_seq_length; else the model's context) keeps its first tokens within its framing, as
sentence-transformers truncates, and a warning says so; `truncate=False` refuses it instead.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from onnxformer.runtime.decoding import right_pad
from onnxformer.runtime.errors import InputError, ManifestError
from onnxformer.runtime.model import ExportModel, ModelExport, pick, text_list

logger = logging.getLogger(__name__)

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
        self._io = export.io("encoder")
        # The embedding's width: d_model, or a sentence-transformers Dense module's out_features.
        self.dim: int = _embedding_width(export, self._io.outputs.get("sentence_embedding"))
        self.num_labels: int = export.shape.num_labels or 2
        # The most ids a text is read as (framing included): longer texts are cut to it, or refused.
        self.max_length: int = self.framing.limit(self.max_len)
        self._encoder = export.sessions["encoder"]
        self.has_classifier: bool = "class_logits" in self._io.outputs
        # An imported checkpoint (manifest extra.source) was not trained on the built-in task.
        self.label_names: dict[int, str] = {} if "source" in export.manifest.extra else dict(LABELS)

    def embed(
        self,
        texts: str | list[str],
        *,
        batch_size: int = 32,
        normalize: bool = False,
        truncate: bool = True,
    ) -> np.ndarray:
        """Sentence embeddings (the graph's pooling of the last hidden states: mean over the real tokens, or a
        sentence-transformers folder's Pooling, Dense and Normalize): (N, D) for a list of N texts,
        (D,) for one str. An empty text is fine (it is <cls> <sep>).

        `normalize=True` scales each embedding to unit L2 norm (as sentence-transformers'
        `normalize_embeddings`), so a dot product is the cosine similarity; an all-zero embedding stays
        zero. A text longer than `max_length` ids is cut to them (`truncate=False`: refused)."""
        if not isinstance(normalize, bool):
            raise InputError(f"normalize must be True or False, got {normalize!r}", field="normalize")
        single = isinstance(texts, str)
        rows = self._frame([texts] if isinstance(texts, str) else texts, truncate=truncate)
        vectors = self._run(rows, "sentence_embedding", batch_size)  # (N, D)
        if normalize:
            norms = np.linalg.norm(vectors, axis=-1, keepdims=True)  # (N, 1)
            vectors = vectors / np.maximum(norms, 1e-12)  # (N, D)
        return vectors[0] if single else vectors

    def frame_texts(self, texts: list[str], *, truncate: bool = True) -> list[list[int]]:
        """The ids each text is read as (framing included, cut or refused as `embed` does): with
        `embed_ids`, how a server checks each request alone and then embeds many requests as one batch."""
        return self._frame(texts, truncate=truncate)

    def embed_ids(self, rows: list[list[int]], *, batch_size: int = 32) -> np.ndarray:
        """Sentence embeddings (N, D) of framed rows (from `frame_texts`), as `embed` gives them."""
        return self._run(rows, "sentence_embedding", batch_size)

    def similarity(self, a: str, b: str, *, truncate: bool = True) -> float:
        """Cosine similarity of the two texts' embeddings, in [-1, 1]."""
        first, second = self.embed([a, b], truncate=truncate)  # (D,) each
        norms = float(np.linalg.norm(first) * np.linalg.norm(second))
        return float(first @ second) / max(norms, 1e-12)

    def classify(
        self, texts: str | list[str], *, batch_size: int = 32, truncate: bool = True
    ) -> Classification | list[Classification]:
        """The class of each text (a list in, a list out); `truncate` as for `embed`. An export without a
        classifier (`has_classifier` False) refuses with a ManifestError."""
        single = isinstance(texts, str)
        rows = self._frame([texts] if isinstance(texts, str) else texts, truncate=truncate)
        probabilities = _softmax(self._run(rows, "class_logits", batch_size))  # (N, num_labels)
        results = [Classification(int(np.argmax(p)), p) for p in probabilities]
        return results[0] if single else results

    def fill_mask(self, text: str, *, top_k: int = 5, truncate: bool = True) -> list[list[tuple[str, float]]]:
        """For each mask token in `text` ("<mask>" in our tokenizers, "[MASK]" in BERT's), left to right,
        the `top_k` likeliest tokens and their probabilities.

        Probabilities are over the whole vocabulary; special tokens are not offered as fillers. A text
        longer than `max_length` ids is cut (`truncate`) as long as no mask falls past the cut.
        """
        if not isinstance(text, str):
            raise InputError(f"fill_mask takes one str, got {type(text).__name__}")
        if "mask" not in self.tokenizer.special_tokens:
            raise InputError("this export's tokenizer has no mask token, so it cannot fill masks")
        mask_text = self.tokenizer.token_text(self.tokenizer.special_tokens["mask"])
        if mask_text not in text:
            raise InputError(f"the text has no {mask_text}; mark each word to predict with {mask_text}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise InputError(f"top_k must be an integer >= 1, got {top_k!r}", field="top_k")
        (row,) = self._frame([text], truncate=truncate)
        mask_id = self.tokenizer.special_tokens["mask"]
        if len(row) == self.max_length and self.tokenizer.encode(text).count(mask_id) > row.count(mask_id):
            raise InputError(
                f"the text has a {mask_text} past its first {self.max_length} tokens, the most the model "
                f"reads; shorten the text before that {mask_text}"
            )
        logits = self._run([row], "mlm_logits", 1)[0]  # (T, V)
        candidates = np.array(sorted(set(range(logits.shape[-1])) - self.tokenizer.special_ids))
        results = []
        for position in np.flatnonzero(np.array(row) == mask_id).tolist():
            probabilities = _softmax(logits[position])  # (V,)
            best = candidates[np.argsort(-probabilities[candidates], kind="stable")[:top_k]]
            results.append([(self.tokenizer.token_text(int(t)), float(probabilities[t])) for t in best])
        return results

    def _run(self, rows: list[list[int]], output: str, batch_size: int) -> np.ndarray:
        """One output of the encoder (an `io` key such as "sentence_embedding") for every row, in batches
        of `batch_size` sorted by length, in the rows' order (outputs with a sequence axis only join when
        one batch holds every row)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be an integer >= 1, got {batch_size!r}", field="batch_size")
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

    def lengths(self, texts: str | list[str]) -> list[int]:
        """How many ids each text is framed to before any cut: more than `max_length` is cut (or, with
        `truncate=False`, refused)."""
        listed = text_list([texts] if isinstance(texts, str) else texts, what="text")
        return [len(self._ids(text, index)) + self._framing_size for index, text in enumerate(listed)]

    @property
    def _framing_size(self) -> int:
        return len(self.framing.prefix) + len(self.framing.suffix)

    def _ids(self, text: object, index: int) -> list[int]:
        """All of a text's tokens (sentence-transformers tokenizes the whole text, then cuts)."""
        if not isinstance(text, str):
            raise InputError(
                f"text {index} must be a str, got {type(text).__name__}", field=f"texts[{index}]"
            )
        return self.tokenizer.encode(text)

    def _frame(self, texts: Sequence[str], *, truncate: bool) -> list[list[int]]:
        """Each text framed; one longer than `max_length` ids cut to its first tokens (`truncate`, with a
        warning naming it) or refused."""
        if not isinstance(truncate, bool):
            raise InputError(f"truncate must be True or False, got {truncate!r}", field="truncate")
        if not truncate:
            return self.frame_all(texts, what="text", limit=self.max_length)
        room = self.max_length - self._framing_size
        rows, cut = [], []
        for index, text in enumerate(text_list(texts, what="text")):
            tokens = self._ids(text, index)
            if len(tokens) > room:
                cut.append(f"text {index}: {len(tokens) + self._framing_size}")
                tokens = tokens[:room]
            rows.append(self.framing.ids(tokens, self.tokenizer.special_tokens))
        if cut:
            shown = ", ".join(cut[:5]) + (f", and {len(cut) - 5} more" if len(cut) > 5 else "")
            logger.warning(
                "%d text(s) longer than the %d tokens the model reads were cut to their first tokens (%s "
                "tokens); truncate=False (--no-truncate) refuses them instead",
                len(cut),
                self.max_length,
                shown,
            )
        return rows

    def warm_up(self) -> None:
        self.embed("a")


def _embedding_width(export: ModelExport, output: str | None) -> int:
    """The last axis of the encoder graph's embedding output as the manifest records it (else d_model)."""
    entry = export.manifest.file(export.manifest.graphs["encoder"])
    for spec in entry.outputs:
        if spec.name == output and spec.shape and isinstance(spec.shape[-1], int):
            return spec.shape[-1]
    return export.shape.d_model


def _softmax(logits: np.ndarray) -> npt.NDArray[np.float64]:
    """Softmax over the last axis, in float64."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    probabilities: npt.NDArray[np.float64] = exp / exp.sum(axis=-1, keepdims=True)
    return probabilities
