"""One graph from module to manifest entry, the same way for a block and for a whole model:

trace (dynamo, onnx.checker) -> load in ONNX Runtime -> parity against PyTorch at shapes other than
the trace shapes -> goldens (the chosen parity cases) -> manifest entry (sha256, IO specs, parity)

exported = export_one(spec, module, opset=18)
exported.files    # path -> bytes: the graph and its goldens
exported.entries  # their manifest entries
exported.goldens  # the graph's record in the manifest's goldens section
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from onnxformer.builder.export.external import (
    EXTERNAL_THRESHOLD,
    check_graph_with_weights,
    graph_bytes,
    move_weights_out,
    weights_entry,
    weights_path,
)
from onnxformer.builder.export.goldens import GoldenRecorder, golden_entries
from onnxformer.builder.export.graph import DEFAULT_OPSET, check_graph, export_graph, io_specs
from onnxformer.builder.export.parity import Cases, ParityRule, measure_parity
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.folder import GraphBytes, sha256_bytes
from onnxformer.runtime.manifest import FileEntry, GoldenGraph, Parity
from onnxformer.runtime.session import create_session

AxisNames = dict[str, tuple[str | None, ...]]  # flattened graph input -> its axes' names (None = fixed)


@dataclass(frozen=True)
class GraphSpec:
    """What the pipeline needs to export one graph and prove it."""

    filename: str  # path inside the export folder
    kind: str  # the manifest entry's kind: a block kind, or a model graph's role
    options: dict[str, Any]  # the manifest entry's options
    example: dict[str, Any]  # forward kwargs at the trace sizes (>= 2 on every dynamic axis)
    dim_names: AxisNames  # in the order the example flattens
    output_names: tuple[str, ...]
    cases: Callable[[], Cases]  # parity cases, none at the trace sizes
    golden_labels: frozenset[str] | None = None  # the cases kept as goldens; None keeps every case
    metadata: dict[str, object] = field(default_factory=dict)  # ONNX metadata_props


@dataclass(frozen=True)
class Exported:
    files: dict[str, bytes]  # the graph and its golden files
    entries: list[FileEntry]  # the graph's entry first, then its goldens'
    goldens: GoldenGraph


def export_one(
    spec: GraphSpec,
    module: nn.Module,
    *,
    opset: int = DEFAULT_OPSET,
    rule: ParityRule = ParityRule(),  # noqa: B008 (frozen)
    external_data: bool | None = None,
) -> Exported:
    """Export `module` as `spec` describes and prove it; a parity miss raises `ParityError`.

    `external_data` (see builder/export/external.py): None moves the weights into `<graph>.data` only
    when the graph would pass protobuf's 2 GB limit, True always, False never. The weights move before the
    graph is serialised, and ONNX Runtime runs the parity cases on the graph as the runtime will load it."""
    module.eval()
    model = export_graph(
        module,
        spec.example,
        output_names=list(spec.output_names),
        dim_names=spec.dim_names,
        opset=opset,
        metadata=spec.metadata,
        check=False,
    )
    if model.ByteSize() < EXTERNAL_THRESHOLD:
        check_graph(model)  # in memory, before any weights move (the checker would look for their file)
        weights = move_weights_out(model, spec.filename, external_data)
    else:
        weights = move_weights_out(model, spec.filename, external_data)
        check_graph_with_weights(model, spec.filename, weights)
    data = model.SerializeToString()
    try:
        session = create_session(graph_bytes(data, weights), device="cpu")
    except Exception as error:
        raise ExportError(f"{spec.filename}: ONNX Runtime cannot load the exported graph: {error}") from error
    recorder = GoldenRecorder(None if spec.golden_labels is None else set(spec.golden_labels))
    parity = measure_parity(
        spec.filename,
        module,
        session,
        spec.cases(),
        input_names=list(spec.dim_names),
        output_names=spec.output_names,
        rule=rule,
        record=recorder,
    )
    inputs, outputs = io_specs(model)
    golden_files, golden_graph = recorder.write(spec.filename, inputs, outputs)
    entry = FileEntry(
        path=spec.filename,
        sha256=sha256_bytes(data),
        size=len(data),
        kind=spec.kind,
        options=spec.options,
        inputs=inputs,
        outputs=outputs,
        parity=parity,
    )
    files = {spec.filename: data, **golden_files}
    listed = [entry]
    if weights:
        files[weights_path(spec.filename)] = weights
        listed.append(weights_entry(spec.filename, weights))
    return Exported(files, [*listed, *golden_entries(golden_files)], golden_graph)


def reprove(
    spec: GraphSpec,
    module: nn.Module,
    data: bytes | GraphBytes,
    *,
    rule: ParityRule = ParityRule(),  # noqa: B008 (frozen)
) -> Parity:
    """Parity of an already exported graph (its bytes, or them with its external tensors) against `module`,
    on the spec's cases."""
    session = create_session(data, device="cpu")
    return measure_parity(
        spec.filename,
        module.eval(),
        session,
        spec.cases(),
        input_names=list(spec.dim_names),
        output_names=spec.output_names,
        rule=rule,
    )
