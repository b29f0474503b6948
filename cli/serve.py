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
    model_name: Annotated[
        str | None,
        typer.Option("--model-name", help='The OpenAI "model" name (default: the folder\'s name).'),
    ] = None,
    chat_template: Annotated[
        Path | None,
        typer.Option("--chat-template", help="A Jinja chat template file, for an export without one."),
    ] = None,
    max_batch: Annotated[int, typer.Option("--max-batch", help="Most texts or prompts per batch.")] = 32,
    batch_wait_ms: Annotated[
        float, typer.Option("--batch-wait-ms", help="How long a batch waits for more requests.")
    ] = 0.0,
    max_queue: Annotated[
        int, typer.Option("--max-queue", help="Requests that may wait; more are refused with 503.")
    ] = 256,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds a request may take (else 504).")
    ] = 300.0,
    workers: Annotated[int, typer.Option("--batch-workers", help="Batches run at once.")] = 1,
    batching: Annotated[
        bool, typer.Option("--batching/--no-batching", help="Run concurrent requests as batches.")
    ] = True,
    continuous: Annotated[
        bool,
        typer.Option(
            "--continuous/--arrival-batches",
            help="Generations join a running batch between steps, or batch only as they arrive.",
        ),
    ] = True,
) -> None:
    """Serve the export over HTTP: the OpenAI API (/v1/models, /v1/embeddings, /v1/completions,
    /v1/chat/completions), our own routes (POST /embed, /generate or /seq2seq; GET /health, /info) and
    GET /metrics (Prometheus). Concurrent requests run in batches; a full queue answers 503. uvicorn on
    this machine by default (`pip install "onnxformer[serve]"`); SIGTERM drains the requests in flight. Or
    the same application on Ray Serve with --ray (`pip install "onnxformer[ray]"`)."""
    with user_errors(ctx):
        from onnxformer.runtime.serving.app import Limits, ServerOptions, check_port, serve_local
        from onnxformer.runtime.serving.scheduler import BatchSettings

        check_port(port)  # before the model loads, and before the --ray line below names the port
        options = ServerOptions(
            limits=Limits(max_body_bytes=max_body_bytes, max_texts=max_texts, max_new_tokens=max_new_tokens),
            batching=BatchSettings(
                max_batch=max_batch,
                max_wait_ms=batch_wait_ms,
                max_queue=max_queue,
                timeout_s=timeout,
                workers=workers,
                batching=batching,
            ),
            model_name=model_name or folder.resolve().name,
            chat_template=read_template(chat_template),
        )
        if ray is None:
            serve_local(folder, host=host, port=port, options=options, threads=threads)
            return
        from onnxformer.runtime.serving.ray_serve import serve_on_ray

        console.print(
            f"serving {folder} on Ray Serve at http://{host}:{port} ({replicas} replicas); Ctrl-C stops"
        )
        try:
            serve_on_ray(folder, address=ray, host=host, port=port, replicas=replicas, options=options,
                         threads=threads or 1)  # fmt: skip
        except KeyboardInterrupt:
            console.print("stopped")


def read_template(path: Path | None) -> str | None:
    """The text of a --chat-template file."""
    if path is None:
        return None
    from onnxformer.runtime.errors import ConfigError

    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"--chat-template {path}: cannot read it as UTF-8 text ({error})") from None


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
