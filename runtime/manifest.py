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

This module is the `Manifest` and the names the rest of onnxformer imports; the code behind it is split by
concern: `manifest_schema` (the parts and the runtime's vocabularies), `manifest_parse` (reading JSON into
the parts, one table of keys per part, through `manifest_keys`) and `manifest_checks` (the checks between
parts).
"""

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from onnxformer.runtime.errors import ManifestError
from onnxformer.runtime.manifest_checks import check_manifest
from onnxformer.runtime.manifest_keys import fail
from onnxformer.runtime.manifest_parse import parse_shape, read_manifest
from onnxformer.runtime.manifest_schema import (
    CACHE_LAYOUT,
    CACHE_LAYOUTS,
    DTYPES,
    EXPORT_COMMANDS,
    EXPORT_KINDS,
    FORMAT_VERSION,
    IN_PLACE_LAYOUT,
    INPUT_NAMES,
    MANIFEST_NAME,
    OUTPUT_KEYS,
    SHAPE_KEYS,
    TASKS,
    WEIGHTS_KIND,
    FileEntry,
    Framing,
    GenerationDefaults,
    GoldenCase,
    GoldenGraph,
    Goldens,
    GraphIO,
    KVCache,
    ModelShape,
    Parity,
    Task,
    TaskSpec,
    TensorSpec,
    allowed_difference,
)

__all__ = [
    "CACHE_LAYOUT",
    "CACHE_LAYOUTS",
    "DTYPES",
    "EXPORT_COMMANDS",
    "EXPORT_KINDS",
    "FORMAT_VERSION",
    "INPUT_NAMES",
    "IN_PLACE_LAYOUT",
    "MANIFEST_NAME",
    "OUTPUT_KEYS",
    "SHAPE_KEYS",
    "TASKS",
    "WEIGHTS_KIND",
    "FileEntry",
    "Framing",
    "GenerationDefaults",
    "GoldenCase",
    "GoldenGraph",
    "Goldens",
    "GraphIO",
    "KVCache",
    "Manifest",
    "ModelShape",
    "Parity",
    "Task",
    "TaskSpec",
    "TensorSpec",
    "allowed_difference",
]


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
        return parse_shape(self.config)

    @property
    def task_spec(self) -> TaskSpec:
        if self.task not in TASKS:
            raise fail("task", f"must be one of {tuple(TASKS)} for a model export, got {self.task!r}")
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
        manifest = cls(**read_manifest(data))
        check_manifest(manifest)
        return manifest
