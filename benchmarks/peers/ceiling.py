"""The memory-bandwidth ceiling of the decoder workloads: how close each tool's decode step comes to the
time it takes just to read what a step must read.

A decode step at a small batch does little arithmetic per byte: it reads every weight matrix once, one row
of each gathered table per token (the token embedding; the rotary tables), and each sequence's KV cache
up to its context. So it cannot take less than bytes read / read bandwidth (the "memory wall" of LLM
inference: Gholami et al. 2024, https://arxiv.org/abs/2403.14123). Per decoder workload and tool:

    bytes per step = whole-read weights + batch x (gathered rows + KV cache at the mean context)
    share          = (bytes per step / step time) / read bandwidth  =  ceiling ms / step ms

with the weights counted at the tool's own precision, from its own model files (ONNX initializers, GGUF
tensors, safetensors), and the read bandwidth that `benchmarks.machine.memory_bandwidth` measured at the
run's thread count. A share near 1 leaves nothing to gain without reading fewer bytes (a lower precision);
a share above 1 means the step read less than counted from memory: its bytes fit in the last-level cache
(`fits_in_llc`), or the tool's kernels read faster than the measured sum does.
"""

import json
import struct
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.peers.workloads import TOOLS, WORKLOADS, Tool, Workload

MB = 1e6

# Ops that read one row (along their gather axis) of these inputs per index, not the whole tensor:
# (domain, op type) -> (input positions, the axis attribute's name or None for axis 0).
GATHERS: dict[tuple[str, str], tuple[tuple[int, ...], str | None]] = {
    ("", "Gather"): ((0,), "axis"),
    ("com.microsoft", "GatherBlockQuantized"): ((0, 2, 3), "gather_axis"),  # data, scales, zero points
    ("com.microsoft", "RotaryEmbedding"): ((2, 3), None),  # cos and sin caches, by position
    ("com.microsoft", "GroupQueryAttention"): ((7, 8), None),  # its rotary cos and sin caches
}
TOKEN_EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight")  # HF checkpoint names
GGUF_ALIGNMENT = 32  # the format's default `general.alignment`
LLAMA_CPP_KV_BYTES = 2.0  # llama.cpp's default cache type: f16 K and V
# Bytes per cache element of llama.cpp's cache types (a tool's `kv_type` argument): the quantized ones
# store blocks of 32 values with an f16 scale (and an f16 minimum for the _1 types).
KV_TYPE_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
    "iq4_nl": 18 / 32,
}


@dataclass(frozen=True)
class StepWeights:
    """What one decode step reads of a model's weights: `whole` bytes of tensors read in full every step,
    `gathered_row` bytes per token of tables a step indexes (one row each); and the element size of the
    KV cache the tool keeps."""

    whole: int
    gathered_row: int
    kv_bytes_per_element: float
    files: tuple[str, ...]


@dataclass(frozen=True)
class KvShape:
    layers: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class StepShape:
    """One decoder workload as decode steps: rows per step, the mean cache length a step reads over the
    timed steps, and the steps (new tokens per row) in one timed call."""

    batch: int
    context: float
    steps_per_call: int


def kv_cache_bytes(kv: KvShape, *, context: float, bytes_per_element: float, batch: int = 1) -> float:
    """K and V of every layer up to `context` positions: layers x 2 x kv_heads x head_dim x context x bytes
    x batch (grouped-query attention keeps kv_heads, not n_heads, per layer)."""
    return kv.layers * 2 * kv.kv_heads * kv.head_dim * context * bytes_per_element * batch


def step_bytes(weights: StepWeights, kv: KvShape, shape: StepShape) -> tuple[float, float]:
    """(weight bytes, KV bytes) one step reads: the whole-read weights once, gathered rows and the cache
    once per row of the batch."""
    kv_bytes = kv_cache_bytes(
        kv, context=shape.context, bytes_per_element=weights.kv_bytes_per_element, batch=shape.batch
    )
    return weights.whole + shape.batch * weights.gathered_row, kv_bytes


# ---- ONNX ---------------------------------------------------------------------------------------------


def _element_bits(data_type: int) -> int:
    import onnx

    packed = {getattr(onnx.TensorProto, name, None) for name in ("INT4", "UINT4", "FLOAT4E2M1")}
    if data_type in packed:
        return 4
    if data_type in {getattr(onnx.TensorProto, name, None) for name in ("INT2", "UINT2")}:
        return 2
    if data_type == onnx.TensorProto.STRING:
        return 0
    return onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize * 8


def _tensor_bytes(tensor) -> int:
    count = 1
    for dim in tensor.dims:
        count *= dim
    return (count * _element_bits(tensor.data_type) + 7) // 8


def _graphs(graph):
    """The graph and every subgraph (If, Loop, Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.g.node or attribute.g.initializer:
                yield from _graphs(attribute.g)
            for sub in attribute.graphs:
                yield from _graphs(sub)


def onnx_weights(path: Path) -> StepWeights:
    """The initializers of the graph at `path` (and its subgraphs) that some node reads: those read only
    by a gathering op (GATHERS) count one row per token, the rest in full; initializers no node reads are
    not counted. Sizes come from the dims, so external data is not loaded."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    tensors = {}
    gathered: dict[str, set[int]] = defaultdict(set)  # initializer -> the axes it is gathered along
    whole: set[str] = set()
    for graph in _graphs(model.graph):
        tensors.update({tensor.name: tensor for tensor in graph.initializer})
        for node in graph.node:
            positions, axis_name = GATHERS.get((node.domain or "", node.op_type), ((), None))
            axis = next((a.i for a in node.attribute if a.name == axis_name), 0)
            for position, name in enumerate(node.input):
                if position in positions:
                    gathered[name].add(axis)
                else:
                    whole.add(name)
    full, row = 0, 0.0
    for name, tensor in tensors.items():
        if name in whole or (name in gathered and len(gathered[name]) > 1):
            full += _tensor_bytes(tensor)
        elif name in gathered:
            (axis,) = gathered[name]
            rows = tensor.dims[axis % len(tensor.dims)] if tensor.dims else 1
            row += _tensor_bytes(tensor) / max(rows, 1)
    return StepWeights(full, round(row), _onnx_kv_bytes(model), (str(path),))


def _onnx_kv_bytes(model) -> float:
    """The element size of the graph's past-key input (4 when it has none that says)."""
    for value in model.graph.input:
        name = value.name.lower()
        if "past" in name and "key" in name:
            return _element_bits(value.type.tensor_type.elem_type) / 8 or 4.0
    return 4.0


def _decoder_graph(folder: Path) -> Path | None:
    """The graph that runs a decode step: our manifest's `decoder` graph, genai_config.json's decoder
    file, or the folder's only .onnx file."""
    manifest = folder / "manifest.json"
    if manifest.is_file():
        graphs = json.loads(manifest.read_text()).get("graphs", {})
        if "decoder" in graphs:
            return folder / graphs["decoder"]
    genai = folder / "genai_config.json"
    if genai.is_file():
        return folder / json.loads(genai.read_text())["model"]["decoder"]["filename"]
    graphs = sorted(folder.glob("*.onnx"))
    return graphs[0] if len(graphs) == 1 else None


# ---- GGUF (llama.cpp) ---------------------------------------------------------------------------------

_GGUF_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.take("<Q")
        self.at += length
        return self.data[self.at - length : self.at].decode("utf-8", errors="replace")

    def value(self, kind: int):
        if kind == 8:
            return self.string()
        if kind == 9:
            item, count = self.take("<I"), self.take("<Q")
            return [self.value(item) for _ in range(count)]
        return self.take(_GGUF_SCALARS[kind])


def gguf_tensors(path: Path) -> dict[str, tuple[int, list[int]]]:
    """Each tensor's (bytes, dims) in a GGUF file, from its header (magic, version, counts, metadata,
    tensor infos) and the tensors' data offsets: a tensor's size is the distance to the next one's offset
    (the data is laid out in order, each padded to the alignment), so no table of quantized block sizes is
    needed. GGUF lists dims fastest-varying first: a [rows, columns] matrix is [columns, rows]."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(min(size, 64 * 2**20))  # the header: metadata (the vocabulary) and tensor infos
    if head[:4] != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file")
    reader = _Reader(head)
    reader.at = 8  # magic and version (2 and 3 share this layout)
    tensors, entries = reader.take("<Q"), reader.take("<Q")
    alignment = GGUF_ALIGNMENT
    for _ in range(entries):
        key, kind = reader.string(), reader.take("<I")
        value = reader.value(kind)
        if key == "general.alignment":
            alignment = int(value)
    infos = {}
    for _ in range(tensors):
        name = reader.string()
        dims = [reader.take("<Q") for _ in range(reader.take("<I"))]
        reader.take("<I")  # the ggml type
        infos[name] = (reader.take("<Q"), dims)
    start = -(-reader.at // alignment) * alignment
    ordered = sorted(infos, key=lambda name: infos[name][0])
    ends = [infos[name][0] for name in ordered[1:]] + [size - start]
    return {name: (end - infos[name][0], infos[name][1]) for name, end in zip(ordered, ends, strict=True)}


def gguf_weights(path: Path) -> StepWeights:
    """llama.cpp's names: `token_embd.weight` is gathered unless there is no `output.weight` (the head is
    tied to it, so reads it whole); the cache at llama.cpp's default f16."""
    tensors = gguf_tensors(path)
    row = 0
    if "output.weight" in tensors and "token_embd.weight" in tensors:
        size, dims = tensors.pop("token_embd.weight")
        row = size // dims[-1]
    return StepWeights(sum(size for size, _ in tensors.values()), row, LLAMA_CPP_KV_BYTES, (str(path),))


# ---- safetensors (transformers) -----------------------------------------------------------------------


def safetensors_weights(folder: Path) -> StepWeights:
    """A Hugging Face folder run by transformers: every tensor in full except the token embedding (read
    one row per token) when the config does not tie it to the head; the cache in the config's dtype."""
    config = json.loads((folder / "config.json").read_text())
    tied = bool(config.get("tie_word_embeddings", False))
    full, row = 0, 0
    files = sorted(folder.glob("*.safetensors"))
    for path in files:
        with path.open("rb") as handle:
            header = json.loads(handle.read(struct.unpack("<Q", handle.read(8))[0]))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            size = info["data_offsets"][1] - info["data_offsets"][0]
            if not tied and name.endswith(TOKEN_EMBEDDINGS):
                row += size // info["shape"][0]
            else:
                full += size
    dtype = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    kv = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}.get(dtype, 4.0)
    return StepWeights(full, row, kv, tuple(str(path) for path in files))


def model_weights(path: Path) -> StepWeights:
    """A tool's model, by what `path` holds: a .gguf or .onnx file, a folder with our manifest or
    genai_config.json (its decoder graph), a .gguf, or a Hugging Face checkpoint."""
    if path.is_file():
        return gguf_weights(path) if path.suffix == ".gguf" else onnx_weights(path)
    graph = _decoder_graph(path)
    if graph is not None:
        return onnx_weights(graph)
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return gguf_weights(ggufs[0])
    if (path / "config.json").is_file() and any(path.glob("*.safetensors")):
        return safetensors_weights(path)
    raise ValueError(f"{path}: no decoder graph, single .gguf file or safetensors checkpoint to count")


def kv_shape(config: dict) -> KvShape:
    """From a Hugging Face config.json."""
    heads = config["num_attention_heads"]
    return KvShape(
        layers=config["num_hidden_layers"],
        kv_heads=config.get("num_key_value_heads") or heads,
        head_dim=config.get("head_dim") or config["hidden_size"] // heads,
    )


# ---- the rows -----------------------------------------------------------------------------------------


def step_shape(workload: Workload) -> StepShape | None:
    """Decode steps timed one by one (the cache runs from context + 1 to context + steps), or a whole
    generation of `new` tokens per row from a prompt (the prefill counted as one of its steps); None for
    workloads that are not decode steps (prefill is bound by arithmetic, not by reading)."""
    ids = workload.args["ids"]
    if workload.kind == "decode":
        steps = workload.args["steps"]
        return StepShape(len(ids), len(ids[0]) + (steps + 1) / 2, 1)
    if workload.kind == "generate":
        new = workload.args["new"]
        return StepShape(len(ids), len(ids[0]) + new / 2, new)
    return None


def tool_weights(tool: Tool) -> StepWeights:
    """A tool's model (the first of its adapter's arguments that names an existing file or folder), with
    the cache type its `kv_type` argument sets (llama.cpp) in place of the file's default."""
    paths = [Path(v) for v in tool.args.values() if isinstance(v, str | Path)]
    path = next((path for path in paths if path.exists()), None)
    if path is None:
        raise ValueError(f"none of its model paths exists ({', '.join(map(str, paths)) or 'it names none'})")
    weights = model_weights(path)
    kv_type = tool.args.get("kv_type")
    if kv_type is None:
        return weights
    if str(kv_type).lower() not in KV_TYPE_BYTES:
        raise ValueError(f"unknown KV cache type {kv_type!r} (known: {', '.join(KV_TYPE_BYTES)})")
    return replace(weights, kv_bytes_per_element=KV_TYPE_BYTES[str(kv_type).lower()])


def share_rows(
    result: dict,
    shapes: dict[str, StepShape],
    weights: dict[str, StepWeights],
    kv: KvShape,
    *,
    read_gbs: float | None,
    llc_mb: float | None,
) -> list[dict]:
    """Per decoder workload in `shapes` and tool with a timing and counted weights: the bytes a step reads
    and the share of `read_gbs` its step time reached."""
    rows = []
    for workload in result["workloads"]:
        shape = shapes.get(workload["key"])
        if workload["family"] != "decoder" or shape is None:
            continue
        for name, timing in workload["tools"].items():
            if name not in weights:
                continue
            weight_bytes, kv_bytes = step_bytes(weights[name], kv, shape)
            total = weight_bytes + kv_bytes
            step_ms = timing["median_ms"] / shape.steps_per_call
            achieved = total / (step_ms / 1e3) / 1e9
            row = {
                "workload": workload["key"],
                "title": workload["title"],
                "tool": name,
                "precision": result["tools"]["decoder"].get(name, {}).get("precision"),
                "batch": shape.batch,
                "mean_context": shape.context,
                "weights_mb": round(weight_bytes / MB, 2),
                "kv_cache_mb": round(kv_bytes / MB, 2),
                "bytes_per_step_mb": round(total / MB, 2),
                "step_ms": round(step_ms, 3),
                "achieved_gbs": round(achieved, 2),
                "ceiling_ms": None if not read_gbs else round(total / (read_gbs * 1e9) * 1e3, 3),
                "share_of_read_bandwidth": None if not read_gbs else round(achieved / read_gbs, 3),
                "fits_in_llc": None if llc_mb is None else total <= llc_mb * 2**20,
            }
            rows.append(row)
    return rows


def ceiling_rows(result: dict, models: dict, *, read_gbs: float | None = None) -> list[dict]:
    """The rows for result["ceiling"]: `result` as run_peers builds it, `models` its {family: models}
    (the decoder's folders). The read bandwidth is the machine facts' unless `read_gbs` is given. A tool
    whose model cannot be counted gets one row {"tool", "error"} instead of its figures."""
    if "decoder" not in models:
        return []
    decoder = models["decoder"]
    try:  # after a whole run: an error here is a row, never a lost result
        kv = kv_shape(json.loads((Path(decoder["source"]) / "config.json").read_text()))
        workloads = WORKLOADS["decoder"](decoder, quick=result["settings"]["quick"])
    except (OSError, ValueError, KeyError) as error:
        return [{"tool": "-", "error": f"the decoder's config or workloads: {error}"}]
    shapes = {w.key: shape for w in workloads if (shape := step_shape(w)) is not None}
    weights, errors = {}, []
    for tool in TOOLS["decoder"](decoder):
        if tool.name not in result["tools"].get("decoder", {}):  # not loaded: nothing timed to compare
            continue
        try:
            weights[tool.name] = tool_weights(tool)
        except (OSError, ValueError, KeyError, struct.error) as error:
            errors.append({"tool": tool.name, "error": f"counting its model: {error}"})
    machine = result.get("machine", {})
    if read_gbs is None:
        read_gbs = machine.get("memory_bandwidth", {}).get("read_gbs")
    llc_mb = machine.get("last_level_cache_mb")
    return share_rows(result, shapes, weights, kv, read_gbs=read_gbs, llc_mb=llc_mb) + errors
