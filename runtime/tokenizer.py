"""The export's tokenizer, loaded from the bytes the export folder verified (never re-read from the path).

A byte-level BPE `tokenizer.json` with no post-processor: `encode` gives exactly the text's tokens and the
model classes add <s>, </s>, <cls>, <sep> themselves. A byte-level vocabulary can split one character
across tokens, so text is always decoded from whole token sequences (see `TextGenerator.stream`).
"""

import json
from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer

from onnxformer.runtime.errors import InputError, ManifestError

REPLACEMENT = "\ufffd"  # what decoding shows for bytes that are not (yet) a whole UTF-8 character


def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's characters -> the bytes they stand for: printable Latin-1 bytes stand for
    themselves, the other 68 bytes for the characters from U+0100 on, in byte order (GPT-2's scheme)."""
    ranges = (("!", "~"), ("¡", "¬"), ("®", "ÿ"))
    printable = [byte for first, last in ranges for byte in range(ord(first), ord(last) + 1)]
    table = {chr(byte): byte for byte in printable}
    others = [byte for byte in range(256) if byte not in printable]
    table.update({chr(256 + index): byte for index, byte in enumerate(others)})
    return table


BYTE_LEVEL = _byte_level_alphabet()


class TextTokenizer:
    """Text <-> token ids for one export; stateless after construction, so safe to share across threads."""

    def __init__(self, tokenizer: Tokenizer, special_tokens: dict[str, int]) -> None:
        self._tokenizer = tokenizer
        self.special_tokens = dict(special_tokens)  # name -> id: pad, bos, eos, unk, mask, sep, cls
        self.special_ids = frozenset(self.special_tokens.values())
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        # With byte-level pre-tokenization and no normalizer, a token covers at most as many characters
        # as its vocabulary entry has (one per byte), so a text longer than limit * that is refused
        # before the tokenizer spends time on it. Other tokenizers get no early bound.
        self._max_token_chars: int | None = None
        self._byte_level = type(tokenizer.pre_tokenizer).__name__ == "ByteLevel"
        if tokenizer.normalizer is None and self._byte_level:
            self._max_token_chars = max(map(len, tokenizer.get_vocab(with_added_tokens=True)), default=1)
        # A ByteFallback decoder (Llama 2, Gemma) turns a run of byte tokens ("<0xE2>") into text only as a
        # whole, and a run that is not valid UTF-8 into one U+FFFD per byte, valid bytes included: text
        # from such a run may still change while the run goes on (see `settled`).
        self._byte_tokens: frozenset[int] = frozenset()
        if '"ByteFallback"' in json.dumps(json.loads(tokenizer.to_str()).get("decoder")):
            self._byte_tokens = frozenset(
                token_id
                for piece, token_id in tokenizer.get_vocab(with_added_tokens=False).items()
                if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">")
            )

    @classmethod
    def from_bytes(cls, data: bytes, special_tokens: dict[str, int], *, name: str) -> "TextTokenizer":
        """A tokenizer from verified `tokenizer.json` bytes; `name` is the file, for error messages."""
        try:
            tokenizer = Tokenizer.from_str(data.decode("utf-8"))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:  # the library's bare Exception, or a Rust panic (a BaseException)
            raise ManifestError(
                f"{name} is not a tokenizer.json ({str(error)[:200]}); re-export the folder"
            ) from None
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        for key, token_id in special_tokens.items():
            if token_id >= size:
                raise ManifestError(
                    f"special token {key}={token_id} is outside {name}'s vocabulary of {size}; "
                    "re-export the folder"
                )
        return cls(tokenizer, special_tokens)

    def encode(self, text: str, *, limit: int | None = None) -> list[int]:
        """The text's token ids, no special tokens added; "" gives []. A special token's text ("<mask>")
        inside `text` maps to its id. A text sure to exceed `limit` tokens is refused without encoding."""
        if not isinstance(text, str):
            raise InputError(f"text must be a str, got {type(text).__name__}; decode bytes as UTF-8 first")
        if limit is not None and self._max_token_chars is not None:
            at_least = -(-len(text) // self._max_token_chars)
            if at_least > limit:
                raise InputError(
                    f"a text of {len(text)} characters is at least {at_least} tokens, but the model reads "
                    f"at most {limit}; shorten the text"
                )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise InputError(
                f"the text holds {text[error.start : error.end]!r} at position {error.start}, a lone "
                "surrogate that is not a Unicode character; pass valid text (decode bytes with "
                "errors='replace')"
            ) from None
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids` with special tokens left out."""
        listed = ids.ndim == 1 if isinstance(ids, np.ndarray) else isinstance(ids, Sequence)
        if not listed or isinstance(ids, str | bytes):
            raise InputError(f"ids must be a list of token ids, got {type(ids).__name__}")
        if any(isinstance(t, bool) or not isinstance(t, int | np.integer) for t in ids):
            raise InputError("ids must be integer token ids")
        ids = [int(token_id) for token_id in ids]
        bad = [token_id for token_id in ids if not 0 <= token_id < self.vocab_size]
        if bad:
            # The library would drop them silently and return a shorter text.
            raise InputError(f"token ids {bad[:5]} are outside the vocabulary 0 .. {self.vocab_size - 1}")
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def decode_generated(self, ids: list[int]) -> str:
        """`decode` for ids the model chose (ints from the vocabulary), without checking each one again:
        a generation loop decodes its rows at every step."""
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def settled(self, ids: Sequence[int]) -> int:
        """How many leading `ids` have a text that later ids cannot change: all of them, but for a
        ByteFallback decoder not a trailing run of byte tokens (decoded only as a whole run)."""
        end = len(ids)
        while end > 0 and ids[end - 1] in self._byte_tokens:
            end -= 1
        return end

    def token_bytes(self, token_id: int) -> bytes | None:
        """The bytes a byte-level token stands for (part of a character, for emoji and many scripts);
        None for special tokens and for tokenizers that are not byte-level."""
        piece = self._tokenizer.id_to_token(token_id)
        if token_id in self.special_ids or piece is None or any(c not in BYTE_LEVEL for c in piece):
            return None
        return bytes(BYTE_LEVEL[c] for c in piece)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """Each token as it reads in the decoded text, for showing a sentence token by token: a byte-level
        token is its own text (" sat"); a WordPiece or Unigram token is what its decoding adds to the text
        before it (" sat" for a new word, "ing" inside one), as the decoder spaces words. Special tokens
        show as their own text."""
        if self._byte_level:
            return [self.token_text(int(t)) for t in ids]
        shown, words, before = [], [], ""
        for token_id in (int(t) for t in ids):
            if token_id in self.special_ids:
                shown.append(self.token_text(token_id))
                continue
            words.append(token_id)
            text = self._tokenizer.decode(words, skip_special_tokens=True)
            shown.append(text[len(before) :] if text.startswith(before) else self.token_text(token_id))
            before = text
        return shown

    def token_text(self, token_id: int) -> str:
        """One token as text; a special token shows as its own text ("<pad>") rather than vanishing."""
        if token_id in self.special_ids:
            piece = self._tokenizer.id_to_token(token_id)
            if piece is not None:  # None only for an id the vocabulary skips
                return piece
        return self.decode([token_id])
