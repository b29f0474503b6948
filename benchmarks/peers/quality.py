"""The quality of every tool's Llama at every precision, side by side, on a trained model.

The benchmark's Llama has random weights, whose near-uniform next-token distributions say nothing about
quantization; this comparison runs on a small Llama trained on the built-in corpus instead
(`build_hf.py llama-trained`, models.prepare_quality), built by every tool as the benchmark's is: ours
(the plain export, the reference; fused; --int8; --int4 in blocks of 32 and 128, each through our quality
gate), onnxruntime-genai's builder (-p fp32, int8, int4) and llama.cpp (f32, Q8_0, Q4_0), and transformers.

Method, the quality gate's (onnxformer/builder/optimize/gate.py): the built-in grammar's held-out
sentences (what no model here was trained on), each framed as our runtime frames a prompt (<s> + its
tokens) plus </s>, the same ids for every tool. Each tool's worker computes the logits at every position
of every row, teacher forced (kind "logits"), and saves them as .npy; then here, in float64, per tool
against the reference (our plain fp32 export): KL(reference || tool) per position in nats, top-1
agreement, the perplexity of the rows' next tokens and its change, and the largest logit difference.

    python -m benchmarks.peers.quality [--work runs/bench-peers] [--threads N] [--out FILE]

runs it alone (building what is missing); `onnxformer bench --peers` runs it after the decoder family's
timings (result["quality"]).
"""

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.peers.envs import ENVS, Worker, WorkerError
from benchmarks.peers.workloads import Tool, decoder_tools
from onnxformer.builder.optimize.gate import BUILTIN_TEXT, MAX_ROWS, _Divergence, builtin_texts

Progress = Callable[[str], None]
REFERENCE = "ours:export"
FP32_CHECK = ("transformers", 1e-4)  # the reference must equal transformers' fp32 logits within this
MODEL_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "tie_word_embeddings",
)


def quality_tools(models: dict) -> list[Tool]:
    """The reference (our plain export), then every decoder tool of the benchmark on the trained Llama."""
    reference = Tool(
        REFERENCE,
        "ours",
        "ours",
        {"folder": str(models["export"])},
        "fp32",
        "onnxformer runtime on the plain `onnxformer export` (the reference)",
        ours=True,
    )
    return [reference, *decoder_tools(models)]


def held_out_rows(export: Path, texts: list[str], *, limit: int = MAX_ROWS) -> list[list[int]]:
    """The first `limit` texts, each framed as our runtime frames a prompt, plus the end token: the rows
    the quality gate measures on."""
    from onnxformer.runtime import TextGenerator

    model = TextGenerator.load(export, device="cpu")
    eos = model.tokenizer.special_tokens["eos"]
    return [[*model.frame(text), eos] for text in texts[:limit]]


def teacher_forced(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """For the logits of every position of `rows`, concatenated row after row (sum T, V): the positions
    that have a next token (each row's but its last) and those next tokens, both (N,)."""
    keep: list[int] = []
    following: list[int] = []
    at = 0
    for row in rows:
        keep += range(at, at + len(row) - 1)
        following += row[1:]
        at += len(row)
    return np.asarray(keep, dtype=np.int64), np.asarray(following, dtype=np.int64)


def figures(reference: np.ndarray, logits: np.ndarray, following: np.ndarray) -> tuple[dict, dict]:
    """reference, logits (N, V) of the same positions, following (N,) their next tokens: the tool's
    figures (the gate's KL per position in nats, top-1 agreement, the perplexity of `following` and its
    change; the largest |logit difference|) and the reference's (its loss in nats per token, perplexity,
    mean entropy, the largest entropy log V, why it says nothing: "" when it does)."""
    divergence = _Divergence()
    divergence.add(reference, logits, following)
    values, uniform = divergence.figures()
    difference = np.abs(reference.astype(np.float64) - logits.astype(np.float64))  # (N, V)
    tool = {
        "kl": values["kl"],
        "top1": values["top1"],
        "perplexity": values["perplexity_quantized"],
        "perplexity_change": values["perplexity_change"],
        "max_abs_logit_diff": float(difference.max()),
    }
    own = {
        "loss": math.log(values["perplexity_fp32"]),
        "perplexity": values["perplexity_fp32"],
        "mean_entropy": values["fp32_entropy"],
        "max_entropy": math.log(reference.shape[-1]),
        "uninformative": uniform,
    }
    return tool, own


def _tool_logits(
    tool: Tool, rows: list[list[int]], threads: int, logs: Path, tmp: Path
) -> tuple[np.ndarray, dict]:
    """The tool's logits at every position of `rows` (sum T, V), from its own worker; its versions and
    the seconds it took."""
    name = tool.name.replace(":", "-")
    worker = Worker(tool.name, ENVS[tool.env], threads=threads, log=logs / f"quality-{name}.log")
    try:
        args = {**tool.args, "threads": threads}
        versions = worker.request("load", tool=tool.module, args=args)["versions"]
        worker.request("prepare", key="logits", kind="logits", args={"rows": rows})
        ms = worker.time("logits", 1)
        path = tmp / f"{name}.npy"
        worker.request("output", key="logits", path=str(path))
        return np.load(path), {"versions": versions, "seconds": round(ms / 1e3, 2)}
    finally:
        worker.close()


def describe_model(models: dict) -> dict:
    """The trained Llama: its shape (config.json) and its training's figures (training.json)."""
    source = Path(models["source"])
    config = json.loads((source / "config.json").read_text())
    training = source / "training.json"
    return {
        "source": str(source),
        "architecture": (config.get("architectures") or ["?"])[0],
        **{field: config.get(field) for field in MODEL_FIELDS},
        "training": json.loads(training.read_text()) if training.is_file() else None,
    }


def _gates(models: dict) -> dict:
    """What our quality gate measured on each of our quantized variants when `onnxformer optimize` built
    it, and what it kept in float32 (manifest.json extra.optimization)."""
    gates = {}
    for name, folder in models["ours"].items():
        manifest = json.loads((Path(folder) / "manifest.json").read_text())
        optimization = (manifest.get("extra") or {}).get("optimization") or {}
        if "gate" in optimization:
            gate = optimization["gate"]
            gates[f"ours:{name}"] = {
                "passed": gate.get("passed"),
                "figures": gate.get("figures"),
                "kept": optimization.get("kept"),
            }
    return gates


def collect_logits(
    tools: list[Tool], rows: list[list[int]], *, threads: int, logs: Path, say: Progress, failures: list
) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """Each tool's logits at the positions of `rows` that have a next token, (N, V), one worker at a
    time; and its versions and seconds. A tool that fails is left out, its error in `failures`."""
    keep, _ = teacher_forced(rows)
    total = sum(len(row) for row in rows)
    logits: dict[str, np.ndarray] = {}
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for tool in tools:
            say(f"quality: {tool.name}'s logits")
            try:
                value, run = _tool_logits(tool, rows, threads, logs, Path(tmp))
            except WorkerError as error:
                value, run = None, str(error)
            if value is not None and (value.ndim != 2 or value.shape[0] != total):
                value, run = None, f"logits of shape {value.shape}, not ({total}, vocabulary)"
            if value is None:
                failures.append({"family": "quality", "tool": tool.name, "stage": "logits", "error": run})
                continue
            logits[tool.name], runs[tool.name] = value[keep], run  # (N, V)
    return logits, runs


def measure_quality(models: dict, *, threads: int, logs: Path, say: Progress, failures: list) -> dict:
    """Every quality tool's teacher-forced logits on the held-out rows against the reference's: the
    figures per tool, the model, and our gate's own record of each of our quantized variants."""
    started = time.perf_counter()
    rows = held_out_rows(Path(models["export"]), builtin_texts())
    _, following = teacher_forced(rows)
    tools = {tool.name: tool for tool in quality_tools(models)}
    logits, runs = collect_logits(
        list(tools.values()), rows, threads=threads, logs=logs, say=say, failures=failures
    )
    result = {
        "model": describe_model(models),
        "text": BUILTIN_TEXT,
        "rows": len(rows),
        "positions": len(following),
        "reference": REFERENCE,
        "gates": _gates(models),
        "tools": {},
    }
    reference = logits.get(REFERENCE)
    if reference is None:
        result["error"] = f"no logits from the reference ({REFERENCE}); see failures"
        return result
    _, result["model"]["held_out"] = figures(reference, reference, following)
    for name, value in logits.items():
        if value.shape != reference.shape:
            error = f"a vocabulary of {value.shape[1]}, the reference's {reference.shape[1]}"
            failures.append({"family": "quality", "tool": name, "stage": "logits", "error": error})
            continue
        measured, _ = figures(reference, value, following)
        tool = tools[name]
        result["tools"][name] = {"precision": tool.precision, "what": tool.what, **measured, **runs[name]}
    check, tolerance = FP32_CHECK
    if check in result["tools"]:
        difference = result["tools"][check]["max_abs_logit_diff"]
        result["fp32_check"] = {
            "tool": check,
            "max_abs_logit_diff": difference,
            "tolerance": tolerance,
            "within": difference <= tolerance,
        }
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from benchmarks.__main__ import UNWRAPPED
    from benchmarks.peers.models import Builder, prepare_quality
    from benchmarks.peers.report import print_quality

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peers.quality", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--work", type=Path, default=Path("runs/bench-peers"), help="the peers' model folder")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for every tool")
    parser.add_argument("--fresh", action="store_true", help="rebuild the trained Llama and its builds")
    parser.add_argument("--out", type=Path, help="write {'quality': ..., 'failures': ...} here as JSON")
    args = parser.parse_args(argv)
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    console = Console(highlight=False, width=UNWRAPPED if piped else None)
    for env in ENVS.values():
        env.check()
    with console.status("quality") as status:
        builder = Builder(args.work, fresh=args.fresh, progress=lambda message: status.update(message))
        models = prepare_quality(builder)
        failures = list(builder.failures)
        quality = measure_quality(
            models, threads=args.threads, logs=args.work / "logs", say=status.update, failures=failures
        )
    result = {"quality": quality, "failures": failures}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print_quality(console, result)
    for failure in failures:
        console.print(f"[red]{failure['tool']} ({failure['stage']}): {failure['error']}[/red]")
    return 1 if failures or quality.get("error") else 0


if __name__ == "__main__":
    raise SystemExit(main())
