"""The runtime on the manifest contract: framing as before, threads checked, normalised embeddings."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from onnxformer.runtime import ConfigError, InputError, ManifestError, TextEncoder, check_threads, load
from onnxformer.runtime.session import max_threads

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
WORDS = ("the", "cat", "sat", "on", "the", "mat", "while", "the", "small", "dog", "chased", "the", "ball")


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


def _words_of(bert: TextEncoder, count: int) -> str:
    """A text of exactly `count` tokens, built word by word (so a longer text starting with it begins
    with the same tokens: byte-level BPE splits at spaces)."""
    words = WORDS
    text = ""
    for index in range(10 * count):
        longer = (text + " " + words[index % len(words)]).strip()
        if len(bert.tokenizer.encode(longer)) > count:
            break
        text = longer
    assert len(bert.tokenizer.encode(text)) == count
    return text


def test_a_long_text_is_cut_to_what_the_model_reads(models: dict, caplog: pytest.LogCaptureFixture) -> None:
    """As sentence-transformers truncates: the text's first tokens within the framing, said in a warning;
    truncate=False refuses the text instead."""
    bert = models["bert"]
    assert bert.max_length == bert.max_len == 64
    head = _words_of(bert, 62)  # <cls> + 62 tokens + <sep> = 64
    long = head + " and the dog ran far away from the house" * 3
    assert bert.tokenizer.encode(long)[:62] == bert.tokenizer.encode(head)
    framed = len(bert.tokenizer.encode(long)) + 2
    assert bert.lengths([head, long]) == [64, framed]
    with caplog.at_level("WARNING", logger="onnxformer.runtime.encoder"):
        cut = bert.embed([long, "A dog ran."])
    assert np.array_equal(cut, bert.embed([head, "A dog ran."]))
    assert caplog.records[-1].getMessage().startswith("1 text(s) longer than the 64 tokens the model reads")
    assert f"(text 0: {framed} tokens); truncate=False" in caplog.records[-1].getMessage()
    assert bert.classify(long).label == bert.classify(head).label
    with pytest.raises(InputError, match="reads at most 64; shorten the text"):
        bert.embed(long, truncate=False)
    with pytest.raises(InputError, match="truncate must be True or False"):
        bert.embed(long, truncate="yes")
    assert np.array_equal(bert.embed([head, "A dog ran."], truncate=False), cut)  # head: not cut


def test_the_manifests_max_length_bounds_the_text(tmp_path: Path) -> None:
    """A framing max_length (a sentence-transformers folder's max_seq_length) shorter than the context."""
    folder = tmp_path / "bert"
    shutil.copytree(EXPORTED / "bert", folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["framing"]["text"]["max_length"] = 16
    (folder / "manifest.json").write_text(json.dumps(manifest))
    bert, full = load(folder, device="cpu"), load(EXPORTED / "bert", device="cpu")
    assert (bert.max_length, bert.max_len) == (16, 64)
    head = _words_of(bert, 14)
    long = head + " and the dog ran far away"
    assert np.array_equal(bert.embed(long), full.embed(head))
    assert not np.array_equal(full.embed(long), full.embed(head))  # the full context reads it all
    with pytest.raises(InputError, match="reads at most 16"):
        bert.embed(long, truncate=False)
    mask = bert.tokenizer.token_text(bert.tokenizer.special_tokens["mask"])
    assert len(bert.fill_mask(f"the {mask} sat on the mat while the small dog chased the red ball")) == 1
    with pytest.raises(InputError, match=f"has a {mask} past its first 16 tokens"):
        bert.fill_mask(long + f" {mask}")
