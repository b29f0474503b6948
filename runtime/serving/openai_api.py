"""The OpenAI API on an export, so every OpenAI client, agent framework and chat UI works against it:

    GET  /v1/models               the one model served, named by `--model-name` (default: the folder's name)
    POST /v1/embeddings           an encoder export: input (a string or a list), encoding_format float|base64
    POST /v1/completions          a decoder export: prompt (a string or a list), max_tokens, temperature, ...
    POST /v1/chat/completions     a decoder export with a chat template: messages rendered by the template

Both generation routes take max_tokens (chat also max_completion_tokens), temperature, top_p, seed, stop
(a string or up to 4), n = 1, stream (server-sent events in the OpenAI chunk format, ending with
`data: [DONE]`; `stream_options.include_usage` adds the usage chunk), and top_k as vLLM does. Unset
options take the export's generation defaults. Every answer carries `usage` with the real token counts;
finish_reason is "stop" (a stop token or string) or "length". Fields that would change the output and
that are not built (logit_bias, penalties, logprobs, tools, n > 1) are refused by name rather than
ignored; `user` is accepted and ignored. Errors have OpenAI's shape:
{"error": {"message", "type", "param", "code"}}.
"""

import base64
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxformer.runtime.errors import InputError, OnnxformerError
from onnxformer.runtime.generation_options import GenerationOptions
from onnxformer.runtime.generator import TextGenerator, Update
from onnxformer.runtime.serving.checks import Limits, RequestError, number
from onnxformer.runtime.serving.engine import Generated, TimedOut

# Fields that change the output and are not built, with the values that mean "off".
NEUTRAL: dict[str, Callable[[Any], bool]] = {
    "n": lambda v: v == 1,
    "best_of": lambda v: v == 1,
    "echo": lambda v: v is False,
    "suffix": lambda v: v in ("",),
    "logprobs": lambda v: v is False,
    "top_logprobs": lambda v: v == 0,
    "logit_bias": lambda v: v == {},
    "presence_penalty": lambda v: v == 0,
    "frequency_penalty": lambda v: v == 0,
    "tools": lambda v: v == [],
    "functions": lambda v: v == [],
    "tool_choice": lambda v: v == "none",
    "response_format": lambda v: v == {"type": "text"},
}
IGNORED = ("user", "parallel_tool_calls", "metadata", "store", "service_tier")
SAMPLING = ("temperature", "top_p", "top_k", "seed", "stop", "stream", "stream_options", "model")
FIELDS = {
    "completions": {"prompt", "max_tokens", *SAMPLING},
    "chat": {"messages", "max_tokens", "max_completion_tokens", "add_generation_prompt", *SAMPLING},
    "embeddings": {"input", "encoding_format", "dimensions", "model"},
}


@dataclass(frozen=True)
class GenerationRequest:
    """A checked /v1/completions or /v1/chat/completions body."""

    options: GenerationOptions
    stream: bool = False
    include_usage: bool = False
    prompts: list[str] = field(default_factory=list)  # completions
    messages: list[dict[str, Any]] = field(default_factory=list)  # chat
    add_generation_prompt: bool = True


def error_body(error: RequestError) -> dict[str, Any]:
    """OpenAI's error shape."""
    kind = "invalid_request_error" if error.status < 500 else "server_error"
    code = {404: "model_not_found", 413: "request_too_large", 503: "overloaded", 504: "timeout"}.get(
        error.status
    )
    return {"error": {"message": error.message, "type": kind, "param": error.field, "code": code}}


def parse_json(body: bytes, route: str, limits: Limits, model_name: str) -> dict[str, Any]:
    """The body as a dict, refused when it is not JSON, names an unknown field, sets one that is not built,
    or asks for another model."""
    if len(body) > limits.max_body_bytes:
        raise RequestError(413, None, f"the body is over {limits.max_body_bytes} bytes; send less")
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RequestError(400, None, f"the body is not JSON ({error}); send a JSON object") from None
    if not isinstance(data, dict):
        raise RequestError(400, None, "the body must be a JSON object")
    for name, value in data.items():
        if value is None or name in IGNORED or name in FIELDS[route]:
            continue
        if name in NEUTRAL:
            if not NEUTRAL[name](value):
                raise RequestError(400, name, f"{name}={json.dumps(value)} is not supported by this server")
            continue
        raise RequestError(400, name, f"unknown field {name!r}; this route takes {sorted(FIELDS[route])}")
    model = data.get("model")
    if not isinstance(model, str):
        raise RequestError(400, "model", f'give the model\'s name: "model": "{model_name}" (GET /v1/models)')
    if model != model_name:
        raise RequestError(
            404, "model", f"the model {model!r} does not exist; this server serves {model_name!r}"
        )
    return data


def generation_request(data: dict[str, Any], route: str, limits: Limits) -> GenerationRequest:
    """The options and texts of a checked completions or chat body."""
    options: dict[str, Any] = {}
    tokens_field = "max_completion_tokens" if data.get("max_completion_tokens") is not None else "max_tokens"
    if data.get(tokens_field) is not None:
        options["max_new_tokens"] = int(
            number(tokens_field, data[tokens_field], "int", 1, limits.max_new_tokens)
        )
    if data.get("temperature") is not None:
        options["temperature"] = number("temperature", data["temperature"], "float", 0, 2)
    if data.get("top_p") is not None:
        options["top_p"] = number("top_p", data["top_p"], "float", 0, 1)
        if options["top_p"] == 0:
            raise RequestError(400, "top_p", "must be above 0 (1 keeps every token)")
    if data.get("top_k") is not None:
        options["top_k"] = int(number("top_k", data["top_k"], "int", -1, 2**31))
        options["top_k"] = max(options["top_k"], 0)  # vLLM's -1 (and 0): every token
    if data.get("seed") is not None:
        options["seed"] = int(number("seed", data["seed"], "int", 0, 2**63 - 1))
    stop = data.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
            raise RequestError(400, "stop", "must be a non-empty string or a list of up to 4 of them")
        options["stop"] = tuple(stops)
    stream = data.get("stream") or False
    if not isinstance(stream, bool):
        raise RequestError(400, "stream", f"must be true or false, got {stream!r}")
    stream_options = data.get("stream_options") or {}
    if not isinstance(stream_options, dict) or set(stream_options) - {"include_usage"}:
        raise RequestError(400, "stream_options", 'takes only {"include_usage": true|false}')
    include_usage = stream_options.get("include_usage") is True
    try:
        checked = GenerationOptions(**options)
    except InputError as error:
        raise RequestError(400, error.field, str(error)) from None
    if route == "chat":
        add = data.get("add_generation_prompt", True)
        if not isinstance(add, bool):
            raise RequestError(400, "add_generation_prompt", f"must be true or false, got {add!r}")
        if "messages" not in data:
            raise RequestError(
                400, "messages", 'missing; send {"messages": [{"role": "user", "content": "..."}]}'
            )
        return GenerationRequest(
            checked, stream, include_usage, messages=data["messages"], add_generation_prompt=add
        )
    prompt = data.get("prompt")
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise RequestError(
            400, "prompt", "must be a string or a non-empty list of strings (token-id prompts are not taken)"
        )
    if len(prompts) > limits.max_texts:
        raise RequestError(413, "prompt", f"{len(prompts)} prompts; at most {limits.max_texts} per request")
    if stream and len(prompts) > 1:
        raise RequestError(400, "prompt", "streaming takes one prompt; send the others as their own requests")
    return GenerationRequest(checked, stream, include_usage, prompts=prompts)


def embedding_inputs(data: dict[str, Any], limits: Limits, width: int) -> tuple[list[str], str]:
    """The texts and encoding of a checked /v1/embeddings body."""
    value = data.get("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise RequestError(
            400,
            "input",
            "must be a string or a non-empty list of strings; token-id inputs are not taken (they would be "
            "another tokenizer's ids: with LangChain set check_embedding_ctx_length=False)",
        )
    if len(texts) > limits.max_texts:
        raise RequestError(413, "input", f"{len(texts)} inputs; at most {limits.max_texts} per request")
    encoding = data.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise RequestError(400, "encoding_format", f"must be float or base64, got {encoding!r}")
    dimensions = data.get("dimensions")
    if dimensions is not None and dimensions != width:
        raise RequestError(
            400, "dimensions", f"this model gives {width}-dimensional embeddings and cannot shorten them"
        )
    return texts, encoding


def embeddings_body(vectors: np.ndarray, encoding: str, model: str, prompt_tokens: int) -> dict[str, Any]:
    data = []
    for index, vector in enumerate(vectors):  # (D,)
        values: Any = (
            base64.b64encode(vector.astype("<f4").tobytes()).decode()
            if encoding == "base64"
            else [float(x) for x in vector]
        )
        data.append({"object": "embedding", "index": index, "embedding": values})
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}


def completion_id(route: str) -> str:
    return ("chatcmpl-" if route == "chat" else "cmpl-") + uuid.uuid4().hex


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_body(route: str, model: str, results: list[Generated]) -> dict[str, Any]:
    choices = []
    for index, result in enumerate(results):
        choice: dict[str, Any] = {"index": index, "finish_reason": result.finish_reason, "logprobs": None}
        if route == "chat":
            choice["message"] = {"role": "assistant", "content": result.text}
        else:
            choice["text"] = result.text
        choices.append(choice)
    return {
        "id": completion_id(route),
        "object": "chat.completion" if route == "chat" else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage(sum(r.prompt_tokens for r in results), sum(r.completion_tokens for r in results)),
    }


async def chunks(
    route: str, model: str, prompt_tokens: int, updates: AsyncIterator[Update], include_usage: bool
) -> AsyncIterator[bytes]:
    """The server-sent events of one streamed generation in OpenAI's chunk format, then [DONE]."""
    ident, created = completion_id(route), int(time.time())
    kind = "chat.completion.chunk" if route == "chat" else "text_completion"

    def chunk(text: str | None, finish: str | None, *, first: bool = False) -> bytes:
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
        if route == "chat":
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if text:
                delta["content"] = text
            choice["delta"] = delta
        else:
            choice["text"] = text or ""
        return event({"id": ident, "object": kind, "created": created, "model": model, "choices": [choice]})

    if route == "chat":
        yield chunk(None, None, first=True)
    generated = Generated(prompt_tokens)
    try:
        async for update in updates:
            generated.add(update)
            if update.text:
                yield chunk(update.text, None)
    except OnnxformerError as error:  # the time limit, or the model failing half way: said, then [DONE]
        status = 504 if isinstance(error, TimedOut) else 500
        yield event(error_body(RequestError(status, None, str(error))))
        yield b"data: [DONE]\n\n"
        return
    yield chunk(None, generated.finish_reason)
    if include_usage:
        yield event(
            {
                "id": ident,
                "object": kind,
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage(prompt_tokens, generated.completion_tokens),
            }
        )
    yield b"data: [DONE]\n\n"


def event(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def generator_of(model: object, route: str) -> TextGenerator:
    if not isinstance(model, TextGenerator):
        raise RequestError(
            400,
            None,
            f"this server runs an export that does not generate; /v1/{route} needs a decoder export",
        )
    return model
