"""Example inputs for tracing and for parity checks: block shapes from a spec's named axes, and the padded
attention masks every parity case uses (blocks and whole models).

Tracing uses sizes >= 2 on every dynamic axis (a size of 0 or 1 gets specialised into the graph). Block
parity runs at other sizes: lengths 1, 3, 17, 64 and a long 300, batch 1 and 4, past 0 and 5 for cached
graphs, with padding in every batched mask (left padding on odd rows, right padding on even rows).
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import torch

from onnxformer.builder.export.catalog import BlockDims, BlockSpec, InputSpec
from onnxformer.builder.export.parity import Inputs
from onnxformer.runtime.errors import ExportError

PARITY_LENGTHS = (1, 3, 17, 64, 300)
PARITY_BATCHES = (1, 4)
PARITY_PASTS = (0, 5)
PaddingSide = Literal["left", "right", "alternate"]


def padded_mask(batch: int, length: int, *, side: PaddingSide, step: int) -> torch.Tensor:
    """(B, L) int64 mask: row r has r * step padding positions (at most L - 1), on the left, the right, or
    alternately (odd rows left, even rows right); row 0 has none."""
    mask = torch.ones(batch, length, dtype=torch.int64)  # (B, L)
    for row in range(1, batch):
        padding = min(length - 1, row * step)
        if not padding:
            continue
        left = side == "left" or (side == "alternate" and row % 2 == 1)
        if left:
            mask[row, :padding] = 0
        else:
            mask[row, length - padding :] = 0
    return mask


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
            batch, length = size
            tensors[item.name] = padded_mask(batch, length, side="alternate", step=max(1, length // 4))
        elif item.kind == "positions":
            positions = torch.arange(case.past, case.past + size[1])  # (T,)
            tensors[item.name] = positions[None, :].expand(size[0], -1).contiguous()  # (B, T)
        else:
            tensors[item.name] = torch.randn(*size, generator=generator)
    return tensors


def block_cases(spec: BlockSpec, dims: BlockDims, *, seed: int) -> Iterator[tuple[str, Inputs]]:
    """(label, inputs) for every parity case of a block, the inputs drawn from one seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    for case in parity_cases(spec):
        yield case.label(), make_inputs(spec, dims, case, generator=generator)


def dim_names(spec: BlockSpec) -> dict[str, tuple[str | None, ...]]:
    """Input name -> axis names, None for an axis fixed by the configuration (d_model, heads, head width)."""
    fixed = BlockDims().fixed_sizes()
    return {
        item.name: tuple(d if isinstance(d, str) and d not in fixed else None for d in item.dims)
        for item in spec.inputs
    }
