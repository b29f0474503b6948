"""The HTTP/JSON server of one export folder: an ASGI application (Starlette), served by uvicorn on one
machine (`serve_local`) or, unchanged, by Ray Serve replicas (`onnxformer.runtime.serving.ray_serve`).

    GET  /health               {"status": "ok"}
    GET  /info                 family, task, config, generation defaults, limits (from the manifest)
    POST /embed                {"texts": [...], "truncate": false}  -> {"embeddings": [[...], ...]}
    POST /generate             {"texts": [...], "max_new_tokens": 20, "temperature": 0, "stop": [...]}
                                                                    -> {"generations": [...]}
                               {"texts": ["one"], "stream": true}   -> server-sent events, one per piece
    POST /seq2seq              {"texts": [...], "num_beams": 3}     -> {"outputs": [...]}
    GET  /metrics              Prometheus text format (`metrics.py`)
    /v1/models, /v1/embeddings, /v1/completions, /v1/chat/completions: the OpenAI API (`openai_api.py`)

An export serves the one task of its class (`tasks.TASKS`); the other task endpoints answer 404 naming the
right one. The fields besides "texts" (and "stream") are the `GenerationOptions` fields of the task, with
their types and ranges. Every request is checked before the model runs: the body's size, JSON, known
fields of the right types, the number of texts and max_new_tokens within `Limits`; a failure is a 4xx
whose JSON names the field: {"error": {"field": "texts", "message": "..."}}. The runtime's own refusals
(InputError) carry the field they are about, which the answer reports. Checked requests go to the
engine (`engine.py`), whose worker threads run concurrent requests as batches (`scheduler.py`): a full
queue answers 503 with Retry-After, a request past its time limit 504, and a client that disconnects
cancels its work.
"""

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from onnxformer.runtime.encoder import TextEncoder
from onnxformer.runtime.errors import InputError, OnnxformerError
from onnxformer.runtime.generation_options import DEFAULTS, OPTIONS, GenerationOptions
from onnxformer.runtime.generator import TextGenerator, Update
from onnxformer.runtime.seq2seq import TextToText
from onnxformer.runtime.serving.checks import Limits, RequestError, check_port, parse_request
from onnxformer.runtime.serving.engine import Engine, TimedOut
from onnxformer.runtime.serving.http import ClientGone, all_of, read_body, request_error, until_disconnected
from onnxformer.runtime.serving.metrics import Measured, Metrics
from onnxformer.runtime.serving.openai_api import error_body
from onnxformer.runtime.serving.scheduler import BatchSettings, Overloaded
from onnxformer.runtime.serving.tasks import Model, require, task_for

if TYPE_CHECKING:
    from starlette.applications import Starlette

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["Limits", "RequestError", "ServerOptions", "check_port", "create_app", "serve_local"]


def model_info(model: Model, limits: Limits) -> dict[str, Any]:
    """What GET /info answers: the manifest's description of the model and this server's limits."""
    manifest = model.export.manifest
    task = task_for(model)
    return {
        "family": str(manifest.family),
        "task": task.name,
        "endpoint": f"/{task.name}",
        "output": task.output,
        "config": _plain(manifest.config),
        "generation": _plain(manifest.generation),
        # The fields the endpoint takes besides "texts": null takes the export's default (`generation`).
        "options": {name: {"help": OPTIONS[name].help, "default": DEFAULTS[name]} for name in task.options},
        "special_tokens": _plain(manifest.special_tokens),
        "format_version": manifest.format_version,
        "opset": manifest.opset,
        "versions": _plain(manifest.versions),
        "provider": model.provider,
        "limits": asdict(limits),
    }


def _plain(value: Any) -> Any:
    """Manifest values as JSON (dataclasses as dicts)."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return json.loads(json.dumps(value, default=str))


@dataclass(frozen=True)
class ServerOptions:
    """What `create_app` serves besides the model: request bounds, batching, the OpenAI model name and a
    chat template for an export that has none."""

    limits: Limits = field(default_factory=Limits)
    batching: BatchSettings = field(default_factory=BatchSettings)
    model_name: str | None = None  # the OpenAI "model" (default: the export folder's name)
    chat_template: str | None = None  # replaces the export's (manifest extra.chat_template)
    metrics: bool = True  # GET /metrics (needs prometheus_client, in the serve extra)


def create_app(
    model: Model, *, limits: Limits | None = None, options: ServerOptions | None = None
) -> "Starlette":
    """The ASGI application serving `model` (from `onnxformer.runtime.load`): the task route, the OpenAI
    routes and /metrics, with concurrent requests batched (`options.batching`)."""
    require("starlette", "serve")
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    from onnxformer.runtime.serving.openai_routes import OpenAIRoutes

    options = options or ServerOptions()
    if limits is not None:
        options = replace(options, limits=limits)
    limits = options.limits
    task = task_for(model)
    metrics = Metrics() if options.metrics else None
    engine = Engine(model, options.batching, metrics)
    info = model_info(model, limits)
    openai = OpenAIRoutes(engine, options, info)

    def refuse(error: RequestError) -> JSONResponse:
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers())

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "task": task.name})

    async def describe(request: Request) -> Response:
        return JSONResponse(info)

    async def exposition(request: Request) -> Response:
        if metrics is None:
            return refuse(RequestError(404, None, "metrics are off on this server"))
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    async def run(request: Request) -> Response:
        name = request.url.path.strip("/")
        if name != task.name:
            return refuse(
                RequestError(404, None, f"this server runs a {info['family']} export; POST /{task.name}")
            )
        try:
            texts, generation, stream = parse_request(await read_body(request, limits), task, limits)
            task.check(generation)
            if stream:
                assert isinstance(model, TextGenerator)  # parse_request takes "stream" for generation only
                row = model.frame(texts[0], what="prompt")
                updates = engine.updates(engine.start(row, generation))
                return StreamingResponse(_events(updates), media_type="text/event-stream")
            values = await until_disconnected(request, _run_task(engine, texts, generation))
        except RequestError as error:
            return refuse(error)
        except (InputError, Overloaded, TimedOut) as error:
            # The runtime names the option or text at fault; an error naming neither is about the texts
            # (the tokenizer's length guard, which sees one text at a time).
            return refuse(request_error(error, field="texts"))
        except ClientGone:
            return Response(status_code=499)
        except OnnxformerError as error:
            log.exception("inference failed")
            return JSONResponse({"error": {"field": None, "message": str(error)}}, status_code=500)
        payload = values.tolist() if hasattr(values, "tolist") else list(values)
        return JSONResponse({f"{task.output}s": payload})

    async def http_error(request: Request, error: Exception) -> Response:
        status = getattr(error, "status_code", 500)
        detail = getattr(error, "detail", "error")
        if status == 404:
            detail = (
                f"no such endpoint {request.url.path}; the endpoints are /health, /info, /metrics, "
                f"/{task.name} and {', '.join(openai.paths)}"
            )
        if request.url.path.startswith("/v1/"):
            return JSONResponse(error_body(RequestError(status, None, detail)), status_code=status)
        return JSONResponse({"error": {"field": None, "message": detail}}, status_code=status)

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/info", describe, methods=["GET"]),
        Route("/metrics", exposition, methods=["GET"]),
        *(Route(f"/{name}", run, methods=["POST"]) for name in ("embed", "generate", "seq2seq")),
        *openai.routes(),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(engine.stop)  # the requests in flight are answered first (uvicorn drains)

    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan)
    app.state.engine = engine
    if metrics is None:
        return app
    paths = frozenset(route.path for route in routes)
    return Measured(app, metrics, paths)  # type: ignore[return-value]  # an ASGI app like Starlette's


async def _run_task(engine: Engine, texts: list[str], generation: GenerationOptions) -> Any:
    """The task route's answer: embeddings, or each text's generation (one job each, so they batch)."""
    model = engine.model
    if isinstance(model, TextEncoder):
        return await engine.embed(model.frame_texts(texts, truncate=generation.truncate))
    if isinstance(model, TextGenerator):
        rows = model.frame_all(texts, what="prompt")
        return [done.text for done in await all_of([engine.complete(row, generation) for row in rows])]
    assert isinstance(model, TextToText)
    model.frame_all(texts, what="text")  # each text checked alone, before it shares a batch
    return await engine.transform(texts, generation)


async def _events(updates: AsyncGenerator[Update, None]) -> AsyncIterator[bytes]:
    """Server-sent events: one `data:` per piece, then `event: done` with the whole text (or `event:
    error` if the model fails half way, or the server is busy)."""
    text = ""
    try:
        async with contextlib.aclosing(updates):
            async for update in updates:
                if update.text:
                    text += update.text
                    yield _event("message", {"text": update.text})
    except (OnnxformerError, Overloaded) as error:
        yield _event("error", {"error": {"field": None, "message": str(error)}})
        return
    yield _event("done", {"text": text})


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def serve_local(
    folder: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    options: ServerOptions | None = None,
    threads: int | None = None,
    log_level: str = "info",
) -> None:
    """Serve the folder with uvicorn until interrupted. SIGTERM (or Ctrl-C) drains: the listening socket
    closes at once, so new connections are refused, and the requests in flight are answered before the
    process exits."""
    check_port(port)
    require("starlette", "serve")
    require("uvicorn", "serve")
    import uvicorn

    from onnxformer.runtime.loader import load

    options = options or ServerOptions()
    if options.model_name is None:
        options = replace(options, model_name=os.path.basename(os.path.abspath(folder)))
    app = create_app(load(folder, threads=threads), options=options)
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=None)


@contextlib.contextmanager
def background_server(app: Any, *, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `app` with uvicorn in a thread (port 0: any free one) and yield its base URL; stops on exit.
    For tests, benchmarks and notebooks; `serve_local` is the command's foreground server."""
    require("uvicorn", "serve")
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="onnxformer-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise OnnxformerError(f"the server did not start on {host}:{port}")
        time.sleep(0.01)
    (socket,) = server.servers[0].sockets
    try:
        yield f"http://{host}:{socket.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def read_events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Parse a server-sent event stream into (event, data) pairs (for clients and tests)."""
    kind = "message"
    data: list[str] = []
    for line in lines:
        line = line.rstrip("\r\n")
        if not line:
            if data:
                yield kind, json.loads("\n".join(data))
            kind, data = "message", []
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
