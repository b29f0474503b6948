"""A byte-level BPE tokenizer (Radford et al., 2019, GPT-2, 2.2), trained with Hugging Face `tokenizers`.

Byte-level means the base alphabet is the 256 bytes, each shown as a printable character, so any Unicode
text (Japanese, emoji, control characters) encodes without <unk> and decodes back to exactly the same
string. Nothing may change the text on the way: no normalizer (no NFC/NFKC, no lowercasing), no prefix space,
no post-processor; the ByteLevel decoder maps bytes back one to one. The model code adds <s>, </s>, <cls>
and <sep> itself, so `encode(text)` is exactly the text's tokens.

The special tokens take the first ids in a fixed order, so every model trained here agrees on <pad> = 0.
The file is the standard `tokenizer.json` that the Rust, Python and JavaScript tokenizers libraries load.
Two things to know when decoding elsewhere: a byte-level vocabulary can split a character across tokens, so
decode whole sequences, not token by token; and @huggingface/transformers (JS) cleans up spaces before
punctuation by default unless `clean_up_tokenization_spaces` is false.
"""

import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from onnxformer.builder.data.files import read_text_file
from onnxformer.runtime.errors import ConfigError, InputError


@dataclass(frozen=True)
class SpecialTokens:
    """The ids of the special tokens, read from a tokenizer (the fixed order gives 0 .. 6)."""

    pad: int
    bos: int
    eos: int
    unk: int
    mask: int
    sep: int
    cls: int


# Field of SpecialTokens -> token text, in id order.
SPECIAL_TOKENS: dict[str, str] = {
    "pad": "<pad>",
    "bos": "<s>",
    "eos": "</s>",
    "unk": "<unk>",
    "mask": "<mask>",
    "sep": "<sep>",
    "cls": "<cls>",
}

# The smallest vocabulary that holds the special tokens and the 256 bytes, before any merge.
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + 256


def train_tokenizer(texts: Iterable[str], *, vocab_size: int = 512, min_frequency: int = 2) -> Tokenizer:
    """A byte-level BPE tokenizer learned from the texts; the same texts give the same tokenizer.

    `vocab_size` is an upper bound: training stops early once no pair of tokens occurs `min_frequency`
    times, which on a small closed corpus happens well before 512. Read the real size from
    `tokenizer.get_vocab_size()`.
    """
    if isinstance(texts, str):
        raise InputError("texts must be an iterable of strings, got one str; wrap it in a list: [text]")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < MIN_VOCAB_SIZE:
        raise ConfigError(
            f"vocab_size must be at least {MIN_VOCAB_SIZE} ({len(SPECIAL_TOKENS)} special tokens "
            f"+ 256 bytes), got {vocab_size!r}; 512 is a good size for a small corpus"
        )
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or min_frequency < 1:
        raise ConfigError(f"min_frequency must be a whole number >= 1, got {min_frequency!r}; 2 is usual")
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk"]))
    # add_prefix_space=False: a prefix space would make decode(encode(text)) start with an extra space.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS.values()),
        # Every byte, not only those in the corpus, so text unlike the corpus still encodes without <unk>.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_checked_texts(texts), trainer=trainer)
    return tokenizer


def special_tokens(tokenizer: Tokenizer) -> SpecialTokens:
    """The special token ids of a tokenizer; ConfigError if one is missing or not marked special."""
    registered = {token.content for token in tokenizer.get_added_tokens_decoder().values() if token.special}
    ids = {}
    for name, text in SPECIAL_TOKENS.items():
        token_id = tokenizer.token_to_id(text)
        if token_id is None or text not in registered:
            raise ConfigError(
                f"the tokenizer has no special token {text!r} ({name}); train it with train_tokenizer, "
                f"which adds all of {list(SPECIAL_TOKENS.values())}"
            )
        ids[name] = token_id
    return SpecialTokens(**ids)


def encode(tokenizer: Tokenizer, text: str) -> list[int]:
    """The text's token ids, nothing added. A special token's text inside `text` ("<mask>") maps to its id."""
    if not isinstance(text, str):
        raise InputError(f"text must be a str, got {type(text).__name__}; decode bytes as UTF-8 first")
    return tokenizer.encode(text, add_special_tokens=False).ids


def decode(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """The text of the ids, special tokens left out; for ids of text alone, exactly the encoded text."""
    ids = [int(token_id) for token_id in ids]
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    bad = [token_id for token_id in ids if not 0 <= token_id < size]
    if bad:
        # The library would drop them silently and return a shorter text.
        raise InputError(
            f"token ids {bad[:5]} are outside the vocabulary 0 .. {size - 1}; "
            "check that the model's vocab_size is the tokenizer's get_vocab_size()"
        )
    return tokenizer.decode(ids, skip_special_tokens=True)


def save_tokenizer(tokenizer: Tokenizer, path: str | os.PathLike[str]) -> Path:
    """Write `tokenizer.json` (or any file name) atomically: a reader never sees half a file."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a folder; give a file path such as {path / 'tokenizer.json'}")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = tokenizer.to_str(pretty=True)
    # The temporary file sits in the same folder, so os.replace is a rename within one file system.
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp makes the file private (0600); a tokenizer is meant to be shared and served.
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """A tokenizer from a `tokenizer.json`; InputError naming the path if it is missing or not one."""
    text = read_text_file(path)
    try:
        return Tokenizer.from_str(text)
    except Exception as error:  # the library raises a bare Exception for any parse problem
        raise InputError(
            f"{path} is not a tokenizer.json ({error}); give the file that save_tokenizer wrote"
        ) from None


def _checked_texts(texts: Iterable[str]) -> Iterator[str]:
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"texts[{index}] is of type {type(text).__name__}, not str; give text only")
        yield text
