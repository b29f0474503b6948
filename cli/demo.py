"""`onnxformer demo`: the whole path in one command, ending with a summary (the README's main job)."""

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from onnxformer.cli.errors import user_errors
from onnxformer.cli.outputs import (
    check_checkpoint_out,
    check_export_out,
    check_folder_out,
    check_png_out,
    parse_path,
)
from onnxformer.cli.printing import console
from onnxformer.cli.train import training_progress

SENTENCE = "The cat sat on the mat."


def demo_command(
    ctx: typer.Context,
    out: Annotated[
        Path,
        typer.Option("--out", parser=parse_path, metavar="DIR", help="Folder for checkpoints and exports."),
    ] = Path("runs"),
    steps: Annotated[
        int | None,
        typer.Option(help="Training steps per model (default: each family's; fewer for a quick look)."),
    ] = None,
    blocks: Annotated[
        bool, typer.Option("--blocks/--no-blocks", help="Also export each block of each model.")
    ] = True,
    overwrite: Annotated[
        bool,
        typer.Option("--overwrite", help="Replace the checkpoints and exports of an earlier demo in --out."),
    ] = False,
) -> None:
    """Train the tiny GPT, BERT and T5 on the built-in corpus, export them (graphs and blocks), verify the
    exports, run them with the torch-free runtime, and print a summary. Writes OUT/FAMILY (checkpoints),
    OUT/export/FAMILY and the attention PNG; an earlier demo's are replaced only with --overwrite."""
    started = time.perf_counter()
    rows = []
    with user_errors(ctx):
        check_folder_out(out, what="checkpoints and exports")
        from onnxformer.builder.export.recipes import RECIPES

        # The attention picture of the first text generator (a decoder's causal attention).
        drawn = next(family for family, recipe in RECIPES.items() if recipe.task == "generate")
        picture = out / f"attention_{drawn}.png"
        for family in RECIPES:  # every target checked before any work
            check_checkpoint_out(out / family, overwrite=overwrite)
            check_export_out(out / "export" / family, model=True, overwrite=overwrite)
        check_png_out(picture, overwrite=overwrite)
        from onnxformer.builder.export.models import export_checkpoint
        from onnxformer.builder.training import TrainOptions, train
        from onnxformer.builder.training.defaults import TRAINING
        from onnxformer.runtime import load
        from onnxformer.runtime.attention import attention_map, save_heatmaps
        from onnxformer.runtime.check import check_export
        from onnxformer.runtime.errors import ExportError
        from onnxformer.runtime.folder import ExportFolder
        from onnxformer.runtime.goldens import run_goldens

        for family, recipe in RECIPES.items():
            metric, examples = TRAINING[family].headline, recipe.demo.examples
            with training_progress(family) as report:
                result = train(out / family, TrainOptions(family, steps=steps), progress=report)
            console.print(f"[bold]{family}[/] trained: {metric} = {result.metrics[metric]:.3f}")
            export = out / "export" / family
            with console.status(f"exporting {family} and checking parity"):
                manifest = export_checkpoint(result.out, export, blocks=blocks)
            opened = ExportFolder.open(export)
            problems = [r.problem for r in check_export(opened) if not r.ok]
            goldens = run_goldens(opened) if not problems else []
            problems += [f"{g.file} {g.label}: {g.problem}" for g in goldens if not g.ok]
            if problems:
                raise ExportError(f"{export} failed verification: {problems[0]}")
            samples = recipe.demo.show(load(export, device="cpu"), examples)
            worst = max(max(e.parity.max_abs_diff.values()) for e in manifest.files if e.parity)
            checked = f"{worst:.1e}\ngoldens {len(goldens)}/{len(goldens)} pass"
            rows.append((family, metric, result, export, checked, samples))
        attention = attention_map(out / "export" / drawn, SENTENCE, device="cpu")
        save_heatmaps(attention, picture)
        weights = attention.row("sat")
    table = Table(title=f"onnxformer demo: done in {time.perf_counter() - started:.0f} s")
    for column in ("model", "trained (held-out)", "export", "max parity diff", "runtime output"):
        table.add_column(column, overflow="fold")
    for family, metric, result, export, checked, samples in rows:
        trained = f"{metric} {result.metrics[metric]:.3f}\n{result.parameters:,} params, "
        trained += f"{result.metrics['train_seconds']:.0f} s"
        table.add_row(family, trained, str(export), checked, "\n".join(samples))
    console.print(table)
    focus = ", ".join(
        f"{token} {weight:.2f}"
        for token, weight in zip(attention.key_tokens, weights, strict=True)
        if weight >= 0.01
    )
    console.print(f"attention from 'sat' in {SENTENCE!r} ({drawn}, averaged): {focus}")
    console.print(f"attention heatmaps: {picture}   (see also: onnxformer attention --help)")
