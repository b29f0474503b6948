"""`onnxformer verify DIR`: re-check an export folder (runs without torch)."""

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from onnxformer.cli.errors import user_errors
from onnxformer.runtime.check import check_export
from onnxformer.runtime.folder import ExportFolder

console = Console(highlight=False)


def verify_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="An export folder (it holds manifest.json).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Check every file of an export against the sha256 in its manifest, load each ONNX graph in ONNX
    Runtime (CPU) and compare its inputs and outputs with the manifest. Exits 1 if anything is wrong."""
    with user_errors(ctx):
        export = ExportFolder.open(folder)
        results = check_export(export)
    failed = [result for result in results if not result.ok]
    if as_json:
        rows = [
            {
                "path": r.entry.path,
                "ok": r.ok,
                "problem": r.problem,
                "max_abs_diff": r.entry.parity.max_abs_diff if r.entry.parity else None,
            }
            for r in results
        ]
        typer.echo(json.dumps({"folder": str(folder), "ok": not failed, "files": rows}, indent=2))
    else:
        table = Table(title=f"{folder}: {len(results) - len(failed)}/{len(results)} files verified")
        for column in ("file", "sha256 + load", "recorded max abs diff"):
            table.add_column(column, overflow="fold")
        for result in results:
            parity = result.entry.parity
            worst = f"{max(parity.max_abs_diff.values()):.1e}" if parity and parity.max_abs_diff else "-"
            status = "[green]ok[/]" if result.ok else f"[red]{result.problem}[/]"
            table.add_row(result.entry.path, status, worst)
        console.print(table)
    if failed:
        raise typer.Exit(1)
