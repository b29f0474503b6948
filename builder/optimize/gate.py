"""The quality gate of a quantized export: how far its outputs move from the fp32 export's on held-out text.

A decoder (or the decoder of an encoder-decoder) is judged by its next-token distributions, teacher forced
over held-out text: the mean KL divergence KL(fp32 || quantized) per position, in nats; top-1 agreement
(both pick the same next token); and the change in perplexity of the text's actual next tokens. An encoder
is judged by its sentence embeddings: the cosine of each text's quantized embedding to its fp32 one.

    measure_gate(source, "int4", sessions, manifest, texts)   # -> GateResult; .passed, .misses

The text: the built-in grammar's held-out sentences (what `onnxformer train` held out with its default
seed), or the lines of a text file the user passes. Figures from a model whose fp32 distributions are
near-uniform (random or untrained weights) say nothing about quantization: `GateResult.uninformative`
names that case so the error can say so.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxformer.runtime.decoding import CacheLayout, right_pad
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import run_case
from onnxformer.runtime.manifest import Manifest
from onnxformer.runtime.session import Session, create_session

# Thresholds per quantization: (figure, bound, "max" or "min"). KL in nats per position; top-1 and cosine
# fractions; perplexity change a fraction of the fp32 perplexity.
THRESHOLDS: dict[str, dict[str, tuple[float, str]]] = {
    "int8": {
        "kl": (0.002, "max"),
        "top1": (0.97, "min"),
        "min_cosine": (0.99, "min"),
    },
    "int4": {
        "kl": (0.05, "max"),
        "top1": (0.90, "min"),
        "perplexity_change": (0.05, "max"),
        "min_cosine": (0.97, "min"),
    },
}
MAX_ROWS = 256  # held-out rows measured (each at most the context), enough for stable figures
BATCH = 16
MAX_POSITIONS = 8192  # next-token predictions compared at most
CHUNK = 256  # positions per float64 log-softmax
# Next-token distributions whose mean entropy is above this share of log(vocab) are near uniform: the tiny
# trained GPT's are at 29 %, a random-weight Llama's at 88 %.
UNIFORM_SHARE = 0.75
BUILTIN_TEXT = "the built-in grammar's held-out sentences"
BUILTIN_PAIRS_TEXT = "the built-in passive-voice task's held-out pairs"


class QualityError(ExportError):
    """A quantized export missed the quality gate (or the cosine bar) on every rung it was tried with."""


@dataclass(frozen=True)
class GateResult:
    quantize: str
    text: str  # where the held-out text came from
    rows: int  # texts (or pieces of them) measured
    positions: int  # next-token predictions compared (0 for an encoder)
    figures: dict[str, float]  # kl, top1, perplexity_fp32/_quantized/_change; or mean/min_cosine
    thresholds: dict[str, str]  # figure -> "<= 0.05" / ">= 0.9"
    misses: list[str]  # "kl 0.08 > 0.05", ... (empty when the gate passed)
    uninformative: str  # why the fp32 model's figures say nothing ("" when they do)

    @property
    def passed(self) -> bool:
        """Within every threshold, on figures that say something."""
        return not self.misses and not self.uninformative

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "passed": self.passed}


def builtin_texts() -> list[str]:
    """The built-in grammar's held-out sentences, as `onnxformer train` splits them with its seed."""
    from onnxformer.builder.data import generate_sentences, split_held_out
    from onnxformer.builder.export.recipes.base import TRAIN_SEED
    from onnxformer.builder.training.gpt_task import BUILTIN_SENTENCES

    _, held_out = split_held_out(generate_sentences(BUILTIN_SENTENCES, seed=TRAIN_SEED), seed=TRAIN_SEED)
    return held_out


def builtin_pairs() -> list[tuple[str, str]]:
    """The built-in passive-voice task's held-out pairs, as `onnxformer train t5` splits them."""
    from onnxformer.builder.data import passive_pairs, split_held_out
    from onnxformer.builder.export.recipes.base import TRAIN_SEED
    from onnxformer.builder.training.t5_task import BUILTIN_PAIRS

    _, held_out = split_held_out(passive_pairs(BUILTIN_PAIRS, seed=TRAIN_SEED), seed=TRAIN_SEED)
    return held_out


def read_eval_text(path: str) -> list[str]:
    """The non-empty lines of a UTF-8 text file, the held-out text the gate measures on."""
    from onnxformer.builder.data.files import read_text_file

    lines = [line.strip() for line in read_text_file(path).splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise ExportError(
            f"{path} holds no text to measure the quantized model on; give a file with lines of text"
        )
    return lines


def measure_gate(
    source: ExportFolder,
    quantize: str,
    quantized: dict[str, bytes],
    manifest: Manifest,
    eval_text: str | None = None,
) -> GateResult:
    """Figures of the quantized graphs (`quantized`: file -> bytes, laid out as `manifest` says) against
    the source export's fp32 graphs on held-out text (`eval_text`, a file, or the built-in sentences), and
    whether they meet THRESHOLDS[quantize]."""
    from onnxformer.runtime.loader import open_export

    original = open_export(source.root, device="cpu")
    roles = {path: role for role, path in manifest.graphs.items()}
    after = {roles[path]: create_session(data, device="cpu") for path, data in quantized.items()}
    texts = read_eval_text(eval_text) if eval_text else None
    name = eval_text or (BUILTIN_PAIRS_TEXT if manifest.task_spec.cross else BUILTIN_TEXT)
    uniform = ""
    if manifest.task_spec.cross:
        pairs = [(text, text) for text in texts] if texts else builtin_pairs()
        figures, rows, positions, uniform = _seq2seq(original, after, pairs)
    elif "decoder" in after:
        figures, rows, positions, uniform = _next_tokens(original, after, manifest, texts or builtin_texts())
    else:
        sample = (texts or builtin_texts())[:MAX_ROWS]
        figures, rows, positions = _embeddings(original, after, sample), len(sample), 0
    thresholds, misses = {}, []
    for figure, (bound, kind) in THRESHOLDS[quantize].items():
        if figure not in figures:
            continue
        thresholds[figure] = f"{'<=' if kind == 'max' else '>='} {bound:g}"
        value = figures[figure]
        if (kind == "max" and value > bound) or (kind == "min" and value < bound):
            misses.append(f"{figure} {value:.4g} {'>' if kind == 'max' else '<'} {bound:g}")
    return GateResult(quantize, name, rows, positions, figures, thresholds, misses, uniform)


class _Divergence:
    """Running sums of the next-token figures over (reference, quantized) logits of the same positions."""

    def __init__(self) -> None:
        # kl, top-1 hits, the targets' negative log-likelihoods, the fp32 entropy: summed over positions
        self.sums = {"kl": 0.0, "top1": 0.0, "nll_fp32": 0.0, "nll_quantized": 0.0, "entropy": 0.0}
        self.count = 0
        self.vocab = 1

    def add(self, reference: np.ndarray, changed: np.ndarray, following: np.ndarray) -> None:
        """reference, changed (N, V) logits of the positions whose next tokens are `following` (N,)."""
        for at in range(0, len(following), CHUNK):  # float64 log-probabilities, a chunk at a time
            p = _log_softmax(reference[at : at + CHUNK])  # (n, V)
            q = _log_softmax(changed[at : at + CHUNK])  # (n, V)
            target = following[at : at + CHUNK, None]
            probs = np.exp(p)
            self.sums["kl"] += float(np.sum(probs * (p - q)))
            self.sums["top1"] += float(np.sum(p.argmax(-1) == q.argmax(-1)))
            self.sums["nll_fp32"] -= float(np.take_along_axis(p, target, -1).sum())
            self.sums["nll_quantized"] -= float(np.take_along_axis(q, target, -1).sum())
            self.sums["entropy"] -= float(np.sum(probs * p))
            self.vocab = p.shape[-1]
        self.count += len(following)

    def figures(self) -> tuple[dict[str, float], str]:
        """The figures, and why they say nothing ("" when they do)."""
        if self.count == 0:
            raise ExportError(
                "the held-out text gave no next token to compare; give longer text (--eval-text)"
            )
        sums, count = self.sums, self.count
        fp32, quantized = np.exp(sums["nll_fp32"] / count), np.exp(sums["nll_quantized"] / count)
        figures = {
            "kl": sums["kl"] / count,
            "top1": sums["top1"] / count,
            "perplexity_fp32": float(fp32),
            "perplexity_quantized": float(quantized),
            "perplexity_change": float(quantized / fp32 - 1.0),
            "fp32_entropy": sums["entropy"] / count,
        }
        uniform = ""
        if figures["fp32_entropy"] > UNIFORM_SHARE * np.log(self.vocab):
            uniform = (
                f"the fp32 model's next-token distributions are near uniform (mean entropy "
                f"{figures['fp32_entropy']:.2f} nats of at most {np.log(self.vocab):.2f}): random or "
                "untrained weights, on which no quantization can be judged"
            )
        return figures, uniform


def _next_tokens(original: Any, after: dict[str, Session], manifest: Manifest, texts: list[str]):
    """KL, top-1 agreement and perplexities of the decoder's next-token distributions, teacher forced."""
    rows = _decoder_rows(original, texts)
    pad = original.special.get("pad", 0)
    layout = CacheLayout(original.manifest.kv_cache) if original.manifest.kv_cache else None
    decoder = original.manifest.graphs["decoder"]
    divergence = _Divergence()
    for start in range(0, len(rows), BATCH):
        ids, mask = right_pad(rows[start : start + BATCH], pad)  # (B, T)
        feeds = {"input_ids": ids, "attention_mask": mask, **(layout.empty(len(ids)) if layout else {})}
        (reference,) = original.sessions["decoder"].run(feeds, ["logits"])
        (changed,) = run_case(after["decoder"], manifest, decoder, feeds, ["logits"])  # (B, T, V)
        real = mask[:, 1:] == 1  # (B, T - 1): positions whose next token is text
        divergence.add(reference[:, :-1][real], changed[:, :-1][real], ids[:, 1:][real])
        if divergence.count >= MAX_POSITIONS:
            break
    figures, uniform = divergence.figures()
    return figures, len(rows), divergence.count, uniform


def _seq2seq(original: Any, after: dict[str, Session], pairs: list[tuple[str, str]]):
    """The decoder's next-token figures over each target, teacher forced after its source."""
    from onnxformer.runtime.seq2seq import TextToText

    before = TextToText(original)
    changed = TextToText(dataclasses.replace(original, sessions={**original.sessions, **after}))
    limit = int(original.config.get("max_len") or 512)
    eos = original.special.get("eos")
    divergence = _Divergence()
    rows = 0
    for source, target in pairs[:MAX_ROWS]:
        (row,) = before.frame_all([source])
        wanted = [*original.tokenizer.encode(target), *([eos] if eos is not None else [])][:limit]
        row = row[:limit]
        divergence.add(
            before.target_logits(row, wanted), changed.target_logits(row, wanted), np.asarray(wanted)
        )
        rows += 1
        if divergence.count >= MAX_POSITIONS:
            break
    figures, uniform = divergence.figures()
    return figures, rows, divergence.count, uniform


def _decoder_rows(original: Any, texts: list[str]) -> list[list[int]]:
    """Each text framed as the model frames a prompt (plus its end token), cut into pieces of the context."""
    special = original.special
    frame = original.framing.ids
    limit = int(original.config.get("max_len") or 512)
    rows: list[list[int]] = []
    for text in texts:
        ids = [*frame(original.tokenizer.encode(text), special)]
        if "eos" in special:
            ids.append(special["eos"])
        rows += [ids[at : at + limit] for at in range(0, len(ids), limit) if len(ids[at : at + limit]) > 1]
        if len(rows) >= MAX_ROWS:
            break
    return rows[:MAX_ROWS]


def _embeddings(original: Any, after: dict[str, Session], texts: list[str]) -> dict[str, float]:
    """Cosine of each text's quantized sentence embedding to its fp32 one."""
    from onnxformer.runtime.encoder import TextEncoder

    sample = texts[:MAX_ROWS]
    before = TextEncoder(original).embed(sample, normalize=True)
    swapped = dataclasses.replace(original, sessions={**original.sessions, **after})
    changed = TextEncoder(swapped).embed(sample, normalize=True)
    cosine = np.sum(before.astype(np.float64) * changed.astype(np.float64), axis=-1)  # (N,)
    return {"mean_cosine": float(cosine.mean()), "min_cosine": float(cosine.min())}


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
