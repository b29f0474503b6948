"""DistilBERT, RoBERTa, XLM-RoBERTa, ModernBERT and sentence-transformers folders: the import against
transformers and sentence-transformers themselves, then the export through the torch-free runtime, tract
and Node.

    parity      DistilBert/Roberta/XLMRoberta Model, ForMaskedLM, ForSequenceClassification and
                ModernBert Model, ForMaskedLM against transformers' eager fp32 model: batch 1 and 3 (right
                padded), lengths 1, 7 and 64 (ModernBERT's local window 8 crossed); max abs diff <= 1e-4
                on real tokens (hidden states, pooler, masked-LM and class logits); a ModernBERT with every
                bias on; a transformers 4.x ModernBERT config.json
    sentence    one sentence-transformers folder per pooling (last token on BERT with a Tanh Dense and
                legacy Pooling keys, mean on DistilBERT cut at max_seq_length 24, max on RoBERTa with an
                Identity Dense, CLS on XLM-R): our embeddings against `SentenceTransformer(folder).encode`
    export      those four, DistilBERT's classifier and RoBERTa's and ModernBERT's masked-LM heads
                exported: goldens in ONNX Runtime (Python), tract and onnxruntime-node (native and wasm, the
                checkpoints' WordPiece, byte-level BPE and Unigram tokenizers), and the runtime's and
                Node's embeddings against sentence-transformers'
    errors      what is not built is refused by name: sinusoidal DistilBERT positions, concatenated or
                weighted pooling modes, a residual Dense, modules out of order, a default prompt,
                ModernBERT's classification heads

Every figure is printed (`-s`); the folders (tests/hf_encoders.py) are built once per module.
"""

import json
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import hf_encoders
import numpy as np
import pytest
import torch

from onnxformer.builder.pretrained import from_pretrained
from onnxformer.runtime import load
from onnxformer.runtime.errors import ModelImportError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import run_end_to_end, run_graph_goldens

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[1]
NODE_HOST = ROOT / "hosts" / "node"
TOLERANCE = 1e-4  # against transformers, as tests/test_pretrained_parity.py
EMBEDDING_TOLERANCE = 1e-5  # against sentence-transformers, as tests/test_minilm.py
LENGTHS = (1, 7, 64)
BATCHES = (1, 3)
FIGURES: dict[str, float] = {}  # name -> worst max abs diff, for the closing table
TEXTS = [
    "the cat sat on the mat.",
    "a dog sleeps near the old house",
    "",
    "Hello world, this is a tiny model for tests.",
    "birds sing in the morning; children play outside. The teacher finds a small red book!",
    "naïve café — 東京",
]
# Past the st-distilbert-mean folder's max_seq_length (24), within every model's positions.
LONG = " ".join(TEXTS[:2] + TEXTS[3:5])
# name -> export options: one export of each architecture, and of each pooling.
EXPORTS = {
    "distilbert-cls": {"blocks": False},
    "roberta-mlm": {"blocks": False},
    "modernbert-mlm": {"blocks": False},
    **{name: {"blocks": False, "attentions": False} for name in hf_encoders.SENTENCE},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return hf_encoders.encoder_folders(tmp_path_factory.mktemp("encoders"))


@pytest.fixture(scope="module")
def exports(folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from onnxformer.builder.export.models import export_checkpoint

    root = tmp_path_factory.mktemp("encoder-exports")
    for name, options in EXPORTS.items():
        export_checkpoint(folders[name], root / name, **options)
    return {name: root / name for name in EXPORTS}


@pytest.fixture(scope="module", autouse=True)
def figures_table():
    yield
    if FIGURES:
        print("\nmax abs diff (against transformers, or sentence-transformers), worst over the cases:")
        for name, worst in FIGURES.items():
            print(f"  {name:28s} {worst:.2e}")


def record(name: str, case: str, diffs: dict[str, float], tolerance: float, *, figure: str = "") -> None:
    """Print and record the figures (under `figure`, default the name), then assert each is within the
    tolerance."""
    figure = figure or name
    FIGURES[figure] = max(FIGURES.get(figure, 0.0), *diffs.values())
    print(f"\n{name:18s} {case:20s} " + "  ".join(f"{k}={v:.2e}" for k, v in diffs.items()))
    bad = {k: v for k, v in diffs.items() if not v <= tolerance}
    assert not bad, f"{name} {case}: max abs diff above {tolerance}: {bad}"


@cache
def ours(folder: Path):
    return from_pretrained(folder)


def padded(lengths: list[int], vocab: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids (B, T) of real tokens in [5, vocab) (past the special tokens), right padded with pad_id,
    and their mask (B, T)."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.full((len(lengths), max(lengths)), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, :length] = torch.randint(5, vocab, (length,), generator=generator)
        mask[row, :length] = 1
    return ids, mask


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    if mask is not None:
        a, b = a[mask.bool()], b[mask.bool()]
    return (a.float() - b.float()).abs().max().item()


# ---- parity against transformers ---------------------------------------------------------------------


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name", hf_encoders.ENCODERS)
@torch.no_grad()
def test_encoder_matches_transformers(folders: dict[str, Path], name: str, batch: int, length: int) -> None:
    folder, architecture = folders[name], hf_encoders.ENCODERS[name][1]
    mine = ours(folder)
    assert mine.architecture == architecture
    hf = getattr(transformers, architecture).from_pretrained(folder, attn_implementation="eager").eval()
    lengths = [length, max(1, length - 3), max(1, length // 2)][:batch]
    ids, mask = padded(lengths, mine.config.vocab_size, mine.special_tokens["pad"])
    out = mine.model(ids, attention_mask=mask)
    ref = hf(input_ids=ids, attention_mask=mask)
    # the base model's last_hidden_state: ModernBERT's hidden_states[-1] is before its final norm
    hidden = hf.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    diffs = {"hidden": max_diff(out.hidden, hidden, mask)}
    if name.endswith("-mlm"):
        assert out.pooled is None and out.class_logits is None
        diffs["mlm_logits"] = max_diff(out.mlm_logits, ref.logits, mask)
    elif name.endswith("-cls"):
        assert out.mlm_logits is None
        diffs["class_logits"] = max_diff(out.class_logits, ref.logits)
    else:
        assert out.mlm_logits is None and out.class_logits is None
        if hasattr(ref, "pooler_output"):  # RoBERTa's pooler; DistilBertModel has none
            diffs["pooler"] = max_diff(out.pooled, ref.pooler_output)
    record(name, f"batch {batch} length {length}", diffs, TOLERANCE)


def test_options_are_the_checkpoints(folders: dict[str, Path]) -> None:
    """DistilBERT: no token types, eps 1e-12, a ReLU pre-classifier; RoBERTa and XLM-R: one token type and
    the position table from row padding_idx + 1 = 2 on."""
    distil = ours(folders["distilbert-cls"])
    assert (distil.config.type_vocab_size, distil.config.pooler_activation) == (0, "relu")
    assert distil.model.embeddings.segment is None and distil.config.block.norm.eps == 1e-12
    for name in ("roberta", "xlmr-mlm"):
        imported = ours(folders[name])
        config = imported.config
        assert (config.type_vocab_size, config.max_len) == (1, hf_encoders.MAX_POSITIONS - 2)
        hf = transformers.AutoModel.from_pretrained(folders[name])
        table = hf.embeddings.position_embeddings.weight
        assert torch.equal(imported.model.embeddings.position.weight, table[2:])
        assert imported.framing.prefix == ("cls",) and imported.framing.suffix == ("sep",)
        assert (imported.special_tokens["cls"], imported.special_tokens["sep"]) == (0, 2)


def test_modernbert_options_are_the_checkpoints(folders: dict[str, Path]) -> None:
    """Rotary positions with a base per layer type, global then local layers with the window
    local_attention // 2 + 1, no norm before the first layer's attention, LayerNorms without bias."""
    imported = ours(folders["modernbert-mlm"])
    config, layers = imported.config, imported.config.layers
    assert (config.position, config.type_vocab_size, config.mlm_transform_bias) == ("rotary", 0, False)
    window = hf_encoders.LOCAL_ATTENTION // 2 + 1
    assert [layer.attention.sliding_window for layer in layers] == [None, window, window]
    assert [layer.rotary.base for layer in layers if layer.rotary] == [160_000.0, 10_000.0, 10_000.0]
    assert [layer.residual.attention_norm for layer in layers] == [False, True, True]
    assert isinstance(imported.model.encoder.blocks[0].self_attn_residual.norm, torch.nn.Identity)
    assert imported.model.embeddings.norm.bias is None and imported.model.encoder.norm.bias is None
    assert imported.framing.prefix == ("cls",) and imported.framing.suffix == ("sep",)


@torch.no_grad()
def test_a_modernbert_with_every_bias_matches_transformers(tmp_path: Path) -> None:
    """norm_bias, attention_bias, mlp_bias and classifier_bias on (the released checkpoints have none)."""
    biases = dict.fromkeys(("norm_bias", "attention_bias", "mlp_bias", "classifier_bias"), True)
    folder = hf_encoders.modernbert_folder(tmp_path / "biased", "ModernBertForMaskedLM", **biases)
    mine = from_pretrained(folder)
    assert mine.config.block.norm.bias and mine.config.block.ffn.bias and mine.config.mlm_transform_bias
    hf = transformers.ModernBertForMaskedLM.from_pretrained(folder, attn_implementation="eager").eval()
    ids, mask = padded([64, 20, 5], mine.config.vocab_size, mine.special_tokens["pad"])
    out = mine.model(ids, attention_mask=mask)
    hidden = hf.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    diffs = {
        "hidden": max_diff(out.hidden, hidden, mask),
        "mlm_logits": max_diff(out.mlm_logits, hf(input_ids=ids, attention_mask=mask).logits, mask),
    }
    record("modernbert-biased", "batch 3 length 64", diffs, TOLERANCE)


def test_a_transformers_4_modernbert_config_imports_the_same(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    """4.x wrote global_attn_every_n_layers and global/local_rope_theta, not layer_types and
    rope_parameters, and keys its ModernBERT never read (layer_norm_eps, position_embedding_type)."""
    folder = Path(shutil.copytree(folders["modernbert"], tmp_path / "modernbert"))

    def old(config: dict) -> dict:
        rope = config.pop("rope_parameters")
        del config["layer_types"]
        return {
            **config,
            "global_rope_theta": rope["full_attention"]["rope_theta"],
            "local_rope_theta": rope["sliding_attention"]["rope_theta"],
            "layer_norm_eps": 1e-5,
            "position_embedding_type": "absolute",
            "reference_compile": None,
            "repad_logits_with_grad": False,
        }

    edit_json(folder / "config.json", old)
    assert from_pretrained(folder).config == ours(folders["modernbert"]).config
    edit_json(folder / "config.json", lambda c: {**c, "global_rope_theta": 5000.0})
    first, local = from_pretrained(folder).config.layers[:2]
    assert first.rotary and local.rotary and (first.rotary.base, local.rotary.base) == (5000.0, 10_000.0)


# ---- sentence-transformers ---------------------------------------------------------------------------

SENTENCE_OPTIONS = {
    "st-bert-last": ("last", (16, "tanh", True), True),
    "st-distilbert-mean": ("mean", None, True),
    "st-roberta-max": ("max", (24, "identity", False), False),
    "st-xlmr-cls": ("cls", None, True),
}


@cache
def sentence_model(folder: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu")


def reference(folder: Path, texts: list[str]) -> np.ndarray:
    return sentence_model(folder).encode(texts, batch_size=4, convert_to_numpy=True)


@pytest.mark.parametrize("name", hf_encoders.SENTENCE)
@torch.no_grad()
def test_sentence_embeddings_equal_sentence_transformers(folders: dict[str, Path], name: str) -> None:
    """Our model's embeddings of the texts framed and cut as sentence-transformers tokenizes them, in
    batches of 4 (right padded), against its `encode`."""
    folder = folders[name]
    imported = ours(folder)
    config = imported.config
    pooling, dense, normalize = SENTENCE_OPTIONS[name]
    projection = None if config.projection is None else dataclass_tuple(config.projection)
    assert (config.pooling, projection, config.normalize) == (pooling, dense, normalize)
    assert imported.sentence_transformers
    texts = [*TEXTS, LONG]
    st_tokenizer = sentence_model(folder).tokenizer
    limit = imported.framing.limit(config.max_len)
    rows = []
    for text in texts:
        tokens = imported.tokenizer.encode(text, add_special_tokens=False).ids
        room = limit - len(imported.framing.prefix) - len(imported.framing.suffix)
        rows.append(imported.framing.ids(tokens[:room], imported.special_tokens))
        assert rows[-1] == st_tokenizer(text, truncation=True, max_length=limit)["input_ids"]
    vectors = []
    for start in range(0, len(rows), 4):
        batch = rows[start : start + 4]
        ids, mask = padded([len(row) for row in batch], config.vocab_size, imported.special_tokens["pad"])
        for index, row in enumerate(batch):
            ids[index, : len(row)] = torch.tensor(row)
        vectors.append(imported.model(ids, attention_mask=mask).sentence_embedding)
    got = torch.cat(vectors).numpy()
    expected = reference(folder, texts)
    assert got.shape == expected.shape == (len(texts), dense[0] if dense else config.d_model)
    diff = float(np.abs(got - expected).max())
    record(name, "torch", {"embedding": diff}, EMBEDDING_TOLERANCE, figure=f"{name} (torch)")


def dataclass_tuple(options) -> tuple:
    return (options.d_out, options.activation, options.bias)


def test_max_seq_length_cuts_as_sentence_transformers(folders: dict[str, Path]) -> None:
    imported = ours(folders["st-distilbert-mean"])
    assert imported.framing.max_length == sentence_model(folders["st-distilbert-mean"]).max_seq_length == 24
    assert len(imported.tokenizer.encode(LONG).ids) > 24


# ---- export: the runtime, tract and Node ---------------------------------------------------------------


@pytest.mark.parametrize("name", list(EXPORTS))
def test_goldens_pass_in_the_python_runtime_and_tract(exports: dict[str, Path], name: str) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from test_engines import _goldens_in_tract

    export = ExportFolder.open(exports[name])
    manifest = json.loads((exports[name] / "manifest.json").read_text())
    assert manifest["extra"]["source"]["architecture"] == ours_architecture(name)
    engines = {
        "onnxruntime": run_graph_goldens(export) + run_end_to_end(export),
        "tract": _goldens_in_tract(export),
    }
    for engine, results in engines.items():
        assert results, f"{engine}: no goldens ran"
        failed = [(r.file, r.label, r.problem) for r in results if not r.ok]
        worst = max(r.max_abs_diff or 0.0 for r in results)
        print(f"{name} on {engine}: {len(results)} golden cases, max abs diff {worst:.1e}")
        assert not failed, f"{engine}: {failed[:5]}"


def test_goldens_pass_in_the_c_host(exports: dict[str, Path]) -> None:
    """The C host verifies every encoder export: graph goldens and the end-to-end embeddings (tokenizer
    goldens wait for its tokenizer)."""
    from test_c_host import RESULT, c_host_binary, run

    binary = c_host_binary()
    for name, export in exports.items():
        result = run(binary, "verify", str(export))
        assert result.returncode == 0, f"{name}: " + result.stdout[-3000:] + result.stderr[-2000:]
        lines = [match for line in result.stdout.splitlines() if (match := RESULT.match(line))]
        assert lines and all(match.group(1) == "ok  " for match in lines), name
        worst = max((float(m.group(6)) for m in lines if m.group(6) is not None), default=None)
        assert worst is not None, f"{name}: no difference was measured"
        print(f"C host, {name}: {len(lines)} results ok, max abs diff {worst:.2e}")


def ours_architecture(name: str) -> str:
    encoder = hf_encoders.SENTENCE[name][0] if name in hf_encoders.SENTENCE else name
    return "BertModel" if encoder == "bert" else hf_encoders.ENCODERS[encoder][1]


def test_exported_inputs_follow_the_token_types(exports: dict[str, Path]) -> None:
    """token_type_ids only where a model has two or more token types: BERT, not DistilBERT or RoBERTa."""
    for name, export in exports.items():
        inputs = json.loads((export / "manifest.json").read_text())["io"]["encoder"]["inputs"]
        wanted = ["input_ids", "attention_mask"] + (["token_type_ids"] if name == "st-bert-last" else [])
        assert inputs == wanted, name


@pytest.mark.parametrize("name", hf_encoders.SENTENCE)
def test_runtime_embeddings_equal_sentence_transformers(
    folders: dict[str, Path], exports: dict[str, Path], name: str
) -> None:
    model = load(exports[name])
    texts = [*TEXTS, LONG]
    got = model.embed(texts, batch_size=3)
    expected = reference(folders[name], texts)
    assert model.dim == expected.shape[1]
    diff = float(np.abs(got - expected).max())
    record(name, "runtime", {"embedding": diff}, EMBEDDING_TOLERANCE, figure=f"{name} (runtime)")


def test_goldens_and_embeddings_in_onnxruntime_node(
    folders: dict[str, Path], exports: dict[str, Path], tmp_path: Path
) -> None:
    """bin/verify.js on every export (native and wasm: graph goldens, the tokenizer's ids, the embeddings),
    then the Node host's embeddings of the sentence-transformers exports against sentence-transformers'."""
    node = shutil.which("node")
    assert node, "Node.js is not installed; the host's tests need it (README: set-up)"
    assert (NODE_HOST / "node_modules").is_dir(), "run `make node-deps` first (npm ci in hosts/node)"
    done = subprocess.run(
        [node, "bin/verify.js", *map(str, exports.values()), "--engine", "all", "--json"],
        cwd=NODE_HOST,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for report in json.loads(done.stdout):
        checks = sorted({result["check"] for result in report["results"]})
        print(f"{Path(report['dir']).name} on {report['engine']}: {len(report['results'])} checks {checks}")
        assert report["ok"] and "tokenizer" in checks and "embedding" in checks
    texts = [*TEXTS, LONG]
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    names = list(hf_encoders.SENTENCE)
    script = (
        f"import {{ openExport }} from {json.dumps(str(NODE_HOST / 'src' / 'index.js'))};\n"
        "import { readFileSync, writeFileSync } from 'node:fs';\n"
        f"const texts = JSON.parse(readFileSync({json.dumps(str(tmp_path / 'texts.json'))}, 'utf8'));\n"
        "const rows = {};\n"
        f"for (const [name, dir] of Object.entries({json.dumps({n: str(exports[n]) for n in names})})) {{\n"
        "  const model = await openExport(dir);\n"
        "  rows[name] = (await model.embed(texts)).map((v) => Array.from(v));\n"
        "}\n"
        f"writeFileSync({json.dumps(str(tmp_path / 'out.json'))}, JSON.stringify(rows));\n"
    )
    (tmp_path / "embed.mjs").write_text(script)
    embedded = subprocess.run(
        [node, str(tmp_path / "embed.mjs")], capture_output=True, text=True, timeout=300
    )
    assert embedded.returncode == 0, embedded.stderr[-2000:]
    rows = json.loads((tmp_path / "out.json").read_text())
    for name in names:
        got = np.array(rows[name], dtype=np.float32)
        diff = float(np.abs(got - reference(folders[name], texts)).max())
        record(name, "node", {"embedding": diff}, EMBEDDING_TOLERANCE, figure=f"{name} (node)")


# ---- what is not built is refused ----------------------------------------------------------------------


def import_error(folder: Path) -> str:
    with pytest.raises(ModelImportError) as caught:
        from_pretrained(folder)
    return str(caught.value)


def edit_json(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def test_sinusoidal_distilbert_positions_are_refused(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = Path(shutil.copytree(folders["distilbert"], tmp_path / "distilbert"))
    edit_json(folder / "config.json", lambda c: {**c, "sinusoidal_pos_embds": True})
    assert "config.json sinusoidal_pos_embds=True" in import_error(folder)


def test_a_roberta_without_position_rows_for_its_padding_is_refused(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = Path(shutil.copytree(folders["roberta"], tmp_path / "roberta"))
    edit_json(folder / "config.json", lambda c: {**c, "pad_token_id": hf_encoders.MAX_POSITIONS})
    assert "pad_token_id=80" in import_error(folder)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda c: {**c, "pooling_mode": ["mean", "max"]}, "pools by ['mean', 'max']"),
        (lambda c: {**c, "pooling_mode": "weightedmean"}, "pools by ['weightedmean']"),
        (lambda c: {**c, "pooling_mode": "max", "prompt_pooling": True}, "prompt_pooling=True"),
        (lambda c: {**c, "embedding_dimension": 48}, "pools 48-wide token vectors"),
    ],
)
def test_pooling_settings_not_built_are_refused(
    folders: dict[str, Path], tmp_path: Path, change, says: str
) -> None:
    folder = Path(shutil.copytree(folders["st-roberta-max"], tmp_path / "st"))
    edit_json(folder / "1_Pooling" / "config.json", change)
    assert says in import_error(folder)


def test_legacy_pooling_keys_setting_two_modes_are_refused(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = Path(shutil.copytree(folders["st-xlmr-cls"], tmp_path / "st"))
    edit_json(folder / "1_Pooling" / "config.json", lambda c: {**c, "pooling_mode_mean_tokens": True})
    assert "pools by ['cls', 'mean']" in import_error(folder)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda c: {**c, "use_residual": True}, "use_residual=true"),
        (lambda c: {**c, "activation_function": "torch.nn.modules.activation.Sigmoid"}, "Sigmoid"),
        (lambda c: {**c, "module_input_name": "token_embeddings"}, "module_input_name='token_embeddings'"),
    ],
)
def test_dense_settings_not_built_are_refused(
    folders: dict[str, Path], tmp_path: Path, change, says: str
) -> None:
    folder = Path(shutil.copytree(folders["st-bert-last"], tmp_path / "st"))
    edit_json(folder / "2_Dense" / "config.json", change)
    assert says in import_error(folder)


def test_modules_out_of_order_and_default_prompts_are_refused(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = Path(shutil.copytree(folders["st-bert-last"], tmp_path / "st"))
    edit_json(folder / "modules.json", lambda m: [m[0], m[2], m[1], m[3]])
    assert "runs Transformer -> Dense -> Pooling -> Normalize" in import_error(folder)
    edit_json(folder / "modules.json", lambda m: [m[0], m[2], m[1], m[3]])
    edit_json(folder / "config_sentence_transformers.json", lambda c: {**c, "default_prompt_name": "query"})
    assert "default_prompt_name='query'" in import_error(folder)


def test_modernbert_classification_heads_are_refused_by_name(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = Path(shutil.copytree(folders["modernbert"], tmp_path / "modernbert"))
    edit_json(
        folder / "config.json", lambda c: {**c, "architectures": ["ModernBertForSequenceClassification"]}
    )
    message = import_error(folder)
    assert "'ModernBertForSequenceClassification' is not supported" in message
    assert "the nearest supported is ModernBertModel" in message


def test_a_dense_weight_of_another_shape_is_named(folders: dict[str, Path], tmp_path: Path) -> None:
    from safetensors.torch import save_file

    folder = Path(shutil.copytree(folders["st-bert-last"], tmp_path / "st"))
    save_file(
        {"linear.weight": torch.ones(16, 32), "linear.bias": torch.ones(16), "linear.scale": torch.ones(1)},
        folder / "2_Dense" / "model.safetensors",
    )
    assert "2_Dense/linear.scale" in import_error(folder)
