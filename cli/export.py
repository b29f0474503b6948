"""`onnxformer export CHECKPOINT --out DIR`: a trained model, or a local Hugging Face model folder, to a
folder any ONNX Runtime host can run."""

from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from onnxformer.cli.errors import user_errors
from onnxformer.cli.outputs import Overwrite, check_export_out, parse_path
from onnxformer.cli.printing import console, progress_bar


def export_command(
    ctx: typer.Context,
    checkpoint: Annotated[
        Path,
        typer.Argument(
            help="A checkpoint folder written by `onnxformer train`, or a local Hugging Face model folder "
            "(config.json, model.safetensors, tokenizer.json; never a hub id: nothing is downloaded)."
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out", parser=parse_path, metavar="DIR", help="Export folder to write (new or empty)."
        ),
    ],
    opset: Annotated[int, typer.Option(help="ONNX opset (17-23).")] = 18,
    attentions: Annotated[
        bool, typer.Option("--attentions/--no-attentions", help="Also write the attention-weights graph.")
    ] = True,
    blocks: Annotated[
        bool, typer.Option("--blocks/--no-blocks", help="Also export each block of the model.")
    ] = True,
    optimize: Annotated[
        bool, typer.Option("--optimize", help="Then fuse the graphs for speed, as `onnxformer optimize`.")
    ] = False,
    int8: Annotated[
        bool, typer.Option("--int8", help="Then fuse and quantize the weights to int8 (implies --optimize).")
    ] = False,
    gate: Annotated[
        bool,
        typer.Option(
            "--gate/--no-gate",
            help="With --int8: refuse int8 weights that depart too far from fp32 on held-out text, as "
            "`onnxformer optimize` does (--no-gate for random weights; the manifest says so).",
        ),
    ] = True,
    external_data: Annotated[
        bool,
        typer.Option(
            "--external-data",
            help="Keep each graph's weights in a <graph>.data file listed (with its sha256) in the manifest. "
            "Without it, only a graph past ONNX's 2 GB limit does.",
        ),
    ] = False,
    layout: Annotated[
        Literal["onnxformer", "optimum"],
        typer.Option(
            help="optimum: also write the files Optimum's ORTModel classes and transformers.js open "
            "(config.json, onnx/model.onnx, ...; listed in the manifest). Hugging Face folders only.",
        ),
    ] = "onnxformer",
    kv_cache: Annotated[
        Literal["in-place", "concat"],
        typer.Option(
            "--kv-cache",
            help="With --optimize / --int8, a decoder's cache: in-place (one buffer the runtime binds) or "
            "concat (past in, past + new out; always used with --layout optimum).",
        ),
    ] = "in-place",
    overwrite: Overwrite = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the manifest as JSON.")] = False,
) -> None:
    """Export the model's graphs (GPT: decoder with KV cache; BERT: encoder; T5: encoder and cached
    decoder), an attention-weights graph, the model's blocks and tokenizer.json, with a manifest.json that
    records every file's sha256 and the parity to PyTorch measured at shapes other than the trace shapes.
    A graph that misses its tolerance fails the export and writes nothing. --optimize / --int8 then
    rewrite the graphs as `onnxformer optimize` does; if that fails too, nothing is written. An existing
    model export at --out is replaced only with --overwrite, and only when the folder holds nothing but
    what its manifest lists; any other non-empty folder is refused.

    A Hugging Face folder (BertModel, BertForMaskedLM, BertForSequenceClassification, sentence-transformers
    folders, GPT2LMHeadModel, T5ForConditionalGeneration, LlamaForCausalLM) is imported first, with its
    own tokenizer; the export then carries everything a trained model's does. --layout optimum then also
    writes the files Optimum's ORTModel classes and transformers.js load (builder/export/layout.py)."""
    with user_errors(ctx):
        check_export_out(out, model=True, overwrite=overwrite)
        from onnxformer.builder.export.folder import staged_export
        from onnxformer.builder.export.layout import check_layout_source, write_layout
        from onnxformer.builder.export.models import export_checkpoint

        check_layout_source(checkpoint, layout=layout)
        # Optimum and transformers.js feed the copied decoder past in, past + new out.
        cache_update = kv_cache if layout == "onnxformer" else "concat"

        progress = progress_bar(
            TextColumn("[bold]exporting[/] {task.description:<36}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        # Every step writes the staging folder; --out gets the finished export or, if one fails, nothing.
        with progress, staged_export(out) as staging:
            task = progress.add_task("", total=None)

            def advance(name: str, index: int, total: int) -> None:
                progress.update(task, completed=index, total=total, description=name)

            manifest = export_checkpoint(
                checkpoint,
                staging,
                opset=opset,
                attentions=attentions,
                blocks=blocks,
                progress=advance,
                external_data=True if external_data else None,
            )
            if optimize or int8:
                from onnxformer.builder.optimize import optimize_export

                progress.update(task, description="optimizing (onnxformer optimize)")
                quantize: Literal["int8"] | None = "int8" if int8 else None
                manifest = optimize_export(
                    staging, staging, quantize=quantize, kv_cache=cache_update, gate=gate
                )
            if layout != "onnxformer":
                progress.update(task, description=f"writing the {layout} layout")
                manifest = write_layout(staging, checkpoint, layout=layout)
    if as_json:
        typer.echo(manifest.to_json())
        return
    table = Table(title=f"{manifest.family} exported to {out}")
    for column in ("file", "role", "cases", "max abs diff", "size"):
        table.add_column(column, overflow="fold")
    goldens = [entry for entry in manifest.files if entry.kind == "golden"]
    for entry in manifest.files:
        if entry.kind == "golden":
            continue
        parity = entry.parity
        worst = f"{max(parity.max_abs_diff.values()):.1e}" if parity else "-"
        cases = str(parity.cases) if parity else "-"
        table.add_row(entry.path, entry.kind, cases, worst, f"{entry.size / 1024:.0f} KiB")
    if goldens:
        size = sum(entry.size for entry in goldens) / 1024
        table.add_row(f"goldens/ ({len(goldens)} files)", "golden", "-", "-", f"{size:.0f} KiB")
    console.print(table)
