"""`--untrusted`: probe an export in a child process with time and memory limits before touching it."""

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from onnxformer.cli.printing import echo_json
from onnxformer.runtime.probe import ProbeResult, probe_export

UNTRUSTED_HELP = (
    "For exports you did not make: first open, verify and run the export in a separate process with "
    "time and memory limits, and stop (exit 1) if it crashes, hangs or runs out of memory there."
)
_VERBS = {"timed_out": "timed out", "out_of_memory": "ran out of memory"}
stderr = Console(stderr=True, highlight=False)


def probe_or_exit(path: Path, *, as_json: bool) -> ProbeResult:
    """The probe's result, unless the probe crashed, hung or ran out of memory: then report it and exit 1.

    A probe that only failed (a file altered, a graph ONNX Runtime refuses) is returned: the command then
    meets the same problem in this process as an ordinary error and reports it in full."""
    result = probe_export(path)
    if not result.harmful:
        return result
    if as_json:
        echo_json({"path": str(path), "ok": False, "probe": result.to_dict()})
    else:
        what = _VERBS.get(result.status, result.status)
        stderr.print(
            f"[bold red]error:[/] the untrusted probe of {escape(str(path))} {what}: "
            f"{escape(result.detail)}; nothing was loaded in this process",
            soft_wrap=True,
        )
    raise typer.Exit(1)
