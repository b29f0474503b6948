"""`onnxformer optimize` on every imported decoder architecture (tests/conftest.py HF_EXPORTS): fused with
the cache in place, fused with the cache concatenated, and int8; each either passes the export's goldens
again (optimize re-checks them before writing, and the runtime runs them on the written folder), or is
refused by name. Nothing may run faster by computing something else.

    in place    GroupQueryAttention writing into the bound buffer; the graph's mask (sliding windows, a
                left-padded row) enters as its attention bias. Gemma 2's soft-capped logits: refused.
    concat      MultiHeadAttention with the plain cache contract, for every architecture
    int8        dynamic int8 weights, graph goldens at twice the measured error (a random model's cosine)
"""

from pathlib import Path

import pytest

from onnxformer.builder.optimize import optimize_export
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import run_goldens

DECODERS = ("llama", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "neox", "smollm3")
# what in-place optimisation refuses, by architecture, and the words that name why
REFUSED_IN_PLACE = {"gemma2": "soft-caps its attention logits"}
VARIANTS = {
    "in-place": {"kv_cache": "in-place"},
    "concat": {"kv_cache": "concat"},
    "int8": {"kv_cache": "concat", "quantize": "int8", "gate": False},  # random weights: nothing to gate
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name", DECODERS)
def test_optimize_keeps_the_goldens_or_refuses_by_name(
    hf_exports: dict[str, tuple[Path, Path]], tmp_path: Path, name: str, variant: str
) -> None:
    _, export = hf_exports[name]
    out = tmp_path / "optimized"
    if variant == "in-place" and name in REFUSED_IN_PLACE:
        with pytest.raises(ExportError, match=REFUSED_IN_PLACE[name]) as caught:
            optimize_export(export, out, tasks=False, **VARIANTS[variant])
        assert "--kv-cache concat" in str(caught.value) and not out.exists()
        return
    manifest = optimize_export(export, out, tasks=False, **VARIANTS[variant])
    record = manifest.extra["optimization"]
    assert record["kv_cache"] == VARIANTS[variant]["kv_cache"]
    results = run_goldens(ExportFolder.open(out))
    failed = [(r.file, r.label, r.problem) for r in results if not r.ok]
    worst = max(r.max_abs_diff or 0.0 for r in results)
    print(f"{name} {variant}: {len(results)} goldens, max abs diff {worst:.2e}, {record['fused_ops']}")
    assert results and not failed, failed[:3]
