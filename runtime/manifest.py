"""The schema of `manifest.json`: the contract between the exporter (builder) and the runtimes.

The builder builds a `Manifest` and writes `manifest.to_json()`; the Python runtime reads it with
`Manifest.from_json`, which checks every field and names each problem it finds, and the Node host reads the
same fields. Everything a runtime needs to know about a model is here, so neither runtime has a table of
families:

- `task`: which model class runs it ("generate": TextGenerator, "encode": TextEncoder, "seq2seq":
  TextToText) and so which graph roles it needs (`TASKS`);
- `framing`: how a text becomes the ids a graph reads (special-token names before and after its tokens,
  and optionally the most ids it is cut to);
- `io`: per graph role, the inputs the runtime feeds and the outputs it reads;
- `kv_cache`: the KV-cache tensors' names and shapes; `generation`: the decoding defaults.

Unknown format versions are refused: a newer exporter's folder fails with a message to upgrade onnxformer,
an older one with the command that re-exports it, rather than being misread.
"""

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from onnxformer.runtime.errors import ManifestError

FORMAT_VERSION = 2
MANIFEST_NAME = "manifest.json"
DTYPES = ("float32", "float16", "int64", "int32", "bool")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
WEIGHTS_KIND = "weights"  # a graph's external-data file (FileEntry.weights_of)


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output. Shape entries are ints (fixed) or names (dynamic: "batch", ...)."""

    name: str
    dtype: str
    shape: tuple[int | str, ...]


def allowed_difference(atol: float, rtol: float, scale: float) -> float:
    """The one tolerance rule of parity and goldens: the largest |got - want| allowed for an output whose
    largest magnitude is `scale` (fp32 rounding grows with the size of the numbers)."""
    return atol + rtol * scale


@dataclass(frozen=True)
class Parity:
    """PyTorch vs ONNX Runtime at export time, over `cases` input shapes none equal to the trace shape.

    Exports since the float64 reference (`reference == "float64"`, docs/goldens.md) run each case through
    the PyTorch module in float32 and in float64: `error` is ONNX Runtime's distance to the float64
    answer, `torch_error` PyTorch float32's own, each the largest over the cases. An output passes when
    its error is at most `factor` x PyTorch's error + `floor` x its largest magnitude; `used` is the share
    of that allowance it took (1.0 = at the limit). Older exports (`reference == "float32"`) were held
    to `tolerance + rtol * max |torch output|` on `max_abs_diff`."""

    tolerance: float  # the float32-reference rule's absolute term (0 for float64-reference exports)
    cases: int
    max_abs_diff: dict[str, float]  # output name -> largest |onnx - torch fp32| over all cases
    shapes: tuple[str, ...] = ()  # the case shapes, e.g. "B=4 T=17 P=5"
    rtol: float = 0.0  # allowed diff = tolerance + rtol * max |torch output| (0: absolute only)
    max_abs_value: dict[str, float] = field(default_factory=dict)  # output name -> largest |torch output|
    reference: Literal["float32", "float64"] = "float32"
    factor: float = 0.0
    floor: float = 0.0
    error: dict[str, float] = field(default_factory=dict)  # output -> largest |onnx - torch fp64|
    torch_error: dict[str, float] = field(default_factory=dict)  # output -> largest |torch fp32 - fp64|
    used: dict[str, float] = field(default_factory=dict)  # output -> error / allowance

    def allowed(self, name: str) -> float:
        """What output `name` was allowed to differ from PyTorch float32 by (float32-reference rule)."""
        return allowed_difference(self.tolerance, self.rtol, self.max_abs_value.get(name, 0.0))

    def problem(self) -> str | None:
        """Why the recorded figures break the export's own rule, or None when they keep it."""
        if self.reference == "float64":
            for name, share in self.used.items():
                if not share <= 1.0:
                    return (
                        f"recorded parity of {name} used {share:.3g}x its allowance "
                        f"({self.factor:g} x PyTorch float32's error + {self.floor:.2g} x max |output|)"
                    )
            return None
        for name, diff in self.max_abs_diff.items():
            if diff > self.allowed(name):
                return f"recorded parity of {name}, {diff:.2e}, exceeds the allowed {self.allowed(name):.2e}"
        return None


@dataclass(frozen=True)
class FileEntry:
    """One listed file. A graph's external-data file (weights moved out of a graph past protobuf's 2 GB
    limit) has kind `WEIGHTS_KIND` and options `{"graph": <the graph's path>}`: the only file that graph's
    tensors may name (`weights_of`). Folders without such entries read as before."""

    path: str  # relative to the export folder, forward slashes
    sha256: str
    size: int
    kind: str  # what the graph computes, e.g. "encoder_block", "ffn"; or "tokenizer", "golden", "weights"
    options: dict[str, Any]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    parity: Parity | None = None

    @property
    def weights_of(self) -> str | None:
        """The graph whose external data this file holds, or None for any other file."""
        return self.options.get("graph") if self.kind == WEIGHTS_KIND else None


@dataclass(frozen=True)
class GoldenCase:
    """One golden run of a graph: `dir` holds input_i.pb and output_i.pb (ONNX backend test-data layout),
    numbered in the order of `inputs` and `outputs` (the graph's own order)."""

    dir: str
    label: str  # the shape, e.g. "cached step B=3 P=9 T=1"
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    # The largest |got - golden| allowed per output, in `outputs` order (derived from the float64 figures
    # at export, docs/goldens.md); None: the graph's atol + rtol * max |golden| (older exports, int8).
    allowed: tuple[float, ...] | None = None

    def allowance(self, index: int, atol: float, rtol: float, scale: float) -> float:
        """What output `index` (whose largest golden magnitude is `scale`) may differ from its golden by."""
        if self.allowed is not None:
            return self.allowed[index]
        return allowed_difference(atol, rtol, scale)

    def input_files(self) -> list[str]:
        return [f"{self.dir}/input_{i}.pb" for i in range(len(self.inputs))]

    def output_files(self) -> list[str]:
        return [f"{self.dir}/output_{i}.pb" for i in range(len(self.outputs))]


@dataclass(frozen=True)
class GoldenGraph:
    """The golden cases of one ONNX file. A case passes when every output has the golden's shape and
    max |got - golden| <= atol + rtol * max |golden| (fp32 rounding grows with the numbers' size)."""

    file: str
    atol: float
    rtol: float
    cases: tuple[GoldenCase, ...]
    note: str = ""  # why this file needs more than the default tolerance, when it does


@dataclass(frozen=True)
class Goldens:
    """Test data written at export time from PyTorch (see docs/goldens.md)."""

    graphs: tuple[GoldenGraph, ...]
    end_to_end: str | None = None  # goldens/end_to_end.json for model exports


EXPORT_KINDS = ("blocks", "model")
Task = Literal["generate", "encode", "seq2seq"]
# The commands that write each kind of export, named in the error an old folder gets.
EXPORT_COMMANDS = {
    "model": "onnxformer export CHECKPOINT --out DIR",
    "blocks": "onnxformer export-blocks --out DIR",
}
# The graph inputs a runtime knows how to feed (besides the KV cache), and what it feeds them:
INPUT_NAMES = (
    "input_ids",  # (B, T) int64: the framed text (the decoder's tokens for "generate")
    "attention_mask",  # (B, T) int64, 1 = a real token (for the decoder: past + new positions)
    "token_type_ids",  # (B, T) int64, all 0 (one segment)
    "decoder_input_ids",  # (B, T) int64: the decoder's tokens ("seq2seq")
    "decoder_attention_mask",  # (B, P + T) int64
    "encoder_attention_mask",  # (B, S) int64: the source's mask, fed to the decoder
)
# The outputs a runtime reads, by what they hold; "{i}" in a name stands for the layer.
OUTPUT_KEYS = (
    "logits",  # (B, T, V) next-token logits
    "last_hidden_state",  # (B, T, D)
    "sentence_embedding",  # (B, D) mean of the real tokens' last hidden states
    "mlm_logits",  # (B, T, V) masked-token logits
    "pooler_output",  # (B, D) tanh(dense([CLS]'s last hidden state)), what the classifier reads
    "class_logits",  # (B, num_labels)
    "self_attentions",  # "{i}": (B, H, T, T) softmax weights of layer i (the encoder's, for seq2seq)
    "cross_attentions",  # "{i}": (B, H, T, S) the decoder's weights over the source
)
CACHE_LAYOUT = ("batch", "heads", "sequence", "head_dim")
# The in-place cache of an optimised decoder (`onnxformer optimize`): past and present are one buffer of
# max_sequence >= past + new positions; the step's keys and values are written after the past ones.
IN_PLACE_LAYOUT = ("batch", "heads", "max_sequence", "head_dim")
CACHE_LAYOUTS = (CACHE_LAYOUT, IN_PLACE_LAYOUT)


@dataclass(frozen=True)
class TaskSpec:
    """What a task needs from a manifest (the runtime's model class for it lives in `runtime.load`)."""

    roles: tuple[str, ...]  # the graph roles it runs
    text: str  # the framing key of the text it reads
    cached: bool  # the "decoder" role takes and returns a KV cache
    cross: bool  # the "encoder" role returns cross keys/values that the "decoder" takes


TASKS: dict[str, TaskSpec] = {
    "generate": TaskSpec(roles=("decoder",), text="prompt", cached=True, cross=False),
    "encode": TaskSpec(roles=("encoder",), text="text", cached=False, cross=False),
    "seq2seq": TaskSpec(roles=("encoder", "decoder"), text="source", cached=True, cross=True),
}


@dataclass(frozen=True)
class Framing:
    """How a text becomes the ids a graph reads: these special tokens (names in `special_tokens`), then the
    text's tokens, then `suffix`. GPT prompt: <s> + text; BERT text: <cls> + text + <sep>; T5 source:
    text + </s>."""

    prefix: tuple[str, ...] = ()
    suffix: tuple[str, ...] = ()
    # The most ids a framed text is read as, framing included: a sentence-transformers folder's
    # max_seq_length (the encode task cuts longer texts to it). None: the model's max_len. Optional, so
    # folders written without it read as before.
    max_length: int | None = None

    def limit(self, max_len: int) -> int:
        """The most ids a framed text may have in a model whose context is `max_len`."""
        return max_len if self.max_length is None else min(self.max_length, max_len)

    def ids(self, tokens: list[int], special: dict[str, int]) -> list[int]:
        """`tokens` framed, the names resolved through `special` (name -> id)."""
        return [*(special[name] for name in self.prefix), *tokens, *(special[name] for name in self.suffix)]

    def describe(self) -> str:
        """e.g. "<cls> + text + <sep>", for messages."""
        return " + ".join([*(f"<{n}>" for n in self.prefix), "text", *(f"<{n}>" for n in self.suffix)])


@dataclass(frozen=True)
class GraphIO:
    """What the runtime feeds one graph (besides the KV cache) and the outputs it reads from it.

    `inputs` are names from `INPUT_NAMES`; `outputs` maps a key from `OUTPUT_KEYS` to the graph's output
    name ("{i}" for per-layer outputs). An output the graph lacks is simply not listed: a method that needs
    it says the export has no such head."""

    inputs: tuple[str, ...]
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KVCache:
    """The KV cache of the "decoder" role: inputs `past_*`, outputs `present_*` (and for seq2seq `cross_*`,
    outputs of the "encoder" and inputs of the "decoder"), one name pattern each with "{i}" for the layer,
    every tensor laid out (batch, kv_heads, sequence, head_dim) in float32."""

    layers: int
    kv_heads: int
    head_dim: int
    past_key: str
    past_value: str
    present_key: str
    present_value: str
    cross_key: str | None = None
    cross_value: str | None = None
    layout: tuple[str, ...] = CACHE_LAYOUT

    @property
    def in_place(self) -> bool:
        """Past and present are one preallocated buffer (IN_PLACE_LAYOUT), not past in, past + new out."""
        return self.layout == IN_PLACE_LAYOUT

    def past_names(self) -> list[str]:
        """Self-attention cache inputs, layer by layer, key then value."""
        return _per_layer(self.layers, self.past_key, self.past_value)

    def present_names(self) -> list[str]:
        """Self-attention cache outputs, in the order of `past_names`."""
        return _per_layer(self.layers, self.present_key, self.present_value)

    def cross_names(self) -> list[str]:
        """Cross-attention keys and values (empty without them), layer by layer, key then value."""
        if self.cross_key is None or self.cross_value is None:
            return []
        return _per_layer(self.layers, self.cross_key, self.cross_value)


def _per_layer(layers: int, key: str, value: str) -> list[str]:
    return [name.replace("{i}", str(i)) for i in range(layers) for name in (key, value)]


@dataclass(frozen=True)
class GenerationDefaults:
    """Decoding defaults, used for every option a call leaves unset; temperature 0 is greedy."""

    max_new_tokens: int
    temperature: float
    top_k: int  # 0: no top-k cut
    top_p: float  # 1.0: no nucleus cut
    stop_tokens: tuple[int, ...]  # ids that end a row (left out of its result)
    decoder_start_token_id: int | None = None  # seq2seq: the decoder's first token


@dataclass(frozen=True)
class ModelShape:
    """The typed part of `config` every runtime reads (the rest is the family's, for the builder)."""

    vocab_size: int
    max_len: int  # positions, prompt or source included
    d_model: int
    n_layers: int
    n_heads: int
    num_labels: int | None = None  # classification head width, when there is one


SHAPE_KEYS = ("vocab_size", "max_len", "d_model", "n_layers", "n_heads")


@dataclass(frozen=True)
class Manifest:
    """What an export folder holds. For `export_kind == "model"` the model fields are filled:

    - `family`: the architecture's name (informational: "gpt", "bert", "t5", ...); `task`: what runs it;
    - `graphs`: role -> file, roles "decoder", "encoder" (as `TASKS[task].roles` needs), "attentions";
      `io`: role -> the names the runtime feeds and reads (`GraphIO`);
    - `kv_cache` (generate, seq2seq), `generation` (generate, seq2seq), `framing` (text key -> `Framing`,
      at least `TASKS[task].text`);
    - `special_tokens`: name -> id (pad, bos, eos, unk, mask, sep, cls); `config`: the model config (its
      common part typed as `shape`); `tokenizer`: the tokenizer file.
    """

    export_kind: str  # "blocks" or "model"
    opset: int
    versions: dict[str, str]  # tool -> version used at export
    files: tuple[FileEntry, ...]
    format_version: int = FORMAT_VERSION
    family: str | None = None
    task: Task | None = None
    config: dict[str, Any] = field(default_factory=dict)
    tokenizer: str | None = None
    special_tokens: dict[str, int] = field(default_factory=dict)
    graphs: dict[str, str] = field(default_factory=dict)
    io: dict[str, GraphIO] = field(default_factory=dict)
    kv_cache: KVCache | None = None
    generation: GenerationDefaults | None = None
    framing: dict[str, Framing] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    goldens: Goldens | None = None

    @property
    def shape(self) -> ModelShape:
        """The config's common fields, typed (checked when a model manifest is parsed)."""
        return _parse_shape(self.config)

    @property
    def task_spec(self) -> TaskSpec:
        if self.task not in TASKS:
            raise _fail("task", f"must be one of {tuple(TASKS)} for a model export, got {self.task!r}")
        return TASKS[self.task]

    def text_framing(self) -> Framing:
        """The framing of the text the task reads (a GPT prompt, a BERT text, a T5 source)."""
        return self.framing[self.task_spec.text]

    def file(self, path: str) -> FileEntry:
        for entry in self.files:
            if entry.path == path:
                return entry
        raise ManifestError(f"{MANIFEST_NAME} lists no file {path!r}; listed: {[f.path for f in self.files]}")

    def to_json(self) -> str:
        data = asdict(self)
        for framing in data["framing"].values():
            if framing["max_length"] is None:
                del framing["max_length"]  # written only when set, as older folders have it
        # The float64 figures and the cases' own allowances are written where they exist: a folder exported
        # before them reads and writes back as it was.
        for entry in data["files"]:
            parity = entry["parity"]
            if parity is not None and parity["reference"] == "float32":
                for key in ("reference", "factor", "floor", "error", "torch_error", "used"):
                    del parity[key]
        for graph in (data["goldens"] or {}).get("graphs", []):
            for case in graph["cases"]:
                if case["allowed"] is None:
                    del case["allowed"]
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ManifestError(
                f"{MANIFEST_NAME} is not valid JSON ({error}); re-export the folder"
            ) from None
        return _parse_manifest(data)


def _fail(where: str, problem: str) -> ManifestError:
    return ManifestError(f"{MANIFEST_NAME}: {where} {problem}; re-export the folder with onnxformer")


def _get(data: dict, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise _fail(f"{where}{key}", "is missing")
    value = data[key]
    # bool is an int subclass; a field typed int must not accept true/false.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        names = " or ".join(t.__name__ for t in _as_tuple(kind))
        raise _fail(f"{where}{key}", f"must be {names}, got {type(value).__name__}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _parse_tensors(items: Any, where: str) -> tuple[TensorSpec, ...]:
    if not isinstance(items, list):
        raise _fail(where, "must be a list")
    specs = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]."
        if not isinstance(item, dict):
            raise _fail(f"{where}[{i}]", "must be an object")
        dtype = _get(item, "dtype", str, at)
        if dtype not in DTYPES:
            raise _fail(f"{at}dtype", f"must be one of {DTYPES}, got {dtype!r}")
        shape = _get(item, "shape", list, at)
        for dim in shape:
            if isinstance(dim, bool) or not isinstance(dim, int | str):
                raise _fail(f"{at}shape", f"entries must be ints or names, got {dim!r}")
        specs.append(TensorSpec(_get(item, "name", str, at), dtype, tuple(shape)))
    return tuple(specs)


def _numbers(item: dict, key: str, at: str) -> dict[str, float]:
    """An optional {output name: number} field."""
    values = _get(item, key, dict, at) if key in item else {}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _fail(f"{at}{key}.{name}", "must be a number")
    return {name: float(value) for name, value in values.items()}


def _parse_parity(item: Any, where: str) -> Parity | None:
    if item is None:
        return None
    if not isinstance(item, dict):
        raise _fail(where, "must be an object or null")
    at = f"{where}."
    diffs = _get(item, "max_abs_diff", dict, at)
    reference = _get(item, "reference", str, at) if "reference" in item else "float32"
    if reference not in ("float32", "float64"):
        raise _fail(f"{at}reference", f"must be 'float32' or 'float64', got {reference!r}")
    parity = Parity(
        tolerance=float(_get(item, "tolerance", (int, float), at)),
        cases=_get(item, "cases", int, at),
        max_abs_diff=_numbers(item, "max_abs_diff", at) if diffs is not None else {},
        shapes=tuple(_get(item, "shapes", list, at)) if "shapes" in item else (),
        rtol=float(_get(item, "rtol", (int, float), at)) if "rtol" in item else 0.0,
        max_abs_value=_numbers(item, "max_abs_value", at),
        reference=reference,
        factor=float(_get(item, "factor", (int, float), at)) if "factor" in item else 0.0,
        floor=float(_get(item, "floor", (int, float), at)) if "floor" in item else 0.0,
        error=_numbers(item, "error", at),
        torch_error=_numbers(item, "torch_error", at),
        used=_numbers(item, "used", at),
    )
    if reference == "float64" and set(parity.used) != set(parity.error):
        raise _fail(f"{at}used", "must name the same outputs as error")
    return parity


def _parse_file(item: Any, where: str) -> FileEntry:
    if not isinstance(item, dict):
        raise _fail(where, "must be an object")
    at = f"{where}."
    sha = _get(item, "sha256", str, at)
    if not _SHA256.match(sha):
        raise _fail(f"{at}sha256", "must be 64 lowercase hex characters")
    size = _get(item, "size", int, at)
    if size < 0:
        raise _fail(f"{at}size", "must be >= 0")
    return FileEntry(
        path=_get(item, "path", str, at),
        sha256=sha,
        size=size,
        kind=_get(item, "kind", str, at),
        options=_get(item, "options", dict, at),
        inputs=_parse_tensors(_get(item, "inputs", list, at), f"{at}inputs"),
        outputs=_parse_tensors(_get(item, "outputs", list, at), f"{at}outputs"),
        parity=_parse_parity(item.get("parity"), f"{at}parity"),
    )


def _parse_manifest(data: Any) -> Manifest:
    if not isinstance(data, dict):
        raise _fail("the top level", "must be a JSON object")
    version = _get(data, "format_version", int, "")
    if version != FORMAT_VERSION:
        raise _unsupported(version, data.get("export_kind"))
    files = _get(data, "files", list, "")
    versions = _get(data, "versions", dict, "")
    kind = _get(data, "export_kind", str, "")
    if kind not in EXPORT_KINDS:
        raise _fail("export_kind", f"must be one of {EXPORT_KINDS}, got {kind!r}")
    manifest = Manifest(
        export_kind=kind,
        opset=_get(data, "opset", int, ""),
        versions={str(k): str(v) for k, v in versions.items()},
        files=tuple(_parse_file(item, f"files[{i}]") for i, item in enumerate(files)),
        format_version=version,
        family=_get(data, "family", (str, type(None)), "") if "family" in data else None,
        task=_get(data, "task", (str, type(None)), "") if "task" in data else None,
        config=_optional(data, "config", dict),
        tokenizer=_get(data, "tokenizer", (str, type(None)), "") if "tokenizer" in data else None,
        special_tokens=_optional(data, "special_tokens", dict),
        graphs=_optional(data, "graphs", dict),
        io={str(role): _parse_io(item, f"io.{role}") for role, item in _optional(data, "io", dict).items()},
        kv_cache=_parse_kv_cache(data.get("kv_cache"), "kv_cache"),
        generation=_parse_generation(data.get("generation"), "generation"),
        framing={
            str(key): _parse_framing(item, f"framing.{key}")
            for key, item in _optional(data, "framing", dict).items()
        },
        extra=_optional(data, "extra", dict),
        goldens=_parse_goldens(data.get("goldens"), "goldens"),
    )
    _check_weights(manifest)
    if manifest.goldens is not None:
        _check_goldens(manifest)
    if kind == "model":
        _check_model_fields(manifest)
    return manifest


def _unsupported(version: int, kind: Any) -> ManifestError:
    reads = (
        f"{MANIFEST_NAME}: format_version {version} is not supported (this onnxformer reads {FORMAT_VERSION})"
    )
    if version > FORMAT_VERSION:
        return ManifestError(f"{reads}; upgrade onnxformer to read it")
    command = EXPORT_COMMANDS.get(kind) if isinstance(kind, str) else None
    how = f"`{command}`" if command else " or ".join(f"`{c}`" for c in EXPORT_COMMANDS.values())
    return ManifestError(f"{reads}; re-export the folder with this onnxformer: {how}")


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise _fail(where, "must be a list of non-empty names")
    return tuple(value)


def _pattern(data: dict, key: str, where: str) -> str:
    value = _get(data, key, str, where)
    if "{i}" not in value:
        raise _fail(f"{where}{key}", f"must be a name with '{{i}}' for the layer, got {value!r}")
    return value


def _positive(data: dict, key: str, where: str) -> int:
    value = _get(data, key, int, where)
    if value <= 0:
        raise _fail(f"{where}{key}", f"must be a positive integer, got {value}")
    return value


def _parse_io(item: Any, where: str) -> GraphIO:
    if not isinstance(item, dict):
        raise _fail(where, "must be an object")
    at = f"{where}."
    inputs = _names(_get(item, "inputs", list, at), f"{at}inputs")
    unknown = [name for name in inputs if name not in INPUT_NAMES]
    if unknown:
        raise _fail(
            f"{at}inputs",
            f"names {unknown}, which this runtime cannot feed (it feeds {INPUT_NAMES})",
        )
    outputs = _get(item, "outputs", dict, at)
    for key, name in outputs.items():
        if key not in OUTPUT_KEYS:
            raise _fail(f"{at}outputs.{key}", f"is not an output this runtime reads ({OUTPUT_KEYS})")
        if not isinstance(name, str) or not name:
            raise _fail(f"{at}outputs.{key}", "must be a graph output name")
    return GraphIO(inputs, dict(outputs))


def _parse_kv_cache(item: Any, where: str) -> KVCache | None:
    if item is None:
        return None
    if not isinstance(item, dict):
        raise _fail(where, "must be an object or null")
    at = f"{where}."
    layout = tuple(_names(_get(item, "layout", list, at), f"{at}layout"))
    if layout not in CACHE_LAYOUTS:
        raise _fail(
            f"{at}layout",
            f"must be one of {[list(known) for known in CACHE_LAYOUTS]} (the layouts this runtime feeds), "
            f"got {list(layout)}; re-export with this version",
        )
    cross = {
        key: _pattern(item, key, at) if item.get(key) is not None else None
        for key in ("cross_key", "cross_value")
    }
    if (cross["cross_key"] is None) != (cross["cross_value"] is None):
        raise _fail(f"{at}cross_key/cross_value", "must both be names or both be null")
    return KVCache(
        layers=_positive(item, "layers", at),
        kv_heads=_positive(item, "kv_heads", at),
        head_dim=_positive(item, "head_dim", at),
        past_key=_pattern(item, "past_key", at),
        past_value=_pattern(item, "past_value", at),
        present_key=_pattern(item, "present_key", at),
        present_value=_pattern(item, "present_value", at),
        layout=layout,
        **cross,
    )


def _parse_generation(item: Any, where: str) -> GenerationDefaults | None:
    if item is None:
        return None
    if not isinstance(item, dict):
        raise _fail(where, "must be an object or null")
    at = f"{where}."
    max_new_tokens = _get(item, "max_new_tokens", int, at)
    temperature = float(_get(item, "temperature", (int, float), at))
    top_k = _get(item, "top_k", int, at)
    top_p = float(_get(item, "top_p", (int, float), at))
    stop_tokens = _get(item, "stop_tokens", list, at)
    start = (
        _get(item, "decoder_start_token_id", (int, type(None)), at)
        if "decoder_start_token_id" in item
        else None
    )
    if max_new_tokens < 0:
        raise _fail(f"{at}max_new_tokens", "must be an integer >= 0")
    if not temperature >= 0:
        raise _fail(f"{at}temperature", "must be a number >= 0 (0 is greedy)")
    if top_k < 0:
        raise _fail(f"{at}top_k", "must be an integer >= 0 (0: no top-k cut)")
    if not 0 < top_p <= 1:
        raise _fail(f"{at}top_p", "must be a number in (0, 1]")
    for value in [*stop_tokens, start]:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise _fail(f"{at}stop_tokens/decoder_start_token_id", f"must be token ids >= 0, got {value!r}")
    return GenerationDefaults(max_new_tokens, temperature, top_k, top_p, tuple(stop_tokens), start)


def _parse_framing(item: Any, where: str) -> Framing:
    if not isinstance(item, dict):
        raise _fail(where, "must be an object with prefix and suffix lists")
    at = f"{where}."
    framing = Framing(
        prefix=_names(_get(item, "prefix", list, at), f"{at}prefix"),
        suffix=_names(_get(item, "suffix", list, at), f"{at}suffix"),
        max_length=_positive(item, "max_length", at) if item.get("max_length") is not None else None,
    )
    special = len(framing.prefix) + len(framing.suffix)
    if framing.max_length is not None and framing.max_length <= special:
        raise _fail(
            f"{at}max_length",
            f"is {framing.max_length}, which leaves no room for a text beside its {special} special tokens",
        )
    return framing


def _parse_shape(config: dict[str, Any]) -> ModelShape:
    values = {key: _positive(config, key, "config.") for key in SHAPE_KEYS}
    labels = _positive(config, "num_labels", "config.") if config.get("num_labels") is not None else None
    return ModelShape(**values, num_labels=labels)


def _parse_goldens(item: Any, where: str) -> Goldens | None:
    if item is None:
        return None
    if not isinstance(item, dict):
        raise _fail(where, "must be an object or null")
    graphs = []
    for i, graph in enumerate(_get(item, "graphs", list, f"{where}.")):
        at = f"{where}.graphs[{i}]."
        if not isinstance(graph, dict):
            raise _fail(at[:-1], "must be an object")
        cases = []
        for j, case in enumerate(_get(graph, "cases", list, at)):
            case_at = f"{at}cases[{j}]."
            if not isinstance(case, dict):
                raise _fail(case_at[:-1], "must be an object")
            names = {key: _get(case, key, list, case_at) for key in ("inputs", "outputs")}
            for key, values in names.items():
                if not all(isinstance(value, str) for value in values):
                    raise _fail(f"{case_at}{key}", "must be a list of names")
            allowed = case.get("allowed")
            if allowed is not None and (
                not isinstance(allowed, list)
                or len(allowed) != len(names["outputs"])
                or not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in allowed)
            ):
                raise _fail(f"{case_at}allowed", "must be null or one number >= 0 per output")
            cases.append(
                GoldenCase(
                    _get(case, "dir", str, case_at),
                    _get(case, "label", str, case_at),
                    tuple(names["inputs"]),
                    tuple(names["outputs"]),
                    None if allowed is None else tuple(float(v) for v in allowed),
                )
            )
        tolerances = {key: float(_get(graph, key, (int, float), at)) for key in ("atol", "rtol")}
        if any(not value >= 0 for value in tolerances.values()):
            raise _fail(f"{at}atol/rtol", "must be numbers >= 0")
        graphs.append(
            GoldenGraph(
                _get(graph, "file", str, at),
                cases=tuple(cases),
                note=_get(graph, "note", str, at) if "note" in graph else "",
                **tolerances,
            )
        )
    end_to_end = _get(item, "end_to_end", (str, type(None)), f"{where}.") if "end_to_end" in item else None
    return Goldens(tuple(graphs), end_to_end)


def _check_weights(manifest: Manifest) -> None:
    """A weights file names one listed graph (a file that is not itself weights) and is not a graph."""
    kinds = {entry.path: entry.kind for entry in manifest.files}
    if len(kinds) != len(manifest.files):
        paths = [entry.path for entry in manifest.files]
        twice = sorted({path for path in paths if paths.count(path) > 1})
        raise _fail("files", f"list {twice} more than once")
    for i, entry in enumerate(manifest.files):
        if entry.kind != WEIGHTS_KIND:
            continue
        graph = entry.options.get("graph")
        if set(entry.options) != {"graph"} or not isinstance(graph, str):
            raise _fail(f"files[{i}].options", 'of a weights file must be {"graph": <the graph\'s path>}')
        if kinds.get(graph) in (None, WEIGHTS_KIND):
            raise _fail(f"files[{i}].options.graph", f"names {graph!r}, which is not a graph in files")
        if entry.path.endswith(".onnx") or entry.path in manifest.graphs.values():
            raise _fail(f"files[{i}]", f"is a weights file but {entry.path!r} is named like a graph")


def _check_goldens(manifest: Manifest) -> None:
    """Every golden file must be a listed (so sha256-checked) file."""
    listed = {entry.path for entry in manifest.files}
    goldens = manifest.goldens
    for i, graph in enumerate(goldens.graphs):
        if graph.file not in listed:
            raise _fail(f"goldens.graphs[{i}].file", f"names {graph.file!r}, which is not in files")
        for case in graph.cases:
            for path in case.input_files() + case.output_files():
                if path not in listed:
                    raise _fail(f"goldens of {graph.file}", f"use {path!r}, which is not in files")
    if goldens.end_to_end is not None and goldens.end_to_end not in listed:
        raise _fail("goldens.end_to_end", f"names {goldens.end_to_end!r}, which is not in files")


def _optional(data: dict, key: str, kind: type) -> Any:
    return _get(data, key, kind, "") if key in data else kind()


def _check_model_fields(manifest: Manifest) -> None:
    if not isinstance(manifest.family, str) or not manifest.family:
        raise _fail("family", "must name the model's architecture for a model export")
    spec = manifest.task_spec
    listed = {entry.path for entry in manifest.files}
    for role in spec.roles:
        if role not in manifest.graphs:
            raise _fail("graphs", f"lacks the {role!r} graph the {manifest.task!r} task needs")
    for role, path in manifest.graphs.items():
        if not isinstance(path, str) or path not in listed:
            raise _fail(f"graphs.{role}", f"names {path!r}, which is not in files")
        if role not in manifest.io:
            raise _fail("io", f"lacks the names of the {role!r} graph's inputs and outputs")
    for role, io in manifest.io.items():
        if role not in manifest.graphs:
            raise _fail(f"io.{role}", "describes a graph that graphs does not list")
        _check_io_names(manifest, role, io)
    if manifest.tokenizer is None or manifest.tokenizer not in listed:
        raise _fail("tokenizer", "must name a file listed in files")
    for name, value in manifest.special_tokens.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _fail(f"special_tokens.{name}", "must be an integer id >= 0")
    shape = manifest.shape
    if spec.text not in manifest.framing:
        raise _fail(
            "framing", f"lacks {spec.text!r}, the framing of the text the {manifest.task!r} task reads"
        )
    for key, framing in manifest.framing.items():
        unknown = [n for n in (*framing.prefix, *framing.suffix) if n not in manifest.special_tokens]
        if unknown:
            raise _fail(f"framing.{key}", f"names {unknown}, which special_tokens lacks")
    if spec.cached:
        _check_cache(manifest.kv_cache, cross=spec.cross)
        generation = manifest.generation
        if generation is None:
            raise _fail("generation", f"is missing; the {manifest.task!r} task decodes with its defaults")
        for token in [*generation.stop_tokens, generation.decoder_start_token_id]:
            if token is not None and token >= shape.vocab_size:
                raise _fail(
                    "generation", f"names token {token}, outside the vocabulary of {shape.vocab_size}"
                )
        if spec.cross and generation.decoder_start_token_id is None:
            raise _fail(
                "generation.decoder_start_token_id", f"is missing; the {manifest.task!r} task needs it"
            )


def _check_io_names(manifest: Manifest, role: str, io: GraphIO) -> None:
    """Every name `io` (and the cache, for the decoder) gives is one the graph's file entry lists."""
    entry = manifest.file(manifest.graphs[role])
    inputs = {spec.name for spec in entry.inputs}
    outputs = {spec.name for spec in entry.outputs}
    wanted_in = list(io.inputs)
    wanted_out = [name.replace("{i}", "0") for name in io.outputs.values()]
    cache = manifest.kv_cache
    if cache is not None and role == "decoder":
        wanted_in += cache.cross_names() + cache.past_names()
        wanted_out += cache.present_names()
    if cache is not None and role == "encoder":
        wanted_out += cache.cross_names()
    missing = [name for name in wanted_in if name not in inputs]
    missing += [name for name in wanted_out if name not in outputs]
    if missing:
        raise _fail(
            f"io.{role}", f"names {missing}, which {entry.path} does not list among its inputs/outputs"
        )


def _check_cache(cache: KVCache | None, *, cross: bool) -> None:
    if cache is None:
        raise _fail("kv_cache", "is missing; a task that decodes step by step needs its cache layout")
    if cross and cache.cross_key is None:
        raise _fail(
            "kv_cache.cross_key/cross_value", "are missing; seq2seq feeds the encoder's keys and values"
        )
    if not cross and cache.cross_key is not None:
        raise _fail("kv_cache.cross_key/cross_value", "must be null for a decoder without an encoder")
    if cross and cache.in_place:
        raise _fail("kv_cache.layout", "max_sequence (an in-place cache) is for decoders without an encoder")
