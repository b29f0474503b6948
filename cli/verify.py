"""`onnxformer verify DIR`: re-check an export folder (runs without torch unless --checkpoint is given)."""

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
    checkpoint: Annotated[
        Path | None,
        typer.Option(help="Re-run the parity checks against this training checkpoint (needs the builder)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Check every file of an export against the sha256 in its manifest, load each ONNX graph in ONNX
    Runtime (CPU) and compare its inputs and outputs with the manifest. With --checkpoint, also run every
    graph against the PyTorch model again and print the max abs/rel differences per file and output.
    Exits 1 if anything is wrong."""
    with user_errors(ctx):
        export = ExportFolder.open(folder)
        results = check_export(export)
        reverified = {}
        if checkpoint is not None:
            from onnxformer.builder.export.models import reverify_export

            reverified = reverify_export(folder, checkpoint)
    failed = [result for result in results if not result.ok]
    rows = []
    for result in results:
        parity = reverified.get(result.entry.path, result.entry.parity)
        outputs = {}
        if parity is not None:
            for name, diff in parity.max_abs_diff.items():
                scale = parity.max_abs_value.get(name, 0.0)
                outputs[name] = {"max_abs_diff": diff, "max_rel_diff": diff / scale if scale else None}
        rows.append(
            {"path": result.entry.path, "ok": result.ok, "problem": result.problem, "outputs": outputs}
        )
    if as_json:
        payload = {"folder": str(folder), "ok": not failed, "rechecked": bool(reverified), "files": rows}
        typer.echo(json.dumps(payload, indent=2))
    else:
        source = "re-run against the checkpoint" if reverified else "recorded at export"
        table = Table(
            title=f"{folder}: {len(results) - len(failed)}/{len(results)} files verified ({source})"
        )
        for column in ("file", "sha256 + load", "output", "max abs diff", "max rel diff"):
            table.add_column(column, overflow="fold")
        for row in rows:
            status = "[green]ok[/]" if row["ok"] else f"[red]{row['problem']}[/]"
            if not row["outputs"]:
                table.add_row(row["path"], status, "-", "-", "-")
            for index, (name, figures) in enumerate(row["outputs"].items()):
                rel = figures["max_rel_diff"]
                table.add_row(
                    row["path"] if index == 0 else "",
                    status if index == 0 else "",
                    name,
                    f"{figures['max_abs_diff']:.1e}",
                    "-" if rel is None else f"{rel:.1e}",
                )
        console.print(table)
    if failed:
        raise typer.Exit(1)
