"""The committed reference exports (exported/) through the torch-free runtime and CLI.

These tests run in the environment without torch (`make test-runtime`) as well as in the full one; they
import nothing from onnxformer.builder.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from onnxformer.cli.main import app
from onnxformer.runtime import TextEncoder, TextGenerator, TextToText, load
from onnxformer.runtime.check import check_export
from onnxformer.runtime.errors import InferenceError, InputError, ManifestError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.session import create_session

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
runner = CliRunner()


@pytest.mark.parametrize("family", ["gpt", "bert", "t5"])
def test_reference_export_verifies(family: str) -> None:
    folder = ExportFolder.open(EXPORTED / family)
    assert folder.manifest.family == family
    results = check_export(folder)
    assert results and all(r.ok for r in results), [r.problem for r in results if not r.ok]
    worst = max(max(r.entry.parity.max_abs_diff.values()) for r in results if r.entry.parity)
    print(f"{family}: {len(results)} files verified, largest recorded parity diff {worst:.2e}")


def test_gpt_generates_sentences_reproducibly() -> None:
    model = load(EXPORTED / "gpt", device="cpu")
    assert isinstance(model, TextGenerator)
    first = model.generate("The cat", temperature=1.0, seed=7)
    assert first == model.generate("The cat", temperature=1.0, seed=7)
    assert first.endswith(".") and 2 <= len(first.split()) <= 12, first
    greedy = model.generate(["The cat", "A small dog"], temperature=0.0)
    assert greedy == [
        model.generate("The cat", temperature=0.0),
        model.generate("A small dog", temperature=0.0),
    ]
    assert "".join(model.stream("The cat", temperature=1.0, seed=7)) == first


def test_t5_turns_active_into_passive() -> None:
    model = load(EXPORTED / "t5", device="cpu")
    assert isinstance(model, TextToText)
    sources = ["The cat chased the dog.", "A small dog saw the red ball under an old table."]
    expected = ["The dog was chased by the cat.", "The red ball was seen by a small dog under an old table."]
    assert model.generate(sources) == expected
    assert model.generate(sources[0], num_beams=3) == expected[0]


def test_bert_classifies_and_embeds() -> None:
    model = load(EXPORTED / "bert", device="cpu")
    assert isinstance(model, TextEncoder)
    labels = [c.label for c in model.classify(["The cat sat on the mat.", "mat the on sat cat The."])]
    assert labels == [1, 0]
    embeddings = model.embed(["The cat sat on the mat.", "The cat sat on the rug.", ""])
    assert embeddings.shape == (3, model.config["d_model"]) and np.isfinite(embeddings).all()
    assert model.similarity("The cat sat on the mat.", "The cat sat on the mat.") == pytest.approx(
        1.0, abs=1e-5
    )


def test_bad_input_is_refused_before_onnx_runtime() -> None:
    gpt = load(EXPORTED / "gpt", device="cpu")
    with pytest.raises(InputError):
        gpt.generate_ids([[1, 10**6]], max_new_tokens=2)
    with pytest.raises(InputError):
        gpt.generate("cat " * 200, max_new_tokens=1)
    with pytest.raises(ManifestError, match="bert"):
        TextGenerator.load(EXPORTED / "bert")


def test_cli_runs_the_exports_without_torch(tmp_path: Path) -> None:
    code = """
import json, sys
from typer.testing import CliRunner
from onnxformer.cli.main import app
runner = CliRunner()
ex = sys.argv[1]
out = {}
for args in (["generate", ex + "/gpt", "The cat", "--seed", "1", "--json"],
             ["encode", ex + "/bert", "The cat sat.", "The dog ran.", "--json"],
             ["seq2seq", ex + "/t5", "The cat chased the dog.", "--json"]):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (args, result.output)
    out[args[0]] = json.loads(result.stdout)
assert "torch" not in sys.modules, "the runtime commands imported torch"
print(json.dumps(out["seq2seq"]["results"]))
"""
    result = subprocess.run(
        [sys.executable, "-c", code, str(EXPORTED)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["output"] == "The dog was chased by the cat."


def test_cli_refuses_the_wrong_family() -> None:
    result = runner.invoke(app, ["generate", str(EXPORTED / "bert"), "The cat"])
    assert result.exit_code == 1
    assert "bert export" in result.stderr and "Traceback" not in result.stderr


def test_installed_entry_point_runs_each_runtime_command() -> None:
    entry = Path(sys.executable).parent / "onnxformer"
    runs = {
        "generate": [str(EXPORTED / "gpt"), "The cat", "--seed", "3", "--temperature", "1.0", "--json"],
        "encode": [str(EXPORTED / "bert"), "The cat sat.", "cat The sat.", "--json"],
        "seq2seq": [str(EXPORTED / "t5"), "The cat chased the dog.", "--num-beams", "2", "--json"],
    }
    outputs = {}
    for command, args in runs.items():
        result = subprocess.run([str(entry), command, *args], capture_output=True, text=True, check=False)
        assert result.returncode == 0, (command, result.stderr)
        outputs[command] = json.loads(result.stdout)
    assert outputs["generate"]["results"][0]["output"].endswith(".")
    assert [row["label"] for row in outputs["encode"]["results"]] == [1, 0]
    assert outputs["seq2seq"]["results"][0]["output"] == "The dog was chased by the cat."


def test_a_run_onnx_runtime_refuses_is_a_typed_error_naming_the_fix() -> None:
    session = create_session(ExportFolder.open(EXPORTED / "bert").read("encoder.onnx"))
    ids = np.ones((1, 4), dtype=np.int64)
    with pytest.raises(InferenceError, match=r"could not run the graph .*onnxformer verify"):
        session.run({"input_ids": ids, "attention_mask": ids.astype(np.float32), "token_type_ids": ids})
