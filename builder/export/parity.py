"""PyTorch vs ONNX Runtime on the same inputs: the proof that an exported graph computes the same thing.

One function for every graph (blocks and whole models): each case's inputs go through the PyTorch module
and the ONNX Runtime session; an output is accepted when max |ONNX Runtime - PyTorch| is within
`allowance(want, atol, rtol)` = atol + rtol * max |want| (onnxformer.runtime.goldens, the rule the hosts'
goldens use too). The first miss raises `ParityError`; the export is refused.
"""

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree
from torch import nn

from onnxformer.runtime.errors import ParityError
from onnxformer.runtime.goldens import allowance
from onnxformer.runtime.manifest import Parity
from onnxformer.runtime.session import Session

logger = logging.getLogger(__name__)

DEFAULT_TOLERANCE = 1e-5  # fp32 max abs difference for random-weight blocks, no rtol
MODEL_TOLERANCE = 1e-4  # fp32 max abs difference for full models...
# ...plus this much per unit of the output's magnitude. A trained model's logits reach |x| ~ 100-150, where
# one fp32 step is 1.5e-5: an absolute 1e-4 would leave room for only ~6 rounding steps after thousands of
# multiply-adds. 1e-6 relative is ~8 fp32 epsilons; it adds nothing for outputs of order 1.
MODEL_RTOL = 1e-6

Inputs = dict[str, Any]  # forward keyword -> tensor, or nested tuples of tensors (a KV cache)
Cases = Iterable[tuple[str, Inputs]]  # (label, inputs), none at the trace shapes
# (case label, inputs, PyTorch outputs, ONNX Runtime outputs), by name: how goldens are collected.
Record = Callable[[str, dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]], None]


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def magnitude(a: np.ndarray) -> float:
    """max |a| (0 for an empty array): the scale that the relative term of the allowance multiplies."""
    return float(np.max(np.abs(a))) if a.size else 0.0


def measure_parity(
    graph: str,
    module: nn.Module,
    session: Session,
    cases: Cases,
    *,
    input_names: Sequence[str],
    output_names: Sequence[str],
    tolerance: float,
    rtol: float = 0.0,
    record: Record | None = None,
) -> Parity:
    """Run every case through both; raise `ParityError` on the first output past its allowance.
    `input_names` name the flattened inputs (a KV cache flattens layer by layer); `record` sees every case
    that passed."""
    worst = dict.fromkeys(output_names, 0.0)
    largest = dict.fromkeys(output_names, 0.0)
    labels = []
    module.eval()
    for label, inputs in cases:
        with torch.no_grad():
            expected = module(**inputs)
        leaves = pytree.tree_leaves(inputs)
        feeds = {name: leaf.numpy() for name, leaf in zip(input_names, leaves, strict=True)}
        got = session.run(feeds)
        for name, want, have in zip(output_names, expected, got, strict=True):
            want = want.numpy()
            if want.shape != have.shape:
                raise ParityError(
                    f"{graph}: output {name} has shape {have.shape} in ONNX Runtime but {want.shape} "
                    f"in PyTorch at {label}"
                )
            diff = max_abs(want, have)
            allowed = allowance(want, tolerance, rtol)
            if not np.isfinite(diff) or diff > allowed:
                rule = f"tolerance {tolerance:g}"
                if rtol:
                    rule = f"allowed {allowed:.3g} = {tolerance:g} + {rtol:g} x {magnitude(want):.3g}"
                raise ParityError(
                    f"{graph}: output {name} differs from PyTorch by {diff:.3g} at {label} ({rule}); "
                    "the export is refused"
                )
            worst[name] = max(worst[name], diff)
            largest[name] = max(largest[name], magnitude(want))
        labels.append(label)
        if record is not None:
            record(
                label,
                feeds,
                {name: tensor.numpy() for name, tensor in zip(output_names, expected, strict=True)},
                dict(zip(output_names, got, strict=True)),
            )
    logger.info("%s parity over %d cases: %s", graph, len(labels), worst)
    return Parity(
        tolerance=tolerance,
        cases=len(labels),
        max_abs_diff=worst,
        shapes=tuple(labels),
        rtol=rtol,
        max_abs_value=largest,
    )
