"""PyTorch vs ONNX Runtime on the same inputs: the proof that an exported graph computes the same thing."""

import logging
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from onnxformer.builder.export.catalog import BlockDims, BlockSpec
from onnxformer.builder.export.samples import Case, make_inputs
from onnxformer.runtime.errors import ParityError
from onnxformer.runtime.manifest import Parity
from onnxformer.runtime.session import Session

logger = logging.getLogger(__name__)

DEFAULT_TOLERANCE = 1e-5  # fp32 max abs difference, no rtol
# (case label, inputs, PyTorch outputs, ONNX Runtime outputs), by name: how goldens are collected.
Record = Callable[[str, dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]], None]


def measure_parity(
    spec: BlockSpec,
    module: nn.Module,
    session: Session,
    cases: Sequence[Case],
    *,
    dims: BlockDims,
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = 0,
    record: Record | None = None,
) -> Parity:
    """Run every case through both; raise `ParityError` on the first output past `tolerance`.
    `record` sees every case that passed."""
    generator = torch.Generator().manual_seed(seed)
    worst: dict[str, float] = dict.fromkeys(spec.outputs, 0.0)
    largest: dict[str, float] = dict.fromkeys(spec.outputs, 0.0)
    module.eval()
    for case in cases:
        inputs = make_inputs(spec, dims, case, generator=generator)
        with torch.no_grad():
            expected = module(**inputs)
        feeds = {name: tensor.numpy() for name, tensor in inputs.items()}
        got = session.run(feeds)
        for name, want, have in zip(spec.outputs, expected, got, strict=True):
            want = want.numpy()
            if want.shape != have.shape:
                raise ParityError(
                    f"{spec.name}: output {name} has shape {have.shape} in ONNX Runtime but {want.shape} "
                    f"in PyTorch at {case.label()}"
                )
            diff = float(np.max(np.abs(want - have))) if want.size else 0.0
            if not np.isfinite(diff) or diff > tolerance:
                raise ParityError(
                    f"{spec.name}: output {name} differs from PyTorch by {diff:.3g} at {case.label()} "
                    f"(tolerance {tolerance:g}); the export is refused"
                )
            worst[name] = max(worst[name], diff)
            largest[name] = max(largest[name], float(np.max(np.abs(want))) if want.size else 0.0)
        if record is not None:
            names = list(spec.outputs)
            record(
                case.label(),
                feeds,
                {name: tensor.numpy() for name, tensor in zip(names, expected, strict=True)},
                dict(zip(names, got, strict=True)),
            )
    logger.info("%s parity over %d cases: %s", spec.name, len(cases), worst)
    return Parity(
        tolerance=tolerance,
        cases=len(cases),
        max_abs_diff=worst,
        shapes=tuple(case.label() for case in cases),
        max_abs_value=largest,
    )
