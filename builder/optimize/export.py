"""Post-export optimisation: an export folder in, a faster folder out, with what it cost measured.

    optimize_export("exported/bert", "exported/bert-fast")                 # fused fp32
    optimize_export("exported/bert", "exported/bert-int8", quantize="int8")  # fused + int8 weights
    optimize_export("exported/gpt", "exported/gpt-int4", quantize="int4")    # fused + 4-bit weights

Each graph the runtime runs (GPT decoder, BERT encoder, T5 encoder and decoder) goes through:

1. our attention fusion (`fusion.fuse_attention`): one MultiHeadAttention per attention subgraph, and
   `onnx_graph.share_input_shapes`, which lets ONNX Runtime compute the per-layer causal mask once;
2. ONNX Runtime's transformer fusions (onnxruntime.transformers.optimizer, graph-level only, so the file
   stays portable between providers): BiasGelu for the FFN's bias + exact-erf GELU. Left off: Attention
   (step 1 does it), EmbedLayerNormalization (it assumes position ids 0..T-1; ours count real tokens) and
   SkipLayerNormalization (ONNX Runtime's CPU kernel for it is ~6x slower than Add + LayerNormalization,
   see runtime/session.py);
3. `fusion.pack_qkv`: the query, key and value projections as one MatMul;
4. with `quantize` (quantize.py): int8 (dynamic quantization of every MatMul with constant weights, which
   ONNX Runtime runs with AVX-512 VNNI / AVX2 int8 kernels) or int4 (MatMulNBits, 4-bit blocks, int8
   activations where the CPU has the kernel); a tied output head gets its own copy so that it is
   quantized too.

The new graph is then run, next to the original, on the export's golden inputs (its parity cases: first
and cached steps, padding, shapes unlike the trace) by `quality.compare_graphs`. A fused fp32 graph must
stay within the goldens' tolerance of the PyTorch outputs stored there, or `ParityError` is raised and
nothing is written. A quantized export must pass the quality gate (gate.py: next-token KL, top-1 agreement
and perplexity against the fp32 export on held-out text; an encoder's embedding cosine), and int8 must
also keep the cosine similarity of its main output to PyTorch at or above `min_cosine`. A miss is tried
again with more MatMuls at a higher precision (quantize.LADDERS: int8 takes the FFN output projections in
8-bit blocks, then keeps them and the head in float32; int4 takes the head in 8 bits, then keeps the FFN
output projections and the first and last blocks in float32); a miss on every rung raises `QualityError`
and nothing is written. Task metrics on the built-in held-out data (`quality.task_metrics`) are recorded
next to the original's.

Files keep their roles and names; their sha256 and size are recomputed; everything else (tokenizer,
attention-weights graph, blocks, goldens) is copied. `manifest.extra["optimization"]` records the fused
node counts, the quantization, what stayed float32, the gate's figures (and every rung tried), the measured
departures and the task metrics. Goldens: fp32 fusion leaves them valid as they are; for a quantized export
the graph goldens get a tolerance of twice the error measured here (with a note saying so) and the
end-to-end goldens, exact PyTorch fp32 ids and embeddings, are dropped.
"""

import contextlib
import dataclasses
import inspect
import io
import logging
import os
from pathlib import Path
from typing import Any, Literal

import onnx

from onnxformer.builder.export.folder import write_export_folder
from onnxformer.builder.export.recipes import recipe_for
from onnxformer.builder.optimize.cache import BUFFER_AXIS, in_place_cache, pack_cached_qkv
from onnxformer.builder.optimize.fusion import (
    fuse_attention,
    pack_qkv,
    pack_sibling_matmuls,
    residual_sums,
    unmasked_fast_path,
)
from onnxformer.builder.optimize.gate import GateResult, QualityError, measure_gate, read_eval_text
from onnxformer.builder.optimize.onnx_graph import graph_ops, share_input_shapes
from onnxformer.builder.optimize.quality import Agreement, compare_graphs, task_metrics
from onnxformer.builder.optimize.quantize import (
    ACCURACY_LEVEL,
    DEFAULT_BLOCK_SIZE,
    EIGHT_BIT_BLOCK_SIZE,
    LADDERS,
    NOTHING_KEPT,
    Keep,
    kept_matmuls,
    quantize_int4,
    quantize_int8,
    untie_head,
    weight_matmuls,
)
from onnxformer.runtime.errors import ExportError, ParityError
from onnxformer.runtime.folder import ExportFolder, sha256_bytes
from onnxformer.runtime.manifest import IN_PLACE_LAYOUT, FileEntry, KVCache, Manifest, TensorSpec
from onnxformer.runtime.session import create_session

logger = logging.getLogger(__name__)

Quantization = Literal["int8", "int4"]
QUANTIZATIONS: tuple[Quantization, ...] = ("int8", "int4")
CacheUpdate = Literal["in-place", "concat"]
CACHE_UPDATES: tuple[CacheUpdate, ...] = ("in-place", "concat")
FUSED_OPS = (
    "MultiHeadAttention",
    "GroupQueryAttention",
    "RotaryEmbedding",
    "SkipLayerNormalization",
    "BiasGelu",
    "Gelu",
    "FastGelu",
)
QUANTIZED = {"int8": "int8 dynamic quantization", "int4": "int4 weights (MatMulNBits)"}
MIN_COSINE = 0.99  # int8 must keep the main output's direction (embedding / logits) this close
NOTHING_TO_SCORE = (
    "the export has none of the heads the built-in tasks score (classifier, masked-LM head); int8's cost "
    "is the embedding's cosine to PyTorch (agreement)"
)


def optimize_graph(
    model: onnx.ModelProto,
    *,
    num_heads: int,
    hidden_size: int,
    fuse: bool = True,
    cache: KVCache | None = None,
    max_positions: int | None = None,
) -> onnx.ModelProto:
    """The fused copy of one graph (the argument is left as it was). With `cache` (a decoder's KV cache),
    its cached self-attention is rewritten to write the cache in place (`cache.in_place_cache`)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    if fuse and cache is not None:
        rewritten = in_place_cache(
            model,
            num_heads=num_heads,
            kv_heads=cache.kv_heads,
            head_dim=cache.head_dim,
            ids="input_ids",
            mask="attention_mask",
            past_names=cache.past_names(),
            max_positions=max_positions,
        )
        if rewritten != cache.layers:
            raise ExportError(
                f"only {rewritten} of the decoder's {cache.layers} cached attentions have the form the "
                "in-place cache rewrites; optimize with --kv-cache concat"
            )
        logger.info("%d cached self-attentions write their KV cache in place", rewritten)
    if fuse:
        fused = fuse_attention(model, num_heads=num_heads)
        shared = share_input_shapes(model)
        logger.info("fused %d attention subgraphs; %d Shape nodes share an input", fused, shared)
        model = _ort_fusions(model, num_heads=num_heads, hidden_size=hidden_size)
        _import_ms_domain(model)
        packed = pack_qkv(model) + pack_cached_qkv(model) + pack_sibling_matmuls(model)
        logger.info("packed %d sets of MatMuls on the same input into one MatMul each", packed)
        logger.info("%d residual sums before a LayerNorm are Sum nodes", residual_sums(model))
        logger.info("%d attentions skip the mask when it hides nothing", unmasked_fast_path(model))
    return model


def quantize_graph(
    model: onnx.ModelProto,
    quantize: Quantization,
    *,
    keep: Keep = NOTHING_KEPT,
    config: dict[str, Any],
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> onnx.ModelProto:
    """The quantized copy of one (fused) graph, with the MatMuls `keep` names left in float32; `config` is
    the manifest's (d_ff, vocab_size, n_layers name those MatMuls)."""
    if quantize not in QUANTIZATIONS:
        raise ExportError(f"quantize must be one of {QUANTIZATIONS}, got {quantize!r}")
    model = onnx.ModelProto.FromString(model.SerializeToString())
    if not keep.head:
        untie_head(model)
    names = _kept_names(model, keep, config)
    heads = _kept_names(model, Keep(head=True), config) if keep.head_8bit else []
    ffn_outputs = _kept_names(model, Keep(ffn_output=True), config) if keep.ffn_output_8bit else []
    with _quiet_ort_tools():
        if quantize == "int8":
            return quantize_int8(model, keep=names, eight_bit=ffn_outputs)
        return quantize_int4(model, keep=names, block_size=block_size, eight_bit=heads)


def _kept_names(model: onnx.ModelProto, keep: Keep, config: dict[str, Any]) -> list[str]:
    """The MatMuls of `model` (its head untied) that `keep` leaves in float32."""
    layers = config.get("n_layers") or config.get("decoder_layers") or 0
    return kept_matmuls(model, keep, d_ff=config["d_ff"], vocab=config["vocab_size"], layers=layers)


def fused_counts(model: onnx.ModelProto) -> dict[str, int]:
    """How many of each fused operator (FUSED_OPS) the graph holds; an attention under the If of
    `unmasked_fast_path` (one attention, two branches) counts once."""
    counts = graph_ops(model.graph)
    return {op: counts[op] for op in FUSED_OPS if counts[op]}


@contextlib.contextmanager
def _quiet_ort_tools():
    """onnxruntime.transformers and quantization print shape-inference chatter and log warnings."""
    names = (
        "onnxruntime.transformers",
        "onnx_model",
        "fusion_base",
        "root",
        "",
        "onnxruntime.quantization.matmul_nbits_quantizer",
    )
    loggers = [logging.getLogger(name) for name in names]
    levels = [item.level for item in loggers]
    for item in loggers:
        item.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for item, level in zip(loggers, levels, strict=True):
            item.setLevel(level)


def _ort_fusions(model: onnx.ModelProto, *, num_heads: int, hidden_size: int) -> onnx.ModelProto:
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    # onnxruntime.transformers' generic Transformer fusions are its default model type (which it names
    # after BERT; it has nothing to do with our families): every graph of ours gets those.
    model_type = inspect.signature(optimize_model).parameters["model_type"].default
    options = FusionOptions(model_type)
    options.enable_attention = False  # done by fuse_attention, which knows our mask semantics
    options.enable_embed_layer_norm = False  # assumes positions 0..T-1; ours count real tokens
    options.enable_gelu_approximation = False  # keep exact erf GELU
    options.enable_rotary_embeddings = False
    options.enable_qordered_matmul = False
    options.enable_skip_layer_norm = False
    options.enable_bias_skip_layer_norm = False
    with _quiet_ort_tools():
        # opt_level=0: graph-level fusions only, no provider-specific rewrites baked into the file.
        optimized = optimize_model(
            model,
            model_type=model_type,
            num_heads=num_heads,
            hidden_size=hidden_size,
            optimization_options=options,
            opt_level=0,
        )
    return optimized.model


def _import_ms_domain(model: onnx.ModelProto) -> None:
    """Declare the com.microsoft opset where a fusion left its operators (FastGelu for tanh GELU) without
    it: ONNX Runtime runs such a graph, but ONNX's shape inference (the int8 quantizer's) refuses it."""
    domains = {opset.domain for opset in model.opset_import}
    if "com.microsoft" not in domains and any(node.domain == "com.microsoft" for node in model.graph.node):
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))


def optimize_export(
    folder: str | os.PathLike,
    out: str | os.PathLike,
    *,
    fuse: bool = True,
    quantize: Quantization | None = None,
    tasks: bool = True,
    min_cosine: float = MIN_COSINE,
    kv_cache: CacheUpdate = "in-place",
    block_size: int = DEFAULT_BLOCK_SIZE,
    eval_text: str | os.PathLike | None = None,
    gate: bool = True,
) -> Manifest:
    """Write the optimised copy of the model export `folder` to `out` (which may be `folder` itself) and
    return its manifest. `tasks=False` skips the task metrics of quantized exports (for models not trained
    on the built-in tasks, e.g. random weights). `kv_cache="in-place"` (with fusion, for decoder-only
    models) makes the decoder write its KV cache into a preallocated buffer (`cache.py`); "concat" keeps
    the plain export's past in, past + new out (for transformers.js; every onnxformer host runs both).

    A quantized export must pass the quality gate (gate.py) on `eval_text` (a text file; by default the
    built-in grammar's held-out sentences): if it misses, more MatMuls are kept at a higher precision
    (quantize.LADDERS) and it is measured again; when the last try misses too, `QualityError` is raised
    and nothing is written. `gate=False` skips it (for random weights, which no gate can judge) and
    says so in the manifest."""
    if not fuse and quantize is None:
        raise ExportError("nothing to do: ask for fusion, quantize='int8' or 'int4', or both")
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ExportError(f"quantize must be one of {QUANTIZATIONS} or None, got {quantize!r}")
    if kv_cache not in CACHE_UPDATES:
        raise ExportError(f"kv_cache must be one of {CACHE_UPDATES}, got {kv_cache!r}")
    source = ExportFolder.open(folder)
    manifest = source.manifest
    if manifest.export_kind != "model":
        raise ExportError(f"{folder} is a blocks export; optimize takes a model export (onnxformer export)")
    if "optimization" in manifest.extra:
        raise ExportError(f"{folder} is already optimised; optimise the original export instead")
    if eval_text is not None:
        read_eval_text(str(eval_text))  # refused before any work when it is unreadable or empty
    config, main_outputs = manifest.config, recipe_for(manifest).main_outputs
    files = {entry.path: source.read(entry.path) for entry in manifest.files}
    graphs = [manifest.graphs[role] for role in main_outputs]
    originals = {path: files[path] for path in graphs}
    cache = manifest.kv_cache
    in_place = fuse and kv_cache == "in-place" and cache is not None and not manifest.task_spec.cross
    if in_place and _soft_capped(config):
        raise ExportError(
            "the decoder soft-caps its attention logits (attention.softcap, Gemma 2), which the in-place "
            "cache's GroupQueryAttention rewrite does not express yet; optimize with --kv-cache concat"
        )
    if in_place and cache is not None:  # (in_place needs a cache)
        cache = dataclasses.replace(cache, layout=IN_PLACE_LAYOUT)
        manifest = dataclasses.replace(manifest, kv_cache=cache)

    fused: dict[str, onnx.ModelProto] = {}
    for path in graphs:
        fused[path] = optimize_graph(
            onnx.load_from_string(originals[path]),
            num_heads=config["n_heads"],
            hidden_size=config["d_model"],
            fuse=fuse,
            cache=cache if in_place and path == manifest.graphs.get("decoder") else None,
            max_positions=config.get("max_len"),
        )
        _check_interface(path, manifest.file(path), fused[path])
    record: dict[str, Any] = {
        "fuse": fuse,
        "quantize": quantize,
        "kv_cache": "in-place" if in_place else "concat",
    }
    if quantize is None:
        optimized = {path: model.SerializeToString() for path, model in fused.items()}
        agreement = compare_graphs(source, originals, optimized, manifest)
        for path in graphs:
            if not agreement[path].within_golden_tolerance:
                raise ParityError(
                    f"{path}: the fused graph misses the golden tolerance ({agreement[path].worst_excess}); "
                    "nothing was written"
                )
    else:
        text = None if eval_text is None else str(eval_text)
        optimized, agreement, quantized = _quantize_with_gate(
            source, manifest, fused, originals, quantize, block_size, text, gate, min_cosine
        )
        record.update(quantized)
    record.update(
        {
            "fused_ops": {
                path: fused_counts(onnx.load_from_string(data)) for path, data in optimized.items()
            },
            "source_sha256": {path: sha256_bytes(data) for path, data in originals.items()},
            "agreement": {path: result.as_dict() for path, result in agreement.items()},
            "onnxruntime": _ort_version(),
        }
    )
    if tasks and quantize is not None:
        record["tasks"] = _task_costs(folder, optimized)
    files.update(optimized)
    entries = []
    for entry in manifest.files:
        if entry.path in optimized:
            data = optimized[entry.path]
            # A quantized graph no longer matches PyTorch to fp32 tolerance: its parity record would mislead.
            parity = entry.parity if quantize is None else None
            entry = dataclasses.replace(entry, sha256=sha256_bytes(data), size=len(data), parity=parity)
            if in_place and cache is not None and entry.path == manifest.graphs.get("decoder"):
                entry = _buffer_shapes(entry, cache)
        entries.append(entry)
    updated = dataclasses.replace(
        manifest, files=tuple(entries), extra={**manifest.extra, "optimization": record}
    )
    if quantize is not None:
        updated = _quantized_goldens(updated, agreement, quantize)
    listed = {entry.path for entry in updated.files}
    write_export_folder(Path(out), {path: data for path, data in files.items() if path in listed}, updated)
    return updated


def _quantize_with_gate(
    source: ExportFolder,
    manifest: Manifest,
    fused: dict[str, onnx.ModelProto],
    originals: dict[str, bytes],
    quantize: Quantization,
    block_size: int,
    eval_text: str | None,
    gate: bool,
    min_cosine: float,
) -> tuple[dict[str, bytes], dict[str, Agreement], dict[str, Any]]:
    """The quantized graphs of the first rung of LADDERS[quantize] that keeps the main outputs' cosine to
    PyTorch (int8: `min_cosine`) and passes the gate; the agreement; and what to record."""
    config, main_outputs = manifest.config, recipe_for(manifest).main_outputs
    tried: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    untied = {path: onnx.ModelProto.FromString(model.SerializeToString()) for path, model in fused.items()}
    for model in untied.values():
        untie_head(model)  # as quantize_graph sees the graph, to name the MatMuls each rung keeps
    heads = [name for model in untied.values() for name in _kept_names(model, Keep(head=True), config)]
    ffn = [name for model in untied.values() for name in _kept_names(model, Keep(ffn_output=True), config)]
    for keep in LADDERS[quantize]:
        kept = [tuple(_kept_names(model, keep, config)) for model in untied.values()]
        rung = (keep.head_8bit and bool(heads), keep.ffn_output_8bit and bool(ffn), *kept)
        if rung in seen:  # this rung keeps nothing more (an encoder has no head): nothing new to measure
            continue
        every = [{node.name for node in weight_matmuls(model)} for model in untied.values()]
        if all(set(names) >= whole for names, whole in zip(kept, every, strict=True)):
            break  # it would keep every MatMul in float32 (a model of two blocks): nothing left to quantize
        seen.add(rung)
        kept_words = keep.describe(has_head=bool(heads))
        optimized = {
            path: quantize_graph(
                model, quantize, keep=keep, config=config, block_size=block_size
            ).SerializeToString()
            for path, model in fused.items()
        }
        agreement = compare_graphs(source, originals, optimized, manifest)
        cosines = {
            manifest.graphs[role]: agreement[manifest.graphs[role]].min_cosine[output]
            for role, output in main_outputs.items()
        }
        low = {path: value for path, value in cosines.items() if quantize == "int8" and value < min_cosine}
        attempt: dict[str, Any] = {"kept": kept_words, "min_cosine_to_pytorch": cosines}
        result: GateResult | None = None
        if not low and gate:
            result = measure_gate(source, quantize, optimized, manifest, eval_text)
            attempt["gate"] = result.as_dict()
        tried.append(attempt)
        if not low and (result is None or result.passed):
            logger.info("%s passes with %s kept at a higher precision", quantize, kept_words)
            details: dict[str, Any] = {
                "kept": kept_words,
                # graphs whose FFN output projections stayed float32 (the int8 record's older key)
                "int8_fp32_ffn_output": list(fused) if keep.ffn_output else [],
                "tries": tried,
            }
            if keep.ffn_output_8bit:
                details["int8"] = {
                    "ffn_output": {
                        "bits": 8,
                        "block_size": EIGHT_BIT_BLOCK_SIZE,
                        "accuracy_level": ACCURACY_LEVEL,
                    }
                }
            if quantize == "int4":
                details["int4"] = {"bits": 4, "block_size": block_size, "accuracy_level": ACCURACY_LEVEL}
            details["gate"] = result.as_dict() if result else {"skipped": "optimize --no-gate"}
            return optimized, agreement, details
        logger.info("%s with %s kept back missed; trying the next rung", quantize, kept_words)
    raise QualityError(_missed(quantize, tried, min_cosine))


def _missed(quantize: str, tried: list[dict[str, Any]], min_cosine: float) -> str:
    """Why every rung of the ladder failed, and what to do."""
    last = tried[-1]
    if "gate" not in last:
        worst = min(last["min_cosine_to_pytorch"].items(), key=lambda item: item[1])
        return (
            f"{quantize} changes {worst[0]} too much even with {last['kept']} (cosine "
            f"{worst[1]:.4f} to PyTorch < {min_cosine}); keep this model unquantized; nothing was written"
        )
    gate = last["gate"]
    if gate["uninformative"]:
        return (
            f"the quality gate cannot judge {quantize} on this model: {gate['uninformative']}. Quantize a "
            "trained model, or pass --no-gate to quantize anyway (the manifest records that it was not "
            "gated); nothing was written"
        )
    return (
        f"{quantize} misses the quality gate on {gate['text']} even with {last['kept']} "
        f"({'; '.join(gate['misses'])}); use a higher precision (--int8, or none), or measure on text "
        "closer to what the model will see (--eval-text); nothing was written"
    )


def _soft_capped(config: dict[str, Any]) -> bool:
    """Whether any layer of the manifest's config (its block, or its per-layer options) soft-caps."""
    blocks = [config.get("block") or {}, *(config.get("layers") or [])]
    return any((block.get("attention") or {}).get("softcap") is not None for block in blocks)


def _buffer_shapes(entry: FileEntry, cache: KVCache) -> FileEntry:
    """The decoder's cache inputs and outputs as the in-place graph takes them: axis 2 is the buffer."""
    names = set(cache.past_names()) | set(cache.present_names())

    def buffer(spec: TensorSpec) -> TensorSpec:
        if spec.name not in names:
            return spec
        return dataclasses.replace(spec, shape=(*spec.shape[:2], BUFFER_AXIS, *spec.shape[3:]))

    return dataclasses.replace(
        entry,
        inputs=tuple(buffer(spec) for spec in entry.inputs),
        outputs=tuple(buffer(spec) for spec in entry.outputs),
    )


def _check_interface(path: str, entry: FileEntry, model: onnx.ModelProto) -> None:
    initializers = {init.name for init in model.graph.initializer}
    inputs = [value.name for value in model.graph.input if value.name not in initializers]
    outputs = [value.name for value in model.graph.output]
    if inputs != [spec.name for spec in entry.inputs] or outputs != [spec.name for spec in entry.outputs]:
        raise ExportError(f"{path}: optimisation changed the graph's inputs or outputs; this is a bug")


def _ort_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def _task_costs(folder: str | os.PathLike, optimized: dict[str, bytes]) -> dict[str, Any]:
    """Task metrics of the original and the optimised graphs, and the change (optimised - original); only
    `skipped` (why) when the export has no head the built-in tasks score."""
    from onnxformer.runtime.loader import open_export

    original = open_export(folder, device="cpu")
    roles = {path: role for role, path in original.manifest.graphs.items()}
    sessions = dict(original.sessions)
    for path, data in optimized.items():
        sessions[roles[path]] = create_session(data, device="cpu")
    before = task_metrics(original)
    if not before:
        return {"skipped": NOTHING_TO_SCORE}
    after = task_metrics(dataclasses.replace(original, sessions=sessions))
    change = {name: after[name] - before[name] for name in before if name != "examples"}
    return {"original": before, "optimized": after, "change": change}


def _quantized_goldens(manifest: Manifest, agreement: dict[str, Agreement], quantize: str) -> Manifest:
    """Goldens a quantized folder can keep: graph goldens at twice the error measured here, no end-to-end."""
    goldens = manifest.goldens
    if goldens is None:
        return manifest
    graphs = []
    for graph in goldens.graphs:
        if graph.file in agreement:
            worst = max(agreement[graph.file].max_abs_diff_pytorch.values(), default=0.0)
            atol = float(f"{max(2 * worst, graph.atol):.1g}")
            atol = atol if atol >= 2 * worst else float(f"{2.5 * worst:.1g}")
            note = (
                f"{QUANTIZED[quantize]}: atol raised to {atol:g}, twice the largest difference to "
                f"PyTorch measured when the graph was quantized ({worst:.3g}); the accuracy cost is in "
                "extra.optimization"
            )
            # The cases' own allowances are fp32 figures quantization does not keep: the graph's atol
            # replaces them.
            cases = tuple(dataclasses.replace(case, allowed=None) for case in graph.cases)
            graph = dataclasses.replace(graph, atol=atol, rtol=0.0, cases=cases, note=note)
        graphs.append(graph)
    dropped = {goldens.end_to_end} if goldens.end_to_end else set()
    files = tuple(entry for entry in manifest.files if entry.path not in dropped)
    extra = dict(manifest.extra)
    if dropped:
        extra["optimization"] = {
            **extra["optimization"],
            "goldens": "end_to_end dropped: its greedy ids and embeddings are exact PyTorch fp32 results "
            f"that {quantize} need not reproduce; graph goldens kept with the tolerance in their note",
        }
    return dataclasses.replace(
        manifest,
        files=files,
        goldens=dataclasses.replace(goldens, graphs=tuple(graphs), end_to_end=None),
        extra=extra,
    )
