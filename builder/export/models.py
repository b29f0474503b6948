"""Whole-model export: a trained checkpoint to a self-describing folder the torch-free runtime loads.

    export_checkpoint("runs/gpt", "exported/gpt")

writes, per family, the graphs of `model_graphs` (GPT: decoder; BERT: encoder; T5: encoder + decoder; and
an attention-weights graph for each), the model's own blocks under `blocks/`, `tokenizer.json`, and
`manifest.json` with the config, KV-cache layout, special tokens, generation defaults and the parity
figures measured here. A graph that misses its tolerance fails the export and nothing is written.
"""

import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path

from torch import nn

from onnxformer.builder.export import catalog
from onnxformer.builder.export import wrappers as block_wrappers
from onnxformer.builder.export.blocks import export_block_with_goldens, tool_versions
from onnxformer.builder.export.catalog import BlockDims, BlockSpec
from onnxformer.builder.export.folder import write_export_folder
from onnxformer.builder.export.goldens import (
    END_TO_END_FILE,
    GoldenRecorder,
    end_to_end,
    golden_entries,
    sentence_embedder,
)
from onnxformer.builder.export.graph import DEFAULT_OPSET, check_opset, export_graph, io_specs
from onnxformer.builder.export.model_graphs import (
    CROSS_KEY,
    CROSS_VALUE,
    GRAPHS,
    PAST_KEY,
    PAST_VALUE,
    PRESENT_KEY,
    PRESENT_VALUE,
    TRACE_BATCH,
)
from onnxformer.builder.export.model_parity import MODEL_RTOL, MODEL_TOLERANCE, measure_model_parity
from onnxformer.builder.export.parity import measure_parity
from onnxformer.builder.export.samples import parity_cases
from onnxformer.builder.tokenizer import SPECIAL_TOKENS, special_tokens
from onnxformer.builder.training.checkpoint import load_checkpoint
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.folder import ExportFolder, sha256_bytes
from onnxformer.runtime.manifest import FileEntry, Goldens, Manifest, Parity
from onnxformer.runtime.session import create_session

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
Progress = Callable[[str, int, int], None]  # (file, index, total)


def _block_specs(family: str, model: nn.Module) -> list[tuple[BlockSpec, nn.Module]]:
    """The model's own blocks, each with the spec (inputs, options) of its kind from the catalogue."""
    c = model.config
    position = c.position if c.position in ("relative", "rotary") else "none"
    specs = []

    def add(stack: str, blocks, template: BlockSpec, wrap) -> None:
        for index, block in enumerate(blocks):
            name = f"blocks/{stack}_layer_{index}"
            options = {**template.options, "layer": index, "stack": stack}
            specs.append((dataclasses.replace(template, name=name, options=options), wrap(block)))

    if family == "gpt":
        template = catalog.decoder_spec(c.norm_position, c.activation, position, cross=False, cached=True)
        add(
            "decoder",
            model.decoder.blocks,
            template,
            lambda b: block_wrappers.Decoder(b, cached=True, relative=model.decoder.relative),
        )
    elif family == "bert":
        template = catalog.encoder_spec(c.norm_position, c.activation, position)
        add("encoder", model.encoder.blocks, template, lambda b: block_wrappers.Encoder(b, model.encoder.relative))
    else:
        template = catalog.encoder_spec(c.norm_position, c.activation, position)
        add(
            "encoder",
            model.encoder.blocks,
            template,
            lambda b: block_wrappers.Encoder(b, model.encoder.relative),
        )
        template = catalog.decoder_spec(c.norm_position, c.activation, position, cross=True, cached=True)
        add(
            "decoder",
            model.decoder.blocks,
            template,
            lambda b: block_wrappers.CrossDecoder(b, cached=True, relative=model.decoder.relative),
        )
    return specs


def _kv_cache(family: str, config) -> dict:
    if family == "bert":
        return {}
    layout = {
        "layers": config.n_layers,
        "heads": config.n_heads,
        "head_dim": config.d_model // config.n_heads,
        "layout": ["batch", "heads", "sequence", "head_dim"],
        "past_key": PAST_KEY,
        "past_value": PAST_VALUE,
        "present_key": PRESENT_KEY,
        "present_value": PRESENT_VALUE,
    }
    if family == "t5":
        layout |= {"cross_key": CROSS_KEY, "cross_value": CROSS_VALUE}
    return layout


def _generation(family: str, config, special) -> dict:
    if family == "bert":
        return {}
    defaults = {"max_new_tokens": config.max_len, "top_k": 0, "top_p": 1.0, "stop_tokens": [special.eos]}
    if family == "gpt":
        return {**defaults, "temperature": 1.0, "prompt_prefix_tokens": [special.bos]}
    return {**defaults, "temperature": 0.0, "decoder_start_token_id": config.decoder_start_token_id}


def export_checkpoint(
    checkpoint: str | os.PathLike,
    out: str | os.PathLike,
    *,
    opset: int = DEFAULT_OPSET,
    tolerance: float = MODEL_TOLERANCE,
    rtol: float = MODEL_RTOL,
    block_tolerance: float = MODEL_TOLERANCE,
    attentions: bool = True,
    blocks: bool = True,
    seed: int = 0,
    progress: Progress | None = None,
) -> Manifest:
    """Export a training checkpoint folder to `out`; returns the manifest written there.

    The model's blocks are held to the full-model tolerance: with trained weights their outputs are an order
    of magnitude larger than the random-weight catalogue's, and fp32 rounding grows with them (about
    1.1e-5 seen on the tiny GPT's blocks, against 1e-6 on the catalogue's).
    """
    check_opset(opset)
    loaded = load_checkpoint(checkpoint)
    family, model = loaded.family, loaded.model.eval()
    config = model.config
    layers = config.n_layers
    special = special_tokens(loaded.tokenizer)
    essentials = {
        "onnxformer.family": family,
        "onnxformer.config": dataclasses.asdict(config),
        "onnxformer.special_tokens": dataclasses.asdict(special),
    }
    graph_specs = [s for s in GRAPHS[family]() if attentions or s.role != "attentions"]
    block_specs = _block_specs(family, model) if blocks else []
    total = len(graph_specs) + len(block_specs)
    files: dict[str, bytes] = {}
    entries: list[FileEntry] = []
    golden_graphs = []
    embed = None  # BERT: input ids -> sentence embedding through the encoder graph's wrapper
    for index, spec in enumerate(graph_specs):
        if progress is not None:
            progress(spec.filename, index, total)
        wrapper = spec.build(model).eval()
        onnx_model = export_graph(
            wrapper,
            spec.example(model, TRACE_BATCH),
            output_names=spec.output_names(layers),
            dim_names=spec.dim_names(layers),
            opset=opset,
            metadata={**essentials, "onnxformer.role": spec.role},
        )
        data = onnx_model.SerializeToString()
        try:
            session = create_session(data, device="cpu")
        except Exception as error:
            raise ExportError(
                f"{spec.filename}: ONNX Runtime cannot load the exported graph: {error}"
            ) from error
        recorder = GoldenRecorder()
        parity = measure_model_parity(
            family,
            spec,
            model,
            wrapper,
            session,
            tolerance=tolerance,
            rtol=rtol,
            seed=seed,
            record=recorder,
        )
        inputs, outputs = io_specs(onnx_model)
        golden_files, golden_graph = recorder.write(spec.filename, inputs, outputs)
        files |= golden_files
        golden_graphs.append(golden_graph)
        if family == "bert" and spec.role == "encoder":
            embed = sentence_embedder(wrapper, spec.output_names(layers))
        files[spec.filename] = data
        entries.append(
            FileEntry(
                spec.filename,
                sha256_bytes(data),
                len(data),
                spec.role,
                {"family": family},
                inputs,
                outputs,
                parity,
            )
        )
        entries += golden_entries(golden_files)
    dims = BlockDims(config.d_model, config.n_heads, config.d_ff, config.max_len)
    for index, (spec, module) in enumerate(block_specs, start=len(graph_specs)):
        if progress is not None:
            progress(spec.filename, index, total)
        block_files, (entry, *block_goldens), golden_graph = export_block_with_goldens(
            spec,
            dims=dims,
            module=module.eval(),
            opset=opset,
            tolerance=block_tolerance,
            seed=seed,
            metadata=essentials,
        )
        files |= block_files
        entries += [dataclasses.replace(entry, kind="block"), *block_goldens]
        golden_graphs.append(golden_graph)
    tokenizer_bytes = loaded.tokenizer.to_str(pretty=True).encode()
    files[TOKENIZER_FILE] = tokenizer_bytes
    entries.append(
        FileEntry(
            TOKENIZER_FILE, sha256_bytes(tokenizer_bytes), len(tokenizer_bytes), "tokenizer", {}, (), ()
        )
    )
    generation = _generation(family, config, special)
    special_ids = {name: getattr(special, name) for name in SPECIAL_TOKENS}
    end_to_end_bytes = end_to_end(family, model, loaded.tokenizer, special_ids, generation, embed)
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
        graphs={spec.role: spec.filename for spec in graph_specs},
        kv_cache=_kv_cache(family, config),
        generation=generation,
        extra={"checkpoint_step": loaded.step, "metrics": loaded.metrics},
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
    if dataclasses.asdict(model.config) != manifest.config:
        raise ExportError(f"{checkpoint} does not hold the model exported to {folder}: the configs differ")
    results: dict[str, Parity] = {}
    for spec in GRAPHS[manifest.family]():
        if spec.filename not in {entry.path for entry in manifest.files}:
            continue
        entry = manifest.file(spec.filename)
        parity = entry.parity
        session = create_session(export.read(spec.filename), device="cpu")
        results[spec.filename] = measure_model_parity(
            manifest.family,
            spec,
            model,
            spec.build(model).eval(),
            session,
            tolerance=parity.tolerance if parity else MODEL_TOLERANCE,
            rtol=parity.rtol if parity else MODEL_RTOL,
        )
    config = model.config
    dims = BlockDims(config.d_model, config.n_heads, config.d_ff, config.max_len)
    listed = {entry.path for entry in manifest.files}
    for spec, module in _block_specs(manifest.family, model):
        if spec.filename not in listed:
            continue
        recorded = manifest.file(spec.filename).parity
        session = create_session(export.read(spec.filename), device="cpu")
        results[spec.filename] = measure_parity(
            spec,
            module.eval(),
            session,
            parity_cases(spec),
            dims=dims,
            tolerance=recorded.tolerance if recorded else MODEL_TOLERANCE,
        )
    return results
