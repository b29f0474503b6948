"""The byte-level BPE tokenizer: exact round trips, fixed special ids, deterministic training, save/load."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models

from onnxformer.builder.data import generate_sentences
from onnxformer.builder.tokenizer import (
    MIN_VOCAB_SIZE,
    SPECIAL_TOKENS,
    SpecialTokens,
    decode,
    encode,
    load_tokenizer,
    save_tokenizer,
    special_tokens,
    train_tokenizer,
)
from onnxformer.runtime.errors import ConfigError, InputError

CORPUS = generate_sentences(5000, seed=0)

ROUND_TRIPS = {
    "ascii": "The cat sat on the mat.",
    "punctuation": "Hello, world! (1 + 2) * 3 = 9; 'quotes' \"double\" -- ok? #tag @name ~/path\\x",
    "japanese": "吾輩は猫である。名前はまだ無い。",
    "emoji": "🐈‍⬛ 👍🏽",
    "accents": "Ünïcödé café naïve",
    "nfd": "cafe\u0301",  # not normalised to "café": the ids must keep the difference
    "greek and arabic": "Ελληνικά العربية",
    "leading spaces": "   leading",
    "trailing spaces": "trailing   ",
    "multiple spaces": "a  b   c    d",
    "newlines": "line one\nline two\n\nline four\n",
    "crlf": "windows\r\nline\r\n",
    "tabs": "\tindented\tand\ttabbed\t",
    "only whitespace": " \t\n \r\n ",
    "single space": " ",
    "control characters": "\x00\x01\x7f\x1b[0m",
    "byte order mark": "\ufeffbom",
    "empty": "",
}


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(CORPUS, vocab_size=512)


@pytest.mark.parametrize("text", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_round_trip_is_exact(tokenizer: Tokenizer, text: str) -> None:
    ids = encode(tokenizer, text)
    assert decode(tokenizer, ids) == text
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    assert not set(ids) & set(range(len(SPECIAL_TOKENS))), "plain text must never map to a special token"


def test_no_normalisation_keeps_composed_and_decomposed_text_apart(tokenizer: Tokenizer) -> None:
    assert encode(tokenizer, "café") != encode(tokenizer, "cafe\u0301")
    assert encode(tokenizer, "Cat") != encode(tokenizer, "cat")


def test_whitespace_is_never_added_or_removed(tokenizer: Tokenizer) -> None:
    # Each piece decoded alone and joined gives back the text: no prefix space added, none trimmed.
    text = "  The cat\n\n sat  on\tthe mat. "
    ids = encode(tokenizer, text)
    assert "".join(decode(tokenizer, [token_id]) for token_id in ids) == text
    assert decode(tokenizer, encode(tokenizer, "cat")) == "cat"
    assert decode(tokenizer, encode(tokenizer, " cat")) == " cat"


def test_encode_adds_no_special_tokens(tokenizer: Tokenizer) -> None:
    assert encode(tokenizer, "") == []
    assert encode(tokenizer, ".") == [tokenizer.token_to_id(".")]
    assert tokenizer.encode("The cat sat.").ids == encode(tokenizer, "The cat sat."), "no post-processor"


def test_special_token_text_inside_the_text_maps_to_the_special_id(tokenizer: Tokenizer) -> None:
    # What a fill-mask demo wants ("The cat <mask> on the mat."), and why the round trip excludes such text.
    ids = encode(tokenizer, "The cat <mask> on the mat.")
    assert special_tokens(tokenizer).mask in ids
    assert decode(tokenizer, ids) == "The cat  on the mat."


def test_decode_skips_special_tokens(tokenizer: Tokenizer) -> None:
    ids = encode(tokenizer, "The cat sat.")
    specials = special_tokens(tokenizer)
    assert decode(tokenizer, [specials.cls, specials.bos, *ids, specials.eos, specials.pad]) == "The cat sat."


def test_decode_rejects_ids_outside_the_vocabulary(tokenizer: Tokenizer) -> None:
    size = tokenizer.get_vocab_size()
    with pytest.raises(InputError, match=f"outside the vocabulary 0 .. {size - 1}"):
        decode(tokenizer, [5, size])
    with pytest.raises(InputError, match="outside"):
        decode(tokenizer, [-1])


def test_encode_rejects_what_is_not_text(tokenizer: Tokenizer) -> None:
    with pytest.raises(InputError, match="must be a str"):
        encode(tokenizer, b"bytes")  # type: ignore[arg-type]


def test_special_token_ids_are_fixed(tokenizer: Tokenizer) -> None:
    assert special_tokens(tokenizer) == SpecialTokens(pad=0, bos=1, eos=2, unk=3, mask=4, sep=5, cls=6)
    assert [tokenizer.id_to_token(i) for i in range(7)] == [
        "<pad>",
        "<s>",
        "</s>",
        "<unk>",
        "<mask>",
        "<sep>",
        "<cls>",
    ]
    assert list(SPECIAL_TOKENS) == list(SpecialTokens.__dataclass_fields__)


def test_special_tokens_of_a_foreign_tokenizer_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no special token '<pad>'"):
        special_tokens(Tokenizer(models.BPE()))
    plain = Tokenizer(models.BPE())
    plain.add_tokens(list(SPECIAL_TOKENS.values()))  # present, but as ordinary tokens
    with pytest.raises(ConfigError, match="train it with train_tokenizer"):
        special_tokens(plain)


def test_subword_merges_make_corpus_sentences_short(tokenizer: Tokenizer) -> None:
    assert len(encode(tokenizer, "The cat sat on the mat.")) <= 8
    # The corpus has ~50 words, so merges run out before the requested 512.
    assert MIN_VOCAB_SIZE < tokenizer.get_vocab_size() <= 512
    lengths = [len(encode(tokenizer, sentence)) for sentence in CORPUS[:500]]
    assert max(lengths) <= 13


def test_vocab_size_is_an_upper_bound(tokenizer: Tokenizer) -> None:
    small = train_tokenizer(CORPUS, vocab_size=300)
    assert small.get_vocab_size() == 300
    assert len(encode(small, "The cat sat on the mat.")) > len(encode(tokenizer, "The cat sat on the mat."))


def test_training_is_deterministic_across_processes(tokenizer: Tokenizer) -> None:
    # Rust hash maps are seeded per process, so only a second process can show an order dependence.
    script = (
        "import sys; from onnxformer.builder.data import generate_sentences;"
        "from onnxformer.builder.tokenizer import train_tokenizer;"
        "sys.stdout.write(train_tokenizer(generate_sentences(5000, seed=0), vocab_size=512).to_str())"
    )
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert other == tokenizer.to_str()
    assert train_tokenizer(reversed(CORPUS), vocab_size=512).to_str() == tokenizer.to_str()


def test_saved_file_is_a_plain_tokenizer_json(tokenizer: Tokenizer, tmp_path: Path) -> None:
    path = save_tokenizer(tokenizer, tmp_path / "tokenizer.json")
    assert path == tmp_path / "tokenizer.json" and [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]
    assert path.stat().st_mode & 0o777 == 0o644
    config = json.loads(path.read_text(encoding="utf-8"))
    assert config["normalizer"] is None and config["post_processor"] is None
    assert config["pre_tokenizer"] == {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": True,
    }
    assert config["decoder"]["type"] == "ByteLevel" and config["model"]["type"] == "BPE"
    assert [token["content"] for token in config["added_tokens"]] == list(SPECIAL_TOKENS.values())
    assert all(token["special"] for token in config["added_tokens"])


def test_save_load_round_trip(tokenizer: Tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "nested" / "tokenizer.json"
    path.parent.mkdir()
    path.write_text("an older file to be replaced", encoding="utf-8")
    save_tokenizer(tokenizer, path)
    for loaded in (load_tokenizer(path), Tokenizer.from_file(str(path))):
        assert loaded.to_str() == tokenizer.to_str()
        assert special_tokens(loaded) == special_tokens(tokenizer)
        for text in ROUND_TRIPS.values():
            assert encode(loaded, text) == encode(tokenizer, text)
            assert decode(loaded, encode(loaded, text)) == text


def test_save_into_a_folder_is_an_input_error(tokenizer: Tokenizer, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a folder; give a file path"):
        save_tokenizer(tokenizer, tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        (b"", "is empty"),
        (b"hello", "is not a tokenizer.json"),
        (b"{}", "is not a tokenizer.json"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "looks binary"),
    ],
)
def test_loading_what_is_not_a_tokenizer_is_an_input_error(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "tokenizer.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError, match=message) as caught:
        load_tokenizer(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [({"vocab_size": 262}, "at least 263"), ({"min_frequency": 0}, ">= 1")],
)
def test_bad_training_options_are_config_errors(options: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        train_tokenizer(CORPUS[:10], **options)


def test_training_texts_must_be_strings() -> None:
    with pytest.raises(InputError, match="wrap it in a list"):
        train_tokenizer("The cat sat.")
    with pytest.raises(InputError, match=r"texts\[1\] is of type int"):
        train_tokenizer(["The cat sat.", 3])  # type: ignore[list-item]
