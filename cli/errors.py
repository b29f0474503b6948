"""How the CLI reports failures: one clear line on stderr and exit code 1; a traceback only with --debug."""

import contextlib
from collections.abc import Iterator

import typer
from rich.console import Console
from rich.markup import escape

from onnxformer.runtime.errors import OnnxformerError

stderr = Console(stderr=True, highlight=False)


@contextlib.contextmanager
def user_errors(ctx: typer.Context) -> Iterator[None]:
    """Turn onnxformer's typed errors into `error: ...` and exit code 1 (re-raise with --debug)."""
    try:
        yield
    except OnnxformerError as error:
        if ctx.obj and ctx.obj.get("debug"):
            raise
        # Messages may hold brackets ("onnxformer[plot]") that rich would read as markup.
        stderr.print(f"[bold red]error:[/] {escape(str(error))}", soft_wrap=True)
        raise typer.Exit(1) from None
