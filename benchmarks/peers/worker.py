"""One peer's worker: loads one tool's model in its own virtual environment and answers timing requests.

Run as `VENV/bin/python benchmarks/peers/worker.py` (standalone: only the standard library and the tool's
own packages, so that it runs in .venv-optimum and .venv-genai, where onnxformer is not installed; llama.cpp's
in .venv-genai with PYTHONPATH at llama-cpp-python's bindings, benchmarks/peers/envs.py). The
orchestrator (benchmarks/peers/run.py) writes one JSON object per line on stdin and reads one per line:

    {"op": "load", "tool": "optimum", "args": {...}}          -> {"ok": true, "versions": {...}}
    {"op": "prepare", "key": K, "kind": "embed", "args": {...}} -> {"ok": true}
    {"op": "time", "key": K, "inner": N}                      -> {"ok": true, "ms": per-call ms}
    {"op": "output", "key": K, "path": P}                     -> {"ok": true, "output": ...}
    (the call's last result: generated tokens, or embeddings or logits saved to P as .npy)
    {"op": "quit"}

A prepared call either returns None (the worker times it) or times itself and returns milliseconds (a
decode step is timed after the prefill it needs). Anything the tools print goes to stderr, never into the
protocol's stdout; an exception is answered as {"ok": false, "error": ...} and the worker keeps serving.
"""

import importlib
import json
import os
import sys
import time
import traceback


def _protocol_stream():
    """The real stdout for the protocol; fd 1 then points at stderr, so library prints cannot corrupt it."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return out


def _tool(name: str):
    # Run as a script, the worker has its own folder first on sys.path: tool_*.py and calls.py import as
    # top-level modules.
    return importlib.import_module(f"tool_{name}")


def _output(value, path: str | None):
    """A call's last result: token lists as they are; an array is saved to `path` (.npy), its shape sent."""
    if hasattr(value, "shape"):
        import numpy as np

        np.save(path, np.asarray(value, dtype=np.float32))
        return list(value.shape)
    return value


def serve() -> None:
    out = _protocol_stream()
    adapter = None
    calls = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.get("op")
        try:
            if op == "quit":
                out.write(json.dumps({"ok": True}) + "\n")
                break
            if op == "load":
                module = _tool(request["tool"])
                adapter = module.Adapter(**request.get("args", {}))
                reply = {"versions": module.versions()}
            elif op == "prepare":
                calls[request["key"]] = adapter.prepare(request["kind"], **request.get("args", {}))
                reply = {}
            elif op == "time":
                call = calls[request["key"]]
                inner = int(request.get("inner", 1))
                own = []
                start = time.perf_counter()
                for _ in range(inner):
                    measured = call()
                    if measured is not None:
                        own.append(float(measured))
                elapsed = (time.perf_counter() - start) / inner * 1e3
                reply = {"ms": sum(own) / len(own) if own else elapsed}
            elif op == "output":
                reply = {"output": _output(calls[request["key"]].last, request.get("path"))}
            else:
                raise ValueError(f"unknown op {op!r}")
            reply["ok"] = True
        except Exception as error:  # answered, so the orchestrator can name the tool and go on
            traceback.print_exc(file=sys.stderr)
            reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        out.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    serve()
