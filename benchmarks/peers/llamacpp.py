"""llama.cpp as a decoder peer: where `make llamacpp` builds it, the GGUF files it runs, and its own
benchmark (llama-bench), which the orchestrator runs beside the worker's timings as a cross-check.

    .peers/llama.cpp/        the Makefile's LLAMACPP_DIR
        src/                 llama-cpp-python's unpacked source distribution: llama_cpp/ (the ctypes
                             bindings tool_llamacpp.py drives) and vendor/llama.cpp/ (llama.cpp,
                             convert_hf_to_gguf.py, gguf-py)
        build/bin/           llama-bench, llama-quantize, llama-perplexity, libllama.so, libggml*.so
        build-info.json      the pinned versions and the cmake flags (written last: the build's stamp)
"""

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CHECKOUT = Path(__file__).resolve().parents[2]
LLAMACPP_DIR = CHECKOUT / ".peers" / "llama.cpp"
LLAMACPP_SOURCES = LLAMACPP_DIR / "src" / "vendor" / "llama.cpp"
LLAMACPP_BIN = LLAMACPP_DIR / "build" / "bin"
LLAMACPP_INFO = LLAMACPP_DIR / "build-info.json"
GGUF_FILE = "model.gguf"
BENCH_TIMEOUT_S = 900


@dataclass(frozen=True)
class GgufVariant:
    """One GGUF file of the Llama: f32 from the converter (--outtype f32), the others llama-quantize of it
    (llama.cpp's recipe: Q4_0 keeps the output projection in Q6_K).

    The fp32 peer computes in float32 throughout, as ours and genai's fp32 do: an f32 KV cache and no flash
    attention (llama.cpp's CPU flash attention rounds through f16: with it, one of four rows' greedy tokens
    left transformers' at the 17th, where the top two logits were 0.1 apart). The quantized ones run with
    llama.cpp's defaults: f16 KV cache, flash attention "auto" (on, on CPU)."""

    name: str  # the converter's --outtype (f32) or llama-quantize's type
    precision: str  # the class it is compared in: "fp32", "int8" or "int4"
    kv_type: str  # "f32" or "f16"
    flash_attn: str  # "off" or "auto"


GGUF_VARIANTS = (
    GgufVariant("f32", "fp32", "f32", "off"),
    GgufVariant("Q8_0", "int8", "f16", "auto"),
    GgufVariant("Q4_0", "int4", "f16", "auto"),
)


def build_info() -> dict:
    return json.loads(LLAMACPP_INFO.read_text())


def converter_environ() -> dict[str, str]:
    """convert_hf_to_gguf.py imports its `conversion` package and gguf-py from the sources."""
    return {"PYTHONPATH": os.pathsep.join([str(LLAMACPP_SOURCES), str(LLAMACPP_SOURCES / "gguf-py")])}


def llama_bench_command(
    model: Path, *, threads: int, kv_type: str, flash_attn: str, repeats: int, tokens: int
) -> list[str]:
    """pp<tokens> (one prompt of `tokens`) and tg<tokens> (`tokens` steps of one token) at the worker's
    settings: the same threads, flash attention and KV cache type (f16 for an f32 cache: llama-bench takes
    no f32 cache type; at these depths the cache is a few MB beside the weights' 211), llama.cpp's default
    batch sizes."""
    cache = "f16" if kv_type == "f32" else kv_type
    return [
        str(LLAMACPP_BIN / "llama-bench"),
        "--model", str(model),
        "--threads", str(threads),
        "--n-prompt", str(tokens),
        "--n-gen", str(tokens),
        "--repetitions", str(repeats),
        "--cache-type-k", cache,
        "--cache-type-v", cache,
        "--flash-attn", flash_attn,
        "--output", "json",
    ]  # fmt: skip


def parse_llama_bench(text: str) -> dict:
    """llama-bench's JSON output (a list, one object per test) as {"tests": {"pp128": ..., "tg128": ...}}
    with ms per prompt (pp) or per generated token (tg), mean and median of its repetitions, and the build,
    CPU and settings it reports."""
    runs = json.loads(text)
    if not runs:
        raise ValueError("llama-bench reported no test")
    tests = {}
    for run in runs:
        prompt, generated = int(run["n_prompt"]), int(run["n_gen"])
        name, per = (f"pp{prompt}", 1) if generated == 0 else (f"tg{generated}", generated)
        unit = "ms per prompt" if generated == 0 else "ms per token"
        samples = [ns / 1e6 / per for ns in run["samples_ns"]]
        tests[name] = {
            "unit": unit,
            "mean_ms": round(run["avg_ns"] / 1e6 / per, 3),
            "median_ms": round(float(np.median(samples)), 3),
            "min_ms": round(min(samples), 3),
            "stddev_ms": round(run["stddev_ns"] / 1e6 / per, 3),
            "tokens_per_s": round(run["avg_ts"], 2),
            "samples": len(samples),
        }
    first = runs[0]
    settings = ("n_threads", "type_k", "type_v", "n_batch", "n_ubatch", "flash_attn", "poll")
    return {
        "tests": tests,
        "build_commit": first["build_commit"],
        "cpu_info": first["cpu_info"],
        "backends": first["backends"],
        "model_type": first["model_type"],
        "settings": {name: first[name] for name in settings if name in first},
    }


def llama_bench(
    model: Path, threads: int, repeats: int, *, kv_type: str, flash_attn: str, tokens: int = 128
) -> dict:
    """llama-bench on `model` (its figures are llama.cpp's own, in C++, beside the worker's)."""
    command = llama_bench_command(
        model, threads=threads, kv_type=kv_type, flash_attn=flash_attn, repeats=repeats, tokens=tokens
    )
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, env=environment)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"llama-bench exited with {done.returncode}: {tail}")
    return {"program": "llama-bench", "command": command[1:], **parse_llama_bench(done.stdout)}
