"""The benchmark's models: the `small` presets with random weights, exported and optimised once, reused.

Per family, under the work folder:

    <family>/checkpoint   random weights (the preset's init, plus noise on biases and LayerNorm gains so
                          no two parameters are equal and no layer is an identity)
    <family>/onnx         `export_checkpoint` (graphs only: no blocks, no attention-weights graph)
    <family>/fused        `optimize_export` fp32: fused attention, SkipLayerNorm, BiasGelu
    <family>/int8         `optimize_export(quantize="int8")`
    <family>/stamp.json   what they were built from; a mismatch (another config, changed optimisation
                          code, other tool versions) rebuilds the family

GPT's context is 1152 (the preset's 1024 is too short for a 1024-token context plus 128 generated).
"""

import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

FAMILIES = ("bert", "gpt", "t5")
VARIANT_FOLDERS = ("onnx", "fused", "int8")
OVERRIDES: dict[str, dict[str, Any]] = {"gpt": {"max_len": 1152}, "bert": {}, "t5": {}}
NOISE = 0.05  # std of the noise added to 1-D parameters (biases, LayerNorm gains and shifts)
SEED = 0
EXPORT_CODE = ("builder/export/pipeline.py", "builder/export/graph.py", "builder/layers/attention.py")
OPTIMIZE_CODE = (
    "builder/optimize/cache.py",
    "builder/optimize/fusion.py",
    "builder/optimize/export.py",
    "builder/optimize/quality.py",
)


@dataclass(frozen=True)
class BenchModel:
    family: str
    config: dict[str, Any]
    checkpoint: Path
    folders: dict[str, Path]  # variant ("onnx", "fused", "int8") -> export folder


def _tokenizer():
    from onnxformer.builder.data import generate_sentences, passive_pairs
    from onnxformer.builder.tokenizer import train_tokenizer

    texts = generate_sentences(4000, seed=SEED) + [t for pair in passive_pairs(2000, seed=SEED) for t in pair]
    return train_tokenizer(texts, vocab_size=512)


def _digest(names: tuple[str, ...]) -> str:
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for name in names:
        path = root / name
        digest.update(path.read_bytes() if path.is_file() else name.encode())
    return digest.hexdigest()


def _stamp(family: str, config: dict[str, Any]) -> dict[str, Any]:
    from onnxformer.builder.export.blocks import tool_versions

    return {
        "family": family,
        "config": config,
        "noise": NOISE,
        "seed": SEED,
        "export_code": _digest(EXPORT_CODE),
        "versions": tool_versions(),
    }


def prepare_models(
    work: Path,
    *,
    families: tuple[str, ...] = FAMILIES,
    fresh: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, BenchModel]:
    """The benchmark models of `families`, built under `work` unless an up-to-date build is there."""
    import torch

    from onnxformer.builder.export.blocks import tool_versions
    from onnxformer.builder.export.models import export_checkpoint
    from onnxformer.builder.families import FAMILIES as FAMILY_TABLE
    from onnxformer.builder.optimize import optimize_export
    from onnxformer.builder.tokenizer import special_tokens
    from onnxformer.builder.training.checkpoint import Checkpoint, save_checkpoint

    tokenizer = None
    models = {}
    for family in families:
        spec = FAMILY_TABLE[family]
        root = work / family
        stamp_path = root / "stamp.json"
        if tokenizer is None:
            tokenizer = _tokenizer()
        overrides = {"vocab_size": tokenizer.get_vocab_size(), "dropout": 0.0, **OVERRIDES[family]}
        if family == "t5":
            overrides["decoder_start_token_id"] = special_tokens(tokenizer).bos
        config = spec.config.preset("small", **overrides)
        stamp = _stamp(family, asdict(config))
        folders = {variant: root / variant for variant in VARIANT_FOLDERS}
        saved = json.loads(stamp_path.read_text()) if stamp_path.is_file() else {}
        exported = {key: saved.get(key) for key in stamp} == stamp and (
            folders["onnx"] / "manifest.json"
        ).is_file()
        optimized = saved.get("optimize_code") == _digest(OPTIMIZE_CODE) and all(
            (folders[name] / "manifest.json").is_file() for name in ("fused", "int8")
        )
        if fresh or not exported:
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            if progress:
                progress(f"{family}: random-weight checkpoint")
            torch.manual_seed(SEED)
            model = spec.model(config).eval()
            with torch.no_grad():
                for parameter in model.parameters():
                    if parameter.dim() == 1:
                        parameter.add_(torch.randn_like(parameter) * NOISE)
            checkpoint = Checkpoint(family, model, tokenizer, 0, extra={"benchmark": "random weights"})
            save_checkpoint(root / "checkpoint", checkpoint, versions=tool_versions())
            if progress:
                progress(f"{family}: export (parity and goldens included)")
            export_checkpoint(root / "checkpoint", folders["onnx"], blocks=False, attentions=False)
            optimized = False
        if not optimized:
            if progress:
                progress(f"{family}: optimize fp32")
            optimize_export(folders["onnx"], folders["fused"], tasks=False)
            if progress:
                progress(f"{family}: optimize int8")
            optimize_export(folders["onnx"], folders["int8"], quantize="int8", tasks=False)
            stamp = {**stamp, "optimize_code": _digest(OPTIMIZE_CODE)}
            stamp_path.write_text(json.dumps(stamp, indent=2, sort_keys=True))
        models[family] = BenchModel(family, asdict(config), root / "checkpoint", folders)
    return models
