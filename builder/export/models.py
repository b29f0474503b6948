"""Whole-model export: a trained checkpoint to a self-describing folder the torch-free runtime loads.

    export_checkpoint("runs/gpt", "exported/gpt")

writes the graphs of the family's recipe (builder/export/recipes: GPT a decoder, BERT an encoder, T5 an
encoder and a decoder, and an attention-weights graph for each), the model's own blocks under `blocks/`,
`tokenizer.json`, goldens, and `manifest.json` with the config, KV-cache layout, special tokens, framing,
generation defaults and the parity figures measured here. Every graph goes through the same pipeline as
the catalogue's blocks (`pipeline.export_one`); one that misses its tolerance fails the export and nothing
is written.
"""

import dataclasses
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn

from onnxformer.builder.export.blocks import block_graph
from onnxformer.builder.export.catalog import BlockDims, BlockSpec
from onnxformer.builder.export.folder import write_export_folder
from onnxformer.builder.export.goldens import END_TO_END_FILE, end_to_end, golden_entries
from onnxformer.builder.export.graph import DEFAULT_OPSET, check_opset
from onnxformer.builder.export.parity import ParityRule
from onnxformer.builder.export.pipeline import GraphSpec, export_one, reprove
from onnxformer.builder.export.recipes import recipe, recipe_for
from onnxformer.builder.export.recipes.base import EndToEnd, ModelGraph, Recipe
from onnxformer.builder.families import FamilyModel
from onnxformer.builder.families.config import head_width, kv_heads, same_config
from onnxformer.builder.layers.blocks import DecoderBlock, EncoderBlock
from onnxformer.builder.tokenizer import special_tokens
from onnxformer.builder.training.checkpoint import CHECKPOINT_NAME, CheckpointError, load_checkpoint
from onnxformer.builder.versions import tool_versions
from onnxformer.runtime.errors import ExportError, ModelImportError, OnnxformerError
from onnxformer.runtime.folder import ExportFolder, sha256_bytes
from onnxformer.runtime.manifest import TASKS, FileEntry, Framing, Goldens, Manifest, Parity

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
Progress = Callable[[str, int, int], None]  # (file, index, total)


def model_graph(
    graph: ModelGraph[Any], model: FamilyModel, *, family: str, seed: int, metadata: dict
) -> GraphSpec:
    """The pipeline's description of one of a model's graphs."""
    config = model.config
    return GraphSpec(
        filename=graph.filename,
        kind=graph.role,
        options={"family": family},
        example=graph.example(model),
        dim_names=graph.dim_names(config),
        output_names=tuple(graph.output_names(config)),
        cases=lambda: graph.cases(model, torch.Generator().manual_seed(seed)),
        metadata={**metadata, "onnxformer.role": graph.role},
    )


def model_blocks(family_recipe: Recipe[Any], model: FamilyModel) -> Iterator[tuple[BlockSpec, nn.Module]]:
    """The model's own blocks, each with the catalogue spec (inputs, options) of its kind."""
    for stack in family_recipe.blocks(model):
        for index, block in enumerate(stack.blocks):
            name = f"blocks/{stack.stack}_layer_{index}"
            # the layer's own options: a per-layer pattern (local and global attention) differs by layer
            own = block.options.described() if isinstance(block, EncoderBlock | DecoderBlock) else {}
            options = {**stack.template.options, **own, "layer": index, "stack": stack.stack}
            yield dataclasses.replace(stack.template, name=name, options=options), stack.wrap(block).eval()


def _dims(config) -> BlockDims:
    return BlockDims(
        config.d_model,
        config.n_heads,
        config.d_ff,
        config.max_len,
        n_kv_heads=kv_heads(config),
        head_width=head_width(config),
    )


@dataclass(frozen=True)
class ExportSource:
    """What a whole-model export is made from: a training checkpoint or an imported Hugging Face folder."""

    family: str
    model: FamilyModel
    tokenizer: Tokenizer
    special: dict[str, int]  # role -> id (the roles the tokenizer has; pad always)
    framing: dict[str, Framing]  # the task's text key -> special tokens around it
    extra: dict[str, Any]  # the manifest's `extra`: where the model came from
    # GenerationDefaults fields that replace the recipe's (an imported folder's, as transformers decodes)
    generation: dict[str, Any] = field(default_factory=dict)


def checkpoint_source(checkpoint: str | os.PathLike) -> ExportSource:
    loaded = load_checkpoint(checkpoint)
    special = dataclasses.asdict(special_tokens(loaded.tokenizer))
    extra = {"checkpoint_step": loaded.step, "metrics": loaded.metrics}
    family_recipe = recipe(loaded.family)
    return ExportSource(loaded.family, loaded.model, loaded.tokenizer, special, family_recipe.framing, extra)


def pretrained_source(folder: str | os.PathLike) -> ExportSource:
    """An imported Hugging Face folder: its own tokenizer, special tokens and framing."""
    from onnxformer.builder.pretrained import from_pretrained

    imported = from_pretrained(folder)
    text = TASKS[recipe(imported.family).task].text
    extra: dict[str, Any] = {"source": {"architecture": imported.architecture, "folder": Path(folder).name}}
    if imported.sentence_transformers:
        extra["source"]["sentence_transformers"] = True
    if imported.chat_template is not None:
        extra["chat_template"] = imported.chat_template  # rendered by the serving issue's chat routes
        extra["chat_tokens"] = imported.chat_tokens  # the bos_token, eos_token... it reads (runtime/chat.py)
    return ExportSource(
        imported.family,
        imported.model,
        imported.tokenizer,
        imported.special_tokens,
        {text: imported.framing},
        extra,
        imported.generation,
    )


def export_checkpoint(
    checkpoint: str | os.PathLike,
    out: str | os.PathLike,
    **options: Any,
) -> Manifest:
    """Export a training checkpoint folder, or a local Hugging Face model folder (config.json,
    model.safetensors, tokenizer.json), to `out`; see `export_model` for the options."""
    from onnxformer.builder.pretrained import is_pretrained_folder

    if not Path(checkpoint).is_dir():
        raise ExportError(
            f"{checkpoint} is not a folder; give a checkpoint folder `onnxformer train` wrote, or a local "
            "Hugging Face model folder (config.json, model.safetensors, tokenizer.json): hub ids are never "
            "downloaded"
        )
    if is_pretrained_folder(checkpoint):
        source = pretrained_source(checkpoint)
    elif (Path(checkpoint) / CHECKPOINT_NAME).is_file():
        source = checkpoint_source(checkpoint)
    else:
        raise _not_a_model_folder(Path(checkpoint))
    return export_model(source, out, **options)


# What a Hugging Face model folder holds besides config.json: seen without it, the folder is one missing it.
HF_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "tokenizer_config.json")


def _not_a_model_folder(folder: Path) -> OnnxformerError:
    """Why `folder`, which has no checkpoint.json, is neither a checkpoint nor a Hugging Face folder."""
    config = folder / "config.json"
    if config.is_file():
        return ModelImportError(
            f"{config} names no transformers model (it has neither model_type nor architectures); restore "
            "the config.json the model came with (save_pretrained writes it)"
        )
    found = [name for name in HF_FILES if (folder / name).is_file()]
    if found:
        return ModelImportError(
            f"{folder} looks like a Hugging Face model folder ({found[0]}) but has no config.json; copy the "
            "config.json that came with the model beside its weights (save_pretrained writes both)"
        )
    return CheckpointError(
        f"{folder} is neither a checkpoint (no {CHECKPOINT_NAME}, which `onnxformer train` writes) nor a "
        "Hugging Face model folder (no config.json, which save_pretrained writes); give one of those folders"
    )


def export_model(
    source: ExportSource,
    out: str | os.PathLike,
    *,
    opset: int = DEFAULT_OPSET,
    rule: ParityRule = ParityRule(),  # noqa: B008 (frozen)
    attentions: bool = True,
    blocks: bool = True,
    seed: int = 0,
    progress: Progress | None = None,
    external_data: bool | None = None,
) -> Manifest:
    """Export a model to `out`; returns the manifest written there.

    Every graph, the model's own blocks included, is held to `rule` against the float64 answer
    (builder/export/parity.py): the allowance grows with the model's own fp32 rounding, so trained weights
    with large activations pass as they are and a wrong graph still fails.

    `external_data` moves each graph's weights into a listed `<graph>.data` file: None (default) only
    for a graph past ONNX's 2 GB limit, True always, False never (builder/export/external.py).
    """
    check_opset(opset)
    family, model = source.family, source.model.eval()
    family_recipe = recipe(family)
    config = model.config
    special_ids = dict(source.special)
    essentials: dict[str, object] = {
        "onnxformer.family": family,
        "onnxformer.config": dataclasses.asdict(config),
        "onnxformer.special_tokens": special_ids,
    }
    graphs = [g for g in family_recipe.graphs if attentions or g.role != "attentions"]
    own_blocks = list(model_blocks(family_recipe, model)) if blocks else []
    total = len(graphs) + len(own_blocks)
    files: dict[str, bytes] = {}
    entries: list[FileEntry] = []
    golden_graphs = []
    wrappers = {}
    for index, graph in enumerate(graphs):
        if progress is not None:
            progress(graph.filename, index, total)
        wrapper = graph.wrapper(model).eval()
        spec = model_graph(graph, model, family=family, seed=seed, metadata=essentials)
        exported = export_one(spec, wrapper, opset=opset, rule=rule, external_data=external_data)
        files |= exported.files
        entries += exported.entries
        golden_graphs.append(exported.goldens)
        wrappers[graph.role] = (wrapper, list(spec.output_names))
    for index, (block_spec, module) in enumerate(own_blocks, start=len(graphs)):
        if progress is not None:
            progress(block_spec.filename, index, total)
        graph_spec = block_graph(block_spec, dims=_dims(config), opset=opset, seed=seed, metadata=essentials)
        exported = export_one(graph_spec, module, opset=opset, rule=rule, external_data=external_data)
        files |= exported.files
        entry, *block_goldens = exported.entries
        entries += [dataclasses.replace(entry, kind="block"), *block_goldens]
        golden_graphs.append(exported.goldens)
    tokenizer_bytes = source.tokenizer.to_str(pretty=True).encode()
    files[TOKENIZER_FILE] = tokenizer_bytes
    entries.append(
        FileEntry(
            TOKENIZER_FILE, sha256_bytes(tokenizer_bytes), len(tokenizer_bytes), "tokenizer", {}, (), ()
        )
    )
    generation = family_recipe.generation(config, special_ids)
    if generation is not None:
        generation = dataclasses.replace(generation, **source.generation)

    def family_goldens(ids):
        context = EndToEnd(model, ids, special_ids, generation, wrappers, source.framing)
        return family_recipe.end_to_end(context)

    end_to_end_bytes = end_to_end(family, source.tokenizer, family_goldens)
    files[END_TO_END_FILE] = end_to_end_bytes
    entries += golden_entries({END_TO_END_FILE: end_to_end_bytes})
    manifest = Manifest(
        export_kind="model",
        opset=opset,
        versions=tool_versions(),
        files=tuple(entries),
        family=family,
        config=dataclasses.asdict(config),
        tokenizer=TOKENIZER_FILE,
        special_tokens=special_ids,
        task=family_recipe.task,
        graphs={graph.role: graph.filename for graph in graphs},
        io={graph.role: graph.io(config) for graph in graphs},
        kv_cache=family_recipe.kv_cache(config),
        generation=generation,
        framing=source.framing,
        extra=source.extra,
        goldens=Goldens(tuple(golden_graphs), END_TO_END_FILE),
    )
    write_export_folder(Path(out), files, manifest)
    return manifest


def reverify_export(folder: str | os.PathLike, checkpoint: str | os.PathLike) -> dict[str, Parity]:
    """Re-run the parity checks of an export against the checkpoint it came from, with the export's own
    (sha256-checked) files; returns file -> parity and raises `ParityError` on the first miss."""
    export = ExportFolder.open(folder)
    manifest = export.manifest
    if manifest.export_kind != "model":
        raise ExportError(f"{folder} is a blocks export; --checkpoint applies to model exports")
    loaded = load_checkpoint(checkpoint, family=manifest.family)
    model = loaded.model.eval()
    if not same_config(model.config, manifest.config):
        raise ExportError(f"{checkpoint} does not hold the model exported to {folder}: the configs differ")
    family_recipe = recipe_for(manifest)
    listed = {entry.path for entry in manifest.files}
    proofs: list[tuple[GraphSpec, nn.Module]] = [
        (model_graph(graph, model, family=str(manifest.family), seed=0, metadata={}), graph.wrapper(model))
        for graph in family_recipe.graphs
    ]
    proofs += [
        (block_graph(spec, dims=_dims(model.config)), module)
        for spec, module in model_blocks(family_recipe, model)
    ]
    results: dict[str, Parity] = {}
    for spec, module in proofs:
        if spec.filename not in listed:
            continue
        recorded = manifest.file(spec.filename).parity
        results[spec.filename] = reprove(
            spec,
            module,
            export.graph(spec.filename),  # with any external weights, checked
            rule=ParityRule(recorded.factor, recorded.floor)
            if recorded is not None and recorded.reference == "float64"
            else ParityRule(),
        )
    return results
