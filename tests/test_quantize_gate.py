"""4-bit weights (`optimize --int4`) and the quality gate every quantized export passes
(builder/optimize/quantize.py, gate.py): the operators written, the figures measured against fp32 on
held-out text, the ladder of MatMuls kept at a higher precision when a rung misses, and refusals that
leave the disk as it was."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

import onnxformer.builder.optimize.export as optimize_module
from onnxformer.builder.optimize import optimize_export
from onnxformer.builder.optimize.gate import THRESHOLDS, QualityError, _Divergence
from onnxformer.cli.main import app
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import run_goldens
from onnxformer.runtime.loader import load

EXPORTED = Path(__file__).resolve().parents[1] / "exported"
runner = CliRunner()


@pytest.fixture(scope="module")
def int4(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """family -> the committed tiny export (trained on the built-in tasks) optimised with int4 weights."""
    root = tmp_path_factory.mktemp("int4")
    folders = {}
    for family in ("gpt", "bert", "t5"):
        optimize_export(EXPORTED / family, root / family, quantize="int4", tasks=family == "gpt")
        folders[family] = root / family
    return folders


def _record(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())["extra"]["optimization"]


def _nbits(folder: Path, graph: str) -> list[dict]:
    """Each MatMulNBits node's attributes, in graph order."""
    nodes = [node for node in onnx.load(folder / graph).graph.node if node.op_type == "MatMulNBits"]
    return [{attr.name: onnx.helper.get_attribute_value(attr) for attr in node.attribute} for node in nodes]


def test_int4_gpt_quantizes_every_matmul_and_the_head(int4: dict[str, Path]) -> None:
    config = json.loads((EXPORTED / "gpt" / "manifest.json").read_text())["config"]
    nodes = _nbits(int4["gpt"], "decoder.onnx")
    # per block: packed q/k/v, the attention output, the FFN's two; then the tied head, untied for it
    assert len(nodes) == 4 * config["n_layers"] + 1
    assert {(n["bits"], n["block_size"], n["accuracy_level"]) for n in nodes} == {(4, 32, 4)}
    assert nodes[-1]["N"] == config["vocab_size"] and nodes[-1]["K"] == config["d_model"]
    plain = [n for n in onnx.load(int4["gpt"] / "decoder.onnx").graph.node if n.op_type == "MatMul"]
    assert all(not n.input[1].startswith("val_") for n in plain)  # only activation x activation is left


def test_int4_passes_the_gate_with_its_figures_in_the_manifest(int4: dict[str, Path]) -> None:
    for family, folder in int4.items():
        record = _record(folder)
        gate = record["gate"]
        assert gate["passed"] and gate["misses"] == [] and gate["quantize"] == "int4", gate
        assert record["int4"] == {"bits": 4, "block_size": 32, "accuracy_level": 4}
        figures = gate["figures"]
        print(family, record["kept"], {k: round(v, 6) for k, v in figures.items()})
        if family == "bert":
            assert figures["min_cosine"] >= THRESHOLDS["int4"]["min_cosine"][0] and gate["rows"] > 100
            continue
        assert figures["kl"] <= 0.05 and figures["top1"] >= 0.90 and abs(figures["perplexity_change"]) <= 0.05
        assert gate["positions"] > 1000 and gate["uninformative"] == ""
        # trained models: peaked distributions, far from log(vocab)
        assert figures["fp32_entropy"] < 0.5 * math.log(400)


def test_int4_folders_pass_their_goldens_and_generate(int4: dict[str, Path]) -> None:
    for folder in int4.values():
        results = run_goldens(ExportFolder.open(folder))
        failed = [result for result in results if not result.ok]
        assert results and not failed, failed[:3]
    model = load(int4["gpt"], device="cpu")
    text = model.generate(["the cat"], temperature=0.0)
    assert isinstance(text[0], str) and text[0]
    record = _record(int4["gpt"])
    assert record["tasks"]["change"]["next_token_accuracy"] >= -0.01, record["tasks"]


def test_block_size_128(tmp_path: Path) -> None:
    optimize_export(EXPORTED / "gpt", tmp_path / "gpt", quantize="int4", block_size=128, tasks=False)
    assert {node["block_size"] for node in _nbits(tmp_path / "gpt", "decoder.onnx")} == {128}
    assert _record(tmp_path / "gpt")["int4"]["block_size"] == 128


def test_divergence_figures_against_closed_forms() -> None:
    """p = (0.5, 0.5) against q = (0.9, 0.1): KL = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1), top-1 disagrees when
    p leans the other way; perplexities from the targets' probabilities."""
    p = np.log(np.array([[0.5, 0.5], [0.3, 0.7]]))
    q = np.log(np.array([[0.9, 0.1], [0.8, 0.2]]))
    divergence = _Divergence()
    divergence.add(p.astype(np.float32), q.astype(np.float32), np.array([0, 1]))
    figures, uniform = divergence.figures()
    kl = (0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1) + 0.3 * math.log(0.3 / 0.8)) + 0.7 * math.log(
        0.7 / 0.2
    )
    assert figures["kl"] == pytest.approx(kl / 2, rel=1e-6)
    assert figures["top1"] == 0.5  # row 0: argmax 0 on both (ties pick the first); row 1: 1 vs 0
    assert figures["perplexity_fp32"] == pytest.approx(math.exp(-(math.log(0.5) + math.log(0.7)) / 2), 1e-6)
    assert figures["perplexity_quantized"] == pytest.approx(
        math.exp(-(math.log(0.9) + math.log(0.2)) / 2), 1e-6
    )
    assert uniform  # a two-token vocabulary at these entropies is near uniform
    same = _Divergence()
    same.add(p, p, np.array([0, 1]))
    assert same.figures()[0]["kl"] == 0.0 and same.figures()[0]["top1"] == 1.0


def test_a_missing_rung_keeps_the_head_in_8_bits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first rung misses (as a head too coarse in 4 bits does: it moves the next-token distribution
    most): the next quantizes the output head in 8-bit blocks and is measured again; the manifest says what
    was kept and what each try measured."""
    real = optimize_module.measure_gate
    calls = []

    def first_misses(*args, **kwargs):
        result = real(*args, **kwargs)
        calls.append(result)
        if len(calls) == 1:
            return type(result)(**{**result.__dict__, "misses": ["kl 0.1 > 0.05"]})
        return result

    monkeypatch.setattr(optimize_module, "measure_gate", first_misses)
    optimize_export(EXPORTED / "gpt", tmp_path / "gpt", quantize="int4", tasks=False)
    record = _record(tmp_path / "gpt")
    assert record["kept"] == "the output head in 8 bits" and len(record["tries"]) == 2
    assert record["tries"][0]["gate"]["misses"] == ["kl 0.1 > 0.05"]
    vocab = json.loads((EXPORTED / "gpt" / "manifest.json").read_text())["config"]["vocab_size"]
    nodes = _nbits(tmp_path / "gpt", "decoder.onnx")
    assert [node["bits"] for node in nodes if node["N"] == vocab] == [8]  # the head
    assert {node["bits"] for node in nodes if node["N"] != vocab} == {4}  # everything else
    failed = [result for result in run_goldens(ExportFolder.open(tmp_path / "gpt")) if not result.ok]
    assert not failed, failed[:3]


def test_a_missed_gate_refuses_and_leaves_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(THRESHOLDS, "int4", {**THRESHOLDS["int4"], "kl": (0.0, "max")})
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file")
    with pytest.raises(QualityError) as caught:
        optimize_export(EXPORTED / "gpt", out, quantize="int4", tasks=False)
    message = str(caught.value)
    assert "misses the quality gate" in message and "kl " in message and "nothing was written" in message
    # the last rung: of two blocks, only the head is left to quantize (in 8 bits)
    kept = "the output head in 8 bits, the FFN output projections, the first and last blocks in float32 ("
    assert kept in message
    assert sorted(path.name for path in out.iterdir()) == ["notes.txt"]


def test_random_weights_are_refused_by_name_unless_ungated(
    hf_exports: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    _, export = hf_exports["llama"]
    with pytest.raises(QualityError, match=r"near uniform.*--no-gate"):
        optimize_export(export, tmp_path / "gated", quantize="int4", tasks=False)
    assert not (tmp_path / "gated").exists()
    optimize_export(export, tmp_path / "ungated", quantize="int4", tasks=False, gate=False)
    record = _record(tmp_path / "ungated")
    assert record["gate"] == {"skipped": "optimize --no-gate"} and record["kept"] == "nothing"
    failed = [result for result in run_goldens(ExportFolder.open(tmp_path / "ungated")) if not result.ok]
    assert not failed, failed[:3]


def test_the_command_measures_on_the_users_text(tmp_path: Path) -> None:
    text = tmp_path / "held-out.txt"
    text.write_text("\n".join(["the cat sees a dog .", "", "a teacher finds the old book ."] * 40))
    out = tmp_path / "gpt"
    args = ["optimize", str(EXPORTED / "gpt"), str(out), "--int8", "--eval-text", str(text), "--no-tasks"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"quality gate on {text}: passed" in result.output
    gate = _record(out)["gate"]
    assert gate["text"] == str(text) and gate["rows"] == 80 and gate["figures"]["kl"] <= 0.002


def test_the_command_refuses_bad_options(tmp_path: Path) -> None:
    source = str(EXPORTED / "gpt")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    cases = [
        (["--int8", "--int4"], "choose one"),
        (["--int4", "--block-size", "64"], "--block-size must be 32 or 128"),
        (["--int4", "--eval-text", str(empty)], "holds only blank lines"),
        (["--int4", "--eval-text", str(tmp_path / "missing.txt")], "missing.txt"),
    ]
    for options, words in cases:
        result = runner.invoke(app, ["optimize", source, str(tmp_path / "out"), *options])
        assert result.exit_code != 0 and words in result.output, (options, result.output)
        assert "Traceback" not in result.output
        assert not (tmp_path / "out").exists()


def test_int8_of_the_tied_head_is_quantized_too(tmp_path: Path) -> None:
    """int8 takes the tied head through the same untying: every weight MatMul is int8 on the tiny GPT."""
    shutil.copytree(EXPORTED / "gpt", tmp_path / "gpt")
    optimize_export(tmp_path / "gpt", tmp_path / "gpt", quantize="int8", tasks=False)
    graph = onnx.load(tmp_path / "gpt" / "decoder.onnx").graph
    weights = {init.name for init in graph.initializer if len(init.dims) == 2}
    assert not [node.name for node in graph.node if node.op_type == "MatMul" and node.input[1] in weights]
    assert _record(tmp_path / "gpt")["gate"]["passed"]
