"""Checking a request before the model runs: the bounds on one request (`Limits`), the port, and the body
of the task routes (/embed, /generate, /seq2seq): its size, JSON, known fields of the right types, the
number of texts and max_new_tokens within `Limits`. A failure is a `RequestError` naming the field."""

import json
import math
from dataclasses import dataclass
from typing import Any

from onnxformer.runtime.errors import ConfigError, InputError
from onnxformer.runtime.generation_options import KINDS, OPTIONS, GenerationOptions
from onnxformer.runtime.serving.tasks import Task


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

    def __init__(
        self, status: int, field: str | None, message: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.message = message
        self.retry_after = retry_after  # seconds, for a 503

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}

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
    return number(name, value, kind, low, high)


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


def number(name: str, value: Any, kind: str, low: float | None, high: float | None) -> int | float:
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "int" and not (numeric and float(value).is_integer()):
        raise RequestError(422, name, f"must be an integer, got {value!r}")
    if not numeric or not math.isfinite(value):
        raise RequestError(422, name, f"must be a number, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"at most {high}" if low is None else None
        raise RequestError(422, name, f"must be {bounds or f'between {low} and {high}'}, got {value!r}")
    return int(value) if kind == "int" else float(value)
