"""`onnxformer train FAMILY`: train a model on the built-in corpus (default) or your own data.

Also runnable as `python -m onnxformer.cli.train FAMILY ...`, the entry torchrun starts in each process
(`torchrun --nproc-per-node 2 -m onnxformer.cli.train gpt`); `--nproc N` launches that itself.
"""

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from typer.core import TyperOption

from onnxformer.cli.errors import stderr, user_errors
from onnxformer.cli.outputs import CHECKPOINT, check_checkpoint_out, parse_path
from onnxformer.cli.printing import ResultConsole, echo_json, progress_bar
from onnxformer.runtime.errors import ConfigError

console = ResultConsole(highlight=False, soft_wrap=True)
MODEL_OPTIONS = ("d_model", "n_layers", "n_heads", "d_ff", "max_len", "dropout")
MODEL_CHOICES = ("position", "norm_position", "activation")
# CLI parameters that are TrainOptions fields of the same name.
OPTION_FIELDS = (
    "preset", "steps", "batch_size", "learning_rate", "seed", "device", "vocab_size", "val_fraction",
    "patience", "eval_every", "save_every", "quality_samples", "fsdp",
)  # fmt: skip


class TrainingDisplay:
    """The trainer's progress callback (a rich bar on stderr) and its message printer (`say`)."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.task = (
            None if progress is None else progress.add_task("", total=None, loss=float("nan"), speed=0.0)
        )

    def __call__(self, step: int, total: int, loss: float, speed: float) -> None:
        if self.progress is not None and self.task is not None:  # a bar has its task
            self.progress.update(self.task, completed=step, total=total, loss=loss, speed=speed)

    def say(self, message: str) -> None:
        if self.progress is not None:
            self.progress.console.print(message, markup=False, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def training_progress(family: str) -> Iterator[TrainingDisplay]:
    """A rich progress bar (steps, loss, tokens/s, ETA) on stderr; yields the trainer's progress callback.

    Only the first process of a distributed run shows it."""
    if int(os.environ.get("RANK", "0")) != 0:
        yield TrainingDisplay(None)
        return
    with progress_bar(
        TextColumn(f"[bold]training {family}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.3f}  {task.fields[speed]:,.0f} tok/s"),
        TimeRemainingColumn(),
    ) as progress:
        yield TrainingDisplay(progress)


def _given(ctx: typer.Context, name: str) -> bool:
    # By name: typer may carry its own copy of click, whose ParameterSource is another enum class.
    source = ctx.get_parameter_source(name)
    return getattr(source, "name", None) not in (None, "DEFAULT", "DEFAULT_MAP")


def _forwarded_args(ctx: typer.Context) -> list[str]:
    """This command line without --nproc: what each torchrun process runs."""
    args: list[str] = []
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if param.name == "nproc" or not _given(ctx, param.name):
            continue
        if param.param_type_name == "argument":
            args.append(str(value))
        elif isinstance(param, TyperOption) and param.is_flag:
            flag = param.opts[0] if value else next(iter(param.secondary_opts), None)
            args += [flag] if flag else []
        else:
            args += [param.opts[0], str(value)]
    return args


def _options(ctx: typer.Context, family: str, model_config: Path | None) -> tuple[Any, dict[str, Any]]:
    """(TrainOptions, the options given on the command line, as TrainOptions fields)."""
    from onnxformer.builder.training import TrainOptions
    from onnxformer.builder.training.model_config import read_model_config

    params = ctx.params
    overrides = read_model_config(model_config) if model_config is not None else {}
    overrides.update({k: params[k] for k in (*MODEL_OPTIONS, *MODEL_CHOICES) if params[k] is not None})
    values = {k: params[k] for k in OPTION_FIELDS}
    values["corpus"] = None if params["corpus"] is None else str(params["corpus"])
    options = TrainOptions(family, **values, model_overrides=overrides)
    changes = {k: values[k] for k in (*OPTION_FIELDS, "corpus") if _given(ctx, k)}
    if overrides:
        changes["model_overrides"] = overrides
    return options, changes


def train_command(
    ctx: typer.Context,
    family: Annotated[
        str, typer.Argument(help="Model family to train (an unknown name lists the known ones).")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", parser=parse_path, help="Checkpoint folder (default: runs/FAMILY)."),
    ] = None,
    preset: Annotated[
        str,
        typer.Option(
            help="Model size: tiny (minutes on a CPU) or small; for gpt also llama-tiny and llama-small "
            "(the Llama-style decoder: RMSNorm, rotary, SwiGLU, no biases, grouped-query attention)."
        ),
    ] = "tiny",
    steps: Annotated[
        int | None,
        typer.Option(help="Optimizer steps (default: the family's; with --corpus, scaled to its size)."),
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="Examples per step (over all processes).")
    ] = 64,
    learning_rate: Annotated[
        float | None, typer.Option("--learning-rate", help="Peak learning rate (default: the family's).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of data, initialisation and sampling.")] = 0,
    corpus: Annotated[
        Path | None,
        typer.Option(
            help="Your data: UTF-8 text, one sentence per line, or tab-separated source and target per "
            "line for the encoder-decoder family."
        ),
    ] = None,
    val_fraction: Annotated[
        float, typer.Option("--val-fraction", help="Share of the distinct lines held out for evaluation.")
    ] = 0.1,
    patience: Annotated[
        int | None,
        typer.Option(
            help="Stop after this many evaluations without a better held-out loss (0: never; "
            "default: 5 with --corpus, else never)."
        ),
    ] = None,
    eval_every: Annotated[
        int | None, typer.Option("--eval-every", help="Steps between evaluations (default: 10 per run).")
    ] = None,
    save_every: Annotated[
        int | None, typer.Option("--save-every", help="Steps between checkpoints (default: 5 per run).")
    ] = None,
    quality_samples: Annotated[
        int | None,
        typer.Option(
            "--quality-samples",
            help="Examples in the final quality check (default: scaled to the run; 0 skips it).",
        ),
    ] = None,
    model_config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="Model size from a .json or .toml file (d_model, n_layers, ...); options win."
        ),
    ] = None,
    d_model: Annotated[int | None, typer.Option("--d-model", help="Model width.")] = None,
    n_layers: Annotated[int | None, typer.Option("--n-layers", help="Blocks (per stack).")] = None,
    n_heads: Annotated[
        int | None, typer.Option("--n-heads", help="Attention heads (divide d_model).")
    ] = None,
    d_ff: Annotated[int | None, typer.Option("--d-ff", help="Feed-forward width.")] = None,
    max_len: Annotated[int | None, typer.Option("--max-len", help="Context length in tokens.")] = None,
    vocab_size: Annotated[
        int, typer.Option("--vocab-size", help="Tokenizer vocabulary size (at most).")
    ] = 512,
    dropout: Annotated[float | None, typer.Option(help="Dropout rate in [0, 1).")] = None,
    position: Annotated[
        str | None, typer.Option(help="Positional encoding: sinusoidal, learned, relative or rotary.")
    ] = None,
    norm_position: Annotated[
        str | None, typer.Option("--norm-position", help="LayerNorm: pre or post.")
    ] = None,
    activation: Annotated[str | None, typer.Option(help="Feed-forward activation: relu or gelu.")] = None,
    device: Annotated[str, typer.Option(help="cpu, or cuda where a GPU is available.")] = "cpu",
    nproc: Annotated[
        int,
        typer.Option(
            help="Processes to train with (torch.distributed via torchrun: gloo on CPU, NCCL on CUDA)."
        ),
    ] = 1,
    fsdp: Annotated[
        bool, typer.Option("--fsdp", help="Shard the model over the processes (FSDP) instead of DDP.")
    ] = False,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Continue the run saved in --out (to a new --steps, if given)."),
    ] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Start afresh over an earlier checkpoint in --out.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the final metrics as JSON.")] = False,
) -> None:
    """Train a model and save a checkpoint (weights as safetensors, config, tokenizer.json, training state
    and a loss-curve PNG). The weights kept are those with the best held-out loss. A killed run continues
    exactly with `--resume`; Ctrl-C says which step the checkpoint kept."""
    with user_errors(ctx):
        from onnxformer.builder.training import train
        from onnxformer.builder.training.distributed import Context, launch_command, launched_world_size

        options, changes = _options(ctx, family, model_config)
        target = out or Path("runs") / family
        if resume and overwrite:
            raise ConfigError("--resume continues the run in --out and --overwrite replaces it; use one")
        # An earlier run is never lost silently, nor a file of the user's in the folder.
        check_checkpoint_out(target, overwrite=overwrite, resume=resume)
        if nproc > 1 and launched_world_size() == 1:
            options.validated()  # a bad option fails here, once, not in every process
            Context(world_size=nproc).rows(batch_size)
            command = launch_command(nproc, "onnxformer.cli.train", _forwarded_args(ctx))
            raise typer.Exit(subprocess.run(command, check=False).returncode)
        try:
            with training_progress(family) as display:
                result = train(
                    target, options, resume=resume, changes=changes, progress=display, report=display.say
                )
        except KeyboardInterrupt:
            _say_what_was_kept(family, target)
            raise typer.Exit(130) from None
    if result.rank != 0:
        return
    _print_result(family, result, as_json=as_json)


def _say_what_was_kept(family: str, target: Path) -> None:
    """After Ctrl-C: the step the checkpoint in `target` holds, and how to continue from it."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    try:
        meta = json.loads((target / CHECKPOINT).read_text(encoding="utf-8"))
        step, steps = int(meta["step"]), int(meta["extra"]["train_options"]["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        message = f"interrupted: no checkpoint was saved in {target} yet, so there is nothing to resume"
    else:
        message = (
            f"interrupted: {target} keeps the checkpoint of step {step} of {steps}; continue with "
            f"`onnxformer train {family} --out {target} --resume`"
        )
    stderr.print(message, markup=False, soft_wrap=True)


def _print_result(family: str, result: Any, *, as_json: bool) -> None:
    if as_json:
        report = {
            "out": str(result.out),
            "metrics": result.metrics,
            "step": result.step,
            "best": result.best,
            "stopped_early": result.stopped_early,
            "already_complete": result.already_complete,
            "warnings": result.warnings,
            "samples": result.samples,
        }
        echo_json(report)
        return
    if result.already_complete:
        console.print(
            f"{result.out} holds a complete run (step {result.step}); nothing was trained or written. "
            f"Give --steps larger than {result.step} to train further."
        )
    elif not result.metrics:
        console.print(f"{family}: stopped at step {result.step}; continue with --resume")
        return
    table = Table(title=f"{family} trained: checkpoint in {result.out}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.metrics.items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)
    if result.best:
        shown = ", ".join(f"{k} {v:.4g}" for k, v in result.best.items() if k != "step")
        console.print(f"kept the best checkpoint: step {result.best['step']} ({shown})")
    for sample in result.samples:
        console.print(f"  sample: {sample}", markup=False)
    for warning in result.warnings:
        console.print(f"warning: {warning}", markup=False)
    console.print(f"loss curve: {result.out / 'loss_curve.png'}")


def main() -> None:
    """`python -m onnxformer.cli.train`: the train command alone (what torchrun runs in each process)."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(train_command)
    app()


if __name__ == "__main__":
    main()
