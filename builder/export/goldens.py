"""Golden test data for an export folder, written from PyTorch at export time (format: docs/goldens.md).

Graph goldens are the parity cases themselves: while parity runs, a `GoldenRecorder` keeps the inputs
and the PyTorch outputs of the chosen cases (and how far ONNX Runtime was from them), and writes them in
the ONNX backend test-data layout (`goldens/<graph>/test_data_set_N/input_i.pb`, `output_i.pb`).
End-to-end goldens (`goldens/end_to_end.json`) hold what a host must reproduce from text: token ids,
greedy generations and sentence embeddings.
"""

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from onnx import numpy_helper
from tokenizers import Tokenizer

from onnxformer.builder.export.samples import Case
from onnxformer.runtime.errors import ParityError
from onnxformer.runtime.folder import sha256_bytes
from onnxformer.runtime.goldens import allowance
from onnxformer.runtime.manifest import FileEntry, GoldenCase, GoldenGraph, TensorSpec

logger = logging.getLogger(__name__)

GOLDEN_ATOL = 1e-5  # the fp32 target per graph
GOLDEN_RTOL = 1e-6  # per unit of the output's magnitude: ~8 fp32 epsilons (trained logits reach ~100)
GOLDEN_CASE_BYTES = 4 * 2**20  # inputs + outputs of one case; larger cases are proven at export, not kept
# A file whose ONNX Runtime outputs miss the target at export gets the first of these that holds, and a
# note in the manifest saying so; past the last one the export fails.
RAISED_ATOLS = (2e-5, 5e-5, 1e-4)
END_TO_END_FILE = "goldens/end_to_end.json"

TOKENIZER_TEXTS = (
    "Hello, world!",
    "the cat sees the dog .",
    "Punctuation: (a), [b], {c}; \"quoted\" & 'single' -- 50% off?! #tag @user ~/path",
    "  leading and trailing spaces\tand a tab\nand a newline  ",
    "日本語の文章です。東京で会いましょう。",
    "emoji 🙂🚀 and a family 👨‍👩‍👧 and skin tone 👍🏽",
    "",
    "a <mask> inside the text",
)


@dataclass
class RecordedCase:
    label: str
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]  # PyTorch
    diffs: dict[str, float]  # output -> max |ONNX Runtime - PyTorch|


@dataclass
class GoldenRecorder:
    """Collects the cases of one graph while its parity is measured (pass it as `record=`)."""

    wanted: set[str] | None = None  # case labels to keep; None keeps every case
    cases: list[RecordedCase] = field(default_factory=list)

    def __call__(
        self, label: str, inputs: dict[str, np.ndarray], expected: dict[str, np.ndarray], got: dict
    ) -> None:
        if self.wanted is not None and label not in self.wanted:
            return
        diffs = {
            name: float(np.max(np.abs(want - got[name]))) if want.size else 0.0
            for name, want in expected.items()
        }
        self.cases.append(RecordedCase(label, dict(inputs), dict(expected), diffs))

    def write(
        self, graph_file: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]
    ) -> tuple[dict[str, bytes], GoldenGraph]:
        """The .pb files (path -> bytes) and the manifest record of this graph's goldens."""
        if not self.cases:
            raise ParityError(f"{graph_file}: no golden case was recorded; the export is refused")
        stem = graph_file.removesuffix(".onnx")
        input_names = [spec.name for spec in inputs]
        output_names = [spec.name for spec in outputs]
        files: dict[str, bytes] = {}
        cases = []
        for index, case in enumerate(self._kept()):
            folder = f"goldens/{stem}/test_data_set_{index}"
            for kind, names, values in (
                ("input", input_names, case.inputs),
                ("output", output_names, case.expected),
            ):
                for i, name in enumerate(names):
                    array = np.ascontiguousarray(values[name])
                    files[f"{folder}/{kind}_{i}.pb"] = numpy_helper.from_array(
                        array, name
                    ).SerializeToString()
            cases.append(GoldenCase(folder, case.label, tuple(input_names), tuple(output_names)))
        atol, note = self._tolerance(graph_file)
        return files, GoldenGraph(graph_file, atol, GOLDEN_RTOL, tuple(cases), note)

    def _kept(self) -> list[RecordedCase]:
        """The cases written as goldens: those of at most GOLDEN_CASE_BYTES, and at least the smallest one.
        A real model's long cases (MiniLM's attention weights at 512 tokens: 150 MB) stay parity cases
        measured at export, not files every host has to ship."""
        sizes = [
            sum(array.nbytes for values in (case.inputs, case.expected) for array in values.values())
            for case in self.cases
        ]
        kept = [case for case, size in zip(self.cases, sizes, strict=True) if size <= GOLDEN_CASE_BYTES]
        return kept or [self.cases[sizes.index(min(sizes))]]

    def _tolerance(self, graph_file: str) -> tuple[float, str]:
        """The golden atol this file meets in ONNX Runtime here: the target, or a raised one with a note."""
        worst_excess, where = 0.0, ""
        for case in self.cases:
            for name, diff in case.diffs.items():
                excess = diff - allowance(case.expected[name], 0.0, GOLDEN_RTOL)  # the atol it needs
                if excess > worst_excess:
                    worst_excess, where = excess, f"{name} at {case.label}"
        if worst_excess <= GOLDEN_ATOL:
            return GOLDEN_ATOL, ""
        for atol in RAISED_ATOLS:
            if worst_excess <= atol:
                note = (
                    f"ONNX Runtime differs from PyTorch by {worst_excess:.2g} beyond the relative term on "
                    f"{where}, past the {GOLDEN_ATOL:g} target: fp32 sums in a different order"
                )
                logger.warning("%s: golden atol raised to %g (%s)", graph_file, atol, note)
                return atol, note
        raise ParityError(
            f"{graph_file}: ONNX Runtime differs from PyTorch by {worst_excess:.3g} on {where}, past every "
            f"golden tolerance up to {RAISED_ATOLS[-1]:g}; the export is refused"
        )


def block_golden_labels(cases: Sequence[Case]) -> set[str]:
    """Which parity cases of a block become goldens: batch 1 at length 1, batch > 1 (padded) at an odd
    short and a mid length, and batch 1 at the longest length; cached blocks both with and without a past."""
    past = max(case.past for case in cases)
    picks = [
        next((c for c in cases if c.batch == 1 and c.sequence == 1 and c.past == 0), None),
        next((c for c in cases if c.batch > 1 and c.sequence == 3 and c.past == past), None),
        next((c for c in cases if c.batch > 1 and c.sequence == 17 and c.past == 0), None),
        max((c for c in cases if c.batch == 1 and c.past == past), key=lambda c: c.sequence, default=None),
    ]
    return {case.label() for case in picks if case is not None}


def golden_entries(files: dict[str, bytes]) -> list[FileEntry]:
    """Manifest entries (kind "golden") for golden files, so hosts check their sha256 like any other."""
    return [
        FileEntry(path, sha256_bytes(data), len(data), "golden", {}, (), ()) for path, data in files.items()
    ]


@torch.no_grad()
def end_to_end(
    family: str,
    tokenizer: Tokenizer,
    family_goldens: Callable[[Callable[[str], list[int]]], dict[str, Any]],
) -> bytes:
    """goldens/end_to_end.json: token ids of `TOKENIZER_TEXTS` for every family, plus what the family's
    recipe adds (greedy generations, sentence embeddings), given a text -> ids function."""

    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids

    data: dict[str, Any] = {
        "family": family,
        "tokenizer": [{"text": text, "ids": ids(text)} for text in TOKENIZER_TEXTS],
        **family_goldens(ids),
    }
    return (json.dumps(data, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def greedy_record(
    prompt: str, fed: list[int], budget: int, stop: list[int], result, logits: torch.Tensor
) -> dict[str, Any]:
    """One greedy golden; `logits` (steps, V) are the model's at every decision, recomputed in one pass
    (a cached step equals the full recompute) to record how close the nearest call was."""
    top2 = torch.topk(logits.float(), 2, dim=-1).values  # (steps, 2)
    return {
        "prompt": prompt,
        "input_ids": fed,
        "max_new_tokens": budget,
        "stop_tokens": stop,
        "output_ids": list(result.tokens),
        "finish_reason": result.finish_reason,
        # The smallest gap between the chosen and the runner-up logit on the way: an engine whose logits
        # differ from PyTorch's by half of it or more may pick another token there.
        "min_logit_margin": float((top2[:, 0] - top2[:, 1]).min()),
    }
