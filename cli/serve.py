"""`onnxformer serve DIR` (HTTP/JSON on uvicorn or Ray Serve) and `onnxformer triton DIR --out REPO`."""

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from onnxformer.cli.errors import user_errors
from onnxformer.cli.outputs import parse_path

console = Console(stderr=True, highlight=False)


def serve_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="A model export folder (from `onnxformer export`).")],
    host: Annotated[str, typer.Option(help="Address to listen on (127.0.0.1: this machine only).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port to listen on (1-65535).")] = 8000,
    ray: Annotated[
        str | None,
        typer.Option("--ray", help="Deploy with Ray Serve on a cluster: auto, an address, or local."),
    ] = None,
    replicas: Annotated[int, typer.Option(help="With --ray: replicas, each loading the export once.")] = 1,
    max_texts: Annotated[int, typer.Option("--max-texts", help="Most texts per request.")] = 64,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Largest max_new_tokens.")] = 256,
    max_body_bytes: Annotated[int, typer.Option("--max-body-bytes", help="Largest request body.")] = 1 << 20,
    threads: Annotated[int | None, typer.Option(help="ONNX Runtime threads per server/replica.")] = None,
) -> None:
    """Serve the export over HTTP/JSON: GET /health and /info, and POST /embed (BERT), /generate (GPT,
    with `"stream": true` for server-sent events) or /seq2seq (T5). uvicorn on this machine by default
    (`pip install "onnxformer[serve]"`), or the same application on Ray Serve with --ray
    (`pip install "onnxformer[ray]"`). Requests are checked and bounded; errors are JSON naming the field."""
    with user_errors(ctx):
        from onnxformer.runtime.serving.app import Limits, check_port, serve_local

        check_port(port)  # before the model loads, and before the --ray line below names the port
        limits = Limits(max_body_bytes=max_body_bytes, max_texts=max_texts, max_new_tokens=max_new_tokens)
        if ray is None:
            serve_local(folder, host=host, port=port, limits=limits, threads=threads)
            return
        from onnxformer.runtime.serving.ray_serve import serve_on_ray

        console.print(
            f"serving {folder} on Ray Serve at http://{host}:{port} ({replicas} replicas); Ctrl-C stops"
        )
        try:
            serve_on_ray(folder, address=ray, host=host, port=port, replicas=replicas, limits=limits,
                         threads=threads or 1)  # fmt: skip
        except KeyboardInterrupt:
            console.print("stopped")


def triton_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="A BERT or T5 export folder (from `onnxformer export`).")],
    out: Annotated[
        Path, typer.Option("--out", parser=parse_path, help="The model repository folder to write.")
    ],
    name: Annotated[str | None, typer.Option(help="Model name prefix (default: the folder's name).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing repository.")] = False,
) -> None:
    """Write a Triton Inference Server model repository for the export's encoder graph(s): config.pbtxt for
    the onnxruntime backend (input and output names, dtypes and dims from the manifest) beside
    1/model.onnx. Start Triton with `tritonserver --model-repository OUT`; tokenize on the client."""
    with user_errors(ctx):
        from onnxformer.runtime.serving.triton import write_repository

        names = write_repository(folder, out, name=name, overwrite=overwrite)
    for model in names:
        typer.echo(f"{out}/{model}/config.pbtxt")
