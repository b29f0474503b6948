"""One module to one ONNX graph with the dynamo exporter, checked by onnx.checker and ONNX Runtime."""

import contextlib
import io
import json
import logging
import warnings
from collections.abc import Iterator

import onnx
import torch
from torch import nn

from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.manifest import FORMAT_VERSION, TensorSpec

DEFAULT_OPSET = 18
MIN_OPSET, MAX_OPSET = 17, 23  # what the dynamo exporter and current ONNX Runtime builds both cover

_DTYPES = {
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
    example: dict[str, torch.Tensor],
    *,
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    opset: int = DEFAULT_OPSET,
    metadata: dict[str, object] | None = None,
) -> onnx.ModelProto:
    """Trace `module` on `example` (sizes >= 2 on dynamic axes) and return a checked ModelProto.

    `example` maps the module's forward parameter names, which become the graph's input names, to tensors.
    """
    check_opset(opset)
    module.eval()
    try:
        with _quiet(), torch.no_grad():
            program = torch.onnx.export(
                module,
                (),
                kwargs=example,
                input_names=list(example),
                output_names=output_names,
                dynamic_axes=dynamic_axes,
                opset_version=opset,
                dynamo=True,
                external_data=False,
                verbose=False,
            )
    except Exception as error:
        raise ExportError(
            f"torch.onnx.export failed for {type(module).__name__}: {str(error).splitlines()[0]}"
        ) from error
    model = program.model_proto
    entries = {"onnxformer.format_version": FORMAT_VERSION, **(metadata or {})}
    for key, value in entries.items():
        prop = model.metadata_props.add()
        prop.key = key
        prop.value = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as error:
        raise ExportError(f"the exported graph fails onnx.checker: {error}") from error
    return model


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
