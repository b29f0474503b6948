"""`onnxformer bench --peers`' arithmetic and its errors, with fake workers: no model, no timing run."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ lives beside the package

from benchmarks.peers.envs import Env, WorkerError
from benchmarks.peers.llamacpp import llama_bench_command, parse_llama_bench
from benchmarks.peers.models import OUR_VARIANTS
from benchmarks.peers.run import compare, targets, time_alternating
from benchmarks.peers.workloads import FAMILY_ENVS, TOOLS, Tool, decoder_tools
from onnxformer.runtime.errors import ConfigError


class FakeWorker:
    def __init__(self, name: str, values: list[float], calls: list[str], *, fail_at: int | None = None):
        self.name, self.values, self.calls, self.fail_at = name, list(values), calls, fail_at

    def time(self, key: str, inner: int) -> float:
        self.calls.append(self.name)
        if self.fail_at is not None and len([c for c in self.calls if c == self.name]) == self.fail_at:
            raise WorkerError(f"{self.name}: boom")
        return self.values.pop(0)


def _tool(name: str, precision: str, *, ours: bool = False) -> Tool:
    return Tool(name, "ours", "ours", {}, precision, name, ours=ours)


def test_tools_alternate_in_reversed_order_and_ratios_are_peer_over_ours() -> None:
    calls: list[str] = []
    workers = {
        "ours:fused": FakeWorker("ours:fused", [9, 10, 11, 10], calls),  # 1 warm-up, then 10, 11, 10
        "peer-a": FakeWorker("peer-a", [0, 20, 21, 19], calls),
        "peer-b": FakeWorker("peer-b", [0, 15, 15, 15], calls),
        "broken": FakeWorker("broken", [0, 1, 1, 1], calls, fail_at=3),
    }
    timings, errors = time_alternating(workers, "k", inner=1, warmup=1, repeats=3, sleep=lambda s: None)
    order = ["ours:fused", "peer-a", "peer-b", "broken"]
    assert calls == [*order, *order, *order[::-1], *order[:3]]  # warm-up, repeat 0, 1 (reversed), 2
    assert set(errors) == {"broken"} and "broken" not in timings  # dropped after its error, the rest go on
    assert timings["ours:fused"] == {"median_ms": 10.0, "min_ms": 10, "max_ms": 11, "samples": 3}
    tools = {
        "ours:fused": _tool("ours:fused", "fp32", ours=True),
        "peer-a": _tool("peer-a", "fp32"),
        "peer-b": _tool("peer-b", "fp32"),
        "ours:int8": _tool("ours:int8", "int8", ours=True),
    }
    timings["ours:int8"] = {"median_ms": 5.0, "min_ms": 5.0, "max_ms": 5.0, "samples": 3}
    fp32, int8 = compare(timings, tools)
    assert fp32["ratios"] == {"peer-a": 2.0, "peer-b": 1.5}
    assert (fp32["best_peer"], fp32["ratio_vs_best"]) == ("peer-b", 1.5)
    assert int8["best_peer"] is None and int8["ratio_vs_best"] is None  # no int8 peer: no ratio, no target
    rows = targets([{"title": "w", "comparisons": [fp32, int8]}])
    assert [(row["met"], row["aim_met"]) for row in rows] == [(True, True), (None, None)]


def test_a_missing_peer_environment_names_the_make_target(tmp_path: Path) -> None:
    env = Env(str(tmp_path / "no-such-venv"), ".installed", "genai-venv", "onnxruntime-genai")
    with pytest.raises(ConfigError, match=r"make genai-venv.*make peers-venvs"):
        env.check()


class _AnyFolder(dict):
    def __missing__(self, key: str) -> str:
        return f"folder-{key}"


def test_a_family_runs_only_in_the_environments_it_checks() -> None:
    """`--family encoder` checks .venv and .venv-optimum only; each tool must run in one of those."""
    models = {"source": "hf", **{key: _AnyFolder() for key in ("ours", "genai", "llamacpp")}}
    models |= {"optimum": "optimum", "st_onnx": "st-onnx"}
    for family, tools in TOOLS.items():
        used = {tool.env for tool in tools(models)}
        assert used <= set(FAMILY_ENVS[family]), (family, used)
        assert "ours" in used


def test_each_precision_is_compared_with_its_own_peers_int4_included() -> None:
    assert {v.name: v.precision for v in OUR_VARIANTS if "decoder" in v.families}["int4"] == "int4"
    models = {
        "source": "llama-hf",
        "ours": {"fused": "fused", "int8": "int8", "int4": "int4"},
        "genai": {"fp32": "g-fp32", "int8": "g-int8", "int4": "g-int4"},
        "llamacpp": {"f32": "l-f32", "Q8_0": "l-q8_0", "Q4_0": "l-q4_0"},
    }
    tools = {tool.name: tool for tool in decoder_tools(models)}
    timings = {name: {"median_ms": 10.0} for name in tools}
    timings["llama.cpp:Q4_0"] = {"median_ms": 5.0}
    rows = {row["ours"]: row for row in compare(timings, tools)}
    assert set(rows["ours:fused"]["ratios"]) == {"transformers", "genai:fp32", "llama.cpp:f32"}
    assert set(rows["ours:int8"]["ratios"]) == {"genai:int8", "llama.cpp:Q8_0"}  # genai's int4 is not int8
    assert set(rows["ours:int4"]["ratios"]) == {"genai:int4", "llama.cpp:Q4_0"}
    assert (rows["ours:int4"]["best_peer"], rows["ours:int4"]["ratio_vs_best"]) == ("llama.cpp:Q4_0", 0.5)


def _bench_run(prompt: int, generated: int, samples_ms: list[float]) -> dict:
    """One test as llama-bench's JSON output writes it (the fields the parser reads, and a few more)."""
    samples_ns = [int(ms * 1e6) for ms in samples_ms]
    tokens = prompt or generated
    return {
        "build_commit": "0c1e57098",
        "cpu_info": "Intel(R) Xeon(R) Processor",
        "backends": "CPU",
        "model_type": "llama ?B Q4_0",
        "n_threads": 2,
        "type_k": "f16",
        "type_v": "f16",
        "n_batch": 2048,
        "n_ubatch": 512,
        "flash_attn": -1,
        "poll": 50,
        "n_prompt": prompt,
        "n_gen": generated,
        "n_depth": 0,
        "avg_ns": sum(samples_ns) // len(samples_ns),
        "stddev_ns": 1000000,
        "avg_ts": tokens / (sum(samples_ms) / len(samples_ms) / 1e3),
        "samples_ns": samples_ns,
        "samples_ts": [tokens / (ms / 1e3) for ms in samples_ms],
    }


def test_llama_bench_output_reads_as_ms_per_prompt_and_per_token() -> None:
    text = json.dumps([_bench_run(128, 0, [40.0, 44.0, 42.0]), _bench_run(0, 128, [256.0, 384.0, 320.0])])
    result = parse_llama_bench(text)
    pp, tg = result["tests"]["pp128"], result["tests"]["tg128"]
    assert (pp["unit"], pp["mean_ms"], pp["median_ms"], pp["min_ms"], pp["samples"]) == (
        "ms per prompt",
        42.0,
        42.0,
        40.0,
        3,
    )
    assert (tg["unit"], tg["mean_ms"], tg["median_ms"], tg["min_ms"]) == ("ms per token", 2.5, 2.5, 2.0)
    assert result["build_commit"] == "0c1e57098" and result["settings"]["n_threads"] == 2
    with pytest.raises(ValueError, match="no test"):
        parse_llama_bench("[]")


def test_llama_bench_runs_at_the_workers_settings() -> None:
    command = llama_bench_command(
        Path("m.gguf"), threads=2, kv_type="f32", flash_attn="off", repeats=3, tokens=128
    )
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert (
        options["--threads"] == "2" and options["--flash-attn"] == "off" and options["--repetitions"] == "3"
    )
    assert (
        options["--cache-type-k"] == options["--cache-type-v"] == "f16"
    )  # llama-bench has no f32 cache type
    assert options["--n-prompt"] == options["--n-gen"] == "128" and options["--output"] == "json"
