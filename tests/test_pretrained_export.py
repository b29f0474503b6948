"""Hugging Face folders through the whole chain: `onnxformer export FOLDER` (graphs with KV cache, blocks,
attentions, the checkpoint's own tokenizer, goldens, parity fatal on a miss), then the torch-free runtime,
onnxruntime-node (native and wasm) and tract, against transformers itself.

The tiny random-weight folders come from tests/hf_models.py; each is exported once per session (~3 minutes
together on 2 cores). BERT's real checkpoint goes through the same chain in tests/test_minilm.py. GPT-2 and
T5 go without their blocks (and GPT-2 without its attentions graph) to keep the suite in its budget: the
Llama export covers an imported model's blocks, and blocks are the stacks' own (tests/test_model_export.py
exports every family's with them)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import hf_models
import pytest
import torch
from conftest import HF_EXPORTS

from onnxformer.runtime import load
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import run_graph_goldens

ROOT = Path(__file__).resolve().parents[1]
NODE_HOST = ROOT / "hosts" / "node"
EXPORTS = HF_EXPORTS
ARCHITECTURES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "t5": "T5ForConditionalGeneration",
    "qwen3": "Qwen3ForCausalLM",
    "mistral": "MistralForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "phi3-longrope": "Phi3ForCausalLM",
    "neox": "GPTNeoXForCausalLM",
    "smollm3": "SmolLM3ForCausalLM",
}


def _tokenizer(folder: Path):
    import transformers

    return transformers.AutoTokenizer.from_pretrained(folder)


def _transformers(name: str, folder: Path):
    import transformers

    return getattr(transformers, ARCHITECTURES[name]).from_pretrained(folder).eval()


@pytest.mark.parametrize("name", list(EXPORTS))
def test_export_manifest_carries_the_checkpoints_tokenizer(
    hf_exports: dict[str, tuple[Path, Path]], name: str
) -> None:
    folder, export = hf_exports[name]
    manifest = json.loads((export / "manifest.json").read_text())
    assert manifest["extra"]["source"]["architecture"] == ARCHITECTURES[name]
    framing = {
        "gpt2": {"prompt": {"prefix": [], "suffix": []}},
        "llama": {"prompt": {"prefix": ["bos"], "suffix": []}},
        "t5": {"source": {"prefix": [], "suffix": ["eos"]}},
        "qwen3": {"prompt": {"prefix": ["bos"], "suffix": []}},
        "mistral": {"prompt": {"prefix": ["bos"], "suffix": []}},
        "gemma2": {"prompt": {"prefix": ["bos"], "suffix": []}},
        "gemma3": {"prompt": {"prefix": ["bos"], "suffix": []}},
        "phi3": {"prompt": {"prefix": ["bos"], "suffix": []}},
        "phi3-longrope": {"prompt": {"prefix": ["bos"], "suffix": []}},
        "neox": {"prompt": {"prefix": [], "suffix": []}},
        "smollm3": {"prompt": {"prefix": ["bos"], "suffix": []}},
    }[name]
    assert manifest["framing"] == framing
    template = _tokenizer(folder).chat_template  # Qwen3's fixture has one, the others none
    assert manifest["extra"].get("chat_template") == template and (template is not None) == (name == "qwen3")
    theirs = json.loads((folder / "tokenizer.json").read_text())
    ours = json.loads((export / "tokenizer.json").read_text())
    assert ours["model"] == theirs["model"] and ours["padding"] is None and ours["truncation"] is None
    kinds = {entry["kind"] for entry in manifest["files"]}
    assert {"tokenizer", "golden"} <= kinds
    assert ("attentions" in kinds) == EXPORTS[name][1].get("attentions", True)
    assert ("block" in kinds) == EXPORTS[name][1].get("blocks", True)
    parities = [e["parity"] for e in manifest["files"] if e.get("parity")]
    worst = max(max(p["max_abs_diff"].values()) for p in parities)
    used = max(max(p["used"].values()) for p in parities)
    print(
        f"{name}: {len(parities)} graphs proven against PyTorch, worst max abs diff {worst:.1e}, "
        f"{used:.0%} of the float64 rule's allowance at most"
    )
    assert all(p["reference"] == "float64" for p in parities) and used <= 1.0


@pytest.mark.parametrize("name", list(EXPORTS))
def test_goldens_pass_in_the_python_runtime_and_tract(
    hf_exports: dict[str, tuple[Path, Path]], name: str
) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from test_engines import _goldens_in_tract

    export = ExportFolder.open(hf_exports[name][1])
    for engine, results in (("onnxruntime", run_graph_goldens(export)), ("tract", _goldens_in_tract(export))):
        assert results, f"{engine}: no goldens ran"
        failed = [(r.file, r.label, r.problem) for r in results if not r.ok]
        worst = max(r.max_abs_diff or 0.0 for r in results)
        print(f"{name} on {engine}: {len(results)} golden cases, max abs diff {worst:.1e}")
        assert not failed, f"{engine}: {failed[:5]}"


def test_goldens_pass_in_onnxruntime_node(hf_exports: dict[str, tuple[Path, Path]]) -> None:
    node = shutil.which("node")
    assert node, "Node.js is not installed; the host's tests need it (README: set-up)"
    assert (NODE_HOST / "node_modules").is_dir(), "run `make node-deps` first (npm ci in hosts/node)"
    folders = [str(export) for _, export in hf_exports.values()]
    done = subprocess.run(
        [node, "bin/verify.js", *folders, "--engine", "all", "--json"],
        cwd=NODE_HOST,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    print(done.stdout[-1500:])


def hf_tokenize(folder: Path, text: str) -> list[int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)(text)["input_ids"]


@torch.no_grad()
@pytest.mark.parametrize(
    "name", ["gpt2", "llama", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "neox", "smollm3"]
)
def test_runtime_greedy_equals_transformers_generate(
    hf_exports: dict[str, tuple[Path, Path]], name: str
) -> None:
    folder, export = hf_exports[name]
    model = load(export)
    hf = _transformers(name, folder)
    for prompt in ("the cat sat", "Hello world, this is"):
        framed = model.framing.ids(model.tokenizer.encode(prompt), model.tokenizer.special_tokens)
        assert framed == hf_tokenize(folder, prompt)
        (ours,) = model.generate_ids([framed], max_new_tokens=16, temperature=0.0, stop_tokens=[])
        theirs = hf.generate(
            torch.tensor([framed]), max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0, len(framed) :].tolist()
        print(f"{name} {prompt!r}: {ours.tokens}")
        assert ours.tokens == theirs


@torch.no_grad()
def test_an_imported_decoder_decodes_as_its_generation_config_says(
    hf_exports: dict[str, tuple[Path, Path]],
) -> None:
    """GPT-2's generation_config.json (tests/hf_models.py: greedy, two stop ids, max_new_tokens) is the
    export's default: a call without options, from Python or the command line, gives what transformers'
    generate gives without options."""
    from typer.testing import CliRunner

    from onnxformer.cli.main import app

    folder, export = hf_exports["gpt2"]
    settings = json.loads((folder / "generation_config.json").read_text())
    model = load(export)
    defaults = model.export.manifest.generation
    assert (defaults.temperature, defaults.top_k, defaults.top_p) == (0.0, 50, 1.0)  # greedy, as no do_sample
    assert list(defaults.stop_tokens) == settings["eos_token_id"]
    assert defaults.max_new_tokens == settings["max_new_tokens"] == hf_models.GENERATION_BUDGET
    hf = _transformers("gpt2", folder)
    stops, reasons = set(settings["eos_token_id"]), []
    for prompt in (hf_models.GENERATION_PROMPT, "Hello world, this is", "a dog"):
        framed = model.framing.ids(model.tokenizer.encode(prompt), model.tokenizer.special_tokens)
        (ours,) = model.generate_ids([framed])
        sequence = hf.generate(torch.tensor([framed]), attention_mask=torch.ones(1, len(framed), dtype=int))
        new = sequence[0, len(framed) :].tolist()
        ends = [i for i, token in enumerate(new) if token in stops]
        theirs = new[: ends[0]] if ends else new
        print(f"{prompt!r}: {ours.tokens} ({ours.finish_reason})")
        assert ours.tokens == theirs
        reasons.append(ours.finish_reason)
        cli = CliRunner().invoke(app, ["generate", str(export), prompt, "--json"])
        assert cli.exit_code == 0, cli.output
        assert json.loads(cli.stdout)["results"][0]["output"] == model.tokenizer.decode(ours.tokens)
    assert reasons[0] == "stop" and "length" in reasons  # the second stop id and the budget both ended one


@torch.no_grad()
def test_runtime_seq2seq_greedy_equals_transformers_generate(
    hf_exports: dict[str, tuple[Path, Path]],
) -> None:
    folder, export = hf_exports["t5"]
    model = load(export)
    from transformers import DynamicCache, EncoderDecoderCache

    hf = _transformers("t5", folder)
    for source in ("the cat sat on the mat.", "birds sing in the morning"):
        framed = model.framing.ids(model.tokenizer.encode(source), model.tokenizer.special_tokens)
        assert framed == hf_tokenize(folder, source)
        (ours,) = model.generate_ids([framed], max_new_tokens=12, temperature=0.0, stop_tokens=[])
        # transformers sizes its own cache by the encoder's layer count (3 decoder layers here crash it),
        # hence the explicit cache.
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        theirs = hf.generate(
            torch.tensor([framed]),
            max_new_tokens=12,
            min_new_tokens=12,
            do_sample=False,
            eos_token_id=None,
            cache=cache,
        )[0, 1:].tolist()
        print(f"t5 {source!r}: {ours.tokens}")
        assert ours.tokens == theirs


def test_cli_names_what_it_cannot_import(tmp_path: Path) -> None:
    """(The hf_exports fixture makes GPT-2's export with the command itself.)"""
    folder = hf_models.gpt2_folder(tmp_path / "gpt2")
    cli = [sys.executable, "-m", "onnxformer"]
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["MixtralForCausalLM"]
    (folder / "config.json").write_text(json.dumps(config))
    done = subprocess.run(
        [*cli, "export", str(folder), "--out", str(tmp_path / "other")], capture_output=True, text=True
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "'MixtralForCausalLM' is not supported; the nearest supported is MistralForCausalLM" in done.stderr
    assert "LlamaForCausalLM" in done.stderr
    assert not (tmp_path / "other").exists()
