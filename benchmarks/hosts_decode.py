"""GPT decode step time in the Node host (onnxruntime-node, and onnxruntime-web's WebAssembly engine, the
browser's) and the C host (ONNX Runtime's C API, hosts/c built without sanitizers) beside the Python
runtime, on the plain export and its `onnxformer optimize` folders (fused fp32 and int8, both with the
in-place KV cache), side by side in one run:

    .venv/bin/python -m benchmarks.hosts_decode                   # the benchmark's small GPT (runs/bench)
    .venv/bin/python -m benchmarks.hosts_decode --tiny            # exported/gpt optimised in a temp folder
    .venv/bin/python -m benchmarks.hosts_decode --json --out benchmarks/results/hosts-decode.json

Workload: greedy `generate_ids` (Node `generateIds`) of N + 1 new tokens from a prompt of C tokens, stop
tokens off so every row runs N + 1 steps, tokenizer not involved. Each step is timed where it starts
(Python: `TextGenerator.steps`, Node: the decoder graph's runs), so an interval is one decode step as the
loop runs it (feeds made, the graph run, the token chosen); the prompt's step is reported apart. R passes,
each one generation per folder and engine (Node in a fresh process, after a warm-up generation), the Python
the Node and the C pass in turn, their order reversed every other pass, so that all see the same machine; the
table shows the median of the R x N steps (the JSON also the fastest step and the prompt's step). The C host
times whole generations (`onnxformer-c bench`: N + 1 tokens against 1 token from the same prompt, the
difference over N), so its figure per pass is the mean step and the median is over the R passes. Threads: 1
by default for every engine (the wasm engine in Node and the C host are single-threaded; `--threads` sets
the Python and Node native engines'). The tokens of every (folder, engine) are compared with the Python
runtime's on the same folder and the exit status is 1 when one differs (int8 may: its kernels differ between
ONNX Runtime builds, and a random-weight model's logits are close).

The small GPT is the one `python -m benchmarks` builds (`benchmarks/models.py`: d_model 384, 6 layers,
context 1152, random weights) and reuses when up to date; the first run builds it (about a minute). Not a
test: nothing asserts a time."""

import argparse
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NODE_HOST = ROOT / "hosts" / "node"
C_HOST = ROOT / "hosts" / "c"
VARIANTS = ("onnx", "fused", "int8")  # plain export, optimize fp32, optimize --int8


def bench_folders(tiny: bool, scratch: Path) -> dict[str, Path]:
    """variant -> folder: the benchmark's small GPT (built when missing), or exported/gpt optimised."""
    if not tiny:
        from benchmarks.models import prepare_models

        model = prepare_models(ROOT / "runs" / "bench", families=("gpt",), progress=print)["gpt"]
        return {variant: model.folders[variant] for variant in VARIANTS}
    from onnxformer.builder.optimize import optimize_export

    plain = ROOT / "exported" / "gpt"
    optimize_export(plain, scratch / "fused", tasks=False)
    optimize_export(plain, scratch / "int8", quantize="int8", tasks=False)
    return {"onnx": plain, "fused": scratch / "fused", "int8": scratch / "int8"}


def python_pass(models: dict[str, Any], prompt: list[int], new_tokens: int) -> list[dict[str, Any]]:
    """One generation per folder in the Python runtime, timed as the Node driver times its own:
    `TextGenerator.steps`, each interval between two steps one decode step, the prompt's step apart."""
    rows = []
    for name, model in models.items():
        marks, tokens = [time.perf_counter()], []
        options = {"max_new_tokens": new_tokens + 1, "temperature": 0.0, "stop_tokens": []}
        for step in model.steps([prompt], **options):
            marks.append(time.perf_counter())
            tokens.append(int(step.chosen[0]))
        prefill, *steps = [(after - before) * 1000 for before, after in itertools.pairwise(marks)]
        rows.append(
            {"folder": name, "engine": "python", "prefill": [prefill], "step": steps, "tokens": tokens}
        )
    return rows


def node_pass(folders: dict[str, Path], prompt: list[int], new_tokens: int, threads: int) -> list[dict]:
    """One generation per folder and Node engine, after a warm-up one (hosts/node/tests/decode_driver.js)."""
    binary = shutil.which("node")
    if binary is None or not (NODE_HOST / "node_modules").is_dir():
        raise SystemExit("Node.js and hosts/node/node_modules are needed: make node-deps")
    request = {
        "op": "time",
        "folders": {name: str(folder) for name, folder in folders.items()},
        "engines": ["native", "wasm"],
        "prompt": prompt,
        "newTokens": new_tokens,
        "repeats": 1,
        "threads": threads,
    }
    done = subprocess.run(
        [binary, "tests/decode_driver.js"],
        cwd=NODE_HOST,
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"the Node driver failed:\n{done.stderr[-3000:]}")
    rows: list[dict[str, Any]] = json.loads(done.stdout)["rows"]
    for row in rows:
        row["engine"] = f"node {row['engine']}"
    return rows


def c_binary() -> Path:
    """hosts/c's onnxformer-c without sanitizers (`make -C hosts/c SANITIZE=0`, a no-op once built)."""
    done = subprocess.run(
        ["make", "-C", str(C_HOST), "SANITIZE=0", f"PYTHON={sys.executable}"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise SystemExit(f"`make -C hosts/c SANITIZE=0` failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return C_HOST / "build" / "release" / "onnxformer-c"


def c_pass(folders: dict[str, Path], prompt: list[int], new_tokens: int) -> list[dict[str, Any]]:
    """One timed generation per folder in the C host (after its own warm-up one)."""
    binary, rows = c_binary(), []
    for name, folder in folders.items():
        command = [str(binary), "bench", str(folder), "--ids", ",".join(map(str, prompt)),
                   "--tokens", str(new_tokens + 1), "--runs", "1"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"onnxformer-c bench failed on {folder}:\n{done.stderr[-2000:]}")
        timed = json.loads(done.stdout)
        rows.append({"folder": name, "engine": "c", "prefill": timed["prefill_ms"], "step": timed["steps_ms"],
                     "tokens": timed["output_ids"]})  # fmt: skip
    return rows


def measure(
    folders: dict[str, Path], models: dict[str, Any], prompt: list[int], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """R passes, Python's, Node's and C's in turn (the order reversed every other pass), so that all see
    the same machine; a row per (folder, engine) gathering every pass's steps."""
    python_pass(models, prompt, args.new_tokens)  # warm-up
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for repeat in range(args.repeats):
        passes = [
            lambda: python_pass(models, prompt, args.new_tokens),
            lambda: node_pass(folders, prompt, args.new_tokens, args.threads),
            lambda: c_pass(folders, prompt, args.new_tokens),
        ]
        for one in passes if repeat % 2 == 0 else passes[::-1]:
            for row in one():
                key = (row["folder"], row["engine"])
                if key not in merged:
                    merged[key] = row
                else:
                    merged[key]["prefill"] += row["prefill"]
                    merged[key]["step"] += row["step"]
    return list(merged.values())


def run(args: argparse.Namespace) -> dict[str, Any]:
    from onnxformer.runtime import load

    with tempfile.TemporaryDirectory(prefix="hosts-decode-") as scratch:
        folders = bench_folders(args.tiny, Path(scratch))
        models = {name: load(folder, device="cpu", threads=args.threads) for name, folder in folders.items()}
        manifest = json.loads((folders["onnx"] / "manifest.json").read_text())
        max_len = manifest["config"]["max_len"]
        results = []
        for context in args.contexts:
            if context + args.new_tokens > max_len:
                raise SystemExit(
                    f"context {context} + {args.new_tokens} new tokens exceeds max_len {max_len}"
                )
            bos = manifest["special_tokens"]["bos"]
            vocab = manifest["config"]["vocab_size"]
            prompt = [bos] + [(7 * i) % (vocab - 10) + 5 for i in range(context - 1)]  # (C,) arbitrary ids
            rows = measure(folders, models, prompt, args)
            python = {row["folder"]: row["tokens"] for row in rows if row["engine"] == "python"}
            for row in rows:
                row["context"] = context
                row["prefillMedianMs"] = statistics.median(row["prefill"])
                row["stepMedianMs"] = statistics.median(row["step"])
                row["stepMinMs"] = min(row["step"])
                row["sameTokensAsPython"] = row["tokens"] == python[row["folder"]]
            results += rows
    return {
        "model": "exported/gpt (tiny)" if args.tiny else "benchmarks small GPT (runs/bench/gpt)",
        "config": {key: manifest["config"][key] for key in ("d_model", "n_layers", "n_heads", "max_len")},
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "threads": args.threads,
        "folders": {name: str(folder) for name, folder in folders.items()},
        "rows": results,
    }


def table(result: dict[str, Any]) -> str:
    engines = ["python", "node native", "node wasm", "c"]
    lines = [
        f"{result['model']}, {result['config']}: ms per decode step, median (fastest) of "
        f"{result['repeats']} x {result['new_tokens']} greedy steps, {result['threads']} thread(s)",
        f"{'context':>8}  {'folder':<6}" + "".join(f"{engine:>18}" for engine in engines),
    ]
    for context in sorted({row["context"] for row in result["rows"]}):
        for folder in VARIANTS:
            cells = []
            for engine in engines:
                (row,) = [
                    r
                    for r in result["rows"]
                    if r["context"] == context and r["folder"] == folder and r["engine"] == engine
                ]
                mark = " " if row["sameTokensAsPython"] else "!"
                cells.append(f"{row['stepMedianMs']:>9.2f} ({row['stepMinMs']:>5.2f}){mark}")
            lines.append(f"{context:>8}  {folder:<6}" + "".join(cells))
    lines.append("(! : tokens differ from the Python runtime's on that folder)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="exported/gpt instead of the benchmark's GPT")
    parser.add_argument("--contexts", type=int, nargs="+", default=None, help="prompt lengths C")
    parser.add_argument("--new-tokens", type=int, default=None, help="decode steps N timed per run")
    parser.add_argument("--repeats", type=int, default=5, help="repetitions R per folder and engine")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of the native engines")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    args = parser.parse_args()
    if args.contexts is None:
        args.contexts = [8] if args.tiny else [16, 1024]  # exported/gpt's context is 64
    if args.new_tokens is None:
        args.new_tokens = 48 if args.tiny else 64
    result = run(args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2) if args.json else table(result))
    sys.exit(0 if all(row["sameTokensAsPython"] for row in result["rows"]) else 1)


if __name__ == "__main__":
    main()
