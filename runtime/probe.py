"""Probing an untrusted export in a child process before the caller touches it.

A malformed ONNX model can crash ONNX Runtime (a segfault or abort in C++ code kills the whole process),
hang it, or make it allocate without bound. `probe_export` does in a child process what `verify` and
`load` would do in the caller: check every file of the folder, create an ONNX Runtime session (CPU) for
every ONNX file, run the golden test data, and, for a model export, open it with `load` and run one tiny
request (for one .onnx file: read it and create its session). The child runs under limits:

- address space (`RLIMIT_AS`, `memory_mb`), so an allocation past it fails instead of swapping the host;
- wall-clock time (`timeout_s`; the child's whole process group is killed when it runs over) and CPU time;
- no core dumps, and files it writes are capped, so it cannot fill the disk either.

The child is `onnxformer.runtime.probe_child` (`python -m onnxformer.runtime.probe_child`), a module of
its own so that this one, which `load` uses, imports nothing of the model classes.

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
from typing import IO, Any, Literal

from onnxformer.runtime.errors import ConfigError

Status = Literal["ok", "error", "crashed", "timed_out", "out_of_memory"]
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MEMORY_MB = 4096
OUTPUT_LIMIT = 64 * 2**20  # most bytes the child may write to any one file (stdout and stderr included)
OOM_MARKERS = ("bad_alloc", "Failed to allocate", "out of memory", "MemoryError", "Cannot allocate")


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
    path: str | os.PathLike[str],
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
        "onnxformer.runtime.probe_child",
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


def _result(returncode: int, report: dict[str, Any] | None, errors: str, seconds: float) -> ProbeResult:
    last_error = errors.splitlines()[-1][:500] if errors else ""
    if returncode < 0:
        number = -returncode
        name = _signal_name(number)
        if number == signal.SIGXCPU:
            return ProbeResult("timed_out", f"the probe used up its CPU time ({name})", seconds, number)
        hint = " (likely out of memory)" if number in (signal.SIGKILL, signal.SIGABRT, signal.SIGSEGV) else ""
        if any(marker in errors for marker in OOM_MARKERS):
            return ProbeResult(
                "out_of_memory", f"the probe ran out of memory and died ({name})", seconds, number
            )
        detail = f"the probe crashed with signal {number} ({name}){hint}"
        return ProbeResult("crashed", detail + (f": {last_error}" if last_error else ""), seconds, number)
    if report is None:
        if any(marker in errors for marker in OOM_MARKERS):
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


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    """Kill the child's process group (the child is not reaped yet, so the group id is still its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _tail(handle: IO[bytes], size: int = 1 << 20) -> bytes:
    handle.seek(0, os.SEEK_END)
    handle.seek(max(0, handle.tell() - size))
    return handle.read()


def _last_json_line(data: bytes) -> dict[str, Any] | None:
    for line in reversed(data.decode("utf-8", "replace").splitlines()):
        if line.startswith("{"):
            try:
                report = json.loads(line)
            except ValueError:
                return None
            return report if isinstance(report, dict) and "status" in report else None
    return None
