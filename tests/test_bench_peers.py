"""`onnxformer bench --peers`' arithmetic and its errors, with fake workers: no model, no timing run."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ lives beside the package

from benchmarks.peers.envs import Env, WorkerError
from benchmarks.peers.run import compare, targets, time_alternating
from benchmarks.peers.workloads import Tool
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
