"""How the CLI reports failures: one clear line on stderr and exit code 1; a traceback only with --debug."""

import contextlib
from collections.abc import Iterator

import typer
from rich.console import Console
from rich.markup import escape

from onnxformer.runtime.errors import OnnxformerError

stderr = Console(stderr=True, highlight=False)

# The extra that brings each optional top-level module; a command that needs one says which to install.
EXTRAS = {
    "torch": "builder",
    "onnx": "builder",
    "onnxscript": "builder",
    "safetensors": "builder",
    "matplotlib": "plot",
    "ray": "ray",
    "uvicorn": "serve",
    "starlette": "serve",
    "fastapi": "serve",
}


def missing_extra(error: ModuleNotFoundError, command: str | None) -> str | None:
    """The message for a missing optional dependency, or None if `error` is not one."""
    module = (error.name or "").split(".")[0]
    extra = EXTRAS.get(module)
    if extra is None:
        return None
    who = f"`onnxformer {command}`" if command else "this command"
    return (
        f"{who} needs {module}, which is not installed: install the {extra} extra with "
        f'pip install "onnxformer[{extra}]"'
    )


@contextlib.contextmanager
def user_errors(ctx: typer.Context) -> Iterator[None]:
    """Turn onnxformer's typed errors, and a missing optional dependency, into `error: ...` and exit
    code 1 (re-raise with --debug)."""
    debug = bool(ctx.obj and ctx.obj.get("debug"))
    try:
        yield
    except OnnxformerError as error:
        if debug:
            raise
        # Messages may hold brackets ("onnxformer[plot]") that rich would read as markup.
        stderr.print(f"[bold red]error:[/] {escape(str(error))}", soft_wrap=True)
        raise typer.Exit(1) from None
    except ModuleNotFoundError as error:
        message = missing_extra(error, ctx.info_name)
        if message is None or debug:
            raise
        stderr.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
        raise typer.Exit(1) from None
