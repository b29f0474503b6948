"""Reading `manifest.json` into the parts of `manifest_schema`: one table per part (`manifest_keys.Part`),
listing its keys in the order they are read, with the check of each value and the check between its keys.
The checks between parts (a graph's io names in its file entry, ...) are `manifest_checks`'s.
"""

import re
from typing import Any

from onnxformer.runtime.errors import ManifestError
from onnxformer.runtime.manifest_keys import (
    NULLABLE_STR,
    NUMBER,
    DictOf,
    Key,
    ListOf,
    OneOf,
    Part,
    as_float,
    fail,
    names,
    numbers,
    pattern,
    positive,
    read_object,
    to_tuple,
)
from onnxformer.runtime.manifest_schema import (
    CACHE_LAYOUTS,
    DTYPES,
    EXPORT_COMMANDS,
    EXPORT_KINDS,
    FORMAT_VERSION,
    INPUT_NAMES,
    MANIFEST_NAME,
    OUTPUT_KEYS,
    SHAPE_KEYS,
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
    TensorSpec,
)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")

# Files: each entry's tensors and parity figures.


def _dims(shape: list[Any], where: str) -> tuple[int | str, ...]:
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int | str):
            raise fail(where, f"entries must be ints or names, got {dim!r}")
    return tuple(shape)


TENSOR = Part(TensorSpec, (Key("dtype", str, OneOf(DTYPES)), Key("shape", list, _dims), Key("name", str)))


def _reference(value: str, where: str) -> str:
    if value not in ("float32", "float64"):
        raise fail(where, f"must be 'float32' or 'float64', got {value!r}")
    return value


def _same_outputs(parity: Parity, where: str) -> None:
    if parity.reference == "float64" and set(parity.used) != set(parity.error):
        raise fail(f"{where}.used", "must name the same outputs as error")


PARITY = Part(
    Parity,
    (
        Key("max_abs_diff", dict, numbers),
        Key("reference", str, _reference, optional="absent"),
        Key("tolerance", NUMBER, as_float),
        Key("cases", int),
        Key("shapes", list, to_tuple, optional="absent"),
        Key("rtol", NUMBER, as_float, optional="absent"),
        Key("max_abs_value", dict, numbers, optional="absent"),
        Key("factor", NUMBER, as_float, optional="absent"),
        Key("floor", NUMBER, as_float, optional="absent"),
        *(Key(name, dict, numbers, optional="absent") for name in ("error", "torch_error", "used")),
    ),
    check=_same_outputs,
    nullable=True,
)


def _sha256(value: str, where: str) -> str:
    if not _SHA256.match(value):
        raise fail(where, "must be 64 lowercase hex characters")
    return value


def _size(value: int, where: str) -> int:
    if value < 0:
        raise fail(where, "must be >= 0")
    return value


FILE = Part(
    FileEntry,
    (
        Key("sha256", str, _sha256),
        Key("size", int, _size),
        Key("path", str),
        Key("kind", str),
        Key("options", dict),
        Key("inputs", list, ListOf(TENSOR)),
        Key("outputs", list, ListOf(TENSOR)),
        Key("parity", None, PARITY, optional="absent"),
    ),
)

# The model contract: io, kv_cache, generation, framing, the config's shape.


def _fed(value: list[Any], where: str) -> tuple[str, ...]:
    inputs = names(value, where)
    unknown = [name for name in inputs if name not in INPUT_NAMES]
    if unknown:
        raise fail(where, f"names {unknown}, which this runtime cannot feed (it feeds {INPUT_NAMES})")
    return inputs


def _read(outputs: dict[str, Any], where: str) -> dict[str, str]:
    for key, name in outputs.items():
        if key not in OUTPUT_KEYS:
            raise fail(f"{where}.{key}", f"is not an output this runtime reads ({OUTPUT_KEYS})")
        if not isinstance(name, str) or not name:
            raise fail(f"{where}.{key}", "must be a graph output name")
    return dict(outputs)


GRAPH_IO = Part(GraphIO, (Key("inputs", list, _fed), Key("outputs", dict, _read)))


def _layout(value: list[Any], where: str) -> tuple[str, ...]:
    layout = names(value, where)
    if layout not in CACHE_LAYOUTS:
        raise fail(
            where,
            f"must be one of {[list(known) for known in CACHE_LAYOUTS]} (the layouts this runtime feeds), "
            f"got {list(layout)}; re-export with this version",
        )
    return layout


def _cross_pair(cache: KVCache, where: str) -> None:
    if (cache.cross_key is None) != (cache.cross_value is None):
        raise fail(f"{where}.cross_key/cross_value", "must both be names or both be null")


KV_CACHE = Part(
    KVCache,
    (
        Key("layout", list, _layout),
        Key("cross_key", str, pattern, optional="absent or null"),
        Key("cross_value", str, pattern, optional="absent or null"),
        *(Key(name, int, positive) for name in ("layers", "kv_heads", "head_dim")),
        *(Key(name, str, pattern) for name in ("past_key", "past_value", "present_key", "present_value")),
    ),
    check=_cross_pair,
    nullable=True,
)


def _in_range(defaults: GenerationDefaults, where: str) -> None:
    if defaults.max_new_tokens < 0:
        raise fail(f"{where}.max_new_tokens", "must be an integer >= 0")
    if not defaults.temperature >= 0:
        raise fail(f"{where}.temperature", "must be a number >= 0 (0 is greedy)")
    if defaults.top_k < 0:
        raise fail(f"{where}.top_k", "must be an integer >= 0 (0: no top-k cut)")
    if not 0 < defaults.top_p <= 1:
        raise fail(f"{where}.top_p", "must be a number in (0, 1]")
    for value in [*defaults.stop_tokens, defaults.decoder_start_token_id]:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise fail(
                f"{where}.stop_tokens/decoder_start_token_id", f"must be token ids >= 0, got {value!r}"
            )


GENERATION = Part(
    GenerationDefaults,
    (
        Key("max_new_tokens", int),
        Key("temperature", NUMBER, as_float),
        Key("top_k", int),
        Key("top_p", NUMBER, as_float),
        Key("stop_tokens", list, to_tuple),
        Key("decoder_start_token_id", (int, type(None)), optional="absent"),
    ),
    check=_in_range,
    nullable=True,
)


def _room_for_text(framing: Framing, where: str) -> None:
    special = len(framing.prefix) + len(framing.suffix)
    if framing.max_length is not None and framing.max_length <= special:
        raise fail(
            f"{where}.max_length",
            f"is {framing.max_length}, which leaves no room for a text beside its {special} special tokens",
        )


FRAMING = Part(
    Framing,
    (
        Key("prefix", list, names),
        Key("suffix", list, names),
        Key("max_length", int, positive, optional="absent or null"),
    ),
    check=_room_for_text,
    problem="must be an object with prefix and suffix lists",
)
SHAPE = Part(
    ModelShape,
    (
        *(Key(name, int, positive) for name in SHAPE_KEYS),
        Key("num_labels", int, positive, optional="absent or null"),
    ),
)


def parse_shape(config: dict[str, Any]) -> ModelShape:
    """The common part of a model's config, typed."""
    shape: ModelShape = SHAPE(config, "config")
    return shape


# Goldens: the cases of each graph.


def _labels(value: list[Any], where: str) -> tuple[str, ...]:
    if not all(isinstance(item, str) for item in value):
        raise fail(where, "must be a list of names")
    return tuple(value)


def _allowances(value: Any, where: str) -> tuple[float, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, NUMBER) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise fail(where, "must be null or one number >= 0 per output")
    return tuple(float(v) for v in value)


def _one_per_output(case: GoldenCase, where: str) -> None:
    if case.allowed is not None and len(case.allowed) != len(case.outputs):
        raise fail(f"{where}.allowed", "must be null or one number >= 0 per output")


GOLDEN_CASE = Part(
    GoldenCase,
    (
        Key("inputs", list, _labels),
        Key("outputs", list, _labels),
        Key("allowed", None, _allowances, optional="absent or null"),
        Key("dir", str),
        Key("label", str),
    ),
    check=_one_per_output,
)


def _tolerances(graph: GoldenGraph, where: str) -> None:
    if not (graph.atol >= 0 and graph.rtol >= 0):
        raise fail(f"{where}.atol/rtol", "must be numbers >= 0")


GOLDEN_GRAPH = Part(
    GoldenGraph,
    (
        Key("cases", list, ListOf(GOLDEN_CASE)),
        Key("atol", NUMBER, as_float),
        Key("rtol", NUMBER, as_float),
        Key("file", str),
        Key("note", str, optional="absent"),
    ),
    check=_tolerances,
)
GOLDENS = Part(
    Goldens,
    (Key("graphs", list, ListOf(GOLDEN_GRAPH)), Key("end_to_end", NULLABLE_STR, optional="absent")),
    nullable=True,
)

# The whole file (a `Manifest`'s fields; `manifest.py` builds it).


def _strings(value: dict[str, Any], where: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()}


MANIFEST = (
    Key("versions", dict, _strings),
    Key("export_kind", str, OneOf(EXPORT_KINDS)),
    Key("opset", int),
    Key("files", list, ListOf(FILE)),
    Key("family", NULLABLE_STR, optional="absent"),
    Key("task", NULLABLE_STR, optional="absent"),
    Key("config", dict, optional="absent"),
    Key("tokenizer", NULLABLE_STR, optional="absent"),
    Key("special_tokens", dict, optional="absent"),
    Key("graphs", dict, optional="absent"),
    Key("io", dict, DictOf(GRAPH_IO), optional="absent"),
    Key("kv_cache", None, KV_CACHE, optional="absent"),
    Key("generation", None, GENERATION, optional="absent"),
    Key("framing", dict, DictOf(FRAMING), optional="absent"),
    Key("extra", dict, optional="absent"),
    Key("goldens", None, GOLDENS, optional="absent"),
)


def read_manifest(data: Any) -> dict[str, Any]:
    """The fields of a `Manifest`, read from the parsed JSON `data`. A format version other than this
    runtime's is refused before anything else, with the way to a folder it reads."""
    if not isinstance(data, dict):
        raise fail("the top level", "must be a JSON object")
    version = read_object(data, (Key("format_version", int),), "")["format_version"]
    if version != FORMAT_VERSION:
        raise _unsupported(version, data.get("export_kind"))
    read_object(data, (Key("files", list),), "")  # without a list of files, JSON is no export's manifest
    return {"format_version": version, **read_object(data, MANIFEST, "")}


def _unsupported(version: int, kind: Any) -> ManifestError:
    reads = (
        f"{MANIFEST_NAME}: format_version {version} is not supported (this onnxformer reads {FORMAT_VERSION})"
    )
    if version > FORMAT_VERSION:
        return ManifestError(f"{reads}; upgrade onnxformer to read it")
    command = EXPORT_COMMANDS.get(kind) if isinstance(kind, str) else None
    how = f"`{command}`" if command else " or ".join(f"`{c}`" for c in EXPORT_COMMANDS.values())
    return ManifestError(f"{reads}; re-export the folder with this onnxformer: {how}")
