"""ONNX Runtime sessions, created from bytes that were already checked, on the device asked for.

A graph that keeps weights in external data arrives as `GraphBytes` (from `ExportFolder.graph`): its
tensors, already sliced from the checked weights bytes, go to ONNX Runtime through
`SessionOptions.add_external_initializers`, so ONNX Runtime never opens a file; plain model bytes that
name external data are refused (ONNX Runtime would resolve the location against the working folder).

`device="auto"` uses CUDA only when a CUDA session really starts (onnxruntime-gpu lists the CUDA provider
even on machines without a GPU), otherwise CPU, and says why.

Session settings (measurements in benchmarks/README.md):
- full graph optimisation (ORT_ENABLE_ALL) at load: it is what turns MatMul + scale into FusedMatMul and
  quantized MatMuls into DynamicQuantizeMatMul, and it is cheap (the small GPT's session: 0.146 s with it,
  0.142 s with basic optimisation only), so exports are not saved pre-optimised;
- `threads` sets the intra-op pool for both the graph and its parallel kernels; the default (None) is
  ONNX Runtime's, one thread per physical core. It must be an integer from 1 to the CPUs this process
  may use (`max_threads()`): an intra-op pool larger than that only makes its threads compete for the
  same cores (and `threads=10**6` once took minutes and 6 GB to start), so it is refused (`check_threads`);
- on CPU the SkipLayerNormalization fusion is turned off: ONNX Runtime's CPU kernel for it ran 6x slower
  than the Add + LayerNormalization it replaces (7.8 ms against 1.3 ms on a 32x128x384 batch, one thread,
  onnxruntime 1.32, AVX-512), which cost ~8 % of a BERT forward. CUDA keeps the fusion. Graphs from
  `onnxformer optimize` write those Adds as Sum nodes, which the fusion does not match, so they need
  nothing from the session (the hosts that cannot turn a fusion off open them too); the setting is for
  every other graph.
"""

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import numpy as np

from onnxformer.runtime.errors import ConfigError, InferenceError, ManifestError, OnnxformerError
from onnxformer.runtime.folder import GraphBytes, external_tensors, uses_external_data

logger = logging.getLogger(__name__)

Device = Literal["auto", "cpu", "cuda"]
DEVICES: tuple[Device, ...] = ("auto", "cpu", "cuda")


def device_of(value: str) -> Device:
    """`value` as a Device, or a ConfigError naming the choices (for a device given as text: the CLI)."""
    for device in DEVICES:
        if value == device:
            return device
    raise ConfigError(f"device must be one of {DEVICES}, got {value!r}")


# ONNX Runtime ships no type information: its objects (the module, InferenceSession, OrtValue, IOBinding)
# are `Any` where this module meets them, and typed from there on (`Session.run` gives arrays).
OrtSession: TypeAlias = Any  # onnxruntime.InferenceSession
CPU_DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)  # see the module docstring


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise OnnxformerError(
            "ONNX Runtime is not installed; install onnxformer[cpu] (CPU only, small) or "
            "onnxformer[gpu] (CUDA, also runs on CPU)"
        ) from None
    return onnxruntime


@dataclass(frozen=True)
class Session:
    session: OrtSession
    provider: str  # the provider the session really runs on
    reason: str  # why this provider (e.g. why CUDA was not used)
    # The external initializers' arrays and OrtValues: ONNX Runtime uses their memory, so they live as
    # long as the session.
    keep_alive: tuple[object, ...] = field(default=(), repr=False, compare=False)

    def run(self, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> list[np.ndarray]:
        try:
            results: list[np.ndarray] = self.session.run(outputs, feeds)
            return results
        except Exception as error:  # ONNX Runtime's own errors are untyped
            raise _inference_error(error, "") from error


def _inference_error(error: Exception, how: str) -> InferenceError:
    """ONNX Runtime's untyped failure to run a graph (`how`: "" or " with ..."), as the user's error."""
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return InferenceError(
        f"ONNX Runtime could not run the graph{how} ({first}); the inputs do not fit it or the model "
        "file is damaged: check the export with `onnxformer verify DIR`"
    )


class BoundCache:
    """One generation's in-place KV cache: zeroed float32 buffers on the session's device, each bound (IO
    binding) as its `past` input and as its `present` output, so that ONNX Runtime writes every step's keys
    and values into the same memory and nothing is copied. The binding is made once; each step rebinds
    only the token inputs."""

    def __init__(
        self, session: Session, pairs: list[tuple[str, str]], shape: tuple[int, ...], outputs: list[str]
    ) -> None:
        ort = _onnxruntime()
        device = "cuda" if session.provider == "CUDAExecutionProvider" else "cpu"
        self.session = session
        self.outputs = outputs
        self.buffers = {
            past: (present, ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, np.float32), device, 0))
            for past, present in pairs
        }
        self.binding = session.session.io_binding()
        for name in outputs:  # first, so that they come first in get_outputs (rebinding keeps the place)
            self.binding.bind_output(name)
        for past, (present, value) in self.buffers.items():
            self.binding.bind_ortvalue_input(past, value)
            self.binding.bind_ortvalue_output(present, value)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One step: `feeds` (the inputs other than the cache) in, `outputs` out as arrays."""
        try:
            for name, value in feeds.items():
                self.binding.bind_cpu_input(name, np.ascontiguousarray(value))
            for name in self.outputs:  # a fresh output each step (its shape changes with the step's tokens)
                self.binding.bind_output(name)
            self.session.session.run_with_iobinding(self.binding)
            return [value.numpy() for value in self.binding.get_outputs()[: len(self.outputs)]]
        except Exception as error:  # ONNX Runtime's own errors are untyped
            raise _inference_error(error, " with its cache bound in place") from error


def max_threads() -> int:
    """The most threads a session may use: the CPUs this process may run on."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):  # not Linux
        return max(os.cpu_count() or 1, 1)


def check_threads(threads: object, *, name: str = "threads") -> int | None:
    """`threads` checked: None (ONNX Runtime's default) or an integer from 1 to `max_threads()`.

    Raises `ConfigError` naming `name` (e.g. "--threads" from the CLI) and the allowed range."""
    if threads is None:
        return None
    limit = max_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= limit:
        raise ConfigError(
            f"{name} must be an integer from 1 to {limit} (the CPUs this process may use), got {threads!r}; "
            "leave it unset for ONNX Runtime's default"
        )
    return threads


def create_session(
    model: bytes | GraphBytes, *, device: Device = "cpu", threads: int | None = None
) -> Session:
    """An InferenceSession on `model` (serialized ONNX bytes, or a graph with its external tensors) for
    the chosen device."""
    if device not in DEVICES:
        raise ConfigError(f"device must be one of {DEVICES}, got {device!r}")
    threads = check_threads(threads)
    graph = model if isinstance(model, GraphBytes) else GraphBytes(model)
    _check_external_covered(graph)
    ort = _onnxruntime()
    options = ort.SessionOptions()
    keep_alive: tuple[object, ...] = ()
    if graph.initializers:
        names = list(graph.initializers)
        values = [ort.OrtValue.ortvalue_from_numpy(graph.initializers[name]) for name in names]
        options.add_external_initializers(names, values)
        keep_alive = (graph.initializers, values)
    model = graph.model
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads is not None:
        options.intra_op_num_threads = threads
    if device in ("auto", "cuda"):
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            reason = "this ONNX Runtime build has no CUDA provider (install onnxformer[gpu])"
        else:
            try:
                session = ort.InferenceSession(
                    model, options, providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
                )
            except Exception as error:  # ORT raises its own untyped errors on provider failure
                reason = f"the CUDA provider failed to start ({str(error).splitlines()[0]})"
            else:
                if session.get_providers()[0] == "CUDAExecutionProvider":
                    return Session(session, "CUDAExecutionProvider", "CUDA session started", keep_alive)
                reason = "the CUDA provider is installed but no GPU session could start"
        if device == "cuda":
            raise OnnxformerError(f"device='cuda' was asked for but {reason}; use device='cpu' or 'auto'")
        logger.info("using CPU: %s", reason)
    else:
        reason = "device='cpu' was asked for"
    session = ort.InferenceSession(
        model, options, providers=["CPUExecutionProvider"], disabled_optimizers=list(CPU_DISABLED_OPTIMIZERS)
    )
    return Session(session, "CPUExecutionProvider", reason, keep_alive)


def _check_external_covered(graph: GraphBytes) -> None:
    """Every tensor the model keeps in external data must come with its value: ONNX Runtime would
    otherwise open the location itself, relative to the working folder."""
    if graph.initializers:
        tensors = external_tensors(graph.model, name="the model")
        missing = [tensor.name for tensor in tensors if tensor.name not in graph.initializers]
    else:
        try:
            missing = ["(some)"] if uses_external_data(graph.model) else []
        except ValueError:  # not a model at all: ONNX Runtime says so in its own words
            return
    if missing:
        raise ManifestError(
            f"the model keeps tensors {missing[:5]} in external data, and ONNX Runtime is never left to "
            "open a file by path; load the graph with ExportFolder.graph(path), which checks the weights "
            "file against the manifest and supplies those tensors"
        )
