"""The untrusted probe's child process: `python -m onnxformer.runtime.probe_child [--memory-mb N]
[--cpu-s N] PATH` does what `verify` and `load` would do, under resource limits, and prints one JSON
report line (see `onnxformer.runtime.probe`, the parent side, for what is checked and why).

It sits at the top of the runtime's imports: it uses `load`, the folder, the goldens and sessions.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from onnxformer.runtime.errors import ManifestError, OnnxformerError
from onnxformer.runtime.probe import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, OOM_MARKERS, OUTPUT_LIMIT


def _limit(memory_mb: int, cpu_s: int) -> None:
    try:
        import resource
    except ImportError:  # not POSIX: crashes and hangs are still isolated
        return
    for name, value in (
        ("RLIMIT_AS", memory_mb * 2**20),
        ("RLIMIT_CPU", cpu_s),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_FSIZE", OUTPUT_LIMIT),
    ):
        limit = getattr(resource, name, None)
        if limit is not None:
            resource.setrlimit(limit, (value, value))


def _probe(path: Path, steps: list[str], report: dict[str, Any]) -> None:
    """What loading does, step by step; raises whatever the first failing step raises."""
    from onnxformer.runtime.folder import (
        MAX_MODEL_BYTES,
        ExportFolder,
        read_regular_file,
        refuse_external_data,
    )
    from onnxformer.runtime.goldens import run_goldens
    from onnxformer.runtime.session import create_session

    if not path.exists() and not path.is_symlink():
        raise ManifestError(f"{path} does not exist; pass an export folder or an .onnx file")
    if not path.is_dir():
        data = read_regular_file(path, limit=MAX_MODEL_BYTES)
        refuse_external_data(data, name=path.name)
        steps.append(f"read {path.name} ({len(data)} bytes), no external data")
        create_session(data, device="cpu", threads=1)
        steps.append(f"created an ONNX Runtime session for {path.name}")
        return
    folder = ExportFolder.open(path)
    report["manifest_sha256"] = folder.manifest_sha256
    steps.append(f"parsed manifest.json ({len(folder.manifest.files)} files)")
    for entry in folder.manifest.files:
        if entry.path.endswith(".onnx"):
            create_session(folder.graph(entry.path), device="cpu", threads=1)
        else:
            folder.read(entry.path)
    steps.append("checked every file and created a session for every ONNX file")
    if folder.manifest.goldens is not None:
        failed = [golden for golden in run_goldens(folder) if not golden.ok]
        steps.append(f"ran the golden test data ({len(failed)} cases off; `verify` reports them)")
    if folder.manifest.export_kind == "model":
        _tiny_run(path)
        steps.append("loaded the model and ran one tiny request")


def _tiny_run(path: Path) -> None:
    from onnxformer.runtime.loader import load

    load(path, device="cpu", threads=1).warm_up()


def _child(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m onnxformer.runtime.probe_child")
    parser.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB)
    parser.add_argument("--cpu-s", type=int, default=int(DEFAULT_TIMEOUT_S))
    parser.add_argument("path", type=Path)
    args = parser.parse_args(argv)
    # The libraries load before the limits apply: the limits are for what the model makes them do.
    from onnxformer.runtime import loader  # noqa: F401  (numpy, tokenizers, the model classes)
    from onnxformer.runtime.session import _onnxruntime

    _onnxruntime()
    _limit(args.memory_mb, args.cpu_s)
    steps: list[str] = []
    report: dict[str, Any] = {"status": "ok", "detail": "", "steps": steps}
    try:
        _probe(args.path, steps, report)
        report["detail"] = steps[-1] if steps else "nothing to do"
    except MemoryError:
        report.update(status="out_of_memory", detail="the probe ran out of memory (MemoryError)")
    except OnnxformerError as error:
        report.update(status="error", detail=str(error))
    except BaseException as error:  # ONNX Runtime's errors are untyped; a Rust panic is a BaseException
        text = str(error).strip().splitlines()[0][:500] if str(error).strip() else type(error).__name__
        status = "out_of_memory" if any(marker in str(error) for marker in OOM_MARKERS) else "error"
        report.update(status=status, detail=f"{type(error).__name__}: {text}")
    sys.stdout.write("\n" + json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
