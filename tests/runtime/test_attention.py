"""The attention highlighter (`onnxformer.runtime.attention`, `onnxformer attention`) on the committed
reference exports. Torch-free: runs in the runtime-only environment too; imports nothing from the builder.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from onnxformer.cli.main import app
from onnxformer.runtime import load
from onnxformer.runtime.attention import AttentionMap, AttentionReader, attention_map, save_heatmaps
from onnxformer.runtime.errors import InputError, ManifestError, OnnxformerError

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
SENTENCE = "The cat sat on the mat."
ACTIVE = "The cat chased the dog."
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
runner = CliRunner()

# name -> (family, text, kind, query tokens, key tokens)
CASES = {
    "gpt": ("gpt", SENTENCE, "self", ["<s>", "The", "cat", "sat", "on", "the", "mat", "."], None),
    "bert": (
        "bert",
        SENTENCE,
        "self",
        ["<cls>", "The", "cat", "sat", "on", "the", "mat", ".", "<sep>"],
        None,
    ),
    "t5": ("t5", ACTIVE, "self", ["The", "cat", "chased", "the", "dog", ".", "</s>"], None),
    "t5-cross": (
        "t5",
        ACTIVE,
        "cross",
        ["The", "dog", "was", "chased", "by", "the", "cat", ".", "</s>"],  # the tokens the decoder wrote
        ["The", "cat", "chased", "the", "dog", ".", "</s>"],
    ),
}


@pytest.fixture(scope="module")
def readers() -> dict[str, AttentionReader]:
    return {family: AttentionReader.load(EXPORTED / family, device="cpu") for family in ("gpt", "bert", "t5")}


@pytest.fixture(scope="module")
def maps(readers: dict[str, AttentionReader]) -> dict[str, AttentionMap]:
    return {name: readers[family].map(text, kind=kind) for name, (family, text, kind, _, _) in CASES.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_map_tokens_and_shapes(maps: dict[str, AttentionMap], name: str) -> None:
    family, _, kind, queries, keys = CASES[name]
    attention = maps[name]
    config = load(EXPORTED / family, device="cpu").config
    assert (attention.family, attention.kind) == (family, kind)
    assert attention.query_tokens == queries
    assert attention.key_tokens == (keys or queries)
    assert attention.weights.shape == (
        config["n_layers"],
        config["n_heads"],
        len(queries),
        len(keys or queries),
    )
    assert attention.weights.dtype == np.float32


@pytest.mark.parametrize("name", list(CASES))
def test_rows_are_distributions_over_the_keys(maps: dict[str, AttentionMap], name: str) -> None:
    weights = maps[name].weights  # (L, H, Q, K)
    worst = float(np.abs(weights.sum(axis=-1) - 1.0).max())
    print(f"{name}: rows sum to 1 within {worst:.1e}")
    assert worst < 1e-5 and weights.min() >= 0.0


def test_gpt_rows_are_causal(maps: dict[str, AttentionMap], readers: dict[str, AttentionReader]) -> None:
    weights = maps["gpt"].weights  # (L, H, T, T)
    assert float(np.triu(weights, k=1).max()) == 0.0, "a GPT token attends to a later one"
    assert np.all(weights[:, :, 0, 0] == 1.0)  # <s> sees only itself
    # Causality proper: the prefix "The cat" gets the same weights inside the longer sentence.
    prefix = readers["gpt"].map("The cat").weights  # (L, H, 3, 3)
    difference = float(np.abs(weights[:, :, :3, :3] - prefix).max())
    assert difference < 1e-5, f"prefix weights differ by {difference:.1e}"


def test_bert_rows_see_both_sides(maps: dict[str, AttentionMap]) -> None:
    weights = maps["bert"].weights  # (L, H, T, T)
    later = np.triu(weights, k=1).sum(axis=-1)[:, :, :-1]  # mass on later keys, every row but the last
    assert float(later.mean()) > 0.2 and float(later.min()) > 0.0


def test_t5_cross_attention_follows_the_output(maps: dict[str, AttentionMap]) -> None:
    cross = maps["t5-cross"]
    assert cross.output_text == "The dog was chased by the cat."
    # Writing "cat" and "dog", the last layer looks mostly at that word in the source.
    for word in ("cat", "dog"):
        assert cross.key_tokens[int(np.argmax(cross.row(word, layer=1)))] == word


def test_row_selects_and_averages(maps: dict[str, AttentionMap]) -> None:
    attention = maps["gpt"]
    weights = attention.weights  # (L, H, T, T)
    np.testing.assert_allclose(attention.row("sat"), weights[:, :, 3].mean(axis=(0, 1)), rtol=1e-6)
    np.testing.assert_array_equal(attention.row("sat", layer=1, head=2), weights[1, 2, 3])
    np.testing.assert_allclose(attention.row(3, layer=0), weights[0, :, 3].mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(attention.row(-1, head=1), weights[:, 1, 7].mean(axis=0), rtol=1e-6)
    assert attention.query_index("SAT") == attention.query_index(" sat") == 3
    assert attention.query_index("the") == 5  # an exact match wins over "The" (index 1)
    assert attention.query_index("<s>") == 0


@pytest.mark.parametrize(
    ("token", "options", "message"),
    [
        ("dog", {}, r"no query token 'dog' .*3 'sat'"),
        (8, {}, r"token index 8 is out of range: there are 8 query tokens \(0\.\.7\)"),
        ("sat", {"layer": 2}, r"layer 2 is out of range: the model has 2 layers, numbered 0\.\.1"),
        ("sat", {"head": -1}, r"head -1 is out of range"),
        ("sat", {"layer": True}, r"layer must be an integer \(0\.\.1\) or None for the average, got True"),
        (1.5, {}, r"token must be a token's text or its index"),
    ],
)
def test_bad_token_layer_or_head_is_refused(
    maps: dict[str, AttentionMap], token: object, options: dict, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        maps["gpt"].row(token, **options)


def test_bad_requests_are_refused(readers: dict[str, AttentionReader]) -> None:
    for family in ("gpt", "bert"):
        with pytest.raises(InputError, match=f"needs an encoder-decoder \\(t5\\) export; this is a {family}"):
            readers[family].map(SENTENCE, kind="cross")
    with pytest.raises(InputError, match="kind must be one of"):
        readers["t5"].map(SENTENCE, kind="both")
    with pytest.raises(InputError, match="non-empty sentence"):
        readers["bert"].map("  ")
    with pytest.raises(InputError, match="model reads at most 64"):
        readers["gpt"].map("cat " * 100)


def test_attention_map_takes_a_folder_or_a_loaded_model(maps: dict[str, AttentionMap]) -> None:
    from_model = attention_map(load(EXPORTED / "t5", device="cpu"), ACTIVE, kind="cross", device="cpu")
    from_folder = attention_map(EXPORTED / "t5", ACTIVE, kind="cross", device="cpu")
    np.testing.assert_array_equal(from_model.weights, maps["t5-cross"].weights)
    np.testing.assert_array_equal(from_folder.weights, maps["t5-cross"].weights)


@pytest.fixture
def without_attentions(tmp_path: Path) -> Path:
    """A GPT export whose manifest lists no attentions graph (as an older export's would)."""
    folder = tmp_path / "gpt"
    shutil.copytree(EXPORTED / "gpt", folder, ignore=shutil.ignore_patterns("blocks"))
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["graphs"]["attentions"], manifest["io"]["attentions"]
    manifest["files"] = [f for f in manifest["files"] if not f["path"].startswith(("blocks/", "goldens/"))]
    del manifest["goldens"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_an_export_without_attentions_is_refused(without_attentions: Path) -> None:
    with pytest.raises(ManifestError, match=r"has no attentions graph.*onnxformer export"):
        attention_map(without_attentions, SENTENCE, device="cpu")


# The command.


def _words(text: str) -> list[str]:
    return text.rstrip(".").split()


@pytest.mark.parametrize(
    ("family", "text", "options"),
    [("gpt", SENTENCE, []), ("bert", SENTENCE, []), ("t5", ACTIVE, ["--cross"])],
)
def test_command_highlights_and_writes_png(
    tmp_path: Path, family: str, text: str, options: list[str]
) -> None:
    out = tmp_path / f"{family}.png"
    result = runner.invoke(app, ["attention", str(EXPORTED / family), text, *options, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert all(word in result.stdout for word in _words(text)), result.stdout
    assert str(out) in result.stdout and out.read_bytes().startswith(PNG_SIGNATURE)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")], "a temporary file was left"


def test_command_defaults_to_sat_and_writes_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --out the picture is only offered: nothing lands in the current folder unannounced."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["attention", str(EXPORTED / "gpt"), SENTENCE, "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "self-attention from 'sat' (token 3), averaged over 2 layers and 4 heads" in result.stdout
    assert "--out FILE.png" in result.stdout and not list(tmp_path.iterdir())
    result = runner.invoke(app, ["attention", str(EXPORTED / "bert"), "A dog ran."])
    assert result.exit_code == 0 and "from '.' (token 4)" in result.stdout  # no "sat": the last word


def test_command_json(tmp_path: Path) -> None:
    args = ["attention", str(EXPORTED / "t5"), ACTIVE, "--cross", "--token", "cat", "--layer", "1"]
    result = runner.invoke(app, [*args, "--head", "0", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    index = payload["token"]["index"]
    assert payload["token"]["text"] == "cat" and payload["query_tokens"][index] == "cat"
    assert payload["key_tokens"] == CASES["t5-cross"][4] and payload["png"] is None
    assert payload["output_text"] == "The dog was chased by the cat."
    np.testing.assert_allclose(payload["row"], np.array(payload["weights"])[1, 0, index])
    assert np.array(payload["weights"]).shape == (2, 4, 9, 7)


@pytest.mark.parametrize(
    ("target", "options", "message"),
    [
        ("bert", ["--cross"], "cross-attention needs an encoder-decoder (t5) export; this is a bert export"),
        ("gpt", ["--cross"], "this is a gpt export"),
        ("gpt", ["--layer", "7"], "layer 7 is out of range: the model has 2 layers"),
        ("gpt", ["--head", "first"], "--head must be a number (0 = first) or avg, got 'first'"),
        ("gpt", ["--token", "dog"], "no query token 'dog'"),
        ("gpt", ["--token", "12"], "token index 12 is out of range"),
        ("gpt", ["--device", "tpu"], "device must be one of"),
        ("empty", [], "has no manifest.json"),
        ("no-attentions", [], "has no attentions graph"),
    ],
)
def test_command_bad_input_is_one_error_line(
    tmp_path: Path, without_attentions: Path, target: str, options: list[str], message: str
) -> None:
    folder = {"empty": tmp_path, "no-attentions": without_attentions}.get(target, EXPORTED / target)
    result = runner.invoke(app, ["attention", str(folder), SENTENCE, *options])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_terminal_view_works_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, module, None)  # `import matplotlib` now raises ImportError
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["attention", str(EXPORTED / "bert"), SENTENCE])
    assert result.exit_code == 0, result.output
    assert all(word in result.stdout for word in _words(SENTENCE)) and not list(tmp_path.iterdir())
    result = runner.invoke(app, ["attention", str(EXPORTED / "bert"), SENTENCE, "--out", "heat.png"])
    assert result.exit_code == 1 and 'pip install "onnxformer[plot]"' in result.stderr, result.output
    assert not list(tmp_path.iterdir())
    with pytest.raises(OnnxformerError, match=r"onnxformer\[plot\]"):
        save_heatmaps(attention_map(EXPORTED / "gpt", SENTENCE, device="cpu"), tmp_path / "x.png")


def test_installed_entry_point_without_torch(tmp_path: Path) -> None:
    # A `torch` that fails on import proves the command never imports it, not even lazily.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise RuntimeError('the runtime imported torch')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "t5.png"
    command = [str(Path(sys.executable).parent / "onnxformer"), "attention", str(EXPORTED / "t5"), ACTIVE]
    result = subprocess.run(
        [*command, "--cross", "--token", "dog", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "t5 cross-attention while writing 'dog'" in result.stdout
    assert all(word in result.stdout for word in _words(ACTIVE))
    assert out.read_bytes().startswith(PNG_SIGNATURE)


def test_a_character_split_over_byte_tokens_is_shown_and_found() -> None:
    """An emoji is four byte-level tokens: they are listed by their bytes (not as "?" boxes), and the
    emoji itself picks the first of them."""
    emoji = attention_map(EXPORTED / "gpt", "The cat 😀 sat", device="cpu")
    parts = [shown for shown in emoji.query_tokens if shown.startswith("<") and shown != "<s>"]
    assert "".join(parts) == "<F0><9F><98><80>", emoji.query_tokens
    assert "\ufffd" not in "".join(emoji.query_tokens)
    first = emoji.query_tokens.index("<F0>")
    assert emoji.query_index("😀") == first
    with pytest.raises(InputError, match="<F0>"):
        emoji.query_index("dog")
