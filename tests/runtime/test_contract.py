"""The runtime on the manifest contract: framing as before, threads checked, normalised embeddings."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from onnxformer.runtime import ConfigError, InputError, ManifestError, TextEncoder, check_threads, load
from onnxformer.runtime.session import max_threads

EXPORTED = Path(__file__).resolve().parents[2] / "exported"


@pytest.fixture(scope="module")
def models() -> dict:
    return {family: load(EXPORTED / family, device="cpu", threads=1) for family in ("gpt", "bert", "t5")}


def test_framing_from_the_manifest_is_the_framing_of_training(models: dict) -> None:
    text = "The cat sat."
    for family, model in models.items():
        special, tokens = model.tokenizer.special_tokens, model.tokenizer.encode(text)
        expected = {
            "gpt": [special["bos"], *tokens],
            "bert": [special["cls"], *tokens, special["sep"]],
            "t5": [*tokens, special["eos"]],
        }[family]
        assert model.frame(text) == expected, family
    assert models["gpt"].prefix == [models["gpt"].tokenizer.special_tokens["bos"]]


def test_load_picks_the_class_by_task(models: dict) -> None:
    assert {family: (model.task, type(model).__name__) for family, model in models.items()} == {
        "gpt": ("generate", "TextGenerator"),
        "bert": ("encode", "TextEncoder"),
        "t5": ("seq2seq", "TextToText"),
    }
    with pytest.raises(
        ManifestError, match=r"task 'generate'.*TextEncoder cannot run; load it with TextGenerator"
    ):
        TextEncoder.load(EXPORTED / "gpt", device="cpu")


@pytest.mark.parametrize("threads", [0, -1, -100, 10**6, True, False, 1.5, 2.0, "2", [1]])
def test_bad_thread_counts_are_refused_before_anything_loads(threads: object) -> None:
    with pytest.raises(ConfigError, match=r"threads must be an integer from 1 to \d+"):
        check_threads(threads)
    with pytest.raises(ConfigError, match=r"threads must be an integer from 1 to \d+"):
        load(EXPORTED / "gpt", device="cpu", threads=threads)


def test_thread_counts_in_range_are_accepted() -> None:
    assert check_threads(None) is None and check_threads(1) == 1
    assert check_threads(max_threads()) == max_threads()
    with pytest.raises(ConfigError, match=r"--threads must be an integer from 1 to"):
        check_threads(max_threads() + 1, name="--threads")
    model = load(EXPORTED / "bert", device="cpu", threads=max_threads())
    assert model.embed("a").shape == (model.dim,)


def test_normalized_embeddings_have_unit_norm_and_dot_is_cosine(models: dict) -> None:
    bert = models["bert"]
    texts = ["The cat sat on the mat.", "A dog ran.", ""]
    raw = bert.embed(texts)
    unit = bert.embed(texts, normalize=True)
    norms = np.linalg.norm(unit, axis=1)
    worst = float(np.abs(norms - 1).max())
    print(f"max |norm - 1| = {worst:.2e}")
    assert worst < 1e-6
    assert np.allclose(unit, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-7)
    assert abs(float(unit[0] @ unit[1]) - bert.similarity(texts[0], texts[1])) < 1e-6
    single = bert.embed(texts[0], normalize=True)
    assert single.shape == (bert.dim,) and np.allclose(single, unit[0], atol=1e-7)
    assert not np.allclose(raw[0], unit[0])  # the raw embedding is not unit length already
    with pytest.raises(InputError, match="normalize must be True or False"):
        bert.embed("a", normalize="yes")


def test_an_encoder_without_a_classifier_head_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "bert"
    shutil.copytree(EXPORTED / "bert", folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["io"]["encoder"]["outputs"]["class_logits"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    bert = load(folder, device="cpu")
    assert bert.embed("a").shape == (bert.dim,)
    with pytest.raises(ManifestError, match=r"encoder.onnx has no class_logits output"):
        bert.classify("a")
