"""`onnxformer export-blocks`: export every Transformer block to ONNX and prove it equal to PyTorch."""

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from onnxformer.cli.errors import user_errors
from onnxformer.cli.outputs import Overwrite, check_export_out, parse_path
from onnxformer.cli.printing import console, progress_bar
from onnxformer.runtime.errors import ConfigError


def export_blocks_command(
    ctx: typer.Context,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            parser=parse_path,
            metavar="DIR",
            help="Folder to write the ONNX files and manifest.json to.",
        ),
    ] = Path("runs/blocks"),
    block: Annotated[
        list[str] | None,
        typer.Option("--block", help="Export only this block (repeatable); default: every block."),
    ] = None,
    opset: Annotated[int, typer.Option(help="ONNX opset to export with (17-23).")] = 18,
    factor: Annotated[
        float,
        typer.Option(
            help="How many times PyTorch fp32's own distance to the float64 answer ONNX Runtime may be "
            "(plus a floor of 4 fp32 steps); a miss fails.",
        ),
    ] = 16.0,
    seed: Annotated[int, typer.Option(help="Seed of the random weights and test inputs.")] = 0,
    overwrite: Overwrite = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the manifest as JSON instead of a table.")
    ] = False,
) -> None:
    """Export each block (attention, positional encodings, FFN, residual, encoder and decoder blocks, under
    each option that changes the graph) to its own ONNX file, then check it against PyTorch at shapes other
    than the trace shapes, against the exact (float64) answer: ONNX Runtime may be at most --factor times
    as far from it as PyTorch fp32 is. A miss fails the export and writes nothing. An
    existing blocks export at --out is replaced only with --overwrite; a model export or any other
    non-empty folder is refused."""
    with user_errors(ctx):
        if not (math.isfinite(factor) and factor >= 1):
            raise ConfigError(f"--factor must be a number >= 1 (e.g. 4), got {factor:g}")
        check_export_out(out, model=False, overwrite=overwrite)
        from onnxformer.builder.export.blocks import export_blocks, select_blocks
        from onnxformer.builder.export.parity import ParityRule

        total = len(select_blocks(block))
        with progress_bar(
            TextColumn("[bold]exporting[/] {task.description:<48}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        ) as progress:
            task = progress.add_task("", total=total)

            def advance(name: str, index: int, _total: int) -> None:
                progress.update(task, completed=index, description=name)

            manifest = export_blocks(
                out, names=block, opset=opset, rule=ParityRule(factor=factor), seed=seed, progress=advance
            )
    if as_json:
        typer.echo(manifest.to_json())
        return
    graphs = [entry for entry in manifest.files if entry.kind != "golden"]
    table = Table(title=f"{len(graphs)} blocks exported to {out} (opset {opset})")
    for column in ("file", "cases", "error to float64 (output: ONNX Runtime / PyTorch fp32)", "size"):
        table.add_column(column, justify="right" if column in ("cases", "size") else "left", overflow="fold")
    parities = []
    for entry in graphs:
        parity = entry.parity
        assert parity is not None  # export_blocks proves every block it writes
        parities.append(parity)
        diffs = ", ".join(
            f"{name}: {value:.1e} / {parity.torch_error[name]:.1e}" for name, value in parity.error.items()
        )
        table.add_row(entry.path, str(parity.cases), diffs, f"{entry.size / 1024:.0f} KiB")
    goldens = len(manifest.files) - len(graphs)
    table.add_row(f"goldens/ ({goldens} files)", "-", "-", "-")
    console.print(table)
    worst = max(max(parity.used.values()) for parity in parities)
    console.print(f"closest to its limit: {worst:.0%} of the allowance (--factor {factor:g})")
