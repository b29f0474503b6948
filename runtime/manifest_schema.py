"""The parts of `manifest.json` (`onnxformer.runtime.manifest` re-exports every name here).

Each part is a frozen dataclass whose fields are the JSON keys, and the vocabularies beside them are what a
runtime knows how to run: the tasks (`TASKS`), the graph inputs it feeds (`INPUT_NAMES`), the outputs it
reads (`OUTPUT_KEYS`) and the cache layouts (`CACHE_LAYOUTS`). `manifest_parse` reads JSON into these
types; `manifest_checks` checks a whole manifest's parts against each other.
"""

from dataclasses import dataclass, field
from typing import Any, Literal

FORMAT_VERSION = 2
MANIFEST_NAME = "manifest.json"
DTYPES = ("float32", "float16", "int64", "int32", "bool")
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
