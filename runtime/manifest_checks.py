"""The checks between the parts of a read manifest: what one part names, another must hold.

A weights file names a listed graph; goldens use listed files; and for a model export, the task's graphs,
io names, tokenizer, special tokens, framing, KV cache and generation defaults agree with each other and
with the file entries. The first problem found is raised (`manifest_keys.fail`).
"""

from typing import TYPE_CHECKING

from onnxformer.runtime.manifest_keys import fail
from onnxformer.runtime.manifest_schema import WEIGHTS_KIND, Goldens, GraphIO, KVCache, TaskSpec

if TYPE_CHECKING:
    from onnxformer.runtime.manifest import Manifest


def check_manifest(manifest: "Manifest") -> None:
    """Refuse `manifest` when its parts disagree."""
    _check_weights(manifest)
    if manifest.goldens is not None:
        _check_goldens(manifest, manifest.goldens)
    if manifest.export_kind == "model":
        _check_model_fields(manifest)


def _check_weights(manifest: "Manifest") -> None:
    """A weights file names one listed graph (a file that is not itself weights) and is not a graph."""
    kinds = {entry.path: entry.kind for entry in manifest.files}
    if len(kinds) != len(manifest.files):
        paths = [entry.path for entry in manifest.files]
        twice = sorted({path for path in paths if paths.count(path) > 1})
        raise fail("files", f"list {twice} more than once")
    for i, entry in enumerate(manifest.files):
        if entry.kind != WEIGHTS_KIND:
            continue
        graph = entry.options.get("graph")
        if set(entry.options) != {"graph"} or not isinstance(graph, str):
            raise fail(f"files[{i}].options", 'of a weights file must be {"graph": <the graph\'s path>}')
        if kinds.get(graph) in (None, WEIGHTS_KIND):
            raise fail(f"files[{i}].options.graph", f"names {graph!r}, which is not a graph in files")
        if entry.path.endswith(".onnx") or entry.path in manifest.graphs.values():
            raise fail(f"files[{i}]", f"is a weights file but {entry.path!r} is named like a graph")


def _check_goldens(manifest: "Manifest", goldens: Goldens) -> None:
    """Every golden file must be a listed (so sha256-checked) file."""
    listed = {entry.path for entry in manifest.files}
    for i, graph in enumerate(goldens.graphs):
        if graph.file not in listed:
            raise fail(f"goldens.graphs[{i}].file", f"names {graph.file!r}, which is not in files")
        for case in graph.cases:
            for path in case.input_files() + case.output_files():
                if path not in listed:
                    raise fail(f"goldens of {graph.file}", f"use {path!r}, which is not in files")
    if goldens.end_to_end is not None and goldens.end_to_end not in listed:
        raise fail("goldens.end_to_end", f"names {goldens.end_to_end!r}, which is not in files")


def _check_model_fields(manifest: "Manifest") -> None:
    """A model export: its family and task, the task's graphs and their io names, the tokenizer and special
    tokens, the config's common fields, the framing, and for a task that decodes, its cache and defaults."""
    if not isinstance(manifest.family, str) or not manifest.family:
        raise fail("family", "must name the model's architecture for a model export")
    spec = manifest.task_spec
    listed = {entry.path for entry in manifest.files}
    _check_graphs(manifest, spec, listed)
    if manifest.tokenizer is None or manifest.tokenizer not in listed:
        raise fail("tokenizer", "must name a file listed in files")
    for name, value in manifest.special_tokens.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise fail(f"special_tokens.{name}", "must be an integer id >= 0")
    shape = manifest.shape  # refuses a config without its common fields
    _check_framing(manifest, spec)
    if spec.cached:
        _check_cache(manifest.kv_cache, cross=spec.cross)
        _check_generation(manifest, spec, shape.vocab_size)


def _check_graphs(manifest: "Manifest", spec: TaskSpec, listed: set[str]) -> None:
    """The task's graphs are listed files, each with the io names the runtime feeds and reads."""
    for role in spec.roles:
        if role not in manifest.graphs:
            raise fail("graphs", f"lacks the {role!r} graph the {manifest.task!r} task needs")
    for role, path in manifest.graphs.items():
        if not isinstance(path, str) or path not in listed:
            raise fail(f"graphs.{role}", f"names {path!r}, which is not in files")
        if role not in manifest.io:
            raise fail("io", f"lacks the names of the {role!r} graph's inputs and outputs")
    for role, io in manifest.io.items():
        if role not in manifest.graphs:
            raise fail(f"io.{role}", "describes a graph that graphs does not list")
        _check_io_names(manifest, role, io)


def _check_framing(manifest: "Manifest", spec: TaskSpec) -> None:
    """The text the task reads has a framing, and every framing names known special tokens."""
    if spec.text not in manifest.framing:
        raise fail(
            "framing", f"lacks {spec.text!r}, the framing of the text the {manifest.task!r} task reads"
        )
    for key, framing in manifest.framing.items():
        unknown = [n for n in (*framing.prefix, *framing.suffix) if n not in manifest.special_tokens]
        if unknown:
            raise fail(f"framing.{key}", f"names {unknown}, which special_tokens lacks")


def _check_generation(manifest: "Manifest", spec: TaskSpec, vocab_size: int) -> None:
    """A decoding task has defaults, whose token ids are in the vocabulary."""
    generation = manifest.generation
    if generation is None:
        raise fail("generation", f"is missing; the {manifest.task!r} task decodes with its defaults")
    for token in [*generation.stop_tokens, generation.decoder_start_token_id]:
        if token is not None and token >= vocab_size:
            raise fail("generation", f"names token {token}, outside the vocabulary of {vocab_size}")
    if spec.cross and generation.decoder_start_token_id is None:
        raise fail("generation.decoder_start_token_id", f"is missing; the {manifest.task!r} task needs it")


def _check_io_names(manifest: "Manifest", role: str, io: GraphIO) -> None:
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
        raise fail(
            f"io.{role}", f"names {missing}, which {entry.path} does not list among its inputs/outputs"
        )


def _check_cache(cache: KVCache | None, *, cross: bool) -> None:
    if cache is None:
        raise fail("kv_cache", "is missing; a task that decodes step by step needs its cache layout")
    if cross and cache.cross_key is None:
        raise fail(
            "kv_cache.cross_key/cross_value", "are missing; seq2seq feeds the encoder's keys and values"
        )
    if not cross and cache.cross_key is not None:
        raise fail("kv_cache.cross_key/cross_value", "must be null for a decoder without an encoder")
    if cross and cache.in_place:
        raise fail("kv_cache.layout", "max_sequence (an in-place cache) is for decoders without an encoder")
