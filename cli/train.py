"""`onnxformer train gpt|bert|t5`: train a model on the built-in corpus (default) or your own data."""

import contextlib
import json
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from onnxformer.cli.errors import user_errors

console = Console(highlight=False)


@contextlib.contextmanager
def training_progress(family: str) -> Iterator[Callable[[int, int, float, float], None]]:
    """A rich progress bar (steps, loss, tokens/s, ETA) on stderr; yields the trainer's progress callback."""
    with Progress(
        TextColumn(f"[bold]training {family}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.3f}  {task.fields[speed]:,.0f} tok/s"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("", total=None, loss=float("nan"), speed=0.0)

        def report(step: int, total: int, loss: float, speed: float) -> None:
            progress.update(task, completed=step, total=total, loss=loss, speed=speed)

        yield report


class FamilyName(str, Enum):
    gpt = "gpt"
    bert = "bert"
    t5 = "t5"


def train_command(
    ctx: typer.Context,
    family: Annotated[FamilyName, typer.Argument(help="gpt (decoder-only), bert (encoder-only) or t5.")],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Checkpoint folder (default: runs/gpt, runs/bert or runs/t5)."),
    ] = None,
    preset: Annotated[str, typer.Option(help="Model size: tiny (minutes on a CPU) or small.")] = "tiny",
    steps: Annotated[int | None, typer.Option(help="Optimizer steps (default: the family's).")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Examples per step.")] = 64,
    learning_rate: Annotated[
        float | None, typer.Option("--learning-rate", help="Peak learning rate (default: the family's).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of data, initialisation and sampling.")] = 0,
    corpus: Annotated[
        Path | None,
        typer.Option(
            help="Your data: UTF-8 text, one sentence per line (gpt, bert), "
            "or tab-separated source and target per line (t5)."
        ),
    ] = None,
    device: Annotated[str, typer.Option(help="cpu, or cuda where a GPU is available.")] = "cpu",
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run saved in --out.")] = False,
    position: Annotated[
        str | None, typer.Option(help="Positional encoding: sinusoidal, learned, relative or rotary.")
    ] = None,
    norm_position: Annotated[
        str | None, typer.Option("--norm-position", help="LayerNorm: pre or post.")
    ] = None,
    activation: Annotated[str | None, typer.Option(help="Feed-forward activation: relu or gelu.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the final metrics as JSON.")] = False,
) -> None:
    """Train a model and save a checkpoint (weights as safetensors, config, tokenizer.json, training state
    and a loss-curve PNG). A killed run continues exactly with `--resume`."""
    with user_errors(ctx):
        from onnxformer.builder.training import TrainOptions, train

        overrides = {
            key: value
            for key, value in {
                "position": position,
                "norm_position": norm_position,
                "activation": activation,
            }.items()
            if value is not None
        }
        options = TrainOptions(
            family.value,
            preset=preset,
            steps=steps,
            batch_size=batch_size,
            learning_rate=learning_rate,
            seed=seed,
            device=device,
            corpus=None if corpus is None else str(corpus),
            model_overrides=overrides,
        )
        target = out or Path("runs") / family.value
        with training_progress(family.value) as report:
            result = train(target, options, resume=resume, progress=report)
    if as_json:
        typer.echo(json.dumps({"out": str(result.out), "metrics": result.metrics}, indent=2))
        return
    table = Table(title=f"{family.value} trained: checkpoint in {result.out}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.metrics.items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)
    for sample in result.samples[:3]:
        console.print(f"  sample: {sample}")
    console.print(f"loss curve: {result.out / 'loss_curve.png'}")
