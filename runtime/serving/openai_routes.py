"""The handlers of the OpenAI routes (`openai_api.py` holds the request and answer shapes): each checks
its body alone, then runs through the engine's batcher like the task routes."""

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from onnxformer.runtime.encoder import TextEncoder
from onnxformer.runtime.errors import ConfigError, InputError, OnnxformerError
from onnxformer.runtime.generator import TextGenerator
from onnxformer.runtime.serving import openai_api as api
from onnxformer.runtime.serving.checks import RequestError
from onnxformer.runtime.serving.engine import Engine, TimedOut
from onnxformer.runtime.serving.http import ClientGone, all_of, read_body, request_error, until_disconnected
from onnxformer.runtime.serving.scheduler import Overloaded

T = TypeVar("T")
log = logging.getLogger(__name__)
# The field that holds the texts of each route, which an error about a text names.
INPUT = {"embeddings": "input", "completions": "prompt", "chat": "messages"}
PATHS = ("/v1/models", "/v1/embeddings", "/v1/completions", "/v1/chat/completions")


class OpenAIRoutes:
    """The OpenAI routes of one served model."""

    paths = PATHS

    def __init__(self, engine: Engine, options: Any, info: dict[str, Any]) -> None:
        self.engine, self.limits = engine, options.limits
        self.name: str = options.model_name or info["family"]
        self.created = int(time.time())
        self.chat, self.no_chat = self._template(options.chat_template)

    def _template(self, override: str | None) -> tuple[Any, str]:
        """The chat template to render with, or why chat is refused."""
        model = self.engine.model
        if not isinstance(model, TextGenerator):
            return None, "this export does not generate; chat needs a decoder export"
        from onnxformer.runtime.conversation import model_template

        try:
            return model_template(model, override), ""
        except ConfigError as error:  # no template, jinja2 missing, or a template that does not compile
            return None, str(error)

    def routes(self) -> list[Any]:
        from starlette.routing import Route

        return [
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{name:path}", self.model, methods=["GET"]),
            Route("/v1/embeddings", self._handler("embeddings", self.embeddings), methods=["POST"]),
            Route("/v1/completions", self._handler("completions", self.completions), methods=["POST"]),
            Route("/v1/chat/completions", self._handler("chat", self.completions), methods=["POST"]),
        ]

    def _card(self) -> dict[str, Any]:
        return {"id": self.name, "object": "model", "created": self.created, "owned_by": "onnxformer"}

    async def models(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({"object": "list", "data": [self._card()]})

    async def model(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        name = request.path_params["name"]
        if name != self.name:
            error = RequestError(
                404, "model", f"the model {name!r} does not exist; this server serves {self.name!r}"
            )
            return JSONResponse(api.error_body(error), status_code=404)
        return JSONResponse(self._card())

    def _handler(self, route: str, run: Callable[..., Any]) -> Callable[[Any], Any]:
        """A route's handler: read and check the body, run, and answer every failure in OpenAI's shape."""
        from starlette.responses import JSONResponse, Response

        async def handle(request: Any) -> Any:
            try:
                data = api.parse_json(await read_body(request, self.limits), route, self.limits, self.name)
                return await run(request, route, data)
            except RequestError as error:
                failure = error
            except (InputError, Overloaded, TimedOut) as error:
                failure = request_error(error, field=None)
            except ClientGone:
                return Response(status_code=499)
            except OnnxformerError as error:  # the model failed: said in OpenAI's shape, not a bare 500
                log.exception("inference failed")
                failure = RequestError(500, None, str(error))
            if failure.status == 422:  # OpenAI answers any bad input 400, naming its own field
                failure.status = 400
                if failure.field is None or failure.field.startswith("texts"):
                    failure.field = INPUT[route]
            return JSONResponse(
                api.error_body(failure), status_code=failure.status, headers=failure.headers()
            )

        return handle

    async def embeddings(self, request: Any, route: str, data: dict[str, Any]) -> Any:
        from starlette.responses import JSONResponse

        model = self.engine.model
        if not isinstance(model, TextEncoder):
            raise RequestError(
                400, None, "this export does not embed; /v1/embeddings needs an encoder export"
            )
        texts, encoding = api.embedding_inputs(data, self.limits, model.dim)
        rows = model.frame_texts(texts, truncate=True)  # as OpenAI's and sentence-transformers' defaults
        vectors = await until_disconnected(request, self.engine.embed(rows))
        tokens = sum(len(row) for row in rows)
        return JSONResponse(api.embeddings_body(vectors, encoding, self.name, tokens))

    async def completions(self, request: Any, route: str, data: dict[str, Any]) -> Any:
        from starlette.responses import JSONResponse, StreamingResponse

        model = api.generator_of(self.engine.model, "chat/completions" if route == "chat" else "completions")
        asked = api.generation_request(data, route, self.limits)
        if route == "chat":
            if self.chat is None:
                raise RequestError(400, "messages", self.no_chat)
            from onnxformer.runtime.chat import check_messages

            text = self.chat.render(
                check_messages(asked.messages), add_generation_prompt=asked.add_generation_prompt
            )
            rows = [model.frame_chat(text)]
        else:
            rows = model.frame_all(asked.prompts, what="prompt")
        if asked.stream:
            job = self.engine.start(rows[0], asked.options)  # refusals (busy, bad input) before the 200
            events = api.chunks(route, self.name, len(rows[0]), self.engine.updates(job), asked.include_usage)
            return StreamingResponse(events, media_type="text/event-stream")
        results = await until_disconnected(
            request, all_of([self.engine.complete(row, asked.options) for row in rows])
        )
        return JSONResponse(api.completion_body(route, self.name, list(results)))
