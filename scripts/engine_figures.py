"""The README's table of engines running the reference exports' goldens, measured: each engine runs every
graph golden of exported/{gpt,bert,t5} and the table gives, per folder, whether all passed and the largest
share of its allowance any output used (docs/goldens.md: allowances come from the float64 figures).

    .venv/bin/python scripts/engine_figures.py            # needs `make node-deps` and `make -C hosts/c`

Engines: ONNX Runtime through the Python runtime; onnxruntime-node (native) and onnxruntime-web
(WebAssembly) through hosts/node's verifier; ONNX Runtime's C API through hosts/c's `onnxformer-c verify`;
tract (Rust) through its Python bindings, in a child process per folder (a tract panic aborts its
process). The Chromium row of the README comes from tests/test_web_host.py, which runs the same goldens
in the browser.
"""

import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("gpt", "bert", "t5")
C_HOST = ROOT / "hosts/c/build/asan/onnxformer-c"
_DIFF = re.compile(r"max diff (\S+) <= (\S+)")


def _share(pairs: list[tuple[float, float]]) -> float:
    return max((diff / allowed if allowed else float(diff > 0) for diff, allowed in pairs), default=0.0)


def python_runtime(folder: Path) -> tuple[bool, float]:
    from onnxformer.runtime.folder import ExportFolder
    from onnxformer.runtime.goldens import run_graph_goldens

    results = run_graph_goldens(ExportFolder.open(folder))
    pairs = [(r.max_abs_diff, r.allowed) for r in results if r.max_abs_diff is not None]
    return all(r.ok for r in results), _share(pairs)


def node(folder: Path, engine: str) -> tuple[bool, float]:
    done = subprocess.run(
        ["node", "bin/verify.js", str(folder), "--engine", engine, "--json"],
        cwd=ROOT / "hosts/node",
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = json.loads(done.stdout)
    reports = report if isinstance(report, list) else [report]
    results = [r for item in reports for r in item["results"] if r.get("check") == "graph"]
    pairs = [(r["maxAbsDiff"], r["allowed"]) for r in results if r.get("maxAbsDiff") is not None]
    return all(r["ok"] for r in results), _share(pairs)


def c_host(folder: Path) -> tuple[bool, float]:
    done = subprocess.run([str(C_HOST), "verify", str(folder)], capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.lstrip().startswith(("ok", "FAIL"))]
    graph = [line for line in lines if "max diff" in line]
    pairs = [(float(m[1]), float(m[2])) for line in graph if (m := _DIFF.search(line)) and m[1] != "-"]
    return done.returncode == 0 and all(line.lstrip().startswith("ok") for line in graph), _share(pairs)


TRACT_CHILD = """
import json, sys
import numpy as np, tract
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import compare, golden_cases
export = ExportFolder.open(sys.argv[1])
models, out = {}, []
for loaded in golden_cases(export):
    file = loaded.graph.file
    if file not in models:
        export.read(file)
        model = tract.onnx().load(str(export.path_of(file))).into_model()
        names = [model.input_name(i) for i in range(model.input_count())]
        models[file] = (model.into_runnable(), names)
    runnable, names = models[file]
    arrays = [tensor.to_numpy() for tensor in runnable.run([loaded.inputs[name] for name in names])]
    result = compare(loaded, dict(zip(loaded.case.outputs, arrays)))
    out.append([result.ok, result.max_abs_diff, result.allowed])
print(json.dumps(out))
"""


def tract_engine(folder: Path) -> tuple[bool, float]:
    done = subprocess.run(
        [sys.executable, "-c", TRACT_CHILD, str(folder)], capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        return False, float("nan")
    results = json.loads(done.stdout.splitlines()[-1])
    pairs = [(diff, allowed) for ok, diff, allowed in results if diff is not None]
    return all(ok for ok, _, _ in results), _share(pairs)


def main() -> None:
    engines = {
        f"ONNX Runtime {version('onnxruntime')} (Python, `onnxformer verify`)": python_runtime,
        "onnxruntime-node 1.30 ([hosts/node](hosts/node))": lambda f: node(f, "native"),
        "onnxruntime-web 1.30, WebAssembly in Node": lambda f: node(f, "wasm"),
        f"tract {version('tract')} (Rust, `tests/runtime/test_engines.py`)": tract_engine,
        "ONNX Runtime 1.21 C API ([hosts/c](hosts/c), gcc, ASan + UBSan)": c_host,
    }
    print("| engine | " + " | ".join(FAMILIES) + " |")
    print("|---|" + "---|" * len(FAMILIES))
    for name, run in engines.items():
        cells = []
        for family in FAMILIES:
            ok, share = run(ROOT / "exported" / family)
            cells.append(f"{'pass' if ok else 'FAIL'}, {share:.0%}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
