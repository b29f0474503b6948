"""Whole-model export: the folder describes itself, every graph matches PyTorch, misses are fatal."""

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from typer.testing import CliRunner

from onnxformer.builder.export.models import export_checkpoint
from onnxformer.builder.export.parity import ParityRule
from onnxformer.builder.training import CheckpointError, load_checkpoint
from onnxformer.cli.main import app
from onnxformer.runtime.check import check_export
from onnxformer.runtime.errors import ParityError
from onnxformer.runtime.folder import ExportFolder

FAMILIES = ("gpt", "bert", "t5")
ROLES = {
    "gpt": {"decoder", "attentions"},
    "bert": {"encoder", "attentions"},
    "t5": {"encoder", "decoder", "attentions"},
}


@pytest.mark.parametrize("family", FAMILIES)
def test_manifest_describes_the_model(model_exports: dict[str, Path], family: str) -> None:
    folder = ExportFolder.open(model_exports[family])
    manifest = folder.manifest
    assert manifest.export_kind == "model" and manifest.family == family
    assert set(manifest.graphs) == ROLES[family]
    assert manifest.tokenizer == "tokenizer.json"
    assert manifest.special_tokens == {"pad": 0, "bos": 1, "eos": 2, "unk": 3, "mask": 4, "sep": 5, "cls": 6}
    assert manifest.config["n_layers"] == 2
    assert {"torch", "onnx", "onnxruntime"} <= set(manifest.versions)
    if family != "bert":
        assert manifest.kv_cache.layers == 2 and manifest.kv_cache.past_key == "past_key_values.{i}.key"
        assert manifest.generation.stop_tokens == (2,)
    blocks = [entry for entry in manifest.files if entry.kind == "block"]
    assert len(blocks) == (4 if family == "t5" else 2)
    assert all(result.ok for result in check_export(folder)), [r.problem for r in check_export(folder)]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_graph_recorded_parity_and_explains_itself(model_exports: dict[str, Path], family: str) -> None:
    folder = ExportFolder.open(model_exports[family])
    for entry in folder.manifest.files:
        if entry.kind in ("tokenizer", "golden"):
            continue
        parity = entry.parity
        print(
            f"{family}/{entry.path}: {parity.cases} cases, to float64 {parity.error}, PyTorch fp32's own "
            f"{parity.torch_error}, share of the allowance {parity.used}"
        )
        assert parity.reference == "float64" and parity.problem() is None
        assert set(parity.error) == set(parity.torch_error) == set(parity.used) == set(parity.max_abs_diff)
        assert all(0.0 <= share <= 1.0 for share in parity.used.values())
        model = onnx.load_from_string(folder.read(entry.path))
        metadata = {prop.key: prop.value for prop in model.metadata_props}
        assert metadata["onnxformer.family"] == family
        assert json.loads(metadata["onnxformer.config"])["d_model"] == 32
        if entry.kind == "decoder":
            labels = " ".join(parity.shapes)
            assert "first step" in labels and "cached step" in labels and "B=3" in labels


def test_decoder_axes_are_dynamic(model_exports: dict[str, Path]) -> None:
    entry = ExportFolder.open(model_exports["gpt"]).manifest.file("decoder.onnx")
    shapes = {spec.name: spec.shape for spec in entry.inputs}
    assert shapes["input_ids"] == ("batch", "sequence")
    assert shapes["attention_mask"] == ("batch", "total_sequence")
    assert shapes["past_key_values.1.value"] == ("batch", 4, "past_sequence", 8)
    outputs = {spec.name: spec.shape for spec in entry.outputs}
    assert outputs["logits"][:2] == ("batch", "sequence")
    assert outputs["present.0.key"][2] == "past_sequence + sequence"


def test_gpt_decoder_matches_pytorch_at_an_unseen_shape(model_exports, tiny_checkpoints) -> None:
    """Independent of the exporter's own check: a 2-step cached run at B=2 with left padding."""
    model = load_checkpoint(tiny_checkpoints["gpt"]).model.eval()
    session = ort.InferenceSession(
        str(model_exports["gpt"] / "decoder.onnx"), providers=["CPUExecutionProvider"]
    )
    ids = torch.randint(7, model.config.vocab_size, (2, 6))
    mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    with torch.no_grad():
        first = model(ids, attention_mask=mask)
        step_ids = torch.randint(7, model.config.vocab_size, (2, 2))
        step_mask = torch.cat([mask, torch.ones(2, 2, dtype=torch.long)], dim=1)
        second = model(step_ids, attention_mask=step_mask, past_key_values=first.present)
    feeds = {"input_ids": step_ids.numpy(), "attention_mask": step_mask.numpy()}
    for i, (key, value) in enumerate(first.present):
        feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = key.numpy(), value.numpy()
    logits = session.run(["logits"], feeds)[0]
    diff = float(np.abs(logits - second.logits.numpy()).max())
    print(f"gpt cached step at B=2 P=6 T=2: max abs diff {diff:.2e}")
    assert diff <= 1e-4


def test_parity_miss_is_fatal(tiny_checkpoints, tmp_path: Path) -> None:
    out = tmp_path / "strict"
    with pytest.raises(ParityError, match="from the float64 answer"):
        export_checkpoint(
            tiny_checkpoints["bert"],
            out,
            rule=ParityRule(factor=0.0, floor=0.0),
            blocks=False,
            attentions=False,
        )
    assert not out.exists()


def test_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"is neither a checkpoint .* nor a Hugging Face model folder"):
        export_checkpoint(tmp_path, tmp_path / "out")


def test_cli_export(tiny_checkpoints, tmp_path: Path) -> None:
    out = tmp_path / "gpt"
    args = [
        "export",
        str(tiny_checkpoints["gpt"]),
        "--out",
        str(out),
        "--no-blocks",
        "--no-attentions",
        "--json",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)
    assert [f["path"] for f in manifest["files"] if f["kind"] != "golden"] == [
        "decoder.onnx",
        "tokenizer.json",
    ]
    bad = CliRunner().invoke(app, ["export", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")])
    assert bad.exit_code == 1 and "error:" in bad.stderr


def test_verify_against_the_checkpoint(model_exports, tiny_checkpoints) -> None:
    args = ["verify", str(model_exports["gpt"]), "--checkpoint", str(tiny_checkpoints["gpt"]), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["rechecked"]
    decoder = next(f for f in report["files"] if f["path"] == "decoder.onnx")
    print("re-verified decoder:", decoder["outputs"]["logits"])
    assert decoder["outputs"]["logits"]["max_abs_diff"] <= 1e-4
    wrong = ["verify", str(model_exports["gpt"]), "--checkpoint", str(tiny_checkpoints["bert"])]
    mismatch = CliRunner().invoke(app, wrong)
    assert mismatch.exit_code == 1 and "bert checkpoint, not gpt" in mismatch.stderr


def test_every_family_has_a_recipe_for_its_task() -> None:
    """FAMILIES and RECIPES name the same families; each recipe exports the graphs its task runs, with an
    io entry for each, the framing of the task's text, and the output int8 must keep per runtime graph."""
    from onnxformer.builder.export.recipes import RECIPES
    from onnxformer.builder.families import FAMILIES as MODELS
    from onnxformer.runtime.manifest import INPUT_NAMES, OUTPUT_KEYS, TASKS

    assert list(RECIPES) == list(MODELS)
    for family, recipe in RECIPES.items():
        spec = TASKS[recipe.task]
        roles = [graph.role for graph in recipe.graphs]
        assert len(set(roles)) == len(roles), f"{family}: a role twice in {roles}"
        assert set(spec.roles) <= set(roles), f"{family}: {recipe.task} needs {spec.roles}, has {roles}"
        assert list(recipe.main_outputs) == list(spec.roles), family
        assert spec.text in recipe.framing, f"{family}: no framing for {spec.text!r}"
        config = MODELS[family].config()
        for graph in recipe.graphs:
            io = graph.io(config)
            assert set(io.inputs) <= set(INPUT_NAMES) and set(io.outputs) <= set(OUTPUT_KEYS)
        assert (recipe.kv_cache(config) is None) == (not spec.cached), family
