"""Example inputs for tracing and for parity checks, built from a spec's named axes.

Tracing uses sizes >= 2 on every dynamic axis (a size of 0 or 1 gets specialised into the graph). Parity
runs at other sizes: lengths 1, 3, 17, 64 and a long 300, batch 1 and 4, past 0 and 5 for cached graphs,
with padding in every batched mask (left padding on odd rows, right padding on even rows).
"""

from dataclasses import dataclass

import torch

from onnxformer.builder.export.catalog import BlockDims, BlockSpec, InputSpec
from onnxformer.runtime.errors import ExportError

PARITY_LENGTHS = (1, 3, 17, 64, 300)
PARITY_BATCHES = (1, 4)
PARITY_PASTS = (0, 5)


@dataclass(frozen=True)
class Case:
    batch: int
    sequence: int
    past: int = 0
    memory: int = 0

    def sizes(self) -> dict[str, int]:
        return {
            "batch": self.batch,
            "sequence": self.sequence,
            "past_sequence": self.past,
            "total_sequence": self.past + self.sequence,
            "memory_sequence": self.memory,
        }

    def label(self) -> str:
        return f"B={self.batch} T={self.sequence} P={self.past} S={self.memory}"


TRACE_CASE = Case(batch=2, sequence=5, past=3, memory=6)


def parity_cases(spec: BlockSpec) -> list[Case]:
    """The validation shapes for a spec; none equals the trace shape."""
    cases = []
    for length in PARITY_LENGTHS:
        for batch in PARITY_BATCHES:
            for past in PARITY_PASTS if spec.cached else (0,):
                if spec.max_positions is not None and past + length > spec.max_positions:
                    continue
                cases.append(Case(batch, length, past, memory=length // 2 + 4))
    return cases


def _mask(batch: int, length: int) -> torch.Tensor:
    mask = torch.ones(batch, length, dtype=torch.int64)  # (B, L)
    for row in range(1, batch):
        padding = min(length - 1, row * max(1, length // 4))
        if padding:
            if row % 2:
                mask[row, :padding] = 0  # left padding
            else:
                mask[row, length - padding :] = 0  # right padding
    return mask


def make_inputs(
    spec: BlockSpec, dims: BlockDims, case: Case, *, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """Input name -> tensor for one case, in the spec's input order."""
    sizes = {**case.sizes(), **dims.fixed_sizes()}

    def shape(item: InputSpec) -> list[int]:
        try:
            return [d if isinstance(d, int) else sizes[d] for d in item.dims]
        except KeyError as error:
            raise ExportError(f"{spec.name}: input {item.name} uses unknown axis {error}") from None

    tensors = {}
    for item in spec.inputs:
        size = shape(item)
        if item.kind == "mask":
            tensors[item.name] = _mask(*size)
        elif item.kind == "positions":
            positions = torch.arange(case.past, case.past + size[1])  # (T,)
            tensors[item.name] = positions[None, :].expand(size[0], -1).contiguous()  # (B, T)
        else:
            tensors[item.name] = torch.randn(*size, generator=generator)
    return tensors


def dynamic_axes(spec: BlockSpec) -> dict[str, dict[int, str]]:
    """Input name -> {axis: name} for every named axis that is not fixed by the configuration."""
    fixed = BlockDims().fixed_sizes()
    return {
        item.name: {i: d for i, d in enumerate(item.dims) if isinstance(d, str) and d not in fixed}
        for item in spec.inputs
    }
