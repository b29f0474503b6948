"""The memory-bandwidth ceiling of the peers' decoder workloads (benchmarks/peers/ceiling.py): bytes per
decode step counted from model files, the KV cache formula, the shares, and the bandwidth measurement."""

import io
import json
import math
import struct
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from rich.console import Console

from benchmarks.machine import llc_bytes, memory_bandwidth
from benchmarks.peers.ceiling import (
    KvShape,
    StepShape,
    StepWeights,
    ceiling_rows,
    gguf_tensors,
    gguf_weights,
    kv_cache_bytes,
    kv_shape,
    onnx_weights,
    share_rows,
    step_shape,
)
from benchmarks.peers.report import ceiling_table_rows, print_ceiling
from benchmarks.peers.workloads import Workload

V, D, F = 10, 4, 6  # vocabulary, width, ffn width of the tiny graphs


def _tensor(name: str, shape: tuple[int, ...], dtype=np.float32) -> TensorProto:
    return numpy_helper.from_array(np.zeros(shape, dtype=dtype), name)


def _decoder_graph(path: Path, *, tied: bool, kv_type: int = TensorProto.FLOAT16) -> None:
    """ids -> Gather(embedding) -> MatMul(w_in fp32 [D, F]) -> DequantizeLinear'd int8 [F, D] MatMul ->
    RotaryEmbedding (cos/sin caches [16, 2]) -> head: its own [D, V] weight, or the embedding transposed
    (tied); plus an initializer no node reads and a packed uint4 weight."""
    initializers = [
        _tensor("embedding", (V, D)),
        _tensor("w_in", (D, F)),
        _tensor("w_out_q", (F, D), np.int8),
        _tensor("w_out_scale", (), np.float32),
        _tensor("cos", (16, 2)),
        _tensor("sin", (16, 2)),
        helper.make_tensor("w4", TensorProto.UINT4, (8, 4), np.zeros(32, dtype=np.uint8).tolist()),
        _tensor("unused", (1000,)),
    ]
    nodes = [
        helper.make_node("Gather", ["embedding", "ids"], ["x0"], axis=0),
        helper.make_node("MatMul", ["x0", "w_in"], ["x1"]),
        helper.make_node("DequantizeLinear", ["w_out_q", "w_out_scale"], ["w_out"]),
        helper.make_node("MatMul", ["x1", "w_out"], ["x2"]),
        helper.make_node(
            "RotaryEmbedding", ["x2", "positions", "cos", "sin"], ["x3"], domain="com.microsoft"
        ),
        helper.make_node("DequantizeLinear", ["w4", "w_out_scale"], ["w4f"]),
    ]
    if tied:
        nodes += [
            helper.make_node("Transpose", ["embedding"], ["head"], perm=[1, 0]),
            helper.make_node("MatMul", ["x3", "head"], ["logits"]),
        ]
    else:
        initializers.append(_tensor("head", (D, V)))
        nodes.append(helper.make_node("MatMul", ["x3", "head"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "tiny",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 1]),
            helper.make_tensor_value_info("positions", TensorProto.INT64, ["batch", 1]),
            helper.make_tensor_value_info("past_key_values.0.key", kv_type, ["batch", 2, "past", 4]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1, V])],
        initializers,
    )
    onnx.save(helper.make_model(graph), str(path))


def test_onnx_bytes_count_gathered_tables_by_the_row_and_skip_what_no_node_reads(tmp_path: Path) -> None:
    path = tmp_path / "untied.onnx"
    _decoder_graph(path, tied=False)
    weights = onnx_weights(path)
    # w_in fp32 D*F*4 + w_out int8 F*D + its scale 4 + uint4 32 values / 2 + head fp32 D*V*4
    assert weights.whole == D * F * 4 + F * D + 4 + 16 + D * V * 4, weights
    # one embedding row (D fp32) and one position of each rotary cache (2 fp32 each)
    assert weights.gathered_row == D * 4 + 2 * 2 * 4, weights
    assert weights.kv_bytes_per_element == 2  # the past-key input is float16


def test_a_tied_embedding_is_read_whole_by_the_head(tmp_path: Path) -> None:
    path = tmp_path / "tied.onnx"
    _decoder_graph(path, tied=True, kv_type=TensorProto.FLOAT)
    weights = onnx_weights(path)
    assert weights.whole == V * D * 4 + D * F * 4 + F * D + 4 + 16, weights
    assert weights.gathered_row == 2 * 2 * 4  # the rotary caches only
    assert weights.kv_bytes_per_element == 4


def test_kv_cache_formula_and_the_config_it_reads() -> None:
    config = {"num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512}
    kv = kv_shape(config)
    assert kv == KvShape(layers=8, kv_heads=2, head_dim=64)
    # layers x 2 (K and V) x kv_heads x head_dim x context x bytes x batch
    assert kv_cache_bytes(kv, context=1024, bytes_per_element=4) == 8 * 2 * 2 * 64 * 1024 * 4
    assert kv_cache_bytes(kv, context=1024, bytes_per_element=2, batch=4) == 8 * 2 * 2 * 64 * 1024 * 2 * 4
    assert kv_shape({**config, "num_key_value_heads": None, "head_dim": 32}) == KvShape(8, 8, 32)


def _gguf(path: Path, tensors: list[tuple[str, list[int], bytes]]) -> None:
    """A GGUF v3 file: two metadata entries (a string array and the alignment) and `tensors`, each padded
    to 32 bytes."""

    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text)) + text.encode()

    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 2)
    header += string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + string("a") + string("bc")
    header += string("general.alignment") + struct.pack("<II", 4, 32)
    data, offset = b"", 0
    for name, dims, raw in tensors:
        header += string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        header += struct.pack("<IQ", 0, offset)
        padded = raw + b"\0" * (-len(raw) % 32)
        data += padded
        offset += len(padded)
    path.write_bytes(header + b"\0" * (-len(header) % 32) + data[: offset - (-len(tensors[-1][2]) % 32)])


def test_gguf_sizes_come_from_the_offsets_and_the_token_table_is_gathered(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    embedding = (("token_embd.weight", [D, V], bytes(V * D * 4)),)  # GGUF dims: columns first
    tensors = [*embedding, ("blk.0.attn_q.weight", [32, 1], bytes(34)), ("output.weight", [D, V], bytes(160))]
    _gguf(path, tensors)
    sizes = gguf_tensors(path)
    assert sizes == {
        "token_embd.weight": (160, [D, V]),
        "blk.0.attn_q.weight": (64, [32, 1]),  # 34 bytes (one Q8_0 block) padded to the alignment
        "output.weight": (160, [D, V]),
    }
    weights = gguf_weights(path)
    assert (weights.whole, weights.gathered_row, weights.kv_bytes_per_element) == (64 + 160, 16, 2)
    _gguf(path, tensors[:2])  # no output.weight: the head is tied to the embedding, read whole
    assert gguf_weights(path).whole == 160 + 34 and gguf_weights(path).gathered_row == 0


def test_step_shapes_of_the_decoder_workloads() -> None:
    ids = [[1] * 256]
    decode = Workload("decode-256", "decode", "ms per token", "decode", {"ids": ids, "steps": 16})
    generate = Workload("generate-128-b4", "gen", "ms", "generate", {"ids": [[1] * 16] * 4, "new": 128})
    prefill = Workload("prefill-128", "prefill", "ms", "prefill", {"ids": [[1] * 128]})
    assert step_shape(decode) == StepShape(batch=1, context=256 + 8.5, steps_per_call=1)
    assert step_shape(generate) == StepShape(batch=4, context=16 + 64, steps_per_call=128)
    assert step_shape(prefill) is None


def _result(tools: dict[str, float]) -> dict:
    return {
        "settings": {"quick": True},
        "machine": {"memory_bandwidth": {"read_gbs": 20.0, "threads": 1}, "last_level_cache_mb": 1.0},
        "tools": {"decoder": {name: {"precision": "fp32"} for name in tools}},
        "workloads": [
            {
                "family": "decoder",
                "key": "decode-1024",
                "title": "decode step, context 1024",
                "tools": {name: {"median_ms": ms} for name, ms in tools.items()},
            },
            {"family": "decoder", "key": "prefill-128", "title": "prefill", "tools": {}},
        ],
    }


def test_the_share_is_bytes_per_step_over_step_time_over_read_bandwidth() -> None:
    kv = KvShape(8, 2, 64)
    weights = {"a": StepWeights(100_000_000, 2048, 4, ("a",)), "b": StepWeights(25_000_000, 512, 2, ("b",))}
    shapes = {"decode-1024": StepShape(1, 1024, 1)}
    rows = share_rows(
        _result({"a": 10.0, "b": 4.0, "c": 1.0}), shapes, weights, kv, read_gbs=20.0, llc_mb=1.0
    )
    assert [row["tool"] for row in rows] == ["a", "b"]  # c: no counted weights; prefill: no step shape
    a = rows[0]
    total = 100_000_000 + 2048 + 8 * 2 * 2 * 64 * 1024 * 4
    assert a["bytes_per_step_mb"] == round(total / 1e6, 2)
    assert math.isclose(a["achieved_gbs"], total / 0.010 / 1e9, abs_tol=0.01)
    assert math.isclose(a["share_of_read_bandwidth"], total / 0.010 / 20e9, abs_tol=1e-3)
    assert math.isclose(a["ceiling_ms"], total / 20e9 * 1e3, abs_tol=1e-3)
    assert a["fits_in_llc"] is False
    assert rows[1]["kv_cache_mb"] == round(8 * 2 * 2 * 64 * 1024 * 2 / 1e6, 2)
    unknown = share_rows(_result({"a": 10.0}), shapes, weights, kv, read_gbs=None, llc_mb=None)
    assert unknown[0]["share_of_read_bandwidth"] is None and unknown[0]["fits_in_llc"] is None


def test_ceiling_rows_read_the_tools_models_and_name_what_cannot_be_counted(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    source = tmp_path / "llama-hf"
    source.mkdir()
    config = {"num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "hidden_size": 8}
    (source / "config.json").write_text(json.dumps(config))
    Tokenizer(models.WordLevel({f"w{i}": i for i in range(V)}, unk_token="w0")).save(
        str(source / "tokenizer.json")
    )
    ours = tmp_path / "ours"
    ours.mkdir()
    _decoder_graph(ours / "decoder.onnx", tied=False, kv_type=TensorProto.FLOAT)
    (ours / "manifest.json").write_text(json.dumps({"graphs": {"decoder": "decoder.onnx"}}))
    broken = tmp_path / "genai-int4"
    broken.mkdir()
    (broken / "genai_config.json").write_text("{}")  # no decoder file named: an error row, not a crash
    decoder = {
        "source": source,
        "ours": {"fused": ours},
        "genai": {"int4": broken},
        "llamacpp": {"f32": tmp_path / "absent", "Q8_0": tmp_path / "absent", "Q4_0": tmp_path / "absent"},
    }
    rows = ceiling_rows(_result({"ours:fused": 0.01, "genai:int4": 0.01}), {"decoder": decoder})
    counted = [row for row in rows if "error" not in row]
    assert [row["tool"] for row in counted] == ["ours:fused"]
    weights = onnx_weights(ours / "decoder.onnx")
    kv = 1 * 2 * 2 * 4 * (1024 + 4.5) * 4  # quick: 8 timed steps, mean context 1024 + 4.5
    assert counted[0]["bytes_per_step_mb"] == round((weights.whole + weights.gathered_row + kv) / 1e6, 2)
    assert [row["tool"] for row in rows if "error" in row] == ["genai:int4"]
    assert ceiling_rows(_result({}), {"encoder": {}}) == []


def test_the_report_prints_the_ceiling_rows() -> None:
    row = {
        "title": "decode step, context 1024",
        "tool": "ours:fused",
        "precision": "fp32",
        "weights_mb": 155.8,
        "kv_cache_mb": 8.4,
        "bytes_per_step_mb": 164.2,
        "step_ms": 9.3,
        "ceiling_ms": 8.2,
        "achieved_gbs": 17.7,
        "share_of_read_bandwidth": 0.88,
        "fits_in_llc": True,
    }
    result = {**_result({}), "ceiling": [row, {"tool": "genai:int4", "error": "counting its model: no file"}]}
    table = ceiling_table_rows(result)
    assert table[0][3] == "164.2 (155.8 + 8.4)" and table[0][-1] == "0.88 (fits LLC)"
    assert len(table) == 1  # the error is a line below the table
    out = io.StringIO()
    print_ceiling(Console(file=out, width=200), result)
    assert "read 20.0 GB/s" in out.getvalue()
    assert "genai:int4 not counted: counting its model: no file" in out.getvalue()


def test_memory_bandwidth_is_positive_and_quick_on_small_arrays() -> None:
    start = time.perf_counter()
    for threads in (1, 2):
        bandwidth = memory_bandwidth(threads, array_bytes=4 * 2**20, repeats=2)
        for kernel in ("copy_gbs", "triad_gbs", "read_gbs"):
            assert 0.1 < bandwidth[kernel] < 10_000, bandwidth
        assert bandwidth["array_mb"] == 4.0 and bandwidth["threads"] == threads
    assert time.perf_counter() - start < 5
    llc = llc_bytes()
    assert llc is None or llc > 0
