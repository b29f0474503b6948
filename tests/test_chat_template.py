"""runtime/chat.py against transformers itself: the same template, tokens and conversations render to the
same string as `tokenizer.apply_chat_template(messages, tokenize=False)`, on generated conversations and on
templates in the styles real checkpoints use (ChatML, Llama 2, Llama 3, Gemma); and what it refuses
(a template's raise_exception, sandbox escapes, malformed messages, a broken template, no jinja2).

The transformers tokenizers are tiny word-level ones saved to tmp_path and read back with AutoTokenizer,
so that the tokens `template_tokens` reads from the saved tokenizer_config.json meet transformers' own."""

import json
import random
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hf_models import CHATML

from onnxformer.runtime.chat import ChatTemplate, check_messages, template_tokens
from onnxformer.runtime.errors import ConfigError, InputError

# Llama 2: the system prompt folded into the first user turn, bos/eos around every exchange, roles checked.
LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
    "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)

# Llama 3 style, laid out over lines as such templates are (trim_blocks, lstrip_blocks and "-" matter): a
# namespace filled in a reversed loop left with {% break %}, system turns skipped with {% continue %},
# loop.first, tojson on message fields and on tools, reasoning shown after the last user turn (Qwen 3's way).
LLAMA3 = r"""{{- bos_token }}
{%- set ns = namespace(last_user=-1, system="") %}
{%- for message in messages | reverse %}
    {%- if message.role == "user" %}
        {%- set ns.last_user = (messages | length) - loop.index %}
        {%- break %}
    {%- endif %}
{%- endfor %}
{%- if messages[0].role == "system" %}
    {%- set ns.system = messages[0].content | trim %}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "system" %}
        {%- continue %}
    {%- endif %}
    {%- if loop.first or (loop.index0 == 1 and messages[0].role == "system") %}
        {{- "<|start_header_id|>system<|end_header_id|>\n\n" + ns.system }}
        {%- if tools is not none %}
            {{- "\n\nTools: " + tools | tojson(indent=2) }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
    {{- "<|start_header_id|>" + message.role }}
    {%- if message.name is defined %}
        {{- " (name: " + message.name | tojson + ")" }}
    {%- endif %}
    {{- "<|end_header_id|>\n\n" }}
    {%- if message.role == "assistant" and loop.index0 > ns.last_user and message.reasoning_content %}
        {{- "<think>\n" + message.reasoning_content + "\n</think>\n\n" }}
    {%- endif %}
    {%- if message.tool_calls is defined %}
        {{- message.tool_calls | tojson(separators=(",", ":"), sort_keys=true) + "\n" }}
    {%- endif %}
    {%- if message.content is defined %}
        {{- message.content | trim }}
    {%- endif %}
    {{- "<|eot_id|>" }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- "<|start_header_id|>assistant<|end_header_id|>\n\n" }}
    {%- if enable_thinking is defined and not enable_thinking %}
        {{- "<think>\n\n</think>\n\n" }}
    {%- endif %}
{%- endif %}
"""

# Gemma style: assistant is "model", the system prompt prefixes the first user turn, text trimmed, content
# given as a string or as a list of text parts.
GEMMA = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if message['role'] == 'assistant' -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

# ChatML laid out over lines with no "-": trim_blocks and lstrip_blocks make the layout, and the assistant's
# text sits in a {% generation %} block, as templates written for training masks have it.
CHATML_GENERATION = """{% for message in messages %}
<|im_start|>{{ message['role'] }}
    {% if message['role'] == 'assistant' %}
        {% generation %}
{{ message['content'] }}<|im_end|>
        {% endgeneration %}
    {% else %}
{{ message['content'] }}<|im_end|>
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}
"""

TEMPLATES = {
    "chatml": CHATML,
    "llama2": LLAMA2,
    "llama3": LLAMA3,
    "gemma": GEMMA,
    "generation": CHATML_GENERATION,
}
ALTERNATING = {"llama2", "gemma"}  # templates that refuse roles out of turn
TOKENS = {
    "chatml": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "llama2": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": "<|finetune|>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
    "generation": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
}
TEXTS = [
    "Hello!",
    "What is 2 + 2?",
    "  padded with spaces and a tab\t",
    "line one\nline two\n\nline four\n",
    "unicode: café, naïve, Straße, 日本語, Ελληνικά",
    "emoji 🤖🎉👩‍👩‍👧 and a flag 🇫🇷",
    "quotes \"double\" and 'single' and `back`",
    "braces {{ not a template }} {% neither %} {# nor #} {'a': 1}",
    "html <b>bold</b> & 'amp'",
    "",
    "\\n is not a newline, \\u00e9 is not é",
    "<s> [INST] tokens typed by the user [/INST] </s> <|im_end|>",
]


def _saved_tokenizer(folder: Path, tokens: dict[str, str], config_edit: dict[str, Any] | None = None):
    """A transformers tokenizer with `tokens`, saved to `folder` and read back as transformers reads a
    checkpoint's; `config_edit` is merged into the saved tokenizer_config.json first."""
    from tokenizers import Tokenizer, models
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    vocab = {text: index for index, text in enumerate(dict.fromkeys(["<unk>", *tokens.values(), "hi"]))}
    model = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    PreTrainedTokenizerFast(tokenizer_object=model, **tokens).save_pretrained(folder)
    if config_edit:
        path = folder / "tokenizer_config.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | config_edit))
    return AutoTokenizer.from_pretrained(folder)


def _config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "tokenizer_config.json").read_text())


def _conversations(name: str, rng: random.Random, count: int) -> list[list[dict[str, Any]]]:
    """`count` conversations of 1 to 6 turns, with or without a system message, alternating user and
    assistant from a user turn (what every template accepts); the Llama 3 template also gets names, tool
    calls, reasoning and assistant turns of null content, the Gemma one content given as text parts."""
    conversations = []
    for _ in range(count):
        turns = rng.randint(1, 6)
        messages: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            messages.append({"role": "system", "content": rng.choice(TEXTS)})
        for turn in range(turns):
            role = "user" if turn % 2 == 0 else "assistant"
            message: dict[str, Any] = {"role": role, "content": rng.choice(TEXTS)}
            if name == "llama3" and role == "user" and rng.random() < 0.3:
                message["name"] = rng.choice(["Ana <dev>", "Zoë & 'co'", "日本"])
            if name == "llama3" and role == "assistant" and rng.random() < 0.4:
                # under any of its names: transformers copies it to the one the template reads
                message[rng.choice(["reasoning_content", "reasoning", "thinking"])] = rng.choice(TEXTS)
            if name == "llama3" and role == "assistant" and rng.random() < 0.2:
                message["tool_calls"] = [{"function": {"name": "add", "arguments": {"a": 2, "b": "é"}}}]
                message["content"] = None  # dropped before rendering, as transformers drops it
            if name == "gemma" and rng.random() < 0.3:
                message["content"] = [{"type": "text", "text": rng.choice(TEXTS)} for _ in range(2)]
            messages.append(message)
        conversations.append(messages)
    return conversations


def _render_both(tokenizer: Any, ours: ChatTemplate, messages: list[dict[str, Any]], **options: Any) -> tuple:
    """(transformers' text or error message, ours): an error shows as ("error", message)."""
    try:
        theirs: Any = tokenizer.apply_chat_template(messages, tokenize=False, **options)
    except Exception as error:  # jinja2's TemplateError from raise_exception
        theirs = ("error", str(error))
    try:
        mine: Any = ours.render(messages, **options)
    except InputError as error:
        assert error.field == "messages"
        mine = ("error", str(error).removeprefix("the chat template refused the messages: "))
    return theirs, mine


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_renders_as_transformers_does(tmp_path: Path, name: str) -> None:
    template = TEMPLATES[name]
    tokenizer = _saved_tokenizer(tmp_path, TOKENS[name])
    tokenizer.chat_template = template
    tokens = template_tokens(_config(tmp_path))
    assert tokens == tokenizer.special_tokens_map == TOKENS[name]
    ours = ChatTemplate(template, tokens)
    rng = random.Random(f"chat-{name}")
    compared, refused, rendered = 0, 0, []
    for messages in _conversations(name, rng, 60):
        before = json.dumps(messages)
        for add_generation_prompt in (True, False):
            options: dict[str, Any] = {"add_generation_prompt": add_generation_prompt}
            if name == "llama3" and rng.random() < 0.5:
                options["enable_thinking"] = rng.random() < 0.5
            if name == "llama3" and rng.random() < 0.3:
                options["tools"] = [
                    {"type": "function", "function": {"name": "add", "description": "a + b <é>"}}
                ]
            theirs, mine = _render_both(tokenizer, ours, messages, **options)
            assert mine == theirs, f"{name} {messages} {options}"
            rendered.append(mine)
            assert json.dumps(messages) == before, "rendering changed the caller's messages"
            compared += 1
        # out-of-turn roles: the alternating templates refuse them with their own message, as transformers
        shuffled = [m for m in messages if m["role"] != "system"]
        rng.shuffle(shuffled)
        theirs, mine = _render_both(tokenizer, ours, [*shuffled, *shuffled[:1]], add_generation_prompt=True)
        assert mine == theirs
        refused += isinstance(mine, tuple)
        compared += 1
    assert name not in ALTERNATING or refused > 10
    if name == "llama3":  # the generated features reached the template
        for seen in ("<think>\n", "<think>\n\n</think>", "Tools: [", "(name: \"Zoë & 'co'\")", '"b":"é"}'):
            assert any(seen in text for text in rendered), seen
    print(f"{name}: {compared} renders equal to transformers' ({refused} refused alike)")


def test_renders_the_fixture_template_exactly() -> None:
    """A spot check whose expected text is written out, so a shared misunderstanding cannot pass."""
    ours = ChatTemplate(CHATML, {"bos_token": "<s>"})
    messages = [{"role": "user", "content": "hi {{ x }}"}, {"role": "assistant", "content": "é"}]
    assert ours.render(messages) == "<s>user\nhi {{ x }}</s>\n<s>assistant\né</s>\n<s>assistant\n"
    assert (
        ours.render(messages, add_generation_prompt=False) == "<s>user\nhi {{ x }}</s>\n<s>assistant\né</s>\n"
    )
    gemma = ChatTemplate(GEMMA, {"bos_token": "<bos>"})
    text = gemma.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi \n"}])
    assert text == "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_globals_and_filters_are_transformers(tmp_path: Path) -> None:
    """tojson (UTF-8, not HTML-escaped, indent/separators/sort_keys), dict, namespace, strftime_now."""
    template = (
        "{{ messages[0].content | tojson }}|{{ {'b': 1, 'a': [1, 2]} | tojson(indent=1, sort_keys=true) }}|"
        "{{ dict(x=1, y='é') | tojson(separators=(',', ':')) }}|{{ dict.fromkeys(['k'], 0) | tojson }}|"
        "{% set ns = namespace(n=1) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}|{{ strftime_now('%Y-%m') }}|"
        "{{ bos_token }}{{ eos_token }}{{ custom }}"
    )
    tokenizer = _saved_tokenizer(tmp_path, {"bos_token": "<s>"})
    tokenizer.chat_template = template
    messages = [{"role": "user", "content": "<é> & 'q' \"dq\" 🤖"}]
    ours = ChatTemplate(template, template_tokens(_config(tmp_path)))
    theirs = tokenizer.apply_chat_template(messages, tokenize=False, custom="!", bos_token="[kw]")
    assert ours.render(messages, custom="!", bos_token="[kw]") == theirs
    assert theirs.startswith('"<é> & \'q\' \\"dq\\" 🤖"|{\n "a": [\n  1,\n  2\n ],\n "b": 1\n}|')
    assert datetime.now().strftime("%Y-%m") in theirs and "[kw]" in theirs  # a keyword overrides a token


def test_raise_exception_is_an_input_error() -> None:
    ours = ChatTemplate(LLAMA2, {"bos_token": "<s>", "eos_token": "</s>"})
    with pytest.raises(InputError, match="Conversation roles must alternate user/assistant") as caught:
        ours.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert caught.value.field == "messages"


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__base__ }}",
        "{{ cycler.__init__.__globals__.os }}",
        "{{ raise_exception.__globals__.os }}",
        "{% set ns = namespace(_hidden=1) %}",
        "{% set ns = namespace() %}{% set ns.__class__ = 1 %}",
        "{{ messages.append(1) }}",  # the immutable sandbox: no changing the template's inputs
        "{{ messages[0].content.format.__self__.upper() }}",
    ],
)
def test_the_sandbox_refuses_escapes(template: str) -> None:
    ours = ChatTemplate(template, {})
    with pytest.raises(InputError) as caught:
        ours.render([{"role": "user", "content": "hi"}])
    assert caught.value.field == "messages"
    assert "forbids" in str(caught.value) or "failed" in str(caught.value)


def test_unsafe_attributes_render_nothing() -> None:
    """Jinja's sandbox answers a lone unsafe attribute with an undefined value (an empty string), and
    raises only on using it: either way no Python internals reach the prompt."""
    assert ChatTemplate("[{{ ''.__class__ }}]", {}).render([{"role": "user", "content": "x"}]) == "[]"


def test_template_errors_are_input_errors() -> None:
    with pytest.raises(InputError, match="UndefinedError") as caught:
        ChatTemplate("{{ messages[0].nothing.deeper }}", {}).render([{"role": "user", "content": "x"}])
    assert caught.value.field == "messages"
    with pytest.raises(InputError, match="TypeError"):
        ChatTemplate("{{ messages[0].content + 1 }}", {}).render([{"role": "user", "content": "x"}])
    with pytest.raises(InputError, match="messages is empty"):
        ChatTemplate(CHATML, {}).render([])


@pytest.mark.parametrize(
    "template",
    ["{% for message in messages %}{{ message }}", "{{ messages | no_such_filter }}", "{% generation %}x"],
)
def test_a_broken_template_is_refused_when_built(template: str) -> None:
    with pytest.raises(ConfigError, match="chat template"):
        ChatTemplate(template, {})


def test_missing_jinja2_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in [name for name in sys.modules if name == "jinja2" or name.startswith("jinja2.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "jinja2", None)  # makes `import jinja2` raise ImportError
    with pytest.raises(
        ConfigError, match=r'needs jinja2, which is not installed: pip install "onnxformer\[serve\]"'
    ):
        ChatTemplate(CHATML, {})


def test_old_jinja2_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import jinja2

    monkeypatch.setattr(jinja2, "__version__", "3.1.5")
    with pytest.raises(ConfigError, match=r"jinja2 >= 3\.1\.6 .* this is 3\.1\.5"):
        ChatTemplate(CHATML, {})


def test_check_messages_accepts_openai_messages() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
            "name": "a",
        },
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
        {"role": "developer", "content": ""},
        {"role": "assistant"},
    ]
    checked = check_messages(messages)
    assert checked[1] == {"role": "user", "content": "one\ntwo", "name": "a"}
    assert checked[2]["content"] is None and checked[2]["tool_calls"] == messages[2]["tool_calls"]
    assert checked[3]["tool_call_id"] == "c1" and checked[5] == {"role": "assistant"}
    checked[2]["tool_calls"][0]["id"] = "changed"
    assert messages[2]["tool_calls"][0]["id"] == "c1", "check_messages must return copies"
    assert isinstance(messages[1]["content"], list)


@pytest.mark.parametrize(
    ("messages", "field", "words"),
    [
        ("hello", "messages", "must be a list"),
        ([], "messages", "empty"),
        (["hi"], "messages[0]", "must be an object"),
        ([{"content": "hi"}], "messages[0].role", "has no role"),
        ([{"role": "user", "content": "a"}, {"role": "bot"}], "messages[1].role", "role 'bot'"),
        ([{"role": "user"}], "messages[0].content", "missing"),
        ([{"role": "user", "content": None}], "messages[0].content", "missing"),
        ([{"role": "user", "content": 3}], "messages[0].content", "must be a string or a list"),
        (
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
             {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "messages[2].content[0]",
            "messages[2].content[0]: type image_url is not supported; this model reads text",
        ),
        ([{"role": "user", "content": [{"text": "x"}]}], "messages[0].content[0]", "without a type"),
        ([{"role": "user", "content": [{"type": "text", "text": 1}]}], "messages[0].content[0].text", "str"),
    ],
)  # fmt: skip
def test_check_messages_names_the_field(messages: object, field: str, words: str) -> None:
    with pytest.raises(InputError) as caught:
        check_messages(messages)
    assert caught.value.field == field
    assert words in str(caught.value)


@pytest.mark.parametrize(
    "edit",
    [
        {},  # as transformers 5 saves them
        {"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False,
                       "rstrip": False, "single_word": False, "special": True}},  # transformers 4's form
        {"pad_token": None, "image_token": "<img>", "add_bos_token": True},  # a model's own named token
        {"extra_special_tokens": {"boi_token": "<img>"}},
        {"extra_special_tokens": ["<img>"], "additional_special_tokens": ["<img>"]},  # unnamed: not seen
    ],
)  # fmt: skip
def test_template_tokens_are_transformers_special_tokens_map(tmp_path: Path, edit: dict[str, Any]) -> None:
    from onnxformer.builder.pretrained.tokenizer import chat_tokens

    tokenizer = _saved_tokenizer(
        tmp_path, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, edit
    )
    assert template_tokens(_config(tmp_path)) == tokenizer.special_tokens_map
    assert chat_tokens(tmp_path) == tokenizer.special_tokens_map


def test_a_legacy_special_tokens_map_json(tmp_path: Path) -> None:
    """special_tokens_map.json, which transformers reads over tokenizer_config.json only when the config has
    no added_tokens_decoder (saved before transformers 4.34)."""
    from onnxformer.builder.pretrained.tokenizer import chat_tokens

    legacy = {"bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "<unk>", "pad_token": "</s>"}
    old = tmp_path / "old"
    _saved_tokenizer(old, {"eos_token": "</s>", "unk_token": "<unk>"})
    (old / "special_tokens_map.json").write_text(json.dumps(legacy))
    newer = tmp_path / "newer"
    _saved_tokenizer(newer, {"eos_token": "</s>", "unk_token": "<unk>"}, {"added_tokens_decoder": {}})
    (newer / "special_tokens_map.json").write_text(json.dumps(legacy))
    from transformers import AutoTokenizer

    for folder in (old, newer):
        expected = AutoTokenizer.from_pretrained(folder).special_tokens_map
        assert chat_tokens(folder) == expected, folder.name
    assert chat_tokens(old)["eos_token"] == "<unk>" and chat_tokens(newer)["eos_token"] == "</s>"
