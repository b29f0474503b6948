"""Per-block export: every block of the catalogue to its own ONNX file, proven equal to PyTorch.

    export_blocks("runs/blocks")  # writes <block>.onnx files + manifest.json, or raises

Each graph is traced at sizes >= 2, checked with onnx.checker (full check), loaded in ONNX Runtime (CPU),
and compared with PyTorch at other sizes (see samples.parity_cases). A difference past the tolerance
raises `ParityError` and nothing is written.
"""

import importlib.metadata
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from onnxformer.builder.export.catalog import BlockDims, BlockSpec, block_catalog
from onnxformer.builder.export.folder import write_export_folder
from onnxformer.builder.export.goldens import GoldenRecorder, block_golden_labels, golden_entries
from onnxformer.builder.export.graph import DEFAULT_OPSET, check_opset, export_graph, io_specs
from onnxformer.builder.export.parity import DEFAULT_TOLERANCE, Record, measure_parity
from onnxformer.builder.export.samples import TRACE_CASE, dynamic_axes, make_inputs, parity_cases
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.folder import sha256_bytes
from onnxformer.runtime.manifest import FileEntry, GoldenGraph, Goldens, Manifest
from onnxformer.runtime.session import create_session

logger = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]  # (block name, index, total), called before each block


def tool_versions() -> dict[str, str]:
    versions = {}
    for package in ("onnxformer", "torch", "onnx", "onnxscript", "onnxruntime", "onnxruntime-gpu"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


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


def export_block(
    spec: BlockSpec,
    *,
    dims: BlockDims = BlockDims(),  # noqa: B008 - frozen dataclass, immutable default
    module: torch.nn.Module | None = None,
    opset: int = DEFAULT_OPSET,
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = 0,
    metadata: dict[str, object] | None = None,
    record: Record | None = None,
) -> tuple[bytes, FileEntry]:
    """Export one block and prove it; return the file's bytes and its manifest entry.

    Without `module` the block is built with random weights (`build_block`); a trained model's own block
    comes in as `module` and is exported as it is. `record` sees every parity case (see `goldens`).
    """
    if module is None:
        module = build_block(spec, dims=dims, seed=seed)
    example = make_inputs(spec, dims, TRACE_CASE, generator=torch.Generator().manual_seed(seed))
    model = export_graph(
        module,
        example,
        output_names=list(spec.outputs),
        dynamic_axes=dynamic_axes(spec),
        opset=opset,
        metadata={"onnxformer.kind": spec.kind, "onnxformer.options": spec.options, **(metadata or {})},
    )
    data = model.SerializeToString()
    try:
        session = create_session(data, device="cpu")
    except Exception as error:
        raise ExportError(f"{spec.name}: ONNX Runtime cannot load the exported graph: {error}") from error
    parity = measure_parity(
        spec,
        module,
        session,
        parity_cases(spec),
        dims=dims,
        tolerance=tolerance,
        seed=seed + 1,
        record=record,
    )
    inputs, outputs = io_specs(model)
    entry = FileEntry(
        path=spec.filename,
        sha256=sha256_bytes(data),
        size=len(data),
        kind=spec.kind,
        options={**spec.options, **dims.fixed_sizes(), "opset": opset},
        inputs=inputs,
        outputs=outputs,
        parity=parity,
    )
    return data, entry


def export_block_with_goldens(
    spec: BlockSpec, **options
) -> tuple[dict[str, bytes], list[FileEntry], GoldenGraph]:
    """`export_block` plus its golden cases: (path -> bytes of the graph and its goldens, their manifest
    entries, the goldens' manifest record)."""
    recorder = GoldenRecorder(block_golden_labels(parity_cases(spec)))
    data, entry = export_block(spec, record=recorder, **options)
    golden_files, graph = recorder.write(entry.path, entry.inputs, entry.outputs)
    return {entry.path: data, **golden_files}, [entry, *golden_entries(golden_files)], graph


def export_blocks(
    out: str | os.PathLike,
    *,
    names: Sequence[str] | None = None,
    dims: BlockDims = BlockDims(),  # noqa: B008 - frozen dataclass, immutable default
    opset: int = DEFAULT_OPSET,
    tolerance: float = DEFAULT_TOLERANCE,
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
        block_files, block_entries, graph = export_block_with_goldens(
            spec, dims=dims, opset=opset, tolerance=tolerance, seed=seed
        )
        files |= block_files
        entries += block_entries
        graphs.append(graph)
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
    """LayerNorm starts as the identity (weight 1, bias 0); perturb it so parity sees a real affine map."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, torch.nn.LayerNorm):
                sub.weight.copy_(1 + 0.1 * torch.randn(sub.weight.shape, generator=generator))
                sub.bias.copy_(0.1 * torch.randn(sub.bias.shape, generator=generator))
