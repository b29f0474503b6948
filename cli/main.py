"""The `onnxformer` command: a typer app composed from one module per command group."""

from typing import Annotated

import typer

from onnxformer.cli.attention import attention_command
from onnxformer.cli.batch import batch_command
from onnxformer.cli.bench import bench_command
from onnxformer.cli.blocks import export_blocks_command
from onnxformer.cli.chat import chat_command
from onnxformer.cli.demo import demo_command
from onnxformer.cli.encode import encode_command
from onnxformer.cli.export import export_command
from onnxformer.cli.generate import generate_command
from onnxformer.cli.inspect import inspect_command
from onnxformer.cli.optimize import optimize_command
from onnxformer.cli.seq2seq import seq2seq_command
from onnxformer.cli.serve import serve_command, triton_command
from onnxformer.cli.train import train_command
from onnxformer.cli.verify import verify_command

app = typer.Typer(
    name="onnxformer",
    help="Build Transformers from their parts, export them to ONNX, and prove the numbers match.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode="markdown",
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"onnxformer {version('onnxformer')}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
    _: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    ctx.obj = {"debug": debug}


app.command("demo")(demo_command)
app.command("train")(train_command)
app.command("export")(export_command)
app.command("export-blocks")(export_blocks_command)
app.command("optimize")(optimize_command)
app.command("verify")(verify_command)
app.command("inspect")(inspect_command)
app.command("generate")(generate_command)
app.command("chat")(chat_command)
app.command("encode")(encode_command)
app.command("seq2seq")(seq2seq_command)
app.command("attention")(attention_command)
app.command("bench")(bench_command)
app.command("batch")(batch_command)
app.command("serve")(serve_command)
app.command("triton")(triton_command)


def main() -> None:
    app()
