"""`onnxformer demo`: the whole path in one command, ending with a summary (the README's main job)."""

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from onnxformer.cli.errors import user_errors
from onnxformer.cli.train import training_progress
from onnxformer.runtime.errors import ConfigError

console = Console(highlight=False)

SENTENCE = "The cat sat on the mat."


def demo_command(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", help="Folder for checkpoints and exports.")] = Path("runs"),
    steps: Annotated[
        int | None,
        typer.Option(help="Training steps per model (default: each family's; fewer for a quick look)."),
    ] = None,
) -> None:
    """Train the tiny GPT, BERT and T5 on the built-in corpus, export them (graphs and blocks), verify the
    exports, run them with the torch-free runtime, and print a summary."""
    started = time.perf_counter()
    rows = []
    with user_errors(ctx):
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {out} is a file; give a folder for the checkpoints and exports")
        from onnxformer.builder.export.models import export_checkpoint
        from onnxformer.builder.export.recipes import RECIPES
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
                manifest = export_checkpoint(result.out, export)
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
        # The attention picture of the first text generator (a decoder's causal attention).
        drawn = next(family for family, recipe in RECIPES.items() if recipe.task == "generate")
        picture = out / f"attention_{drawn}.png"
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
