"""Chat messages -> the prompt text a chat model was trained on, through the model's own Jinja chat template,
rendered exactly as transformers' `tokenizer.apply_chat_template(messages, tokenize=False)` renders it.

    template = ChatTemplate(manifest.extra["chat_template"], manifest.extra["chat_tokens"])
    prompt = template.render(check_messages(request["messages"]), add_generation_prompt=True)

What the template sees is what transformers 5 gives it (chat_template_utils.py's `render_jinja_template`):

    messages                the conversation, each message with its None-valued keys dropped and rebuilt
                            from plain JSON types; reasoning under any of its names is copied to
                            `reasoning_content` and `thinking`
    tools, documents        None unless given (JSON schemas, documents: lists of dicts)
    add_generation_prompt   whether to open the assistant's turn after the last message
    bos_token, eos_token..  the tokenizer's special-token strings (`template_tokens`)
    any other keyword       e.g. enable_thinking=False; a keyword overrides a special token of its name

in the same sandbox: Jinja's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
loopcontrols extension ({% break %}, {% continue %}), a {% generation %} block that renders its body (the
tag marks assistant text for training masks, which serving has no use for), a `tojson` that writes UTF-8
rather than \\u escapes and HTML-safe text, and the globals raise_exception, strftime_now, dict and namespace.

Chat templates come from the Hub and are untrusted code: the sandbox refuses attribute access to Python's
internals, jinja2 older than 3.1.6 is refused (known sandbox escapes), and a namespace refuses
underscore-prefixed names. jinja2 is optional (the `serve` extra): it is imported when a template is built.
"""

import dataclasses
import importlib.metadata
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from onnxformer.runtime.errors import ConfigError, InputError

if TYPE_CHECKING:
    import jinja2
    import jinja2.parser
    import jinja2.sandbox

MIN_JINJA2 = (3, 1, 6)  # transformers' floor too: older versions have known sandbox escapes
INSTALL_HINT = 'pip install "onnxformer[serve]"'
ROLES = ("system", "developer", "user", "assistant", "tool")  # the OpenAI chat API's
# transformers' SPECIAL_TOKENS_ATTRIBUTES: the named tokens of every tokenizer's `special_tokens_map`.
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# The names a message's reasoning comes under; templates read the first (most) or `thinking` (gpt-oss).
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
# How the text parts of one OpenAI message join into the one string templates expect (vLLM joins so too).
PART_SEPARATOR = "\n"


class _TemplateRaised(Exception):
    """What the template's raise_exception(message) raises: the template refusing its input on purpose."""


class ChatTemplate:
    """One model's chat template, compiled once, rendering conversations as transformers does."""

    def __init__(self, template: str, tokens: Mapping[str, str]) -> None:
        """`template`: the Jinja source (tokenizer_config.json chat_template, chat_template.jinja). `tokens`:
        the special-token strings the template sees by name ({"bos_token": "<s>", ...}, `template_tokens`)."""
        if not isinstance(template, str):
            raise ConfigError(f"a chat template is Jinja source text, got {type(template).__name__}")
        for name, value in tokens.items():
            if not isinstance(value, str):
                raise ConfigError(
                    f"chat template token {name!r} must be a string, got {type(value).__name__}; pass the "
                    "token's text (template_tokens reads it from tokenizer_config.json)"
                )
        _check_jinja2()
        from jinja2.exceptions import SecurityError, TemplateError, TemplateSyntaxError

        try:
            self._compiled = _environment().from_string(template)
        except TemplateSyntaxError as error:
            raise ConfigError(
                f"the chat template is not valid Jinja: {error.message} (template line {error.lineno}); "
                "fix the template (chat_template.jinja or tokenizer_config.json's chat_template)"
            ) from None
        except TemplateError as error:
            raise ConfigError(f"the chat template does not compile: {error}; fix the template") from None
        self.template = template
        self.tokens = dict(tokens)
        self._security_error = SecurityError
        # what a template can raise on the messages it is given (beside raise_exception's)
        self._render_errors: tuple[type[BaseException], ...] = (
            TemplateError,
            TypeError,
            ValueError,
            LookupError,
            ArithmeticError,
            AttributeError,
            RecursionError,
        )

    def render(
        self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True, **kwargs: Any
    ) -> str:
        """The prompt text of `messages` (see `check_messages` for requests). `add_generation_prompt` opens
        the assistant's turn after the last message. Other keywords are template variables, as transformers'
        apply_chat_template passes them: tools and documents (lists of dicts), enable_thinking, ...

        InputError(field="messages") when the template refuses the conversation (raise_exception, e.g. roles
        that do not alternate) or fails on it."""
        conversation = _template_messages(messages)
        tools = _dict_list(kwargs.pop("tools", None), "tools")
        documents = _dict_list(kwargs.pop("documents", None), "documents")
        variables = _plain({**self.tokens, **kwargs})  # a keyword overrides a token, as in transformers
        try:
            return self._compiled.render(
                messages=conversation,
                tools=tools,
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                **variables,
            )
        except _TemplateRaised as error:
            raise InputError(f"the chat template refused the messages: {error}", field="messages") from None
        except self._security_error as error:
            raise InputError(
                f"the chat template tried an operation its sandbox forbids ({error}); the template is unsafe "
                "or broken: fix or replace it",
                field="messages",
            ) from None
        except self._render_errors as error:
            raise InputError(
                f"the chat template failed on these messages ({type(error).__name__}: {error}); give the "
                "roles and fields this model's template expects",
                field="messages",
            ) from None


def check_messages(messages: object) -> list[dict[str, Any]]:
    """OpenAI-style chat messages, validated, as plain dicts (copies): each has a role among `ROLES` and a
    content string; a content list of {"type": "text", "text": ...} parts is joined into one string, and an
    assistant message may have null (or no) content, as one holding only tool calls has. Other keys ("name",
    "tool_calls", "tool_call_id", ...) are kept for the template. InputError naming the field at fault."""
    if not isinstance(messages, (list, tuple)):
        raise InputError(
            f"messages must be a list of {{role, content}} objects, got {type(messages).__name__}",
            field="messages",
        )
    if not messages:
        raise InputError("messages is empty; give at least one message", field="messages")
    checked = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, Mapping):
            raise InputError(
                f"{where} must be an object with role and content, got {type(message).__name__}", field=where
            )
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:
            got = "no role" if role is None else f"role {role!r}"
            raise InputError(f"{where} has {got}; give one of {', '.join(ROLES)}", field=f"{where}.role")
        copy: dict[str, Any] = _plain(dict(message))  # rebuilt containers: the caller's stay untouched
        copy["content"] = _content_text(message.get("content"), role, f"{where}.content")
        if copy["content"] is None and "content" not in message:
            del copy["content"]
        checked.append(copy)
    return checked


def _content_text(content: object, role: str, where: str) -> str | None:
    if isinstance(content, str):
        return content
    if content is None:
        if role == "assistant":
            return None
        raise InputError(f"{where} is missing; a {role} message needs its text", field=where)
    if not isinstance(content, (list, tuple)):
        raise InputError(
            f"{where} must be a string or a list of text parts, got {type(content).__name__}", field=where
        )
    texts = []
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if not isinstance(part, Mapping) or kind != "text":
            named = f"type {kind}" if isinstance(kind, str) else "a part without a type"
            raise InputError(
                f"{at}: {named} is not supported; this model reads text (send type text parts)", field=at
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise InputError(f"{at}.text must be a string, got {type(text).__name__}", field=f"{at}.text")
        texts.append(text)
    return PART_SEPARATOR.join(texts)


def template_tokens(
    tokenizer_config: Mapping[str, Any], *, special_tokens_map: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """The special-token strings a chat template sees, from a tokenizer_config.json dict: what transformers
    5's `AutoTokenizer.from_pretrained(folder).special_tokens_map` holds, read without transformers.

    The seven named tokens (`SPECIAL_TOKENS`), each a string or an AddedToken dict ({"content": ...}), left
    out when absent or null; then the model's own named tokens (any other `*_token` key with a token value,
    e.g. Gemma 3's image_token, and `extra_special_tokens` when a dict), which transformers 5 adds to the map.
    `special_tokens_map`: a legacy special_tokens_map.json, which transformers 5 reads, over the config, only
    when the config has no `added_tokens_decoder` (transformers 4.34 to 4.x save one; older ones and 5 not).

    A tokenizer class's own defaults (Qwen2Tokenizer's eos <|endoftext|> when the config omits it) are
    transformers code, not files, and are not known here: real checkpoints name their tokens in the config."""
    declared = dict(tokenizer_config)
    if "extra_special_tokens" not in declared or not declared["extra_special_tokens"]:
        declared["extra_special_tokens"] = declared.get("additional_special_tokens")
    named = _named_tokens(declared)
    if special_tokens_map is not None and "added_tokens_decoder" not in tokenizer_config:
        legacy = _named_tokens(dict(special_tokens_map))
        # the legacy file wins for the seven, the config for a model's own names (transformers' merge order)
        named = {**named, **{k: v for k, v in legacy.items() if k in SPECIAL_TOKENS or k not in named}}
    tokens = {key: named[key] for key in SPECIAL_TOKENS if key in named}
    return tokens | {key: value for key, value in named.items() if key not in SPECIAL_TOKENS}


def _named_tokens(declared: Mapping[str, Any]) -> dict[str, str]:
    found = {
        key: text
        for key, value in declared.items()
        if isinstance(key, str) and key.endswith("_token") and (text := _token_text(value)) is not None
    }
    extra = declared.get("extra_special_tokens")
    if isinstance(extra, Mapping):  # a list is unnamed tokens, which templates do not see
        found |= {key: text for key, value in extra.items() if (text := _token_text(value)) is not None}
    return found


def _token_text(value: object) -> str | None:
    """A token's text: a string, or an AddedToken as tokenizer_config.json stores one ({"content": ...})."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


# ---- what the template sees ------------------------------------------------------------------------------


def _template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as transformers hands it to the template: None-valued keys dropped (templates test
    for a missing key, and would print "None"), plain JSON types, reasoning under the names templates read."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InputError(
            f"messages must be a list of message objects, got {type(messages).__name__}", field="messages"
        )
    if not messages:
        raise InputError("messages is empty; give at least one message", field="messages")
    conversation = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InputError(
                f"messages[{index}] must be an object with role and content, got {type(message).__name__}",
                field=f"messages[{index}]",
            )
        plain: dict[str, Any] = _plain({key: value for key, value in message.items() if value is not None})
        reasoning = next((plain[key] for key in REASONING_FIELDS if plain.get(key) is not None), None)
        if reasoning is not None:
            plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
        conversation.append(plain)
    return conversation


def _dict_list(value: object, name: str) -> list[Any] | None:
    """tools or documents: None, or a list of dicts (JSON schemas; {"title", "text"} documents)."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, Mapping) for item in value):
        raise InputError(f"{name} must be a list of objects", field=name)
    return list(_plain(list(value)))


def _plain(value: object) -> Any:
    """`value` rebuilt from exact JSON types (str, int, float, bool, None, dict, list, tuple), as
    transformers rebuilds template inputs: a subclass or foreign object can carry methods the sandbox does not
    know to be dangerous. Anything else becomes an inert "<TypeName>" placeholder."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if isinstance(value, np.generic):  # np.bool_(False) must not become a truthy placeholder
        return _plain(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    return f"<{type(value).__name__}>"


# ---- the Jinja environment ---------------------------------------------------------------------------------


def _check_jinja2() -> None:
    """ConfigError unless a safe jinja2 is installed (the runtime's own install lacks it)."""
    try:
        import jinja2
    except ImportError:
        raise ConfigError(
            f"rendering chat templates needs jinja2, which is not installed: {INSTALL_HINT}"
        ) from None
    text = getattr(jinja2, "__version__", None) or importlib.metadata.version("jinja2")
    version = tuple(int(part) for part in re.findall(r"\d+", text)[:3])
    if version < MIN_JINJA2:
        floor = ".".join(map(str, MIN_JINJA2))
        raise ConfigError(
            f"rendering chat templates needs jinja2 >= {floor} (older versions have sandbox escapes, and "
            f"templates are untrusted code); this is {text}: pip install -U 'jinja2>={floor}'"
        )


def _raise_exception(message: object) -> NoReturn:
    raise _TemplateRaised(str(message))


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; prompts want the JSON as models saw it in training.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """`dict` for templates: builds dicts, and exposes no class whose attributes lead out of the sandbox."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, keys: Iterable[Any], value: Any = None) -> dict[Any, Any]:
        return dict.fromkeys(keys, value)


def _environment() -> "jinja2.sandbox.ImmutableSandboxedEnvironment":
    """transformers' sandbox for chat templates (its filters, globals and extensions); jinja2 is imported."""
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.sandbox
    import jinja2.utils

    class GenerationBlock(jinja2.ext.Extension):
        """{% generation %}...{% endgeneration %}: renders its body. The tag marks assistant text for
        training masks (transformers' return_assistant_tokens_mask); a prompt only needs the text."""

        tags = {"generation"}  # noqa: RUF012  (Jinja's own type for it)

        def parse(self, parser: "jinja2.parser.Parser") -> jinja2.nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_render_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _render_body(self, caller: Callable[[], str]) -> str:
            return caller()

    class TemplateNamespace(jinja2.utils.Namespace):
        """namespace(...) refusing underscore-prefixed names, which lead to CPython internals."""

        # self taken from *args, as Jinja's Namespace does, so that namespace(self=...) still works
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, args = args[0], args[1:]
            attributes = dict(*args, **kwargs)
            for name in attributes:
                _check_name(name)
            jinja2.utils.Namespace.__init__(self, attributes)

        def __setitem__(self, name: str, value: Any) -> None:
            _check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

    def _check_name(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"a chat template cannot store the underscore-prefixed name {name!r} on a namespace"
            )

    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    environment.globals["dict"] = _TemplateDict()
    environment.globals["namespace"] = TemplateNamespace
    return environment
