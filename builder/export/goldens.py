"""Golden test data for an export folder, written from PyTorch at export time (format: docs/goldens.md).

Graph goldens are the parity cases themselves: while parity runs, a `GoldenRecorder` keeps the inputs
and the exact (float64) outputs of the chosen cases, with how far ONNX Runtime and PyTorch fp32 were from
them, and writes them in the ONNX backend test-data layout
(`goldens/<graph>/test_data_set_N/input_i.pb`, `output_i.pb`).
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

from onnxformer.builder.export.parity import MeasuredCase
from onnxformer.builder.export.samples import Case
from onnxformer.runtime.errors import ParityError
from onnxformer.runtime.folder import sha256_bytes
from onnxformer.runtime.manifest import FileEntry, GoldenCase, GoldenGraph, TensorSpec

logger = logging.getLogger(__name__)

GOLDEN_CASE_BYTES = 4 * 2**20  # inputs + outputs of one case; larger cases are proven at export, not kept
# A golden output (the float64 answer, rounded to fp32) allows another engine GOLDEN_MARGIN times the
# larger of ONNX Runtime's and PyTorch fp32's largest distance to the float64 answer over the graph's cases
# (the rounding noise of that output, as parity measures it), plus GOLDEN_FLOOR x the case's largest
# magnitude: room for other kernels (another ONNX Runtime version, wasm, WebGPU, tract) that round in
# another order, and whose worst case may be another case than ONNX Runtime's.
# Measured on every host (docs/goldens.md): the worst engine used 0.14 of it on the reference exports.
GOLDEN_MARGIN = 8.0
GOLDEN_FLOOR = 16 * 2.0**-23
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


def golden_allowance(error: float, torch_error: float, scale: float) -> float:
    """What a host may differ from a golden output by, from the float64 figures measured at export."""
    return float(f"{GOLDEN_MARGIN * max(error, torch_error) + GOLDEN_FLOOR * scale:.2e}")


def _round_up(value: float) -> float:
    """`value` to three digits, never below it (the graph-level bounds must cover every allowance)."""
    return float(f"{value * 1.01:.2e}")


@dataclass
class GoldenRecorder:
    """Collects the cases of one graph while its parity is measured (pass it as `record=`)."""

    wanted: set[str] | None = None  # case labels to keep; None keeps every case
    cases: list[MeasuredCase] = field(default_factory=list)
    # output name -> the largest distance to the float64 answer over every case measured (kept or not):
    # ONNX Runtime's and PyTorch fp32's
    error: dict[str, float] = field(default_factory=dict)
    torch_error: dict[str, float] = field(default_factory=dict)

    def __call__(self, case: MeasuredCase) -> None:
        for name, off in case.error.items():
            self.error[name] = max(self.error.get(name, 0.0), off)
            self.torch_error[name] = max(self.torch_error.get(name, 0.0), case.torch_error[name])
        if self.wanted is None or case.label in self.wanted:
            self.cases.append(case)

    def write(
        self, graph_file: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]
    ) -> tuple[dict[str, bytes], GoldenGraph]:
        """The .pb files (path -> bytes) and the manifest record of this graph's goldens: the float64
        answers, each output with its own allowance; the graph's atol and rtol cover every allowance
        for a host that reads only those (they are at least as wide)."""
        if not self.cases:
            raise ParityError(f"{graph_file}: no golden case was recorded; the export is refused")
        stem = graph_file.removesuffix(".onnx")
        input_names = [spec.name for spec in inputs]
        output_names = [spec.name for spec in outputs]
        files: dict[str, bytes] = {}
        cases = []
        atol = rtol = 0.0
        for index, case in enumerate(self._kept()):
            folder = f"goldens/{stem}/test_data_set_{index}"
            for kind, names, values in (
                ("input", input_names, case.inputs),
                ("output", output_names, case.exact),
            ):
                for i, name in enumerate(names):
                    array = np.ascontiguousarray(values[name])
                    files[f"{folder}/{kind}_{i}.pb"] = numpy_helper.from_array(
                        array, name
                    ).SerializeToString()
            allowed = []
            for name in output_names:
                scale = float(np.max(np.abs(case.exact[name]))) if case.exact[name].size else 0.0
                allowed.append(golden_allowance(self.error[name], self.torch_error[name], scale))
                if scale > 0:
                    rtol = max(rtol, allowed[-1] / scale)
                else:
                    atol = max(atol, allowed[-1])
            cases.append(
                GoldenCase(folder, case.label, tuple(input_names), tuple(output_names), tuple(allowed))
            )
        return files, GoldenGraph(graph_file, _round_up(atol), _round_up(rtol), tuple(cases))

    def _kept(self) -> list[MeasuredCase]:
        """The cases written as goldens: those of at most GOLDEN_CASE_BYTES, and at least the smallest one.
        A real model's long cases (MiniLM's attention weights at 512 tokens: 150 MB) stay parity cases
        measured at export, not files every host has to ship."""
        sizes = [
            sum(array.nbytes for values in (case.inputs, case.exact) for array in values.values())
            for case in self.cases
        ]
        kept = [case for case, size in zip(self.cases, sizes, strict=True) if size <= GOLDEN_CASE_BYTES]
        return kept or [self.cases[sizes.index(min(sizes))]]


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
