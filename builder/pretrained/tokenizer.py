"""A checkpoint's own tokenizer.json (WordPiece, byte-level BPE, Unigram), with its special tokens mapped to
our roles and its framing read from its post-processor.

Roles (pad, bos, eos, unk, mask, sep, cls) come from tokenizer_config.json / special_tokens_map.json (the
`*_token` entries transformers writes), then config.json's `*_token_id`. A role the checkpoint lacks is
left out (GPT-2 has no mask), except pad: the runtime pads batches, so a tokenizer without a pad token
pads with eos (padding positions are masked, their id never matters).

The framing (the special tokens a text gets before and after its own tokens) is what the tokenizer's
post-processor adds: [CLS] text [SEP] for BERT, <s> text for Llama, text </s> for T5, nothing for GPT-2.
It is measured, by encoding a probe with and without special tokens, rather than parsed from the template.

Fixed padding and truncation settings are removed: the runtime pads and bounds lengths itself.

Every part of tokenizer.json (model, normalizer, pre-tokenizer, post-processor, decoder, and each member of
a Sequence) must be of a type that every host tokenizing from the export reads: the Python `tokenizers`
library and the pure-JS @huggingface/tokenizers of the Node and browser hosts. Another type is refused by
name at import (`COMPONENTS`), rather than exported into a folder that some host cannot open.
"""

from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from onnxformer.builder.pretrained.folder import read_json
from onnxformer.runtime.chat import template_tokens
from onnxformer.runtime.errors import ModelImportError
from onnxformer.runtime.manifest import Framing

TOKENIZER_FILE = "tokenizer.json"
ROLES = ("pad", "bos", "eos", "unk", "mask", "sep", "cls")
# Which role names a framing token, when one id holds several (GPT-2's <|endoftext|> is bos, eos and unk).
PREFIX_ROLES = ("cls", "bos", "sep", "eos", "pad", "unk", "mask")
SUFFIX_ROLES = ("sep", "eos", "cls", "bos", "pad", "unk", "mask")
PROBE = "hello world"


# tokenizer.json part -> the types both tokenizers libraries read (@huggingface/tokenizers 0.2's create_*).
COMPONENTS: dict[str, frozenset[str]] = {
    "model": frozenset({"BPE", "WordPiece", "Unigram"}),
    "normalizer": frozenset({
        "BertNormalizer", "Precompiled", "Sequence", "Replace", "NFC", "NFD", "NFKC", "NFKD", "Strip",
        "StripAccents", "Lowercase", "Prepend",
    }),
    "pre_tokenizer": frozenset({
        "BertPreTokenizer", "Sequence", "Whitespace", "WhitespaceSplit", "Metaspace", "ByteLevel", "Split",
        "Punctuation", "Digits", "FixedLength",
    }),
    "post_processor": frozenset({
        "TemplateProcessing", "ByteLevel", "BertProcessing", "RobertaProcessing", "Sequence",
    }),
    "decoder": frozenset({
        "ByteLevel", "WordPiece", "Metaspace", "BPEDecoder", "CTC", "Sequence", "Replace", "Fuse", "Strip",
        "ByteFallback",
    }),
}  # fmt: skip
# a Sequence's members, by part
MEMBERS = {"normalizer": "normalizers", "pre_tokenizer": "pretokenizers", "post_processor": "processors",
           "decoder": "decoders"}  # fmt: skip


def check_components(data: dict[str, Any], path: Path) -> None:
    """ModelImportError naming the first part of tokenizer.json whose type a host's tokenizer cannot read."""
    for part, known in COMPONENTS.items():
        pending = [(part, data.get(part))]
        while pending:
            where, value = pending.pop()
            if value is None:
                continue
            kind = value.get("type") if isinstance(value, dict) else None
            if part == "model" and kind is None and isinstance(value, dict):
                continue  # an older file without the type: both libraries infer it from the vocabulary
            if kind not in known:
                raise ModelImportError(
                    f"{path} {where} is of type {kind!r}, which the Node and browser hosts' tokenizer "
                    f"(@huggingface/tokenizers) does not read; onnxformer exports a {part} of type "
                    f"{', '.join(sorted(known))}"
                )
            if kind == "Sequence":
                members = value.get(MEMBERS[part]) or []
                pending += [(f"{where}[{i}]", member) for i, member in enumerate(members)]


def load_pretrained_tokenizer(
    folder: Path, hf_config: dict[str, Any]
) -> tuple[Tokenizer, dict[str, int], Framing]:
    """(tokenizer, role -> id, framing) of a model folder."""
    path = folder / TOKENIZER_FILE
    if not path.is_file():
        raise ModelImportError(
            f"{folder} has no {TOKENIZER_FILE}; save the model's fast tokenizer there "
            "(`AutoTokenizer.from_pretrained(...).save_pretrained(folder)` writes it)"
        )
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as error:  # the library raises a bare Exception
        raise ModelImportError(f"{path} is not a tokenizer.json ({str(error)[:200]})") from None
    check_components(read_json(path, what="the tokenizer"), path)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    special = roles(folder, tokenizer, hf_config)
    return tokenizer, special, framing(tokenizer, special)


CHAT_TEMPLATE_FILE = "chat_template.jinja"  # transformers 5 saves the template beside tokenizer_config.json


def chat_template(folder: Path) -> str | None:
    """The folder's chat template (a Jinja string), or None: chat_template.jinja, else tokenizer_config.json's
    chat_template (a string, or a list of named templates of which the "default" one is taken)."""
    path = folder / CHAT_TEMPLATE_FILE
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ModelImportError(f"{path} is not readable UTF-8 text ({error})") from None
    if not (folder / "tokenizer_config.json").is_file():
        return None
    template = read_json(folder / "tokenizer_config.json", what="the tokenizer's settings").get(
        "chat_template"
    )
    if isinstance(template, list):
        named = {item.get("name"): item.get("template") for item in template if isinstance(item, dict)}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise ModelImportError(
            f"tokenizer_config.json chat_template must be a string, got {type(template).__name__}"
        )
    return template


def chat_tokens(folder: Path) -> dict[str, str]:
    """The special-token strings the folder's chat template sees ({"bos_token": "<s>", ...}): what
    transformers' `AutoTokenizer.from_pretrained(folder).special_tokens_map` gives it, from
    tokenizer_config.json and a legacy special_tokens_map.json (`template_tokens` says which wins)."""
    files = {}
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (folder / name).is_file():
            files[name] = read_json(folder / name, what="the tokenizer's special tokens")
    return template_tokens(
        files.get("tokenizer_config.json", {}), special_tokens_map=files.get("special_tokens_map.json")
    )


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def roles(folder: Path, tokenizer: Tokenizer, hf_config: dict[str, Any]) -> dict[str, int]:
    declared: dict[str, Any] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):  # the later file wins
        if (folder / name).is_file():
            declared |= read_json(folder / name, what="the tokenizer's special tokens")
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    found: dict[str, int] = {}
    for role in ROLES:
        text = _token_text(declared.get(f"{role}_token"))
        if text is not None:
            token_id = tokenizer.token_to_id(text)
            if token_id is None:
                raise ModelImportError(
                    f"the tokenizer's {role}_token {text!r} is not in {TOKENIZER_FILE}'s vocabulary; the "
                    "tokenizer files disagree"
                )
            found[role] = token_id
            continue
        token_id = hf_config.get(f"{role}_token_id")
        if isinstance(token_id, list):
            token_id = token_id[0] if token_id else None
        if isinstance(token_id, int) and 0 <= token_id < size:
            found[role] = token_id
    if "pad" not in found and "eos" in found:
        found["pad"] = found["eos"]
    if "pad" not in found:
        raise ModelImportError(
            "the tokenizer names no pad or eos token (tokenizer_config.json pad_token / eos_token, or "
            "config.json pad_token_id); the runtime needs one to pad batches"
        )
    return found


def framing(tokenizer: Tokenizer, special: dict[str, int]) -> Framing:
    plain = tokenizer.encode(PROBE, add_special_tokens=False).ids
    framed = tokenizer.encode(PROBE, add_special_tokens=True).ids
    starts = [i for i in range(len(framed) - len(plain) + 1) if framed[i : i + len(plain)] == plain]
    if not plain or not starts:
        raise ModelImportError(
            f"the tokenizer's post-processor changes the text's own tokens ({plain} -> {framed}); "
            "onnxformer frames texts only with special tokens before and after"
        )
    start = starts[0]
    prefix, suffix = framed[:start], framed[start + len(plain) :]
    return Framing(
        prefix=tuple(_role_of(i, special, PREFIX_ROLES) for i in prefix),
        suffix=tuple(_role_of(i, special, SUFFIX_ROLES) for i in suffix),
    )


def _role_of(token_id: int, special: dict[str, int], preference: tuple[str, ...]) -> str:
    for role in preference:
        if special.get(role) == token_id:
            return role
    raise ModelImportError(
        f"the tokenizer's post-processor adds token id {token_id}, which is none of the special tokens "
        f"{special}; name it in tokenizer_config.json"
    )
