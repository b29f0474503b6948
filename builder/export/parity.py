"""PyTorch vs ONNX Runtime on the same inputs: the proof that an exported graph computes the same thing.

One function for every graph (blocks and whole models). The reference is exact: each case runs through
the PyTorch module twice, as exported (float32) and with its weights and inputs widened to float64, which
is the exact answer to within 1e-16. For every output, ONNX Runtime's distance to the float64 answer is
held to a small multiple of PyTorch float32's own distance to it (PyTorch is the implementation the model
was trained and checked with, so fp32 rounding of that size is what the model is), plus a floor of a few
fp32 steps at the output's magnitude for outputs that fp32 computes exactly:

    max |ONNX Runtime - float64| <= factor x max |PyTorch fp32 - float64| + floor x max |float64 output|

per output, each max taken over every element of every case. Over the cases, not case by case: the
largest rounding error of one case is a noisy figure (a near-tie in a softmax or a ReLU at its kink
magnifies whichever rounding falls there), and either implementation can have the larger one. A Hugging
Face T5 with weights 10x its init has a case where ONNX Runtime is 22x PyTorch's error and another where
PyTorch is 9x ONNX Runtime's; over all cases of that output ONNX Runtime is 0.8x PyTorch. A wrong graph
is wrong in every case it touches, by orders of magnitude.

A fixed absolute tolerance cannot do this: the error of a correct graph grows with the size of the
activations (a trained checkpoint's are 10x a default init's), while a wrong graph on
small outputs can stay under any absolute bound. A wrong eps, rope base or scale is wrong at the level of
the formula, orders of magnitude past the rounding of fp32 (tests/test_parity_rule.py).

An output past its allowance raises `ParityError`; the export is refused. The figures go into the
manifest's `Parity`.
"""

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree
from torch import nn

from onnxformer.runtime.errors import ParityError
from onnxformer.runtime.manifest import Parity
from onnxformer.runtime.session import Session

logger = logging.getLogger(__name__)

# ONNX Runtime may be this many times further from the float64 answer than PyTorch fp32 is. Measured over
# every family, imported architecture and block at weights 1x, 10x and 100x a default init
# (docs/goldens.md): ONNX Runtime's error is 0.3x to 1.6x PyTorch's up to 10x, and 9.3x on a GPT-2 at
# 100x (residual activations of 5e3, as real GPT-2 checkpoints have: its kernels round differently
# there). A wrong graph misses by 1e2 to 1e5 times its allowance (tests/test_parity_rule.py).
PARITY_FACTOR = 16.0
# ...plus this share of the output's largest magnitude: 4 fp32 steps (2^-23 each), for outputs PyTorch fp32
# gets exactly (a cache copied through, a one-hot mask) where any other rounding would read as a miss.
PARITY_FLOOR = 4 * 2.0**-23


@dataclass(frozen=True)
class ParityRule:
    """max |ONNX Runtime - float64| <= factor x max |PyTorch fp32 - float64| + floor x max |float64|, per
    output over its cases."""

    factor: float = PARITY_FACTOR
    floor: float = PARITY_FLOOR

    def allowance(self, torch_error: float, scale: float) -> float:
        return self.factor * torch_error + self.floor * scale


@dataclass(frozen=True)
class MeasuredCase:
    """One parity case as measured: what the goldens are written from (builder/export/goldens.py)."""

    label: str
    inputs: dict[str, np.ndarray]  # graph input name -> the array fed
    exact: dict[str, np.ndarray]  # output name -> the float64 answer, rounded to the output's fp32
    error: dict[str, float]  # output name -> max |ONNX Runtime - float64|
    torch_error: dict[str, float]  # output name -> max |PyTorch fp32 - float64|


Inputs = dict[str, Any]  # forward keyword -> tensor, or nested tuples of tensors (a KV cache)
Cases = Iterable[tuple[str, Inputs]]  # (label, inputs), none at the trace shapes
Record = Callable[[MeasuredCase], None]  # sees every case that passed: how goldens are collected


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    if not a.size:
        return 0.0
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def magnitude(a: np.ndarray) -> float:
    """max |a| (0 for an empty array)."""
    return float(np.max(np.abs(a))) if a.size else 0.0


@contextmanager
def float64(module: nn.Module) -> Iterator[nn.Module]:
    """The module with its floating-point weights and buffers widened to float64, narrowed back after.
    Widening an fp32 value is exact and so is narrowing it back: the weights come out bit for bit."""
    module.double()
    try:
        yield module
    finally:
        module.float()


def _widen(inputs: Inputs) -> Inputs:
    return pytree.tree_map(lambda leaf: leaf.double() if leaf.is_floating_point() else leaf, inputs)


def _outputs(module: nn.Module, inputs: Inputs) -> list[np.ndarray]:
    with torch.no_grad():
        return [tensor.numpy() for tensor in module(**inputs)]


def measure_parity(
    graph: str,
    module: nn.Module,
    session: Session,
    cases: Cases,
    *,
    input_names: Sequence[str],
    output_names: Sequence[str],
    rule: ParityRule = ParityRule(),
    record: Record | None = None,
) -> Parity:
    """Run every case through ONNX Runtime and PyTorch (fp32 and float64); raise `ParityError` when an
    output is past its allowance over the cases (or is not finite, or has another shape, in any case).
    `input_names` name the flattened inputs (a KV cache flattens layer by layer); `record` sees every
    case, before the verdict."""
    names = list(output_names)
    diff = dict.fromkeys(names, 0.0)
    largest = dict.fromkeys(names, 0.0)
    error = dict.fromkeys(names, 0.0)
    torch_error = dict.fromkeys(names, 0.0)
    worst_case = dict.fromkeys(names, "")
    labels = []
    module.eval()
    for label, inputs in cases:
        expected = _outputs(module, inputs)
        with float64(module):
            exact = _outputs(module, _widen(inputs))
        leaves = pytree.tree_leaves(inputs)
        feeds = {name: leaf.numpy() for name, leaf in zip(input_names, leaves, strict=True)}
        got = session.run(feeds)
        measured = MeasuredCase(label, feeds, {}, {}, {})
        for name, want, truth, have in zip(names, expected, exact, got, strict=True):
            if want.shape != have.shape:
                raise ParityError(
                    f"{graph}: output {name} has shape {have.shape} in ONNX Runtime but {want.shape} "
                    f"in PyTorch at {label}"
                )
            if not np.all(np.isfinite(truth)) or not np.all(np.isfinite(want)):
                raise ParityError(
                    f"{graph}: PyTorch's {name} is not finite at {label} (float32 or float64): the model "
                    "overflows on these inputs, so no export of it can be checked; look at the weights' scale"
                )
            off, torch_off = max_abs(have, truth), max_abs(want, truth)
            if not np.isfinite(off):
                raise ParityError(
                    f"{graph}: ONNX Runtime's {name} is not finite at {label}, where PyTorch's is; the "
                    "export is refused"
                )
            diff[name] = max(diff[name], max_abs(have, want))
            largest[name] = max(largest[name], magnitude(want))
            if off > error[name] or not worst_case[name]:
                worst_case[name] = label
            error[name] = max(error[name], off)
            torch_error[name] = max(torch_error[name], torch_off)
            measured.exact[name] = truth.astype(want.dtype)
            measured.error[name] = off
            measured.torch_error[name] = torch_off
        labels.append(label)
        if record is not None:
            record(measured)
    used = {}
    for name in names:
        allowed = rule.allowance(torch_error[name], largest[name])
        if error[name] > allowed:
            raise ParityError(
                f"{graph}: output {name} is {error[name]:.3g} from the float64 answer (at "
                f"{worst_case[name]}), where PyTorch float32 is at most {torch_error[name]:.3g} from it "
                f"over the {len(labels)} cases (allowed {allowed:.3g} = {rule.factor:g} x "
                f"{torch_error[name]:.3g} + {rule.floor:.2g} x max |{name}| {largest[name]:.3g}); the "
                "export is refused"
            )
        used[name] = error[name] / allowed if allowed else 0.0
    logger.info("%s parity over %d cases: error %s, PyTorch fp32 %s", graph, len(labels), error, torch_error)
    return Parity(
        tolerance=0.0,
        cases=len(labels),
        max_abs_diff=diff,
        shapes=tuple(labels),
        max_abs_value=largest,
        reference="float64",
        factor=rule.factor,
        floor=rule.floor,
        error=error,
        torch_error=torch_error,
        used=used,
    )
