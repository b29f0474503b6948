"""A chat with a decoder export: its chat template, a history that stays within the model's context, and
replies streamed as they are generated (`onnxformer chat DIR`; the server's chat route renders the same
template with `model_template`)."""

from collections.abc import Iterator
from typing import Any

from onnxformer.runtime.chat import ChatTemplate
from onnxformer.runtime.errors import ConfigError, InputError
from onnxformer.runtime.generation_options import GenerationOptions
from onnxformer.runtime.generator import TextGenerator

NO_TEMPLATE = (
    "this model has no chat template (its checkpoint came without one); give one with --chat-template FILE, "
    "or use completions (`onnxformer generate`, /v1/completions)"
)


def model_template(model: TextGenerator, override: str | None = None) -> ChatTemplate:
    """The template a model chats with: `override`, else its export's (manifest extra.chat_template), with
    the special-token strings the checkpoint declared (extra.chat_tokens) or, for an export without them,
    its tokenizer's. ConfigError when there is none."""
    extra = model.export.manifest.extra
    template = override if override is not None else extra.get("chat_template")
    if template is None:
        raise ConfigError(NO_TEMPLATE)
    tokens = extra.get("chat_tokens") or {
        f"{role}_token": model.tokenizer.token_text(token_id)
        for role, token_id in model.tokenizer.special_tokens.items()
        if role in ("bos", "eos", "pad", "unk")
    }
    return ChatTemplate(template, tokens)


class Conversation:
    """The messages so far and the next reply. When the rendered history and the reply's token budget
    would not fit the context, the oldest turns are dropped (a system message stays), as chat front-ends
    do; a single message too long for the context is refused."""

    def __init__(
        self,
        model: TextGenerator,
        template: ChatTemplate,
        *,
        system: str | None = None,
        options: GenerationOptions | None = None,
    ) -> None:
        self.model, self.template = model, template
        self.options = (options or GenerationOptions()).check(model.task)
        self.system: list[dict[str, Any]] = [] if system is None else [{"role": "system", "content": system}]
        self.turns: list[dict[str, Any]] = []
        self.dropped = 0  # messages dropped so far to stay within the context

    def say(self, text: str) -> Iterator[str]:
        """Add the user's message and stream the reply, which joins the history when it is complete."""
        before, dropped = list(self.turns), self.dropped
        self.turns.append({"role": "user", "content": text})
        try:
            row = self._fit()
        except InputError:  # refused: the history stays as it was
            self.turns, self.dropped = before, dropped
            raise
        reply = ""
        for updates in self.model.follow([row], self.options):
            if 0 in updates and updates[0].text:
                reply += updates[0].text
                yield updates[0].text
        self.turns.append({"role": "assistant", "content": reply})

    def reset(self) -> None:
        self.turns.clear()

    def _fit(self) -> list[int]:
        """The prompt ids of the history, dropping the oldest turns until the reply has room."""
        budget = self.options.resolve(self.model.defaults).max_new_tokens or 0
        room = self.model.max_len - min(
            budget, self.model.max_len // 2
        )  # keep half the context for the prompt
        while True:
            text = self.template.render(self.system + self.turns, add_generation_prompt=True)
            row = self.model.tokenizer.encode(text)
            if len(row) <= room:
                return row
            if len(self.turns) <= 1:
                raise InputError(
                    f"the message is {len(row)} tokens with its template, but this model reads at most "
                    f"{room} before its reply; send a shorter message",
                    field="messages",
                )
            # Drop the oldest user turn and the answer to it, so that the roles still alternate.
            drop = 2 if len(self.turns) > 2 and self.turns[1]["role"] == "assistant" else 1
            del self.turns[:drop]
            self.dropped += drop
