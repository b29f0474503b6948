"""The float64 parity figures of docs/goldens.md, measured: every family and imported architecture, with its
weights at 1x and 10x, exported (graphs, attentions and blocks) with the parity rule switched off so every
figure is seen, then judged by the default rule.

    .venv/bin/python scripts/parity_figures.py                 # about 15 minutes on 2 quiet cores
    .venv/bin/python scripts/parity_figures.py --only llama,t5

Models: tiny random-weight Hugging Face folders (tests/hf_models.py: BERT with its MLM head, GPT-2, a
Llama with GQA, T5 v1.0 relu and v1.1 gated-gelu) at transformers' default init (0.02), as they are and
with every weight matrix times 10 (0.2, as the import tests use); and onnxformer's own families, briefly
trained (as tests/conftest.py does), as they are and with every weight matrix times 10. One table row per
model and scale: the output that came closest to its allowance, ONNX Runtime's and PyTorch fp32's distance
to the float64 answer there, and the share of the allowance it used.
"""

import argparse
import sys
import tempfile
from pathlib import Path

from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import hf_models  # noqa: E402 (tests/ is put on the path above)

from onnxformer.builder.export.models import export_checkpoint  # noqa: E402
from onnxformer.builder.export.parity import ParityRule  # noqa: E402

MEASURE_ONLY = ParityRule(factor=1e30, floor=1e30)
DEFAULT_INIT = 0.02  # transformers' initializer_range
TINY = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64}

HF_MODELS = {
    "bert (BertForMaskedLM)": lambda p: hf_models.bert_folder(p, "BertForMaskedLM"),
    "gpt2": lambda p: hf_models.gpt2_folder(p, generation_config=False),  # parity needs none
    "llama (GQA, untied)": lambda p: hf_models.llama_folder(p, tied=False),
    "t5 (v1.0 relu)": lambda p: hf_models.t5_folder(p, gated=False),
    "t5 (v1.1 gated-gelu)": lambda p: hf_models.t5_folder(p, gated=True),
}
OWN_FAMILIES = ("gpt", "bert", "t5")


def times(folder: Path, factor: float) -> None:
    """Every weight matrix (2-D or more, norms left alone) of the folder's safetensors times `factor`."""
    for path in folder.glob("*.safetensors"):
        tensors = load_file(path)
        scaled = {
            k: v * factor if v.is_floating_point() and v.dim() >= 2 and "norm" not in k else v
            for k, v in tensors.items()
        }
        save_file(scaled, path, metadata={"format": "pt"})


def worst(manifest, default: ParityRule) -> tuple[str, float, float, float, float]:
    """(graph: output, error, torch_error, max |out|, share of the default allowance) of the output closest
    to its limit, from the figures recorded per output (the largest over the cases)."""
    rows = []
    for entry in manifest.files:
        parity = entry.parity
        if parity is None:
            continue
        for name in parity.error:
            error, own, scale = parity.error[name], parity.torch_error[name], parity.max_abs_value[name]
            allowed = default.allowance(own, scale)
            rows.append((error / allowed if allowed else 0.0, f"{entry.path}: {name}", error, own, scale))
    share, where, error, own, scale = max(rows)
    return where, error, own, scale, share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated keys to run (hf model names' first word, gpt...)")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    default = ParityRule()
    print(f"rule: error <= {default.factor:g} x torch_error + {default.floor:.3g} x max |output|\n")
    print("| model | weights | closest output | ONNX Runtime | PyTorch fp32 | max \\|out\\| | of allowance |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, build in HF_MODELS.items():
            if only and name.split()[0] not in only:
                continue
            hf_models.SCALE = DEFAULT_INIT  # the tests' folders use 10x; T5's builder keeps its own init
            folder = build(root / name.split()[0])
            for label, factor in (("1x", 1.0), ("10x", 10.0)):
                if factor != 1.0:
                    times(folder, factor)
                out = root / f"{folder.name}-{factor:g}-export"
                _row(name, label, worst(export_checkpoint(folder, out, rule=MEASURE_ONLY), default))
        from onnxformer.builder.training import TrainOptions, train

        for family in OWN_FAMILIES:
            if only and family not in only:
                continue
            options = TrainOptions(
                family, steps=30, batch_size=16, eval_every=30, quality_samples=2, model_overrides=TINY
            )
            checkpoint = train(root / f"own-{family}", options).out
            for label, factor in (("trained", 1.0), ("trained, 10x", 10.0)):
                if factor != 1.0:
                    times(checkpoint, factor)
                manifest = export_checkpoint(
                    checkpoint, root / f"own-{family}-{factor:g}-export", rule=MEASURE_ONLY
                )
                _row(f"onnxformer {family}", label, worst(manifest, default))


def _row(name: str, label: str, figures: tuple[str, float, float, float, float]) -> None:
    where, error, own, scale, share = figures
    print(f"| {name} | {label} | {where} | {error:.2e} | {own:.2e} | {scale:.3g} | {share:.0%} |", flush=True)


if __name__ == "__main__":
    main()
