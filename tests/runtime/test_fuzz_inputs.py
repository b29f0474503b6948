"""Property-based tests: whatever a caller passes, the runtime and the CLI give a valid result or a typed
error (onnxformer.runtime.errors) with a useful message; never another exception, a hang or an ONNX
Runtime traceback. Run on the committed reference exports, without torch.

`scripts/reliability.py` runs the same properties with many more examples for docs/reliability.md.
"""

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from onnxformer.cli.main import app
from onnxformer.runtime import TextEncoder, TextGenerator, TextToText, load
from onnxformer.runtime.errors import OnnxformerError

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
# scripts/reliability.py raises the example count through this variable; the test run keeps it small.
EXAMPLES = int(os.environ.get("ONNXFORMER_FUZZ_EXAMPLES", "150"))
FAST = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
runner = CliRunner()

# Text: any code point (lone surrogates included), the specials' own text, and sizes up to megabytes.
SPECIAL_TEXTS = ["<pad>", "<s>", "</s>", "<unk>", "<mask>", "<sep>", "<cls>"]
ANY_CHAR = st.characters(exclude_categories=())
SHORT_TEXT = st.one_of(
    st.text(ANY_CHAR, max_size=12),
    st.lists(st.one_of(st.text(max_size=6), st.sampled_from(SPECIAL_TEXTS)), max_size=6).map("".join),
    st.sampled_from(["", "The cat sat.", "\ud800", "a\udfffb", "<mask>", "The <mask> sat on the <mask>."]),
)
LONG_TEXT = st.one_of(
    st.text(ANY_CHAR, min_size=20, max_size=100),
    st.builds(
        lambda piece, n: piece * n, st.sampled_from(["a", "é ", "🐈", "\x00", " "]), st.integers(0, 3000)
    ),
    st.just("x" * 2_000_000),
)
TEXT = st.one_of(SHORT_TEXT, SHORT_TEXT, LONG_TEXT)  # short texts twice as often: most of them run
# Values at and beyond each option's edges, and values of the wrong type.
NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 0.0, -0.0, -1, 1, 1.0, 1.0000001, 5e-324, 1e-310, 1e308, 2**63]),
    st.integers(-(2**70), 2**70),
)
JUNK = st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.just([1]), st.just(np.array(3)))
HOSTILE = st.one_of(NUMBER, JUNK)
TOKEN = st.one_of(st.integers(0, 387), st.integers(-(2**70), 2**70), JUNK, st.floats())
VALID_TOKENS = st.lists(st.integers(0, 387), max_size=3)
# Sampling options inside their valid ranges, edges included (a tiny temperature, top-k past the
# vocabulary, the smallest top-p, huge seeds and budgets).
SAMPLING = {
    "temperature": st.one_of(st.none(), st.sampled_from([0, 0.0, 5e-324, 1e-310, 1e308]), st.floats(0, 5)),
    "top_k": st.one_of(st.none(), st.integers(0, 410), st.just(10**20)),
    "top_p": st.one_of(
        st.none(), st.sampled_from([1, 1.0, 5e-324, 1e-300]), st.floats(0, 1, exclude_min=True)
    ),
    "seed": st.one_of(st.none(), st.integers(0, 2**130)),
    "max_new_tokens": st.one_of(st.none(), st.integers(0, 80), st.just(10**30)),
}
HOSTILE_SAMPLING = {name: HOSTILE for name in SAMPLING}
ROWS = st.one_of(
    st.lists(st.lists(st.integers(0, 387), min_size=1, max_size=70), min_size=1, max_size=4),  # ragged
    st.lists(st.lists(TOKEN, max_size=8), max_size=4),
    JUNK,
    st.just(np.zeros((2, 3), dtype=np.int64)),
    st.just(np.zeros((2, 0), dtype=np.int64)),
)


@st.composite
def options(draw, valid: dict, hostile: dict) -> dict:
    """Valid options, and in about half the draws one of them replaced by a hostile value."""
    values = draw(st.fixed_dictionaries(valid))
    name = draw(st.one_of(st.none(), st.sampled_from(sorted(hostile))))
    if name is not None:
        values[name] = draw(hostile[name])
    return values


@pytest.fixture(scope="module")
def models() -> dict[str, Any]:
    return {family: load(EXPORTED / family, device="cpu", threads=1) for family in ("gpt", "bert", "t5")}


def outcome(call) -> Any:
    """The call's result, or its typed error (checked for a useful message); anything else fails."""
    try:
        return call()
    except OnnxformerError as error:
        message = str(error)
        assert len(message) > 20, f"unhelpful message {message!r}"
        assert "Traceback" not in message and "onnxruntime_pybind11" not in message, message
        assert "[ONNXRuntimeError]" not in message, message
        return error


def _texts(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else value


def _refused_or(result: Any) -> bool:
    """Record the outcome for the statistics (`--hypothesis-show-statistics`); True when it was valid."""
    event("refused" if isinstance(result, OnnxformerError) else "ran")
    return not isinstance(result, OnnxformerError)


GENERATE_OPTIONS = {
    **SAMPLING,
    "stop": st.one_of(st.none(), st.lists(st.text(ANY_CHAR, min_size=1, max_size=4), max_size=3)),
    "stop_tokens": st.one_of(st.none(), VALID_TOKENS),
}
HOSTILE_GENERATE = {
    **HOSTILE_SAMPLING,
    "stop": st.one_of(st.lists(st.text(ANY_CHAR, max_size=4), max_size=3), st.text(max_size=3), JUNK),
    "stop_tokens": st.one_of(st.lists(TOKEN, max_size=3), st.integers(), JUNK),
}


@FAST
@given(
    prompt=st.one_of(TEXT, st.lists(TEXT, max_size=3), JUNK),
    chosen=options(GENERATE_OPTIONS, HOSTILE_GENERATE),
)
def test_generate_never_crashes(models, prompt, chosen) -> None:
    gpt: TextGenerator = models["gpt"]
    result = outcome(lambda: gpt.generate(prompt, **chosen))
    if _refused_or(result):
        assert isinstance(result, str) if isinstance(prompt, str) else len(result) == len(prompt)
        assert all(isinstance(text, str) for text in _texts(result))
        reproducible = chosen["temperature"] == 0 or chosen["seed"] is not None
        if isinstance(prompt, str) and reproducible:
            assert "".join(gpt.stream(prompt, **chosen)) == result


@FAST
@given(rows=ROWS, chosen=options(SAMPLING, HOSTILE_SAMPLING))
def test_generate_ids_takes_ragged_batches_or_refuses(models, rows, chosen) -> None:
    gpt: TextGenerator = models["gpt"]
    result = outcome(lambda: gpt.generate_ids(rows, **chosen))
    if _refused_or(result):
        assert len(result) == len(rows)
        for row, generation in zip(rows, result, strict=True):
            assert len(row) + len(generation.tokens) <= gpt.max_len + 1
            assert all(0 <= token < gpt.vocab_size for token in generation.tokens)
            assert generation.finish_reason in ("stop", "length")


@FAST
@given(
    texts=st.one_of(TEXT, st.lists(TEXT, min_size=1, max_size=4), st.just([]), JUNK),
    batch_size=st.one_of(st.just(32), st.integers(1, 5), st.just(10**9), st.integers(-2, 0), JUNK),
    top_k=st.one_of(st.just(5), st.integers(1, 500), st.integers(-2, 0), JUNK),
)
def test_encoder_never_crashes(models, texts, batch_size, top_k) -> None:
    bert: TextEncoder = models["bert"]
    embedded = outcome(lambda: bert.embed(texts, batch_size=batch_size))
    if _refused_or(embedded):
        shape = (bert.dim,) if isinstance(texts, str) else (len(texts), bert.dim)
        assert embedded.shape == shape and np.isfinite(embedded).all()
    classes = outcome(lambda: bert.classify(texts, batch_size=batch_size))
    if _refused_or(classes):
        for result in [classes] if isinstance(texts, str) else classes:
            assert math.isclose(float(result.probabilities.sum()), 1.0, abs_tol=1e-6)
    filled = outcome(lambda: bert.fill_mask(texts, top_k=top_k))
    if _refused_or(filled):
        fillers = bert.vocab_size - len(bert.tokenizer.special_ids)
        assert len(filled) >= 1 and all(len(options) == min(top_k, fillers) for options in filled)


SEQ2SEQ_OPTIONS = {
    **SAMPLING,
    "num_beams": st.one_of(st.just(1), st.integers(1, 4), st.just(388)),
    "length_penalty": st.one_of(st.just(1.0), st.floats(-5, 5)),
}
HOSTILE_SEQ2SEQ = {
    **HOSTILE_SAMPLING,
    "num_beams": st.one_of(HOSTILE, st.just(389)),
    "length_penalty": HOSTILE,
}


@FAST
@given(
    text=st.one_of(TEXT, st.lists(TEXT, max_size=3), JUNK), chosen=options(SEQ2SEQ_OPTIONS, HOSTILE_SEQ2SEQ)
)
def test_text_to_text_never_crashes(models, text, chosen) -> None:
    t5: TextToText = models["t5"]
    if chosen["num_beams"] in (2, 3, 4, 388):  # beam search takes no sampling options
        chosen.update(temperature=None, top_k=None, top_p=None, seed=None)
    if chosen["num_beams"] == 388:  # the widest beam allowed: one step of it is enough
        chosen["max_new_tokens"] = 1
    result = outcome(lambda: t5.generate(text, **chosen))
    if _refused_or(result):
        assert all(isinstance(output, str) for output in _texts(result))


@FAST
@given(ids=st.one_of(st.lists(st.integers(0, 399), max_size=10), st.lists(TOKEN, max_size=10), JUNK))
def test_tokenizer_decode_never_crashes(models, ids) -> None:
    result = outcome(lambda: models["gpt"].tokenizer.decode(ids))
    _refused_or(result)
    assert isinstance(result, str | OnnxformerError)


CLI_VALUE = st.one_of(
    st.sampled_from(
        ["0", "-1", "1e-320", "nan", "inf", "-0", "1", "2", "399", "400", "401", "1e30", "x", ""]
    ),
    st.integers(-(2**70), 2**70).map(str),
)
CLI_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)  # argv cannot hold surrogates


@settings(max_examples=max(25, EXAMPLES // 6), deadline=None)
@given(
    command=st.sampled_from(["generate", "encode", "seq2seq"]),
    texts=st.lists(CLI_TEXT, min_size=1, max_size=2),
    options=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "--temperature",
                    "--top-k",
                    "--top-p",
                    "--seed",
                    "--max-new-tokens",
                    "--num-beams",
                    "--length-penalty",
                ]
            ),
            CLI_VALUE,
        ),
        max_size=3,
    ),
)
def test_cli_never_shows_a_traceback(command, texts, options) -> None:
    folder = {"generate": "gpt", "encode": "bert", "seq2seq": "t5"}[command]
    allowed = {
        "generate": {"--temperature", "--top-k", "--top-p", "--seed", "--max-new-tokens"},
        "encode": set(),
        "seq2seq": None,
    }[command]
    flags = [part for name, value in options if allowed is None or name in allowed for part in (name, value)]
    if "--num-beams" in flags:
        flags += ["--max-new-tokens", "2"]  # keep a wide beam's run short
    result = runner.invoke(app, [command, str(EXPORTED / folder), *flags, "--device", "cpu", "--", *texts])
    assert result.exit_code in (0, 1, 2), result.output
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 1:
        assert result.stderr.startswith("error: ") and len(result.stderr) > 30, result.stderr
