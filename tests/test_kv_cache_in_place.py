"""The in-place KV cache of optimised decoders (builder/optimize/cache.py, the runtime's bound steps):
the graph writes each step's keys and values into the buffer the runtime binds, and generates exactly
what the plain cache contract (past in, past + new out) generates."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxformer.builder.optimize import optimize_export
from onnxformer.builder.optimize.cache import in_place_cache
from onnxformer.runtime import load
from onnxformer.runtime.errors import ExportError, ManifestError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import run_goldens
from onnxformer.runtime.manifest import IN_PLACE_LAYOUT, Manifest
from onnxformer.runtime.session import Session

EXPORTED = Path(__file__).resolve().parents[1] / "exported"
PROMPTS = ["the cat", "a teacher finds the old book", "birds"]  # three lengths: a left-padded batch


@pytest.fixture(scope="module")
def gpt_caches(tmp_path_factory: pytest.TempPathFactory, optimized_gpt: dict[str, Path]) -> dict[str, Path]:
    """ "in-place" | "concat" -> the committed tiny GPT, optimised with that cache (the in-place one is
    tests/conftest.py's, which tests must not modify)."""
    concat = tmp_path_factory.mktemp("kv-cache") / "concat"
    optimize_export(EXPORTED / "gpt", concat, kv_cache="concat")
    return {"in-place": optimized_gpt["fused"], "concat": concat}


def test_manifest_records_the_buffer_contract(gpt_caches: dict[str, Path]) -> None:
    manifest = ExportFolder.open(gpt_caches["in-place"]).manifest
    assert manifest.kv_cache.layout == IN_PLACE_LAYOUT and manifest.kv_cache.in_place
    decoder = manifest.file("decoder.onnx")
    caches = [
        spec for spec in (*decoder.inputs, *decoder.outputs) if spec.name.startswith(("past", "present"))
    ]
    assert caches and all(spec.shape[2] == "max_sequence" for spec in caches)
    ops = {node.op_type for node in onnx.load(gpt_caches["in-place"] / "decoder.onnx").graph.node}
    assert "GroupQueryAttention" in ops and "MultiHeadAttention" not in ops
    assert manifest.extra["optimization"]["kv_cache"] == "in-place"
    plain = ExportFolder.open(gpt_caches["concat"]).manifest
    assert not plain.kv_cache.in_place and plain.extra["optimization"]["kv_cache"] == "concat"
    failed = [result for result in run_goldens(ExportFolder.open(gpt_caches["in-place"])) if not result.ok]
    assert not failed, failed[:3]


def test_steps_write_into_the_bound_buffer(gpt_caches: dict[str, Path]) -> None:
    """The prompt's keys and values land in the first positions of the buffer, each later step's at the
    next one, the rest stays untouched; and they are the plain graph's presents."""
    bound, plain = load(gpt_caches["in-place"], device="cpu"), load(gpt_caches["concat"], device="cpu")
    ids = np.array([[1, 9, 12, 30], [1, 44, 8, 9]], np.int64)
    mask = np.ones_like(ids)
    buffers = bound._empty_cache(ids, [3])  # room for the prompt and 3 steps
    pointers = {name: value.data_ptr() for name, (_, value) in buffers.buffers.items()}
    cache = plain._cache.empty(len(ids))
    worst = 0.0
    for step in range(3):
        got, buffers = bound._step(ids, mask, buffers)
        want, cache = plain._step(ids, mask, cache)
        worst = max(worst, float(np.abs(got - want).max()))
        filled = mask.shape[1]
        for name, (_, value) in buffers.buffers.items():
            assert value.data_ptr() == pointers[name]  # the same memory, step after step
            array = value.numpy()
            worst = max(worst, float(np.abs(array[:, :, :filled] - cache[name]).max()))
            assert not array[:, :, filled:].any(), f"{name}: written past position {filled} at step {step}"
        ids = np.argmax(got, axis=-1)[:, None]
        mask = np.concatenate([mask, np.ones((len(ids), 1), np.int64)], axis=1)
    print(f"in-place vs concat cache: max abs diff {worst:.2e}")
    assert worst < 1e-4


def test_generation_matches_the_concat_cache(gpt_caches: dict[str, Path], monkeypatch) -> None:
    bound, plain = load(gpt_caches["in-place"], device="cpu"), load(gpt_caches["concat"], device="cpu")
    calls = {"run": 0}
    real_run = Session.run

    def counting(self, feeds, outputs=None):
        calls["run"] += 1
        return real_run(self, feeds, outputs)

    monkeypatch.setattr(Session, "run", counting)  # the unbound call, which copies the cache
    greedy = bound.generate(PROMPTS, temperature=0.0, max_new_tokens=12)
    assert calls["run"] == 0  # every step went through the bound call
    assert greedy == plain.generate(PROMPTS, temperature=0.0, max_new_tokens=12)
    sampled = bound.generate(PROMPTS, temperature=1.0, top_k=20, seed=3, max_new_tokens=12)
    assert sampled == plain.generate(PROMPTS, temperature=1.0, top_k=20, seed=3, max_new_tokens=12)
    assert "".join(bound.stream(PROMPTS[1], temperature=0.0, max_new_tokens=8)) == plain.generate(
        PROMPTS[1], temperature=0.0, max_new_tokens=8
    )


def test_grouped_query_llama_generates_the_same(hf_exports, tmp_path: Path) -> None:
    """Rotary positions (as RotaryEmbedding) and 2 KV heads for 4 query heads (GroupQueryAttention's
    grouping), on an imported Llama-style checkpoint: the same tokens as the plain export, left padding
    included."""
    _, export = hf_exports["llama"]
    optimize_export(export, tmp_path / "fused", tasks=False)
    assert ExportFolder.open(tmp_path / "fused").manifest.kv_cache.in_place
    ops = Counter(node.op_type for node in onnx.load(tmp_path / "fused" / "decoder.onnx").graph.node)
    layers = ExportFolder.open(export).manifest.kv_cache.layers
    assert ops["GroupQueryAttention"] == layers and ops["RotaryEmbedding"] == 2 * layers  # q and k
    assert ops["Neg"] == 0  # none of the plain graph's rotate-half arithmetic is left
    bound, plain = load(tmp_path / "fused", device="cpu"), load(export, device="cpu")
    rows = [[1, 40, 41, 42, 43, 44], [1, 50, 51]]
    want = plain.generate_ids(rows, temperature=0.0, max_new_tokens=10, stop_tokens=[])
    assert bound.generate_ids(rows, temperature=0.0, max_new_tokens=10, stop_tokens=[]) == want


@pytest.mark.parametrize("cache", ["in-place", "concat"])
def test_a_sliding_window_mistral_generates_as_transformers(hf_exports, tmp_path: Path, cache: str) -> None:
    """Mistral's window (8 keys) crossed by the prompt and the generation: the fused graph, with the cache
    in place (GroupQueryAttention given the window in its attention bias) or concatenated, decodes a
    left-padded batch of two as transformers' `generate` does."""
    import torch
    import transformers

    folder, export = hf_exports["mistral"]
    optimize_export(export, tmp_path / "fused", tasks=False, kv_cache=cache)
    assert ExportFolder.open(tmp_path / "fused").manifest.kv_cache.in_place == (cache == "in-place")
    rows = [[1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49], [1, 50, 51]]  # the first already past the window
    ours = load(tmp_path / "fused", device="cpu").generate_ids(
        rows, temperature=0.0, max_new_tokens=14, stop_tokens=[]
    )
    hf = transformers.MistralForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(row)) + row for row in rows])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows])
    with torch.no_grad():
        out = hf.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=14, do_sample=False, eos_token_id=None,
            pad_token_id=0,
        )  # fmt: skip
    theirs = out[:, width:].tolist()
    print(f"mistral {cache}: {[result.tokens for result in ours]}")
    assert [result.tokens for result in ours] == theirs


def test_a_cache_that_cannot_all_be_rewritten_is_refused() -> None:
    model = onnx.load(EXPORTED / "gpt" / "decoder.onnx")
    manifest = ExportFolder.open(EXPORTED / "gpt").manifest
    cache = manifest.kv_cache
    options = {
        "num_heads": manifest.config["n_heads"],
        "kv_heads": cache.kv_heads,
        "head_dim": cache.head_dim,
    }
    before = model.SerializeToString()
    with pytest.raises(ExportError, match="--kv-cache concat"):
        in_place_cache(
            model,
            ids="input_ids",
            mask="attention_mask",
            past_names=[*cache.past_names(), "past.9"],
            **options,
        )
    assert model.SerializeToString() == before  # left as it was


def test_an_encoder_decoder_cannot_claim_an_in_place_cache() -> None:
    data = json.loads((EXPORTED / "t5" / "manifest.json").read_text())
    data["kv_cache"]["layout"] = list(IN_PLACE_LAYOUT)
    with pytest.raises(ManifestError, match="decoders without an encoder"):
        Manifest.from_json(json.dumps(data))
    data["kv_cache"]["layout"] = ["batch", "sequence", "heads", "head_dim"]
    with pytest.raises(ManifestError, match="re-export with this version"):
        Manifest.from_json(json.dumps(data))
