"""Shared fixtures. The full block export (~1 minute on 2 cores) is made once per test session."""

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def blocks_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every block of the catalogue exported and proven, in a folder tests must not modify."""
    from onnxformer.builder.export import export_blocks

    out = tmp_path_factory.mktemp("export") / "blocks"
    export_blocks(out)
    return out


@pytest.fixture
def blocks_copy(blocks_export: Path, tmp_path: Path) -> Path:
    """A private copy of the block export that a test may damage."""
    copy = tmp_path / "blocks"
    shutil.copytree(blocks_export, copy)
    return copy


@pytest.fixture(scope="session")
def optimized_gpt(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The reference GPT through the installed `onnxformer optimize`, as a user runs it: "fused" (fused
    graphs, the in-place KV cache), "int8" (also int8 weights) and "int4" (4-bit weights). Read by the
    hosts' tests; tests must not modify them."""
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("optimized-gpt")
    source = Path(__file__).resolve().parents[1] / "exported" / "gpt"
    made = {}
    for name, flags in (("fused", []), ("int8", ["--int8"]), ("int4", ["--int4"])):
        command = [
            sys.executable,
            "-m",
            "onnxformer",
            "optimize",
            str(source),
            str(root / name),
            "--no-tasks",
        ]
        done = subprocess.run([*command, *flags], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        made[name] = root / name
    return made


# A model small enough to train and export in seconds; the quality is irrelevant to these tests.
TINY_MODEL = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64}


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """family -> checkpoint folder of a briefly trained tiny model."""
    from onnxformer.builder.training import TrainOptions, train

    root = tmp_path_factory.mktemp("checkpoints")
    return {
        family: train(
            root / family,
            TrainOptions(
                family, steps=30, batch_size=16, eval_every=30, quality_samples=2, model_overrides=TINY_MODEL
            ),
        ).out
        for family in ("gpt", "bert", "t5")
    }


@pytest.fixture(scope="session")
def model_exports(
    tiny_checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """family -> export folder of the tiny checkpoint (graphs, attentions, blocks, tokenizer)."""
    from onnxformer.builder.export.models import export_checkpoint

    root = tmp_path_factory.mktemp("model_exports")
    for family, checkpoint in tiny_checkpoints.items():
        export_checkpoint(checkpoint, root / family)
    return {family: root / family for family in tiny_checkpoints}


@pytest.fixture(scope="module")
def one_torch_thread():
    """For modules of tiny models (`pytestmark = pytest.mark.usefixtures("one_torch_thread")`): they gain
    nothing from intra-op threads, and on a shared 2-core machine the threads' spinning made such a module
    3-4x slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---- Hugging Face model folders (tests/hf_models.py), built once per session -------------------------
# Tiny random-weight transformers models saved with save_pretrained: the checkpoints the import, parity
# and export tests read. Tests must not modify these folders (copy one to tamper with it).


@pytest.fixture(scope="session")
def hf_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name -> folder: bert (BertModel), bert-mlm, bert-cls, gpt2, t5 (v1.0 relu, tied), t5-gated
    (gated-gelu, untied, 2 encoder / 3 decoder layers), llama (untied), llama-tied, llama-bf16,
    llama-fp16, llama-sharded (shards of 20KB with model.safetensors.index.json), qwen2 (q/k/v biases),
    qwen2-sliding (use_sliding_window, the second layer over 8 keys), qwen3 (QK-norm, head_dim 16 apart
    from hidden / heads, tied), mistral (sliding window 8),
    gemma2 and gemma3 (sandwich norms, local and global layers, byte-fallback BPE), phi3 (fused q/k/v and
    gate/up, partial rotary, window 8), phi3-longrope (longrope: 16 positions stretched to 80), neox
    (per-head fused q/k/v, partial rotary, parallel residual), smollm3 (NoPE layers, a sliding layer),
    smollm2 (a Llama with SmolLM2's config keys)."""
    import hf_models
    import torch

    root = tmp_path_factory.mktemp("hf_folders")
    builders = {
        "bert": lambda p: hf_models.bert_folder(p, "BertModel"),
        "bert-mlm": lambda p: hf_models.bert_folder(p, "BertForMaskedLM"),
        "bert-cls": lambda p: hf_models.bert_folder(p, "BertForSequenceClassification"),
        "gpt2": hf_models.gpt2_folder,
        "t5": lambda p: hf_models.t5_folder(p, gated=False),
        "t5-gated": lambda p: hf_models.t5_folder(p, gated=True),
        "llama": lambda p: hf_models.llama_folder(p, tied=False),
        "llama-tied": lambda p: hf_models.llama_folder(p, tied=True),
        "llama-bf16": lambda p: hf_models.llama_folder(p, dtype=torch.bfloat16),
        "llama-fp16": lambda p: hf_models.llama_folder(p, dtype=torch.float16),
        "llama-sharded": lambda p: hf_models.llama_folder(p, shard="20KB"),
        "qwen2": hf_models.qwen2_folder,
        "qwen2-sliding": lambda p: hf_models.qwen2_folder(p, sliding=True),
        "qwen3": hf_models.qwen3_folder,
        "mistral": hf_models.mistral_folder,
        "gemma2": hf_models.gemma2_folder,
        "gemma3": hf_models.gemma3_folder,
        "phi3": hf_models.phi3_folder,
        "phi3-longrope": hf_models.phi3_longrope_folder,
        "neox": hf_models.neox_folder,
        "smollm3": hf_models.smollm3_folder,
        "smollm2": hf_models.smollm2_folder,
    }
    return {name: build(root / name) for name, build in builders.items()}


@pytest.fixture(scope="session")
def hf_bert_folder(hf_folders: dict[str, Path]) -> Path:
    return hf_folders["bert"]


@pytest.fixture(scope="session")
def hf_gpt2_folder(hf_folders: dict[str, Path]) -> Path:
    return hf_folders["gpt2"]


@pytest.fixture(scope="session")
def hf_t5_folder(hf_folders: dict[str, Path]) -> Path:
    return hf_folders["t5"]


@pytest.fixture(scope="session")
def hf_llama_folder(hf_folders: dict[str, Path]) -> Path:
    return hf_folders["llama"]


# name -> (the hf_folders fixture's folder, export options)
HF_EXPORTS = {
    "gpt2": ("gpt2", {"blocks": False, "attentions": False}),
    "llama": ("llama", {}),
    "t5": ("t5-gated", {"blocks": False}),
    "qwen3": ("qwen3", {"blocks": False, "attentions": False}),
    "mistral": ("mistral", {"blocks": False}),
    "gemma2": ("gemma2", {"blocks": False, "attentions": False}),
    "gemma3": ("gemma3", {"attentions": False}),
    "phi3": ("phi3", {"blocks": False, "attentions": False}),
    "phi3-longrope": ("phi3-longrope", {"blocks": False, "attentions": False}),
    "neox": ("neox", {"blocks": False, "attentions": False}),
    "smollm3": ("smollm3", {"blocks": False, "attentions": False}),
}


@pytest.fixture(scope="session")
def hf_exports(
    tmp_path_factory: pytest.TempPathFactory, hf_folders: dict[str, Path]
) -> dict[str, tuple[Path, Path]]:
    """name -> (Hugging Face folder, its onnxformer export): read by tests/test_pretrained_export.py and
    tests/test_loaders.py. Tests must not modify these folders (copy one to write into it). GPT-2's is
    made by the installed command (`python -m onnxformer export FOLDER ...`), so that path is proven too."""
    import subprocess
    import sys

    from onnxformer.builder.export.models import export_checkpoint

    root = tmp_path_factory.mktemp("hf-exports")
    made = {}
    for name, (fixture, options) in HF_EXPORTS.items():
        folder, out = hf_folders[fixture], root / f"{name}-export"
        if name == "gpt2":
            flags = [f"--no-{option}" for option, value in options.items() if value is False]
            command = [sys.executable, "-m", "onnxformer", "export", str(folder), "--out", str(out), *flags]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-2000:]
        else:
            export_checkpoint(folder, out, **options)
        made[name] = (folder, out)
    return made


# ---- end of the Hugging Face model folders ---------------------------------------------------------
