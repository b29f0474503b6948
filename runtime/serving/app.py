"""The HTTP/JSON server of one export folder: an ASGI application (Starlette), served by uvicorn on one
machine (`serve_local`) or, unchanged, by Ray Serve replicas (`onnxformer.runtime.serving.ray_serve`).

    GET  /health               {"status": "ok"}
    GET  /info                 family, task, config, generation defaults, limits (from the manifest)
    POST /embed                {"texts": [...], "truncate": false}  -> {"embeddings": [[...], ...]}
    POST /generate             {"texts": [...], "max_new_tokens": 20, "temperature": 0, "stop": [...]}
                                                                    -> {"generations": [...]}
                               {"texts": ["one"], "stream": true}   -> server-sent events, one per piece
    POST /seq2seq              {"texts": [...], "num_beams": 3}     -> {"outputs": [...]}

An export serves the one task of its class (`tasks.TASKS`); the other task endpoints answer 404 naming the
right one. The fields besides "texts" (and "stream") are the `GenerationOptions` fields of the task, with
their types and ranges. Every request is checked before the model runs: the body's size, JSON, known
fields of the right types, the number of texts and max_new_tokens within `Limits`; a failure is a 4xx
whose JSON names the field: {"error": {"field": "texts", "message": "..."}}. The runtime's own refusals
(InputError) carry the field they are about, which the answer reports. The model runs in a worker thread
(the runtime is thread-safe and keeps no per-call state), so concurrent requests give what sequential
ones give.
"""

import contextlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, is_dataclass
from typing import TYPE_CHECKING, Any

from onnxformer.runtime.errors import ConfigError, InputError, OnnxformerError
from onnxformer.runtime.generation_options import DEFAULTS, KINDS, OPTIONS, GenerationOptions
from onnxformer.runtime.serving.tasks import Model, Task, require, task_for

if TYPE_CHECKING:
    from starlette.applications import Starlette

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """Bounds on one request, so that no request can take unbounded memory or time."""

    max_body_bytes: int = 1 << 20  # 1 MiB
    max_texts: int = 64  # texts per request
    max_text_chars: int = 4096  # characters per text (the model's context is checked after tokenizing)
    max_new_tokens: int = 256
    max_beams: int = 8


def check_port(port: object) -> int:
    """A TCP port to listen on, 1 .. 65535 (a bigger number would wrap around to another port)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(
            f"port must be an integer from 1 to 65535, got {port!r}; choose a free port, e.g. 8000"
        )
    return port


class RequestError(Exception):
    """A request the server refuses: its HTTP status, the field at fault (None: the whole body)."""

    def __init__(self, status: int, field: str | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"error": {"field": self.field, "message": self.message}}


def _server_bounds(limits: Limits) -> dict[str, tuple[float, float]]:
    """Bounds the server sets on top of the options' own ranges: what one request may cost, and seeds
    that fit an int64."""
    return {
        "max_new_tokens": (1, limits.max_new_tokens),
        "num_beams": (1, limits.max_beams),
        "seed": (0, 2**63 - 1),
    }


def parse_request(body: bytes, task: Task, limits: Limits) -> tuple[list[str], GenerationOptions, bool]:
    """The texts, options and stream flag of a request body, or a RequestError naming what is wrong."""
    if len(body) > limits.max_body_bytes:
        raise RequestError(413, None, f"the body is over {limits.max_body_bytes} bytes; send fewer texts")
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RequestError(400, None, f"the body is not JSON ({error}); send a JSON object") from None
    if not isinstance(data, dict):
        raise RequestError(400, None, 'the body must be a JSON object such as {"texts": ["..."]}')
    allowed = {"texts", *task.options, *(("stream",) if task.stream else ())}
    unknown = sorted(set(data) - allowed)
    if unknown:
        name = unknown[0]
        why = f": not an option of {task.name} ({OPTIONS[name].why_not})" if name in OPTIONS else ""
        raise RequestError(422, name, f"unknown field {name!r}{why}; /{task.name} takes {sorted(allowed)}")
    if "texts" not in data:
        raise RequestError(422, "texts", 'missing; send {"texts": ["..."]}')
    texts = _strings("texts", data["texts"], limits, at_least_one=True)
    bounds = _server_bounds(limits)
    options = {}
    for name in sorted(set(data) & set(task.options)):
        if data[name] is not None:  # null: the default
            options[name] = _option(name, data[name], limits, bounds)
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(422, "stream", f"must be true or false, got {stream!r}")
    if stream and len(texts) != 1:
        raise RequestError(422, "texts", f"streaming takes exactly one text, got {len(texts)}")
    try:
        return texts, GenerationOptions(**options), stream
    except InputError as error:  # a value outside its range (top_p 0), or options that do not go together
        raise RequestError(422, error.field, str(error)) from None


def _option(name: str, value: Any, limits: Limits, bounds: dict[str, tuple[float, float]]) -> Any:
    """One option's JSON value as its GenerationOptions field takes it, or a RequestError."""
    kind, _ = KINDS[name]
    if kind == "strings":
        return tuple(_strings(name, value, limits, at_least_one=False))
    if kind == "ints":
        items = _list(name, value, limits)
        for index, item in enumerate(items):
            if isinstance(item, bool) or not isinstance(item, int):
                raise RequestError(422, f"{name}[{index}]", f"must be an integer, got {item!r}")
        return tuple(items)
    if kind == "bool":
        if not isinstance(value, bool):
            raise RequestError(422, name, f"must be true or false, got {value!r}")
        return value
    low, high = bounds.get(name, (OPTIONS[name].low, OPTIONS[name].high))
    return _number(name, value, kind, low, high)


def _list(name: str, value: Any, limits: Limits) -> list[Any]:
    if not isinstance(value, list):
        raise RequestError(422, name, f"must be a list, got {type(value).__name__}")
    if len(value) > limits.max_texts:
        raise RequestError(413, name, f"{len(value)} items; at most {limits.max_texts} per request")
    return value


def _strings(name: str, value: Any, limits: Limits, *, at_least_one: bool) -> list[str]:
    if not isinstance(value, list):
        raise RequestError(422, name, f"must be a list of strings, got {type(value).__name__}")
    if at_least_one and not value:
        raise RequestError(422, name, "give at least one text")
    _list(name, value, limits)
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise RequestError(422, f"{name}[{index}]", f"must be a string, got {type(item).__name__}")
        if len(item) > limits.max_text_chars:
            raise RequestError(
                413, f"{name}[{index}]", f"{len(item)} characters; at most {limits.max_text_chars}"
            )
    return value


def _number(name: str, value: Any, kind: str, low: float | None, high: float | None) -> int | float:
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "int" and not (numeric and float(value).is_integer()):
        raise RequestError(422, name, f"must be an integer, got {value!r}")
    if not numeric or not math.isfinite(value):
        raise RequestError(422, name, f"must be a number, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"at most {high}" if low is None else None
        raise RequestError(422, name, f"must be {bounds or f'between {low} and {high}'}, got {value!r}")
    return int(value) if kind == "int" else float(value)


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


def create_app(model: Model, *, limits: Limits | None = None) -> "Starlette":
    """The ASGI application serving `model` (from `onnxformer.runtime.load`)."""
    require("starlette", "serve")
    from starlette.applications import Starlette
    from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    limits = limits or Limits()
    task = task_for(model)
    info = model_info(model, limits)

    def refuse(error: RequestError) -> JSONResponse:
        return JSONResponse(error.body(), status_code=error.status)

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
            raise RequestError(413, None, f"the body is over {limits.max_body_bytes} bytes; send fewer texts")
        body = bytearray()
        async for piece in request.stream():
            body += piece
            if len(body) > limits.max_body_bytes:
                raise RequestError(
                    413, None, f"the body is over {limits.max_body_bytes} bytes; send fewer texts"
                )
        return bytes(body)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "task": task.name})

    async def describe(request: Request) -> Response:
        return JSONResponse(info)

    async def run(request: Request) -> Response:
        name = request.url.path.strip("/")
        if name != task.name:
            return refuse(
                RequestError(404, None, f"this server runs a {info['family']} export; POST /{task.name}")
            )
        try:
            texts, options, stream = parse_request(await read_body(request), task, limits)
            if stream:
                assert task.stream is not None  # parse_request takes "stream" only for a task that streams
                pieces = await run_in_threadpool(task.stream, model, texts[0], options)  # checks first
                return StreamingResponse(
                    _events(iterate_in_threadpool(pieces)), media_type="text/event-stream"
                )
            values = await run_in_threadpool(task, model, texts, options)
        except RequestError as error:
            return refuse(error)
        except InputError as error:
            # The runtime names the option or text at fault; an error naming neither is about the texts
            # (the tokenizer's length guard, which sees one text at a time).
            return refuse(RequestError(422, error.field or "texts", str(error)))
        except OnnxformerError as error:
            log.exception("inference failed")
            return JSONResponse({"error": {"field": None, "message": str(error)}}, status_code=500)
        payload = values.tolist() if hasattr(values, "tolist") else list(values)
        return JSONResponse({f"{task.output}s": payload})

    async def http_error(request: Request, error: Exception) -> Response:
        status = getattr(error, "status_code", 500)
        detail = getattr(error, "detail", "error")
        if status == 404:
            detail = f"no such endpoint {request.url.path}; the endpoints are /health, /info and /{task.name}"
        return JSONResponse({"error": {"field": None, "message": detail}}, status_code=status)

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/info", describe, methods=["GET"]),
        *(Route(f"/{name}", run, methods=["POST"]) for name in ("embed", "generate", "seq2seq")),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


async def _events(pieces: AsyncIterator[str]) -> AsyncIterator[bytes]:
    """Server-sent events: one `data:` per piece, then `event: done` with the whole text (or `event:
    error` if the model fails half way)."""
    text = ""
    try:
        async for piece in pieces:
            text += piece
            yield _event("message", {"text": piece})
    except OnnxformerError as error:
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
    limits: Limits | None = None,
    threads: int | None = None,
    log_level: str = "info",
) -> None:
    """Serve the folder with uvicorn until interrupted."""
    check_port(port)
    require("starlette", "serve")
    require("uvicorn", "serve")
    import uvicorn

    from onnxformer.runtime.loader import load

    app = create_app(load(folder, threads=threads), limits=limits)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


@contextlib.contextmanager
def background_server(app: Any, *, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `app` with uvicorn in a thread (port 0: any free one) and yield its base URL; stops on exit.
    For tests, benchmarks and notebooks; `serve_local` is the command's foreground server."""
    require("uvicorn", "serve")
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off"))
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
