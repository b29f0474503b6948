"""Per-block export: every block of the catalogue to its own ONNX file, proven equal to PyTorch.

    export_blocks("runs/blocks")  # writes <block>.onnx files + manifest.json, or raises

Each graph goes through the one pipeline (`pipeline.export_one`): traced at sizes >= 2, checked with
onnx.checker (full check), loaded in ONNX Runtime (CPU), and compared with PyTorch at other sizes (see
samples.parity_cases). A difference past the tolerance raises `ParityError` and nothing is written.
"""

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from onnxformer.builder.export.catalog import BlockDims, BlockSpec, block_catalog
from onnxformer.builder.export.folder import write_export_folder
from onnxformer.builder.export.goldens import block_golden_labels
from onnxformer.builder.export.graph import DEFAULT_OPSET, check_opset
from onnxformer.builder.export.parity import ParityRule
from onnxformer.builder.export.pipeline import Exported, GraphSpec, export_one
from onnxformer.builder.export.samples import TRACE_CASE, block_cases, dim_names, make_inputs, parity_cases
from onnxformer.builder.layers import RMSNorm
from onnxformer.builder.versions import tool_versions
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.manifest import FileEntry, Goldens, Manifest

logger = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]  # (block name, index, total), called before each block


def select_blocks(names: Sequence[str] | None = None) -> list[BlockSpec]:
    """The catalogue, or the named blocks of it (unknown names raise `ExportError`)."""
    catalog = block_catalog()
    if names is None:
        return catalog
    by_name = {spec.name: spec for spec in catalog}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise ExportError(f"unknown block(s) {unknown}; choose from {sorted(by_name)}")
    return [by_name[name] for name in names]


def build_block(
    spec: BlockSpec,
    *,
    dims: BlockDims = BlockDims(),  # noqa: B008 - frozen dataclass, immutable default
    seed: int = 0,
) -> torch.nn.Module:
    """The PyTorch module behind a block export, with the same random weights for the same seed."""
    torch.manual_seed(seed)
    module = spec.build(dims).eval()
    _randomise_norms(module, seed)
    return module


def block_graph(
    spec: BlockSpec,
    *,
    dims: BlockDims = BlockDims(),  # noqa: B008 - frozen dataclass, immutable default
    opset: int = DEFAULT_OPSET,
    seed: int = 0,
    metadata: dict[str, object] | None = None,
) -> GraphSpec:
    """The pipeline's description of a block's graph: trace inputs, axes, parity cases, goldens kept."""
    return GraphSpec(
        filename=spec.filename,
        kind=spec.kind,
        options={**spec.options, **dims.fixed_sizes(), "opset": opset},
        example=make_inputs(spec, dims, TRACE_CASE, generator=torch.Generator().manual_seed(seed)),
        dim_names=dim_names(spec),
        output_names=spec.outputs,
        cases=lambda: block_cases(spec, dims, seed=seed + 1),
        golden_labels=frozenset(block_golden_labels(parity_cases(spec))),
        metadata={"onnxformer.kind": spec.kind, "onnxformer.options": spec.options, **(metadata or {})},
    )


def export_block_with_goldens(
    spec: BlockSpec,
    *,
    dims: BlockDims = BlockDims(),  # noqa: B008 - frozen dataclass, immutable default
    module: torch.nn.Module | None = None,
    opset: int = DEFAULT_OPSET,
    rule: ParityRule = ParityRule(),  # noqa: B008 (frozen)
    seed: int = 0,
    metadata: dict[str, object] | None = None,
) -> Exported:
    """Export one block and prove it: its graph, goldens and manifest entries.

    Without `module` the block is built with random weights (`build_block`); a trained model's own block
    comes in as `module` and is exported as it is."""
    if module is None:
        module = build_block(spec, dims=dims, seed=seed)
    graph = block_graph(spec, dims=dims, opset=opset, seed=seed, metadata=metadata)
    return export_one(graph, module, opset=opset, rule=rule)


def export_block(spec: BlockSpec, **options) -> tuple[bytes, FileEntry]:
    """`export_block_with_goldens` without the goldens: the graph's bytes and its manifest entry."""
    exported = export_block_with_goldens(spec, **options)
    entry = exported.entries[0]
    return exported.files[entry.path], entry


def export_blocks(
    out: str | os.PathLike,
    *,
    names: Sequence[str] | None = None,
    dims: BlockDims = BlockDims(),  # noqa: B008 - frozen dataclass, immutable default
    opset: int = DEFAULT_OPSET,
    rule: ParityRule = ParityRule(),  # noqa: B008 (frozen)
    seed: int = 0,
    progress: Progress | None = None,
) -> Manifest:
    """Export the blocks (all by default) to `out` with their manifest; atomic, fatal on a parity miss."""
    check_opset(opset)
    specs = select_blocks(names)
    files: dict[str, bytes] = {}
    entries = []
    graphs = []
    for index, spec in enumerate(specs):
        if progress is not None:
            progress(spec.name, index, len(specs))
        exported = export_block_with_goldens(spec, dims=dims, opset=opset, rule=rule, seed=seed)
        files |= exported.files
        entries += exported.entries
        graphs.append(exported.goldens)
    manifest = Manifest(
        export_kind="blocks",
        opset=opset,
        versions=tool_versions(),
        files=tuple(entries),
        extra={"seed": seed},
        goldens=Goldens(tuple(graphs)),
    )
    write_export_folder(Path(out), files, manifest)
    return manifest


def _randomise_norms(module: torch.nn.Module, seed: int) -> None:
    """Norms start as the identity (weight 1, bias 0); perturb them so parity sees a real affine map."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, torch.nn.LayerNorm):
                sub.weight.copy_(1 + 0.1 * torch.randn(sub.weight.shape, generator=generator))
                sub.bias.copy_(0.1 * torch.randn(sub.bias.shape, generator=generator))
            elif isinstance(sub, RMSNorm):
                sub.weight.copy_(1 + 0.1 * torch.randn(sub.weight.shape, generator=generator))
