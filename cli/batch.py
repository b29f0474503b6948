"""`onnxformer batch DIR INPUT.jsonl --out OUTPUT.jsonl [--ray ADDRESS]`: a whole file through an export."""

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TimeElapsedColumn

from onnxformer.cli.errors import user_errors
from onnxformer.cli.options import FROM_FLAGS, generation_options
from onnxformer.cli.outputs import parse_path
from onnxformer.cli.printing import progress_bar
from onnxformer.runtime.generation_options import GenerationOptions

console = Console(stderr=True, highlight=False)


def _quiet_ray() -> None:
    """Ray Data logs every stage at INFO (its logging is configured when ray.data is imported); the
    progress bar says enough."""
    from onnxformer.runtime.serving.tasks import require

    require("ray", "ray")
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.WARNING)


@generation_options("encode", "generate", "seq2seq")
def batch_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="A model export folder (from `onnxformer export`).")],
    source: Annotated[Path, typer.Argument(help='JSONL input: one object per line, e.g. {"text": "..."}.')],
    out: Annotated[
        Path, typer.Option("--out", parser=parse_path, help="JSONL output: each input line plus the result.")
    ],
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray", help="Run on Ray Data: auto (the running cluster), an address, or local (start one)."
        ),
    ] = None,
    actors: Annotated[int, typer.Option(help="With --ray: actors, each loading the export once.")] = 1,
    column: Annotated[str, typer.Option(help="The input field holding the text.")] = "text",
    batch_size: Annotated[int, typer.Option("--batch-size", help="Rows per model call.")] = 32,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an earlier output of batch (never a file of yours).")
    ] = False,
    options: GenerationOptions = FROM_FLAGS,  # one flag per field, for the export's task
    threads: Annotated[int | None, typer.Option(help="ONNX Runtime threads per process/actor.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run's summary as JSON.")] = False,
) -> None:
    """Embed (BERT), continue (GPT) or transform (T5) the text of every line of a JSONL file, as the
    export's family says, and write each line with its result (`embedding`, `generation` or `output`).
    Runs as a plain loop here, or with --ray on a Ray cluster (`pip install "onnxformer[ray]"`); both give
    the same bytes. The output is written atomically; it replaces only an earlier output of batch, and only
    with --overwrite."""
    with user_errors(ctx):
        from onnxformer.runtime.serving.batch import run_batch

        if ray is not None:
            _quiet_ray()
        with progress_bar(
            "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), disable=as_json,
        ) as bar:  # fmt: skip
            task = bar.add_task("records", total=None)
            run = run_batch(
                folder, source, out, column=column, batch_size=batch_size, options=options,
                overwrite=overwrite, ray_address=ray, actors=actors, threads=threads,
                progress=lambda done: bar.update(task, completed=done),
            )  # fmt: skip
    summary = {"output": str(run.output), "records": run.records, "task": run.task, "mode": run.mode,
               "seconds": round(run.seconds, 3), "records_per_second": round(run.per_second, 1)}  # fmt: skip
    if as_json:
        typer.echo(json.dumps(summary))
        return
    console.print(
        f"{run.task}: {run.records} records -> {run.output} ({run.mode}, {run.seconds:.2f} s, "
        f"{run.per_second:.0f} records/s)"
    )
