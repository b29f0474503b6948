"""What the routes share over HTTP: reading a bounded body, mapping the engine's errors to statuses,
noticing a client that went away, and running several jobs of one request together."""

import asyncio
import contextlib
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

from onnxformer.runtime.serving.checks import Limits, RequestError
from onnxformer.runtime.serving.engine import TimedOut
from onnxformer.runtime.serving.scheduler import Overloaded

T = TypeVar("T")


class ClientGone(Exception):
    """The client closed its connection before the answer was ready."""


async def until_disconnected(request: Any, work: Awaitable[T]) -> T:
    """`work`'s result, or ClientGone (and `work` cancelled, which cancels its jobs) if the client
    disconnects first."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientGone
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()


async def read_body(request: Any, limits: Limits) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise RequestError(413, None, f"the body is over {limits.max_body_bytes} bytes; send less")
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limits.max_body_bytes:
            raise RequestError(413, None, f"the body is over {limits.max_body_bytes} bytes; send less")
    return bytes(body)


def request_error(error: Exception, *, field: str | None) -> RequestError:
    """The HTTP answer to an error from the engine: 503 (busy), 504 (too slow) or 422/400 (bad input)."""
    if isinstance(error, Overloaded):
        return RequestError(503, None, str(error), retry_after=error.retry_after)
    if isinstance(error, TimedOut):
        return RequestError(504, None, str(error))
    return RequestError(422, getattr(error, "field", None) or field, str(error))


async def all_of(work: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Every result, in order; the first failure (or a cancel) cancels the rest, so their jobs stop."""
    tasks = [asyncio.ensure_future(item) for item in work]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
