"""The ecosystem's loaders on an export: the files Optimum's ORTModel classes and transformers.js expect,
written into an export of an imported Hugging Face folder and listed (sha256) in its manifest, so that
our runtime still checks every byte and those loaders open the folder as it is.

    write_layout("exported/gpt2", "path/to/hf-folder", layout="optimum")

adds the source folder's config.json (with `"transformers.js_config": {"dtype": "fp32"}`, so that
transformers.js picks the fp32 graphs on every device), generation_config.json, tokenizer_config.json (a
transformers 5 `TokenizersBackend` named `PreTrainedTokenizerFast`, the same class under the name
transformers 4 also reads) and special_tokens_map.json where the folder has them, and under onnx/ the
graphs by the names both loaders look for:

  task      onnx/                                          made from
  generate  model.onnx                                     decoder.onnx
  encode    model.onnx                                     encoder.onnx
  seq2seq   encoder_model.onnx, decoder_model_merged.onnx  encoder.onnx; a decoder exported here

transformers.js reads onnx/<name>.onnx (its default subfolder and fp32 file names); Optimum searches the
folder recursively for the same names (`model.onnx`, `encoder_model.onnx`, `decoder_model_merged.onnx`).

A copied graph computes exactly what ours does: only its symbolic axes are renamed to Optimum's
(`batch_size`, `past_sequence_length`, ...), because transformers.js sizes the empty first-step cache from
the input's axis names (`batch_size` is the one it fills in; any other name becomes 0). Its goldens are
the original's cases, so `onnxformer verify` runs them on the copy too. A BERT with a masked-LM or
classification head also gets that head's output under the name the loaders' head classes read,
`logits` (an Identity of `mlm_logits` / `class_logits`).

T5's decoder is the one graph that cannot be copied: ours takes every layer's cross-attention keys and
values (computed once by our encoder graph), while both loaders feed `encoder_hidden_states`. So the
seq2seq layout exports one more graph through the same pipeline (parity against PyTorch, goldens): a
decoder over `input_ids`, `encoder_attention_mask`, `encoder_hidden_states` and the self-attention cache
`past_key_values.{i}.decoder.key/value` (the names transformers.js derives from config.json), returning
`logits` and `present.{i}.decoder.key/value`. It computes the cross-attention keys and values from
`encoder_hidden_states` at every step; it has no `use_cache_branch` input (both loaders feed one only
to a graph that declares it), and no `present.{i}.encoder.*` outputs (both loaders then carry only the
self-attention cache).
"""

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

import onnx
import torch
from torch import nn

from onnxformer.builder.export.folder import write_export_folder
from onnxformer.builder.export.graph import io_specs
from onnxformer.builder.export.parity import Cases
from onnxformer.builder.export.pipeline import GraphSpec, export_one
from onnxformer.builder.export.recipes.base import (
    TRACE_BATCH,
    TRACE_LENGTH,
    TRACE_PAST,
    TRACE_SOURCE,
    empty_cache,
    flatten,
    random_cache,
    random_ids,
)
from onnxformer.builder.export.samples import padded_mask
from onnxformer.builder.families import T5
from onnxformer.builder.families.config import same_config
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.folder import ExportFolder, sha256_bytes
from onnxformer.runtime.manifest import WEIGHTS_KIND, FileEntry, Goldens, Manifest, Task

Layout = Literal["onnxformer", "optimum"]
LAYOUTS: tuple[str, ...] = ("onnxformer", "optimum")
SUBFOLDER = "onnx"
# Copied as they are from the Hugging Face folder (config.json is written with transformers.js' dtype).
SIDE_FILES = ("generation_config.json", "special_tokens_map.json")
CONFIG = "config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# transformers 5 saves its generic tokenizers.json-backed class as TokenizersBackend, which transformers 4
# (the one Optimum pins) does not know; PreTrainedTokenizerFast is the same class under the name both read.
TOKENIZER_CLASSES = {"TokenizersBackend": "PreTrainedTokenizerFast"}
# Our axis names -> Optimum's (optimum/exporters/onnx/model_configs.py), the names transformers.js reads.
AXES = {
    "batch": "batch_size",
    "sequence": "sequence_length",
    "past_sequence": "past_sequence_length",
    "total_sequence": "total_sequence_length",
    "encoder_sequence": "encoder_sequence_length",
}
# task -> (our graph role, the loaders' file name) for the graphs copied with renamed axes.
COPIES: dict[Task, tuple[tuple[str, str], ...]] = {
    "generate": (("decoder", "model.onnx"),),
    "encode": (("encoder", "model.onnx"),),
    "seq2seq": (("encoder", "encoder_model.onnx"),),
}
# The encoder heads (manifest output keys) that the loaders' head classes read as `logits`
# (ORTModelForMaskedLM / ORTModelForSequenceClassification, transformers.js' ...ForMaskedLM / ...): an
# imported checkpoint has the head its architecture has, which the manifest lists among the outputs.
HEADS = ("mlm_logits", "class_logits")
MERGED_DECODER = "decoder_model_merged.onnx"
DECODER_PAST_KEY, DECODER_PAST_VALUE = "past_key_values.{i}.decoder.key", "past_key_values.{i}.decoder.value"
DECODER_PRESENT_KEY, DECODER_PRESENT_VALUE = "present.{i}.decoder.key", "present.{i}.decoder.value"


def write_layout(export_dir: str | os.PathLike, source: str | os.PathLike, *, layout: Layout) -> Manifest:
    """Add `layout`'s files to the export at `export_dir`, made from the Hugging Face folder `source` it
    was exported from; returns the new manifest. "onnxformer" (our own layout) adds nothing."""
    if layout not in LAYOUTS:
        raise ExportError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    export = ExportFolder.open(export_dir)
    if layout == "onnxformer":
        return export.manifest
    manifest = export.manifest
    source = Path(source)
    task = _check_source(manifest, source, export_dir)
    files = {entry.path: export.read(entry.path) for entry in manifest.files}
    entries = list(manifest.files)
    golden_graphs = list(manifest.goldens.graphs) if manifest.goldens else []

    def add(path: str, data: bytes, entry: FileEntry) -> None:
        if path in files:
            raise ExportError(f"{export_dir} already has {path}; export again without --layout first")
        files[path] = data
        entries.append(entry)

    for path, data in _side_files(source).items():
        add(path, data, FileEntry(path, sha256_bytes(data), len(data), "layout", {"layout": layout}, (), ()))
    goldens_of = {graph.file: graph for graph in golden_graphs}
    for role, name in COPIES[task]:
        original = manifest.file(manifest.graphs[role])
        path = f"{SUBFOLDER}/{name}"
        aliases = {"logits": head} if role == "encoder" and (head := _head(manifest, role)) else {}
        data, entry = _renamed_copy(original, files[original.path], path, layout, aliases)
        add(path, data, entry)
        if original.path in goldens_of:
            golden_graphs.append(dataclasses.replace(goldens_of[original.path], file=path))
    if task == "seq2seq":
        exported = _merged_decoder(manifest, source, layout)
        for entry in exported.entries:
            add(entry.path, exported.files[entry.path], entry)
        golden_graphs.append(exported.goldens)
    goldens = manifest.goldens or Goldens((), None)
    updated = dataclasses.replace(
        manifest,
        files=tuple(entries),
        extra={**manifest.extra, "layout": layout},
        goldens=dataclasses.replace(goldens, graphs=tuple(golden_graphs)),
    )
    write_export_folder(Path(export_dir), files, updated)
    return updated


def _head(manifest: Manifest, role: str) -> str | None:
    """The graph's output that the loaders' head classes read as `logits`: its one head, if it has one."""
    outputs = manifest.io[role].outputs if role in manifest.io else {}
    heads = [outputs[key] for key in HEADS if key in outputs]
    return heads[0] if len(heads) == 1 else None


def check_layout_source(source: str | os.PathLike, *, layout: Layout) -> None:
    """Before an export: a layout other than ours needs a Hugging Face folder (its config.json)."""
    from onnxformer.builder.pretrained import is_pretrained_folder

    if layout != "onnxformer" and not is_pretrained_folder(source):
        raise ExportError(
            f"--layout {layout} needs a Hugging Face model folder (config.json, model.safetensors), and "
            f"{source} is not one; export a training checkpoint without --layout"
        )


def _check_source(manifest: Manifest, source: Path, export_dir: str | os.PathLike) -> Task:
    """Refuse an export `--layout optimum` cannot extend from `source`; the export's task (one in COPIES)."""
    imported = manifest.extra.get("source")
    if manifest.export_kind != "model" or not isinstance(imported, dict):
        raise ExportError(
            f"{export_dir} is not an export of a Hugging Face folder; --layout optimum needs one "
            "(the loaders read its config.json)"
        )
    task = manifest.task
    if task is None or task not in COPIES:
        raise ExportError(f"--layout optimum has no file names for the {task!r} task")
    if any(entry.kind == WEIGHTS_KIND for entry in manifest.files):
        raise ExportError(
            f"{export_dir} keeps weights in external data files; --layout optimum copies whole graphs "
            "and supports only graphs that hold their weights: export again without --external-data"
        )
    config = _read_json(source / CONFIG)
    architecture = (config.get("architectures") or [None])[0]
    if architecture != imported.get("architecture"):
        raise ExportError(
            f"{source} holds a {architecture} model but {export_dir} was exported from a "
            f"{imported.get('architecture')}; pass the Hugging Face folder the export was made from"
        )
    return task


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(
            f"{path} does not exist; pass the Hugging Face folder the export was made from"
        ) from None
    except (UnicodeDecodeError, ValueError) as error:
        raise ExportError(f"{path} is not JSON ({error}); pass the Hugging Face folder's own file") from None
    if not isinstance(data, dict):
        raise ExportError(f"{path} is not a JSON object; pass the Hugging Face folder's own file")
    return data


def _side_files(source: Path) -> dict[str, bytes]:
    """config.json (fp32 for transformers.js) and the side files the source folder has."""
    config = _read_json(source / CONFIG)
    js_config = {**config.get("transformers.js_config", {}), "dtype": "fp32"}
    files = {CONFIG: (json.dumps({**config, "transformers.js_config": js_config}, indent=2) + "\n").encode()}
    for name in SIDE_FILES:
        if (source / name).is_file():
            files[name] = (source / name).read_bytes()
    if (source / TOKENIZER_CONFIG).is_file():
        tokenizer = _read_json(source / TOKENIZER_CONFIG)
        named = tokenizer.get("tokenizer_class")
        if named in TOKENIZER_CLASSES:
            tokenizer = {**tokenizer, "tokenizer_class": TOKENIZER_CLASSES[named]}
            files[TOKENIZER_CONFIG] = (json.dumps(tokenizer, indent=2) + "\n").encode()
        else:
            files[TOKENIZER_CONFIG] = (source / TOKENIZER_CONFIG).read_bytes()
    return files


def _renamed_axis(name: str) -> str:
    """An axis name, or an expression of them (`past_sequence + sequence`), in Optimum's words."""
    return re.sub(r"[A-Za-z_]\w*", lambda m: AXES.get(m.group(), m.group()), name)


def _renamed_copy(
    original: FileEntry, data: bytes, path: str, layout: str, aliases: dict[str, str]
) -> tuple[bytes, FileEntry]:
    """The graph `data` with its symbolic axes renamed (the computation untouched) and each alias
    (new output name -> one of its outputs) added as an Identity of that output; and its entry."""
    model = onnx.load_from_string(data)
    graph = model.graph
    for value in [*graph.input, *graph.output, *graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_param = _renamed_axis(dim.dim_param)
    by_name = {value.name: value for value in graph.output}
    for alias, name in aliases.items():
        if alias in by_name or name not in by_name:
            raise ExportError(f"{original.path}: cannot add output {alias!r} as a copy of {name!r}")
        graph.node.append(onnx.helper.make_node("Identity", [name], [alias], name=f"layout_{alias}"))
        value = graph.output.add()
        value.CopyFrom(by_name[name])
        value.name = alias
    copy = model.SerializeToString()
    inputs, outputs = io_specs(model)
    options = {**original.options, "layout": layout, "copy_of": original.path, "aliases": aliases}
    entry = FileEntry(
        path, sha256_bytes(copy), len(copy), original.kind, options, inputs, outputs, original.parity
    )
    return copy, entry


class MergedDecoder(nn.Module):
    """T5's decoder as the loaders run it: from the encoder's hidden states, not from cross K/V."""

    def __init__(self, model: T5) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids,  # (B, T)
        encoder_attention_mask,  # (B, S)
        encoder_hidden_states,  # (B, S, D)
        past_key_values,  # per layer (B, H, P, Dh) x2
    ):
        out = self.model.decode(
            input_ids,
            cross_key_values=self.model.cross_key_values(encoder_hidden_states),
            encoder_attention_mask=encoder_attention_mask,
            past_key_values=past_key_values,
        )
        return out.logits, *flatten(out.present)


def _names(key: str, value: str, layers: int) -> list[str]:
    return [pattern.format(i=i) for i in range(layers) for pattern in (key, value)]


@torch.no_grad()
def _merged_cases(model: T5, generator: torch.Generator) -> Cases:
    """First steps over padded sources, then a cached step on the cache PyTorch produced."""
    layers = model.config.decoder_layers
    for batch, source in ((1, 4), (3, 11), (2, model.config.max_len)):
        source_mask = padded_mask(batch, source, side="right", step=2)
        memory = model.encode(random_ids(model, batch, source, generator), attention_mask=source_mask).hidden
        for length in (1, 4):
            ids = random_ids(model, batch, length, generator)
            first = {
                "input_ids": ids,
                "encoder_attention_mask": source_mask,
                "encoder_hidden_states": memory,
                "past_key_values": empty_cache(model, batch, layers=layers),
            }
            yield f"first step B={batch} S={source} T={length}", first
            past = MergedDecoder(model)(**first)[1:]
            cached = {
                **first,
                "input_ids": random_ids(model, batch, 1, generator),
                "past_key_values": tuple(zip(past[::2], past[1::2], strict=True)),
            }
            yield f"cached step B={batch} S={source} P={length} T=1", cached


def _merged_decoder(manifest: Manifest, source: Path, layout: str):
    """onnx/decoder_model_merged.onnx, exported and proven like every graph of ours."""
    from onnxformer.builder.pretrained import from_pretrained

    model = from_pretrained(source).model.eval()
    if not isinstance(model, T5) or not same_config(model.config, manifest.config):
        raise ExportError(
            f"{source} does not hold the model the export was made from (the configs differ); pass the "
            "Hugging Face folder it was exported from"
        )
    layers = model.config.decoder_layers
    cache_axes = ("batch_size", None, "past_decoder_sequence_length", None)
    source_axes = ("batch_size", "encoder_sequence_length")
    spec = GraphSpec(
        filename=f"{SUBFOLDER}/{MERGED_DECODER}",
        kind="decoder",
        options={"family": manifest.family, "layout": layout},
        example={
            "input_ids": random_ids(model, TRACE_BATCH, TRACE_LENGTH),
            "encoder_attention_mask": torch.ones(TRACE_BATCH, TRACE_SOURCE, dtype=torch.long),
            "encoder_hidden_states": torch.randn(TRACE_BATCH, TRACE_SOURCE, model.config.d_model),
            "past_key_values": random_cache(model, TRACE_BATCH, TRACE_PAST, layers=layers),
        },
        dim_names={
            "input_ids": ("batch_size", "decoder_sequence_length"),
            "encoder_attention_mask": source_axes,
            "encoder_hidden_states": (*source_axes, None),
            **dict.fromkeys(_names(DECODER_PAST_KEY, DECODER_PAST_VALUE, layers), cache_axes),
        },
        output_names=("logits", *_names(DECODER_PRESENT_KEY, DECODER_PRESENT_VALUE, layers)),
        cases=lambda: _merged_cases(model, torch.Generator().manual_seed(0)),
        metadata={"onnxformer.family": str(manifest.family), "onnxformer.role": "decoder", "layout": layout},
    )
    return export_one(spec, MergedDecoder(model), opset=manifest.opset)
