"""Probing an untrusted export in a child process before the caller touches it.

A malformed ONNX model can crash ONNX Runtime (a segfault or abort in C++ code kills the whole process),
hang it, or make it allocate without bound. `probe_export` does in a child process what `verify` and
`load` would do in the caller: check every file of the folder, create an ONNX Runtime session (CPU) for
every ONNX file, run the golden test data, and, for a model export, open it with `load` and run one tiny
request (for one .onnx file: read it and create its session). The child runs under limits:

- address space (`RLIMIT_AS`, `memory_mb`), so an allocation past it fails instead of swapping the host;
- wall-clock time (`timeout_s`; the child's whole process group is killed when it runs over) and CPU time;
- no core dumps, and files it writes are capped, so it cannot fill the disk either.

The result says what happened: "ok", "error" (a Python exception, which the caller would also have got as
an exception), "crashed" (killed by a signal, with its number and name), "timed_out" or "out_of_memory".
`load(folder, untrusted=True)` probes first and loads only after "ok"; the `--untrusted` flag of
`onnxformer inspect` and `onnxformer verify` probes first and stops when the probe was `harmful` (crashed,
timed out, out of memory): after a mere "error" the command meets the same error in-process and reports
it as usual.
The sha256 of the manifest the child read is returned: every file is checked against the manifest, so
a caller whose manifest has the same sha256 reads the very bytes the child probed.

Limits are POSIX `resource` limits: on systems without them the probe still isolates crashes and hangs,
but not memory.
"""

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from onnxformer.runtime.errors import ConfigError, ManifestError, OnnxformerError

Status = Literal["ok", "error", "crashed", "timed_out", "out_of_memory"]
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MEMORY_MB = 4096
_OUTPUT_LIMIT = 64 * 2**20  # most bytes the child may write to any one file (stdout and stderr included)
_OOM_MARKERS = ("bad_alloc", "Failed to allocate", "out of memory", "MemoryError", "Cannot allocate")


@dataclass(frozen=True)
class ProbeResult:
    status: Status
    detail: str  # one sentence: what happened
    seconds: float
    signal: int | None = None  # the signal that killed the child ("crashed")
    steps: tuple[str, ...] = ()  # what the child finished, in order
    manifest_sha256: str | None = None  # of the manifest.json the child read (folders)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def harmful(self) -> bool:
        """Whether doing the same in the caller would kill, hang or exhaust it ("error" only raises)."""
        return self.status in ("crashed", "timed_out", "out_of_memory")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "steps": list(self.steps)}


def probe_export(
    path: str | os.PathLike,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
) -> ProbeResult:
    """Open, verify, create sessions for and (model exports) run once `path`, an export folder or one
    .onnx file, in a child process under the limits; never raises for what the child does."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not 0 < timeout_s < 1e6:
        raise ConfigError(f"timeout_s must be a number of seconds > 0, got {timeout_s!r}")
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 64:
        raise ConfigError(f"memory_mb must be an integer >= 64 (MiB), got {memory_mb!r}")
    command = [
        sys.executable,
        "-m",
        "onnxformer.runtime.probe",
        "--memory-mb",
        str(memory_mb),
        "--cpu-s",
        str(int(timeout_s) + 1),
        os.fspath(Path(path).absolute()),
    ]
    # One thread each: the probe measures whether the model is safe, not how fast it runs, and thread
    # pools reserve address space that would count against the memory limit.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, start_new_session=True
        )
        try:
            returncode = child.wait(timeout=timeout_s)
        except BaseException as error:  # the timeout, or the caller interrupted: leave no child behind
            _kill_group(child)
            if not isinstance(error, subprocess.TimeoutExpired):
                raise
            return ProbeResult(
                "timed_out",
                f"the probe did not finish within {timeout_s:g} s and was killed",
                time.monotonic() - start,
            )
        seconds = time.monotonic() - start
        report = _last_json_line(_tail(out))
        errors = _tail(err).decode("utf-8", "replace").strip()
    return _result(returncode, report, errors, seconds)


def _result(returncode: int, report: dict | None, errors: str, seconds: float) -> ProbeResult:
    last_error = errors.splitlines()[-1][:500] if errors else ""
    if returncode < 0:
        number = -returncode
        name = _signal_name(number)
        if number == signal.SIGXCPU:
            return ProbeResult("timed_out", f"the probe used up its CPU time ({name})", seconds, number)
        hint = " (likely out of memory)" if number in (signal.SIGKILL, signal.SIGABRT, signal.SIGSEGV) else ""
        if any(marker in errors for marker in _OOM_MARKERS):
            return ProbeResult(
                "out_of_memory", f"the probe ran out of memory and died ({name})", seconds, number
            )
        detail = f"the probe crashed with signal {number} ({name}){hint}"
        return ProbeResult("crashed", detail + (f": {last_error}" if last_error else ""), seconds, number)
    if report is None:
        if any(marker in errors for marker in _OOM_MARKERS):
            return ProbeResult("out_of_memory", f"the probe ran out of memory: {last_error}", seconds)
        return ProbeResult(
            "error", f"the probe exited with code {returncode} and no report: {last_error}", seconds
        )
    return ProbeResult(
        report["status"],
        report["detail"],
        seconds,
        steps=tuple(report.get("steps", ())),
        manifest_sha256=report.get("manifest_sha256"),
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _kill_group(child: subprocess.Popen) -> None:
    """Kill the child's process group (the child is not reaped yet, so the group id is still its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _tail(handle, size: int = 1 << 20) -> bytes:
    handle.seek(0, os.SEEK_END)
    handle.seek(max(0, handle.tell() - size))
    return handle.read()


def _last_json_line(data: bytes) -> dict | None:
    for line in reversed(data.decode("utf-8", "replace").splitlines()):
        if line.startswith("{"):
            try:
                report = json.loads(line)
            except ValueError:
                return None
            return report if isinstance(report, dict) and "status" in report else None
    return None


# The child.


def _limit(memory_mb: int, cpu_s: int) -> None:
    try:
        import resource
    except ImportError:  # not POSIX: crashes and hangs are still isolated
        return
    for name, value in (
        ("RLIMIT_AS", memory_mb * 2**20),
        ("RLIMIT_CPU", cpu_s),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_FSIZE", _OUTPUT_LIMIT),
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
        data = folder.read(entry.path)
        if entry.path.endswith(".onnx"):
            create_session(data, device="cpu", threads=1)
    steps.append("checked every file and created a session for every ONNX file")
    if folder.manifest.goldens is not None:
        failed = [golden for golden in run_goldens(folder) if not golden.ok]
        steps.append(f"ran the golden test data ({len(failed)} cases off; `verify` reports them)")
    if folder.manifest.export_kind == "model":
        _tiny_run(path)
        steps.append("loaded the model and ran one tiny request")


def _tiny_run(path: Path) -> None:
    from onnxformer.runtime.loader import load

    model = load(path, device="cpu", threads=1)
    if model.family == "bert":
        model.embed("a")
    elif model.family == "gpt":
        model.generate_ids(
            [model.prefix or [model.tokenizer.special_tokens["bos"]]], max_new_tokens=1, temperature=0
        )
    else:
        model.generate_ids([[model.export.special["eos"]]], max_new_tokens=1, temperature=0)


def _child(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m onnxformer.runtime.probe")
    parser.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB)
    parser.add_argument("--cpu-s", type=int, default=int(DEFAULT_TIMEOUT_S))
    parser.add_argument("path", type=Path)
    args = parser.parse_args(argv)
    # The libraries load before the limits apply: the limits are for what the model makes them do.
    from onnxformer.runtime import loader  # noqa: F401  (numpy, tokenizers)
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
        status = "out_of_memory" if any(marker in str(error) for marker in _OOM_MARKERS) else "error"
        report.update(status=status, detail=f"{type(error).__name__}: {text}")
    sys.stdout.write("\n" + json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
