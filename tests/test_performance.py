"""The optimisation step (builder/optimize/export.py) on the committed tiny exports: which operators get
fused, that fused graphs compute what the originals compute (goldens, all-padding rows), int8's accuracy
cost, and the session options. No timing here: speed is the benchmark's job (benchmarks/README.md)."""

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from typer.testing import CliRunner

from onnxformer.builder.optimize import optimize_export, optimize_graph
from onnxformer.builder.optimize.export import quantize_graph
from onnxformer.builder.optimize.onnx_graph import graph_ops, remove_dead_nodes, sort_topologically
from onnxformer.builder.optimize.quantize import Keep
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import golden_cases, run_goldens
from onnxformer.runtime.loader import load
from onnxformer.runtime.session import create_session

EXPORTED = Path(__file__).resolve().parents[1] / "exported"
GRAPHS = {"bert": ("encoder.onnx",), "gpt": ("decoder.onnx",), "t5": ("encoder.onnx", "decoder.onnx")}


@pytest.fixture(scope="module")
def optimized(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """(family, "fused" | "int8") -> optimised copy of the committed tiny export."""
    root = tmp_path_factory.mktemp("optimized")
    folders = {}
    for family in GRAPHS:
        for variant, quantize in (("fused", None), ("int8", "int8")):
            out = root / f"{family}-{variant}"
            optimize_export(EXPORTED / family, out, quantize=quantize)
            folders[(family, variant)] = out
    return folders


def _ops(path: Path) -> Counter:
    return graph_ops(onnx.load(path).graph)  # an attention under the unmasked fast path's If counts once


def _config(family: str) -> dict:
    return json.loads((EXPORTED / family / "manifest.json").read_text())["config"]


def _fused_bert() -> tuple[dict, onnx.ModelProto]:
    """The committed BERT's config and its fused fp32 encoder graph."""
    config = _config("bert")
    graph = onnx.load(EXPORTED / "bert" / "encoder.onnx")
    return config, optimize_graph(graph, num_heads=config["n_heads"], hidden_size=config["d_model"])


@pytest.mark.parametrize("family", sorted(GRAPHS))
def test_every_attention_and_norm_is_fused(optimized, family: str) -> None:
    config = _config(family)
    layers = config["n_layers"]
    attentions = {"bert": layers, "gpt": layers, "t5": 3 * layers}  # T5: encoder self, decoder self + cross
    counts = Counter()
    for graph in GRAPHS[family]:
        ops = _ops(optimized[(family, "fused")] / graph)
        assert ops["Softmax"] == 0, f"{graph}: an attention was left unfused: {ops}"
        assert ops["Erf"] == 0, f"{graph}: a GELU was left unfused: {ops}"
        counts += ops
    # GPT's cached self-attention writes its cache in place (GroupQueryAttention, q/k/v packed into it).
    in_place = {"bert": 0, "gpt": layers, "t5": 0}
    assert counts["MultiHeadAttention"] == attentions[family] - in_place[family]
    assert counts["GroupQueryAttention"] == in_place[family]
    # One MatMul then a Split: q, k, v of each cached self-attention (T5's decoder; GPT's go packed into
    # GroupQueryAttention); an uncached one (BERT's, T5's encoder's) keeps three MatMuls. T5's encoder also
    # computes every decoder layer's cross keys and values from its output in one.
    packed = {"bert": 0, "gpt": 0, "t5": layers + 1}
    assert counts["Split"] == packed[family]
    # Residual add + LayerNorm stay two ops: ONNX Runtime's CPU SkipLayerNormalization is the slower one.
    # The adds before a LayerNorm are Sum nodes, which the session's fusion leaves alone (see below).
    assert counts["SkipLayerNormalization"] == 0
    # Post-norm BERT: two a layer and the embeddings'; pre-norm GPT and T5: the one before each final norm.
    sums = {"bert": 2 * layers + 1, "gpt": 1, "t5": 2}
    assert counts["Sum"] == sums[family]
    gelus = {"bert": layers + 1, "gpt": layers, "t5": 0}  # BERT's MLM transform has one more
    assert counts["BiasGelu"] == gelus[family]
    record = json.loads((optimized[(family, "fused")] / "manifest.json").read_text())["extra"]["optimization"]
    fused = sum(
        record["fused_ops"][g].get(op, 0)
        for g in GRAPHS[family]
        for op in ("MultiHeadAttention", "GroupQueryAttention")
    )
    assert fused == attentions[family]
    assert record["kv_cache"] == ("in-place" if in_place[family] else "concat")


@pytest.mark.parametrize("family", sorted(GRAPHS))
def test_fused_export_passes_goldens_and_generates_the_same(optimized, family: str) -> None:
    folder = optimized[(family, "fused")]
    record = json.loads((folder / "manifest.json").read_text())["extra"]["optimization"]
    for graph in GRAPHS[family]:
        agreement = record["agreement"][graph]
        assert agreement["within_golden_tolerance"], agreement["worst_excess"]
        assert max(agreement["max_abs_diff"].values()) < 1e-4, agreement["max_abs_diff"]
    failed = [result for result in run_goldens(ExportFolder.open(folder)) if not result.ok]
    assert not failed, failed[:3]
    original, fused = load(EXPORTED / family, device="cpu"), load(folder, device="cpu")
    if family == "bert":
        texts = ["the cat sees the dog", "a bird"]
        np.testing.assert_allclose(fused.embed(texts), original.embed(texts), atol=1e-5)
    else:
        prompts = ["the cat", "a teacher finds the old book"]
        assert fused.generate(prompts, temperature=0.0) == original.generate(prompts, temperature=0.0)


def test_a_row_that_sees_no_key_stays_zero() -> None:
    """An all-padding batch row: the original masks every key, so its attention output is exactly zero; the
    fused MultiHeadAttention would average the values unless the any-key-visible factor zeroes it."""
    config = _config("bert")
    data = (EXPORTED / "bert" / "encoder.onnx").read_bytes()
    fused = optimize_graph(
        onnx.load_from_string(data), num_heads=config["n_heads"], hidden_size=config["d_model"]
    )
    ids = np.full((2, 6), 9, dtype=np.int64)
    mask = np.array([[1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    names = ["last_hidden_state", "mlm_logits"]
    want = create_session(data, device="cpu").run(feeds, names)
    got = create_session(fused.SerializeToString(), device="cpu").run(feeds, names)
    for name, a, b in zip(names, want, got, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("family", sorted(GRAPHS))
def test_int8_costs_at_most_one_point(optimized, family: str) -> None:
    folder = optimized[(family, "int8")]
    manifest = json.loads((folder / "manifest.json").read_text())
    record = manifest["extra"]["optimization"]
    assert record["quantize"] == "int8"
    assert sum(_ops(folder / graph)["MatMulInteger"] for graph in GRAPHS[family]) > 0
    tasks = record["tasks"]
    accuracies = [m for m in tasks["change"] if m.endswith(("accuracy", "exact_match"))]
    assert accuracies, tasks
    for metric in accuracies:
        assert tasks["change"][metric] >= -0.01, f"{metric}: {tasks}"
    main = {"bert": "sentence_embedding", "gpt": "logits", "t5": "logits"}[family]
    graph = "encoder.onnx" if family == "bert" else "decoder.onnx"
    assert record["agreement"][graph]["min_cosine"][main] >= 0.99
    assert manifest["goldens"]["end_to_end"] is None
    failed = [result for result in run_goldens(ExportFolder.open(folder)) if not result.ok]
    assert not failed, failed[:3]
    load(folder, device="cpu")  # the runtime opens it like any export


def test_optimize_refuses_what_it_cannot_do(optimized, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="already optimised"):
        optimize_export(optimized[("bert", "fused")], tmp_path / "again")
    with pytest.raises(ExportError, match="nothing to do"):
        optimize_export(EXPORTED / "bert", tmp_path / "none", fuse=False)
    with pytest.raises(ExportError, match="quantize must be"):
        quantize_graph(onnx.ModelProto(), "int2", config={})  # type: ignore[arg-type]


def test_optimize_in_place(tmp_path: Path) -> None:
    """`onnxformer export --optimize` optimises the folder it just wrote: out may be the input."""
    folder = tmp_path / "bert"
    shutil.copytree(EXPORTED / "bert", folder)
    manifest = optimize_export(folder, folder, tasks=False)
    assert ExportFolder.open(folder).manifest == manifest
    assert _ops(folder / "encoder.onnx")["MultiHeadAttention"] == _config("bert")["n_layers"]


def test_optimize_command(tmp_path: Path) -> None:
    from onnxformer.cli.main import app

    result = CliRunner().invoke(app, ["optimize", str(EXPORTED / "bert"), str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["fused_ops"]["encoder.onnx"]["MultiHeadAttention"] == _config("bert")["n_layers"]


@pytest.mark.parametrize("variant", ["fused", "int8"])
def test_a_batch_without_padding_takes_the_unmasked_attention(optimized, variant: str) -> None:
    """BERT's attentions run under an If: no mask when the batch has no padding (ONNX Runtime's flash
    path), the masked kernel otherwise. Both branches must give the original graph's outputs."""
    graph = onnx.load(optimized[("bert", variant)] / "encoder.onnx")
    ifs = [node for node in graph.graph.node if node.op_type == "If"]
    assert len(ifs) == _config("bert")["n_layers"]
    for node in ifs:
        branches = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        (flash,), (masked,) = branches["then_branch"].node, branches["else_branch"].node
        assert flash.op_type == masked.op_type == "MultiHeadAttention"
        assert len(flash.input) == 4 and masked.input[5], "the flash branch must take no attention_bias"
    original = create_session((EXPORTED / "bert" / "encoder.onnx").read_bytes(), device="cpu")
    fused = create_session(graph.SerializeToString(), device="cpu")
    rng = np.random.default_rng(0)
    ids = rng.integers(5, _config("bert")["vocab_size"], size=(3, 9))
    tolerance = {"fused": 1e-5, "int8": 0.5}[variant]  # int8: its own activation quantization
    for mask in (np.ones_like(ids), np.array([[1] * 9, [1] * 4 + [0] * 5, [1] * 7 + [0] * 2])):
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (want,) = original.run(feeds, ["last_hidden_state"])
        (got,) = fused.run(feeds, ["last_hidden_state"])
        real = mask.astype(bool)
        np.testing.assert_allclose(got[real], want[real], atol=tolerance)


def test_graph_edits_see_what_an_if_branch_reads() -> None:
    """An If's branch reads names of the graph around it: sorting must put their producers first, and
    dead-node removal must keep them."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])
    inner = helper.make_tensor_value_info("inner", onnx.TensorProto.FLOAT, [2])
    branch = helper.make_graph([helper.make_node("Neg", ["doubled"], ["inner"])], "branch", [], [inner])
    nodes = [
        helper.make_node("ReduceMin", ["x"], ["lowest"], keepdims=0),
        helper.make_node("Greater", ["lowest", "zero"], ["flag"]),
        helper.make_node("If", ["flag"], ["y"], then_branch=branch, else_branch=branch),
        helper.make_node("Add", ["once", "x"], ["doubled"]),  # read only inside the branches
        helper.make_node("Identity", ["x"], ["once"]),
    ]
    zero = onnx.numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    graph = helper.make_graph(nodes, "g", [x], [y], [zero])
    sort_topologically(graph)
    assert [node.op_type for node in graph.node] == ["ReduceMin", "Greater", "Identity", "Add", "If"]
    remove_dead_nodes(graph)
    assert [node.op_type for node in graph.node] == ["ReduceMin", "Greater", "Identity", "Add", "If"]
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)


def test_a_plain_session_keeps_the_fast_norm_kernels(optimized, tmp_path: Path) -> None:
    """Node, C and the browser open the graph with ONNX Runtime's defaults (they cannot turn its fusions
    off): the fused BERT graph's residual sums must come out of that session as Sum + LayerNormalization,
    not as the slower SkipLayerNormalization."""
    import onnxruntime

    def session_ops(graph: Path) -> Counter:
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(graph.with_suffix(".session.onnx"))
        options.log_severity_level = 3
        onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        return _ops(graph.with_suffix(".session.onnx"))

    fused = tmp_path / "encoder.onnx"
    shutil.copy(optimized[("bert", "fused")] / "encoder.onnx", fused)
    ops = session_ops(fused)
    assert ops["SkipLayerNormalization"] == 0, ops
    assert ops["Sum"] == 2 * _config("bert")["n_layers"] + 1, ops  # each still before its LayerNorm
    # The two-term sums turned back into Adds: the session fuses those into SkipLayerNormalization.
    with_adds = onnx.load(fused)
    for node in with_adds.graph.node:
        if node.op_type == "Sum" and len(node.input) == 2:
            node.op_type = "Add"
    onnx.save(with_adds, tmp_path / "with_adds.onnx")
    assert session_ops(tmp_path / "with_adds.onnx")["SkipLayerNormalization"] > 0


def test_session_options(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime

    data = (EXPORTED / "bert" / "encoder.onnx").read_bytes()
    options = create_session(data, device="cpu", threads=1).session.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    seen = {}
    real = onnxruntime.InferenceSession

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", spy)
    create_session(data, device="cpu")
    assert "SkipLayerNormFusion" in seen["disabled_optimizers"]  # the slower CPU kernel stays out


def test_int8_that_misses_the_bar_keeps_the_ffn_outputs_fp32(tmp_path: Path, caplog) -> None:
    """Below min_cosine, int8 is redone with the FFN output projections in 8-bit blocks, then in float32,
    then the head too; still below, refused."""
    with (
        caplog.at_level("INFO"),
        pytest.raises(ExportError, match="even with the output head, the FFN output projections in float32"),
    ):
        optimize_export(EXPORTED / "bert", tmp_path / "strict", quantize="int8", tasks=False, min_cosine=1.0)
    rungs = [
        "int8 with nothing kept back missed",
        "int8 with the FFN output projections in 8-bit blocks kept back missed",
        "int8 with the FFN output projections in float32 kept back missed",
    ]
    assert [caplog.text.find(rung) for rung in rungs] == sorted(caplog.text.find(rung) for rung in rungs)
    assert all(rung in caplog.text for rung in rungs), caplog.text
    assert not (tmp_path / "strict").exists()  # nothing written
    config, graph = _fused_bert()
    kept = quantize_graph(graph, "int8", keep=Keep(ffn_output=True), config=config)
    rows = {init.name: init.dims[0] for init in kept.graph.initializer if len(init.dims) == 2}
    float_rows = [rows.get(node.input[1]) for node in kept.graph.node if node.op_type == "MatMul"]
    assert float_rows.count(config["d_ff"]) == config["n_layers"]  # every FFN output projection, in fp32
    ops = Counter(node.op_type for node in kept.graph.node)
    assert ops["MatMulInteger"] + ops["DynamicQuantizeMatMul"] > 0  # the rest is int8


def test_int8_with_8bit_ffn_outputs_stays_close_to_fp32() -> None:
    """The ladder's second int8 rung: each FFN output projection as 8-bit blocks (MatMulNBits, a scale and
    zero point per 128 weights), the rest dynamic int8; no float32 weight product is left, and it keeps the
    fp32 graph's outputs within the 0.99 cosine bar on the goldens' inputs, padding included."""
    config, graph = _fused_bert()
    quantized = quantize_graph(graph, "int8", keep=Keep(ffn_output_8bit=True), config=config)
    weights = {init.name for init in quantized.graph.initializer if len(init.dims) == 2}
    nbits = [node for node in quantized.graph.node if node.op_type == "MatMulNBits"]
    attributes = [{a.name: a.i for a in node.attribute} for node in nbits]
    assert len(nbits) == config["n_layers"]
    assert {(a["bits"], a["block_size"], a["K"]) for a in attributes} == {(8, 128, config["d_ff"])}
    assert not [n for n in quantized.graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    fp32 = create_session(graph.SerializeToString(), device="cpu", threads=1).session
    int8 = create_session(quantized.SerializeToString(), device="cpu", threads=1).session
    names = [i.name for i in fp32.get_inputs()]
    worst, cases = 1.0, 0
    for loaded in golden_cases(ExportFolder.open(EXPORTED / "bert")):
        if loaded.graph.file != "encoder.onnx":
            continue
        cases += 1
        feed = {name: loaded.inputs[name] for name in names}
        want, got = fp32.run(None, feed)[0], int8.run(None, feed)[0]
        mask = feed["attention_mask"].astype(bool)
        want, got = want[mask].astype(np.float64), got[mask].astype(np.float64)
        cosine = (want * got).sum(-1) / np.linalg.norm(want, axis=-1) / np.linalg.norm(got, axis=-1)
        worst = min(worst, float(cosine.min()))
    print(f"int8 with 8-bit FFN outputs: worst token cosine to fp32 {worst:.5f} over {cases} cases")
    assert cases >= 2 and worst >= 0.99


def test_int8_on_an_encoder_without_classifier(hf_folders: dict[str, Path], tmp_path: Path) -> None:
    """A BertModel (sentence-transformers' kind: no classifier, no masked-LM head) gets past the task check
    of `optimize --int8`, and of `export --int8` (which optimises the folder it wrote in place, as here):
    nothing to score is recorded, where a missing class_logits output failed both."""
    from onnxformer.cli.main import app

    runner = CliRunner()
    plain = tmp_path / "plain"
    args = ["export", str(hf_folders["bert"]), "--no-blocks", "--no-attentions", "--out", str(plain)]
    assert runner.invoke(app, args).exit_code == 0
    shutil.copytree(plain, tmp_path / "in-place")
    optimized = runner.invoke(app, ["optimize", str(plain), str(tmp_path / "opt"), "--int8"])
    assert optimized.exit_code == 0, optimized.output
    assert "task metrics not measured: the export has none of the heads" in optimized.output
    optimize_export(tmp_path / "in-place", tmp_path / "in-place", quantize="int8")  # export --int8's step
    for folder in ("opt", "in-place"):
        record = ExportFolder.open(tmp_path / folder).manifest.extra["optimization"]
        assert record["quantize"] == "int8" and set(record["tasks"]) == {"skipped"}, record["tasks"]
        assert record["agreement"]["encoder.onnx"]["min_cosine"]["sentence_embedding"] >= 0.99
    model = load(tmp_path / "opt")
    assert not model.has_classifier and model.embed(["a cat", "a dog"]).shape == (2, 32)
