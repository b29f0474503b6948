"""The ecosystem's own loaders on `onnxformer export --layout optimum`: transformers.js
(@huggingface/transformers in Node, from the local folder alone) and Optimum's ORTModel classes (in their
own environment, .venv-optimum: Optimum pins transformers < 4.58) open the exports of the tiny Hugging Face
folders, and compute the logits, hidden states and greedy tokens our runtime computes.

GPT-2, Llama and T5 reuse the session's exports of the import tests (conftest.py `hf_exports`), copied and
given the layout here; BERT is exported through the CLI with --layout optimum, BERT with its masked-LM
and classification heads through the library (the loaders' head classes read our head as `logits`). Each
loader runs once, in one subprocess, over the six exports."""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from onnxformer.builder.export.layout import write_layout
from onnxformer.builder.export.models import export_checkpoint
from onnxformer.cli.main import app
from onnxformer.runtime import load
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import run_graph_goldens

ROOT = Path(__file__).resolve().parents[1]
NODE_HOST = ROOT / "hosts" / "node"
OPTIMUM_PYTHON = ROOT / ".venv-optimum" / "bin" / "python"
SCRIPTS = Path(__file__).resolve().parent / "loaders"
TOLERANCE = 1e-4
NEW_TOKENS = 8
TEXT = "the cat sat on the mat."
# name -> (task, the loaders' ONNX files)
LOADED = {
    "gpt2": ("generate", ["onnx/model.onnx"]),
    "llama": ("generate", ["onnx/model.onnx"]),
    "bert": ("encode", ["onnx/model.onnx"]),
    "bert-mlm": ("encode", ["onnx/model.onnx"]),
    "bert-cls": ("encode", ["onnx/model.onnx"]),
    "t5": ("seq2seq", ["onnx/decoder_model_merged.onnx", "onnx/encoder_model.onnx"]),
}
# name -> (the loaders' head class, our output they read as `logits`)
HEADS = {"bert-mlm": ("masked-lm", "mlm_logits"), "bert-cls": ("classification", "class_logits")}


@pytest.fixture(scope="session")
def layout_exports(
    tmp_path_factory: pytest.TempPathFactory,
    hf_folders: dict[str, Path],
    hf_exports: dict[str, tuple[Path, Path]],
) -> dict[str, Path]:
    """name -> an export with the optimum layout (folders tests must not modify)."""
    root = tmp_path_factory.mktemp("layout-exports")
    made = {}
    for name in ("gpt2", "llama", "t5"):
        folder, export = hf_exports[name]
        shutil.copytree(export, root / name)
        write_layout(root / name, folder, layout="optimum")
        made[name] = root / name
    args = ["export", str(hf_folders["bert"]), "--out", str(root / "bert"), "--no-blocks", "--no-attentions"]
    result = CliRunner().invoke(app, [*args, "--layout", "optimum"])
    assert result.exit_code == 0, result.output
    made["bert"] = root / "bert"
    for name in HEADS:
        export_checkpoint(hf_folders[name], root / name, blocks=False, attentions=False)
        write_layout(root / name, hf_folders[name], layout="optimum")
        made[name] = root / name
    return made


def _prompts(name: str, export: Path) -> dict:
    """The request both loaders answer: a batch of two framed texts (left-padded for a decoder)."""
    model = load(export)
    special = model.export.manifest.special_tokens
    framing = model.export.manifest.text_framing()
    rows = [framing.ids(model.tokenizer.encode(text), special) for text in ("the cat sat", "a dog")]
    width = max(map(len, rows))
    task = LOADED[name][0]
    left = task == "generate"  # the decoders' batches are left-padded, the encoders' right-padded
    pad = [[special["pad"]] * (width - len(row)) for row in rows]
    ids = [p + r if left else r + p for p, r in zip(pad, rows, strict=True)]
    ones = [
        [0] * len(p) + [1] * len(r) if left else [1] * len(r) + [0] * len(p)
        for p, r in zip(pad, rows, strict=True)
    ]
    request = {
        "folder": str(export),
        "task": task,
        "input_ids": ids,
        "attention_mask": ones,
        "max_new_tokens": NEW_TOKENS,
        "text": TEXT,
        "rows": rows,
        "head": HEADS.get(name, (None,))[0],
    }
    if task == "seq2seq":
        start = model.export.manifest.generation.decoder_start_token_id
        request["decoder_input_ids"] = [[start]] * len(rows)
    return request


@pytest.fixture(scope="session")
def requests(layout_exports: dict[str, Path]) -> dict[str, dict]:
    return {name: _prompts(name, export) for name, export in layout_exports.items()}


def _run_loader(command: list[str], requests: dict[str, dict]) -> dict[str, dict]:
    names = list(requests)
    done = subprocess.run(
        [*command, json.dumps([requests[name] for name in names])],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(zip(names, json.loads(done.stdout), strict=True))


@pytest.fixture(scope="session")
def transformers_js(requests: dict[str, dict]) -> dict[str, dict]:
    node = shutil.which("node")
    assert node, "Node.js is not installed; the host's tests need it (README: set-up)"
    installed = NODE_HOST / "node_modules" / "@huggingface" / "transformers"
    assert installed.is_dir(), "run `make node-deps` first (npm ci in hosts/node)"
    return _run_loader([node, str(SCRIPTS / "transformers_js.mjs"), str(NODE_HOST)], requests)


@pytest.fixture(scope="session")
def optimum(requests: dict[str, dict]) -> dict[str, dict]:
    assert OPTIMUM_PYTHON.exists(), "run `make optimum-venv` first (Optimum's own environment)"
    return _run_loader([str(OPTIMUM_PYTHON), str(SCRIPTS / "optimum_check.py")], requests)


def _array(result: dict) -> np.ndarray:
    return np.asarray(result["data"], dtype=np.float64).reshape(result["dims"])


def _ours(name: str, export: Path, request: dict) -> dict[str, np.ndarray | list[list[int]]]:
    """What our runtime computes for the request: the graph's outputs, and the greedy tokens."""
    model = load(export)
    ids = np.asarray(request["input_ids"], dtype=np.int64)
    mask = np.asarray(request["attention_mask"], dtype=np.int64)
    sessions = model.export.sessions
    task = request["task"]
    if task == "encode":
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        output = HEADS[name][1] if name in HEADS else "last_hidden_state"
        (value,) = sessions["encoder"].run(feeds, [output])
        return {"logits" if name in HEADS else output: value}
    stop = list(model.export.manifest.generation.stop_tokens)
    generations = model.generate_ids(request["rows"], max_new_tokens=NEW_TOKENS, temperature=0.0)
    ours: dict = {"tokens": [generation.tokens for generation in generations], "stop": stop}
    if task == "generate":
        feeds = {"input_ids": ids, "attention_mask": mask, **model.export.cache.empty(len(ids))}
        (ours["logits"],) = sessions["decoder"].run(feeds, ["logits"])
    else:
        cross = model.export.manifest.kv_cache.cross_names()
        memory = sessions["encoder"].run({"input_ids": ids, "attention_mask": mask}, cross)
        step = np.asarray(request["decoder_input_ids"], dtype=np.int64)
        feeds = {
            "decoder_input_ids": step,
            "decoder_attention_mask": np.ones_like(step),
            "encoder_attention_mask": mask,
            **dict(zip(cross, memory, strict=True)),
            **model.export.cache.empty(len(ids)),
        }
        (ours["logits"],) = sessions["decoder"].run(feeds, ["logits"])
    return ours


def _new_tokens(sequences: np.ndarray, request: dict, stop: list[int]) -> list[list[int]]:
    """Each row's generated tokens, up to (without) its first stop token, as our runtime reports them."""
    prompt = 1 if request["task"] == "seq2seq" else len(request["input_ids"][0])  # the start token or prompt
    rows = []
    for row in sequences.astype(int).tolist():
        new = row[prompt:]
        ends = [i for i, token in enumerate(new) if token in stop]
        rows.append(new[: ends[0]] if ends else new)
    return rows


def _compare(name: str, loader: str, got: dict, export: Path, request: dict) -> float:
    ours = _ours(name, export, request)
    worst = 0.0
    for output in ("logits", "last_hidden_state"):
        if output in ours:
            theirs = _array(got[output])
            assert theirs.shape == ours[output].shape, (loader, output, theirs.shape)
            worst = max(worst, float(np.max(np.abs(theirs - ours[output]))))
    if "tokens" in ours:
        tokens = _new_tokens(_array(got["sequences"]), request, ours["stop"])
        assert tokens == ours["tokens"], f"{loader} generated {tokens}, our runtime {ours['tokens']}"
    print(f"{loader} {name}: max abs diff {worst:.2e} against our runtime")
    assert worst <= TOLERANCE, f"{loader} {name}: max abs diff {worst:.2e} > {TOLERANCE}"
    return worst


def _framed(export: Path) -> list[int]:
    """TEXT's ids as our runtime frames them (the special tokens the loaders' tokenizers add)."""
    model = load(export)
    manifest = model.export.manifest
    return manifest.text_framing().ids(model.tokenizer.encode(TEXT), manifest.special_tokens)


@pytest.mark.parametrize("name", list(LOADED))
def test_transformers_js_computes_what_our_runtime_does(
    layout_exports: dict[str, Path], requests: dict[str, dict], transformers_js: dict[str, dict], name: str
) -> None:
    _compare(name, "transformers.js", transformers_js[name], layout_exports[name], requests[name])
    assert transformers_js[name]["text_ids"] == _framed(layout_exports[name])  # its own tokenizer


@pytest.mark.parametrize("name", list(LOADED))
def test_optimum_computes_what_our_runtime_does(
    layout_exports: dict[str, Path], requests: dict[str, dict], optimum: dict[str, dict], name: str
) -> None:
    _compare(name, "optimum", optimum[name], layout_exports[name], requests[name])
    assert optimum[name]["text_ids"] == _framed(layout_exports[name])  # transformers 4's AutoTokenizer
    loaded = [Path(path).relative_to(layout_exports[name]).as_posix() for path in optimum[name]["files"]]
    assert loaded == LOADED[name][1]  # the layout's graphs, not ours under our names


@pytest.mark.parametrize("name", list(LOADED))
def test_layout_files_are_listed_and_their_goldens_pass(layout_exports: dict[str, Path], name: str) -> None:
    export = ExportFolder.open(layout_exports[name])
    manifest = export.manifest
    assert manifest.extra["layout"] == "optimum"
    listed = {entry.path for entry in export.verify()}  # every file's size and sha256
    assert {"config.json", "tokenizer_config.json", *LOADED[name][1]} <= listed
    config = json.loads(export.read("config.json"))
    assert config["transformers.js_config"]["dtype"] == "fp32"
    if LOADED[name][0] == "encode":  # the export's one head (BertModel: none) is what they read as `logits`
        aliases = manifest.file("onnx/model.onnx").options["aliases"]
        assert aliases == ({"logits": HEADS[name][1]} if name in HEADS else {}), aliases
    results = run_graph_goldens(export)
    checked = {result.file for result in results}
    assert set(LOADED[name][1]) <= checked  # the copies' (and T5's merged decoder's) goldens run too
    failed = [(r.file, r.label, r.problem) for r in results if r.problem is not None]
    assert not failed, failed
    worst = max(r.max_abs_diff for r in results if r.file in LOADED[name][1])
    print(f"{name}: layout graphs' goldens max abs diff {worst:.2e}")


def test_layout_refuses_another_models_folder(
    layout_exports: dict[str, Path], hf_folders: dict[str, Path], tmp_path: Path
) -> None:
    copy = tmp_path / "bert"
    shutil.copytree(layout_exports["bert"], copy)
    with pytest.raises(ExportError, match="GPT2LMHeadModel"):
        write_layout(copy, hf_folders["gpt2"], layout="optimum")
    with pytest.raises(ExportError, match=r"already has config\.json"):
        write_layout(copy, hf_folders["bert"], layout="optimum")
    with pytest.raises(ExportError, match="unknown layout"):
        write_layout(copy, hf_folders["bert"], layout="onnx")  # type: ignore[arg-type]


def test_export_refuses_a_layout_without_a_hugging_face_folder(tmp_path: Path) -> None:
    (tmp_path / "checkpoint").mkdir()
    args = ["export", str(tmp_path / "checkpoint"), "--out", str(tmp_path / "out"), "--layout", "optimum"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    assert "needs a Hugging Face model folder" in result.output
    assert not (tmp_path / "out" / "manifest.json").exists()
