"""The peers' quality comparison (benchmarks/peers/quality.py) on synthetic logits and fake workers: the
rows' shaping, the figures, the table; no model is built and no worker started."""

import io
import math
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from benchmarks.peers import build_hf, quality
from benchmarks.peers.envs import WorkerError
from benchmarks.peers.models import Builder
from benchmarks.peers.report import print_quality, quality_rows
from benchmarks.peers.workloads import KINDS

MODELS = {
    "source": "llama-trained-hf",
    "export": "llama-trained/onnx",
    "ours": {"fused": "fused", "int8": "int8", "int4": "int4"},
    "genai": {"fp32": "g-fp32", "int8": "g-int8", "int4": "g-int4"},
    "llamacpp": {"f32": "l-f32", "Q8_0": "l-q8_0", "Q4_0": "l-q4_0"},
}


def test_teacher_forcing_keeps_every_position_but_each_rows_last_with_its_next_token() -> None:
    keep, following = quality.teacher_forced([[1, 5, 6, 2], [1, 7, 2]])
    assert keep.tolist() == [0, 1, 2, 4, 5]  # positions 3 and 6 end their rows: nothing follows them
    assert following.tolist() == [5, 6, 2, 7, 2]


def test_figures_are_kl_top1_and_perplexity_against_the_reference() -> None:
    reference = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]))  # (N, V) log-probabilities
    tool = np.log(np.array([[0.25, 0.5, 0.25], [0.1, 0.8, 0.1]]))  # the first position's top-1 flips
    following = np.array([0, 1])
    same, own = quality.figures(reference, reference, following)
    assert same["kl"] == pytest.approx(0.0, abs=1e-12) and same["top1"] == 1.0
    assert same["perplexity_change"] == pytest.approx(0.0, abs=1e-12) and same["max_abs_logit_diff"] == 0.0
    measured, _ = quality.figures(reference, tool, following)
    kl = (0.5 * math.log(0.5 / 0.25) + 0.25 * math.log(0.25 / 0.5)) / 2  # the second position adds 0
    assert measured["kl"] == pytest.approx(kl)
    assert measured["top1"] == 0.5
    assert own["perplexity"] == pytest.approx(math.exp(-(math.log(0.5) + math.log(0.8)) / 2))
    assert measured["perplexity"] == pytest.approx(math.exp(-(math.log(0.25) + math.log(0.8)) / 2))
    assert measured["perplexity_change"] == pytest.approx(measured["perplexity"] / own["perplexity"] - 1)
    assert measured["max_abs_logit_diff"] == pytest.approx(math.log(2))
    entropy = -(0.5 * math.log(0.5) + 0.5 * math.log(0.25) + 0.2 * math.log(0.1) + 0.8 * math.log(0.8)) / 2
    assert own["mean_entropy"] == pytest.approx(entropy) and own["max_entropy"] == pytest.approx(math.log(3))
    assert "near uniform" in own["uninformative"]  # 0.84 nats of at most 1.10: above the gate's 75 %


def test_every_quality_tool_has_a_logits_workload_and_the_reference_comes_first() -> None:
    tools = quality.quality_tools(MODELS)
    assert tools[0].name == quality.REFERENCE and tools[0].args["folder"] == MODELS["export"]
    names = [tool.name for tool in tools]
    for name in ("ours:int4", "transformers", "genai:int4", "llama.cpp:Q4_0", quality.FP32_CHECK[0]):
        assert name in names
    assert all("logits" in KINDS[tool.module] for tool in tools)


def test_collected_logits_are_cut_to_the_scored_positions_and_a_bad_tool_is_reported(monkeypatch) -> None:
    rows = [[1, 5, 2], [1, 6, 7, 2]]  # 7 positions, 5 with a next token
    vocab = 8

    def fake(tool, rows, threads, logs, tmp):
        if tool.name == "genai:int8":
            raise WorkerError("genai:int8: boom")
        total = sum(len(row) for row in rows) - (tool.name == "llama.cpp:Q8_0")  # one position short
        return np.arange(total * vocab, dtype=np.float32).reshape(total, vocab), {"seconds": 0.1}

    monkeypatch.setattr(quality, "_tool_logits", fake)
    failures: list[dict] = []
    tools = quality.quality_tools(MODELS)
    logits, runs = quality.collect_logits(
        tools, rows, threads=1, logs=Path("logs"), say=lambda message: None, failures=failures
    )
    assert {f["tool"] for f in failures} == {"genai:int8", "llama.cpp:Q8_0"}
    assert "(6, 8)" in next(f["error"] for f in failures if f["tool"] == "llama.cpp:Q8_0")
    reference = logits[quality.REFERENCE]
    assert reference.shape == (5, vocab)
    assert reference[:, 0].tolist() == [0, 8, 24, 32, 40]  # positions 0, 1 | 3, 4, 5 of the 7
    assert set(runs) == set(logits) and len(logits) == len(tools) - 2


def _result() -> dict:
    def tool(precision: str, kl: float, top1: float, change: float) -> dict:
        return {
            "precision": precision,
            "kl": kl,
            "top1": top1,
            "perplexity": 5.0 * (1 + change),
            "perplexity_change": change,
            "max_abs_logit_diff": 0.5,
        }

    return {
        "quality": {
            "model": {
                "hidden_size": 256,
                "intermediate_size": 704,
                "num_hidden_layers": 4,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 396,
                "held_out": {"loss": 1.6, "mean_entropy": 1.7, "max_entropy": 5.98, "uninformative": ""},
            },
            "text": "the built-in grammar's held-out sentences",
            "rows": 256,
            "positions": 2184,
            "reference": "ours:export",
            "gates": {"ours:int4": {"passed": True, "kept": "nothing", "figures": {}}},
            "tools": {
                "ours:int4": tool("int4", 4e-4, 0.9556, 0.0017),
                "ours:export": tool("fp32", 0.0, 1.0, 0.0),
                "genai:int8": tool("int8", 3e-6, 0.995, -0.0001),
            },
            "fp32_check": {
                "tool": "transformers",
                "max_abs_logit_diff": 1.5e-5,
                "tolerance": 1e-4,
                "within": True,
            },
        }
    }


def test_the_quality_table_orders_by_precision_and_prints_the_model_and_the_fp32_check() -> None:
    rows = quality_rows(_result())
    assert [row[0] for row in rows] == ["ours:export", "genai:int8", "ours:int4"]
    assert rows[2][2:6] == ["4.00e-04", "0.9556", "5.0085", "+0.170 %"]
    out = io.StringIO()
    print_quality(Console(file=out, width=300), _result())
    text = out.getvalue()
    assert "hidden 256, 4 layers" in text and "held-out loss 1.600 nats" in text
    assert "against transformers: max |logit diff| 1.5e-05, within 0.0001" in text
    assert "ours:int4: our quality gate passed" in text
    print_quality(Console(file=io.StringIO()), {"workloads": []})  # no quality: nothing, no error


def test_the_trained_llamas_stamp_covers_its_helpers_and_settings(monkeypatch, tmp_path: Path) -> None:
    stamps = []
    monkeypatch.setattr(Builder, "step", lambda self, out, what, stamp, command, **kw: stamps.append(stamp))
    builder = Builder(tmp_path, fresh=False, progress=lambda message: None)
    builder.hf("genai", "trained", tmp_path / "out", "llama-trained", str(tmp_path / "out"), "corpus.txt")
    monkeypatch.setitem(build_hf.TRAINING, "steps", build_hf.TRAINING["steps"] + 1)
    monkeypatch.setitem(
        build_hf.PARTS, "llama-trained", (*build_hf.PARTS["llama-trained"][:3], build_hf.TRAINING)
    )
    builder.hf("genai", "trained", tmp_path / "out", "llama-trained", str(tmp_path / "out"), "corpus.txt")
    assert stamps[0]["recipe"] != stamps[1]["recipe"]
    assert all(width % 32 == 0 for key, width in build_hf.TRAINED.items() if key.endswith("_size"))
