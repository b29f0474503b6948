"""One module to one ONNX graph with the dynamo exporter, checked by onnx.checker and ONNX Runtime."""

import contextlib
import io
import json
import logging
import re
import warnings
from collections.abc import Iterator
from typing import Any

import onnx
import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.export import Dim

from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.manifest import FORMAT_VERSION, TensorSpec

DEFAULT_OPSET = 18
MIN_OPSET, MAX_OPSET = 17, 23  # what the dynamo exporter and current ONNX Runtime builds both cover

_DTYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.BOOL: "bool",
}


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporter logs and warns about things irrelevant to our graphs (torchvision ops, ...)."""
    loggers = [
        logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def check_opset(opset: int) -> None:
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ExportError(f"opset must be an integer from {MIN_OPSET} to {MAX_OPSET}, got {opset!r}")


def export_graph(
    module: nn.Module,
    example: dict[str, Any],
    *,
    output_names: list[str],
    dim_names: dict[str, tuple[str | None, ...]],
    opset: int = DEFAULT_OPSET,
    metadata: dict[str, object] | None = None,
    check: bool = True,
) -> onnx.ModelProto:
    """Trace `module` on `example` (sizes >= 2 on dynamic axes) and return a ModelProto, checked by
    onnx.checker unless `check=False` (the pipeline checks after moving large weights out).

    `example` maps the module's forward parameter names to inputs: tensors, or nested tuples of tensors (a
    KV cache). `dim_names` maps each flattened graph input name, in order, to its axis names (None = fixed
    size); the graph's symbolic dims are renamed to those names afterwards.
    """
    check_opset(opset)
    module.eval()
    leaves, structure = pytree.tree_flatten(example)
    if len(leaves) != len(dim_names):
        raise ExportError(f"dim_names names {len(dim_names)} inputs, the example has {len(leaves)}")
    specs = [{axis: Dim.AUTO for axis, name in enumerate(names) if name} for names in dim_names.values()]
    options = {"input_names": list(dim_names), "dynamic_shapes": pytree.tree_unflatten(specs, structure)}
    try:
        with _quiet(), torch.no_grad():
            program = torch.onnx.export(
                module,
                (),
                kwargs=example,
                output_names=output_names,
                opset_version=opset,
                dynamo=True,
                external_data=False,
                verbose=False,
                **options,
            )
    except Exception as error:
        raise ExportError(
            f"torch.onnx.export failed for {type(module).__name__}: {str(error).splitlines()[0]}"
        ) from error
    assert program is not None  # dynamo=True returns the program (None is for dynamo=False)
    model = program.model_proto
    _rename_dims(model, dim_names)
    # The exporter annotates intermediate tensors with its own shape symbols (s18, s0 + s28). They are
    # optional, and engines that trust them fail: tract cannot unify them with the input axes (nor prove
    # total_sequence == past_sequence + sequence). Every engine infers the shapes itself.
    del model.graph.value_info[:]
    entries = {"onnxformer.format_version": FORMAT_VERSION, **(metadata or {})}
    for key, value in entries.items():
        prop = model.metadata_props.add()
        prop.key = key
        prop.value = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if check:
        check_graph(model)
    return model


def check_graph(model: onnx.ModelProto) -> None:
    """onnx.checker with shape inference; ExportError when it fails."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as error:
        raise ExportError(f"the exported graph fails onnx.checker: {error}") from error


def _rename_dims(model: onnx.ModelProto, dim_names: dict[str, tuple[str | None, ...]]) -> None:
    """Give the graph's inputs and outputs our axis names instead of the exporter's symbols (s0, s17, ...).

    Output dims that are expressions of input symbols ("s0 + s70") get the same names substituted.
    """
    symbols: dict[str, str] = {}
    for value in model.graph.input:
        for dim, name in zip(value.type.tensor_type.shape.dim, dim_names.get(value.name, ()), strict=False):
            if name and dim.dim_param:
                symbols[dim.dim_param] = name
                dim.dim_param = name
    for value in model.graph.output:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_param = re.sub(
                    r"\b[su]\d+\b", lambda m: symbols.get(m.group(0), m.group(0)), dim.dim_param
                )


def io_specs(model: onnx.ModelProto) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """The graph's inputs and outputs with dtypes and shapes (names for dynamic axes)."""

    def spec(value: onnx.ValueInfoProto) -> TensorSpec:
        tensor = value.type.tensor_type
        dtype = _DTYPES.get(tensor.elem_type)
        if dtype is None:
            raise ExportError(f"graph value {value.name} has unsupported element type {tensor.elem_type}")
        shape = tuple(d.dim_param if d.dim_param else d.dim_value for d in tensor.shape.dim)
        return TensorSpec(value.name, dtype, shape)

    initializers = {init.name for init in model.graph.initializer}
    inputs = tuple(spec(v) for v in model.graph.input if v.name not in initializers)
    return inputs, tuple(spec(v) for v in model.graph.output)
