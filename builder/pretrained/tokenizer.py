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
"""

from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from onnxformer.builder.pretrained.folder import read_json
from onnxformer.runtime.errors import ModelImportError
from onnxformer.runtime.manifest import Framing

TOKENIZER_FILE = "tokenizer.json"
ROLES = ("pad", "bos", "eos", "unk", "mask", "sep", "cls")
# Which role names a framing token, when one id holds several (GPT-2's <|endoftext|> is bos, eos and unk).
PREFIX_ROLES = ("cls", "bos", "sep", "eos", "pad", "unk", "mask")
SUFFIX_ROLES = ("sep", "eos", "cls", "bos", "pad", "unk", "mask")
PROBE = "hello world"


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
    tokenizer.no_padding()
    tokenizer.no_truncation()
    special = roles(folder, tokenizer, hf_config)
    return tokenizer, special, framing(tokenizer, special)


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
