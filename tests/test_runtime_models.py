"""The torch-free model runtime (TextGenerator, TextEncoder, TextToText) on real export folders.

Three tiny models, trained for 30 steps, are exported once per session (about 30 s on 2 cores), or
the exports are read from the folder named by ONNXFORMER_RUNTIME_EXPORTS (gpt/, bert/, t5/, and optionally
their training checkpoints under checkpoints/), which is how these tests run where torch is not installed.
Tests in the first part use the runtime only; tests in the last part compare with the PyTorch reference
loops (`onnxformer.builder.generation`) and the PyTorch models, and print the differences they saw.
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from onnxformer.runtime import (
    InputError,
    ManifestError,
    TextEncoder,
    TextGenerator,
    TextToText,
    load,
)
from onnxformer.runtime.decoding import (
    Collector,
    beam_search,
    decode_steps,
    left_pad,
    log_softmax,
    right_pad,
    sequence_score,
)
from onnxformer.runtime.generator import _final_end
from onnxformer.runtime.manifest import MANIFEST_NAME, Manifest
from onnxformer.runtime.sampling import SamplingConfig

FAMILIES = ("gpt", "bert", "t5")
EXPORTS_VARIABLE = "ONNXFORMER_RUNTIME_EXPORTS"
TINY_MODEL = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64}
GREEDY = SamplingConfig(temperature=0.0)
SAMPLED = SamplingConfig(temperature=1.0, top_k=40, top_p=0.9, seed=11)
TEXTS = ["The cat sat on the mat.", "A dog", "", "the big red fox saw a small bird near the old table"]


# Fixtures: tiny exports, made once.


@pytest.fixture(scope="session")
def checkpoint_dirs(request: pytest.FixtureRequest) -> dict[str, Path]:
    """family -> training checkpoint of the exported model; empty when the exports were given prebuilt
    without a checkpoints/ folder beside them."""
    given = os.environ.get(EXPORTS_VARIABLE)
    if given:
        folders = {family: Path(given) / "checkpoints" / family for family in FAMILIES}
        return {family: folder for family, folder in folders.items() if folder.is_dir()}
    pytest.importorskip("torch")
    return request.getfixturevalue("tiny_checkpoints")  # shared with the export tests (conftest)


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """PyTorch's thread pool spins when other processes share the 2 cores: on a busy machine one thread
    runs these tiny models 10x faster, and no slower on an idle one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def torch_one_thread() -> Iterator[None]:
    pytest.importorskip("torch")
    with one_torch_thread():
        yield


@pytest.fixture(scope="session")
def export_root(request: pytest.FixtureRequest) -> Path:
    """A folder holding the gpt/, bert/ and t5/ exports."""
    given = os.environ.get(EXPORTS_VARIABLE)
    if given:
        return Path(given)
    pytest.importorskip("torch")
    exports = request.getfixturevalue("model_exports")  # shared with the export tests (conftest)
    return exports["gpt"].parent


@pytest.fixture(scope="session")
def gpt(export_root: Path) -> TextGenerator:
    return TextGenerator.load(export_root / "gpt", device="cpu")


@pytest.fixture(scope="session")
def bert(export_root: Path) -> TextEncoder:
    return TextEncoder.load(export_root / "bert", device="cpu")


@pytest.fixture(scope="session")
def t5(export_root: Path) -> TextToText:
    return TextToText.load(export_root / "t5", device="cpu")


def checkpoint_model(checkpoint_dirs: dict[str, Path], family: str):
    """The PyTorch model the export came from (needs torch and the training checkpoint)."""
    pytest.importorskip("torch")
    if family not in checkpoint_dirs:
        pytest.skip("the exports were given prebuilt, without their checkpoints")
    from onnxformer.builder.training import load_checkpoint

    return load_checkpoint(checkpoint_dirs[family]).model.eval()


def gpt_prompts(gpt: TextGenerator) -> list[list[int]]:
    """Framed prompts of many lengths, up to the whole context (which leaves room for one token)."""
    bos, limit = gpt.tokenizer.special_tokens["bos"], gpt.max_len
    rng = np.random.default_rng(0)
    texts = [[bos, *gpt.tokenizer.encode(text)] for text in TEXTS]
    randoms = [[bos, *rng.integers(7, gpt.vocab_size, size=n).tolist()] for n in (limit - 4, limit - 1)]
    return [*texts, *randoms]


def t5_sources(t5: TextToText) -> list[list[int]]:
    eos = t5.tokenizer.special_tokens["eos"]
    return [[*t5.tokenizer.encode(text), eos] for text in TEXTS]


class Forbidden:
    """Stands in for an ONNX Runtime session in tests that must fail before anything runs."""

    def run(self, *args, **kwargs):
        raise AssertionError("ONNX Runtime ran although the input was invalid")


# Runtime only (no torch).


def test_load_picks_the_class_by_family(export_root: Path) -> None:
    classes = {"gpt": TextGenerator, "bert": TextEncoder, "t5": TextToText}
    for family, cls in classes.items():
        model = load(export_root / family, device="cpu")
        assert type(model) is cls
        assert model.config["vocab_size"] == model.tokenizer.vocab_size
        assert model.provider == "CPUExecutionProvider"
        assert "cpu" in model.provider_reason
    auto = load(export_root / "gpt")  # device="auto" falls back to CPU and says why
    assert auto.provider in ("CPUExecutionProvider", "CUDAExecutionProvider") and auto.provider_reason


def test_wrong_family_names_the_right_class(export_root: Path) -> None:
    with pytest.raises(ManifestError, match=r"bert export.*TextEncoder\.load"):
        TextGenerator.load(export_root / "bert")
    with pytest.raises(ManifestError, match=r"gpt export.*TextGenerator\.load"):
        TextToText.load(export_root / "gpt")
    with pytest.raises(ManifestError, match=r"t5 export.*TextToText\.load"):
        TextEncoder.load(export_root / "t5")


def test_altered_files_and_block_exports_are_refused(export_root: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(export_root / "gpt", tmp_path / "gpt")
    graph = copy / "decoder.onnx"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="altered"):
        TextGenerator.load(copy)
    tokenizer = shutil.copytree(export_root / "bert", tmp_path / "bert") / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text().replace("<mask>", "<MASK>"))
    with pytest.raises(ManifestError, match=r"tokenizer\.json"):
        TextEncoder.load(tokenizer.parent)
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    (blocks / MANIFEST_NAME).write_text(Manifest("blocks", 18, {}, ()).to_json())
    with pytest.raises(ManifestError, match="not a model"):
        load(blocks)


def test_gpt_generate_text_and_finish_reasons(gpt: TextGenerator) -> None:
    text = gpt.generate("The cat", max_new_tokens=12, temperature=0)
    assert isinstance(text, str)
    assert gpt.generate(["The cat"], max_new_tokens=12, temperature=0) == [text]
    assert isinstance(gpt.generate("", max_new_tokens=5, seed=1), str)  # just <s>: allowed
    assert gpt.generate("The cat", max_new_tokens=0) == ""
    (run,) = gpt.generate_ids([[1, 20, 30]], max_new_tokens=7, temperature=0, stop_tokens=[])
    assert (len(run.tokens), run.finish_reason) == (7, "length")
    # A prompt filling the whole context gets exactly one token.
    (full,) = gpt.generate_ids([[1] * gpt.max_len], max_new_tokens=50, temperature=0, stop_tokens=[])
    assert (len(full.tokens), full.finish_reason) == (1, "length")


def test_gpt_batched_left_padded_equals_one_by_one(gpt: TextGenerator) -> None:
    prompts = gpt_prompts(gpt)
    for options in ({"temperature": 0.0}, {"temperature": 1.0, "top_p": 0.9, "seed": 5}):
        batched = gpt.generate_ids(prompts, max_new_tokens=20, stop_tokens=[], **options)
        alone = [gpt.generate_ids([p], max_new_tokens=20, stop_tokens=[], **options)[0] for p in prompts]
        assert batched == alone
        assert [len(r.tokens) for r in batched][-2:] == [4, 1]  # context limits per row


def test_seeded_sampling_repeats_and_seeds_differ(gpt: TextGenerator) -> None:
    first = gpt.generate(["The", "A dog"], max_new_tokens=15, seed=3, temperature=1.0)
    assert gpt.generate(["The", "A dog"], max_new_tokens=15, seed=3, temperature=1.0) == first
    others = {
        tuple(gpt.generate(["The", "A dog"], max_new_tokens=15, seed=s, temperature=1.0)) for s in range(5)
    }
    assert len(others) > 1


def test_stream_joins_to_generate(gpt: TextGenerator) -> None:
    for seed in range(6):
        options = {"max_new_tokens": 30, "temperature": 1.0, "seed": seed}
        pieces = list(gpt.stream("The cat", **options))
        assert "".join(pieces) == gpt.generate("The cat", **options)
        assert all(pieces)


def test_stop_strings_cut_at_the_first_occurrence(gpt: TextGenerator) -> None:
    options = {"max_new_tokens": 40, "temperature": 1.0, "seed": 2, "stop_tokens": []}
    full = gpt.generate("The", **options)
    assert len(full) > 6, full
    stop = full[3:5]
    expected = full[: full.find(stop)]
    assert gpt.generate("The", stop=[stop], **options) == expected
    assert "".join(gpt.stream("The", stop=[stop], **options)) == expected
    assert gpt.generate("The", stop=["\x00never"], **options) == full  # absent: no cut
    (ids,) = gpt.generate_ids([[1, *gpt.tokenizer.encode("The")]], **options)
    assert ids.finish_reason == "length"


def scripted_decoder(gpt: TextGenerator, script: list[int]):
    """A stand-in decoder session whose greedy choices spell `script`, one token per step."""
    cache = gpt.export.cache
    calls = []

    class Scripted:
        def run(self, feeds: dict, outputs: list[str]) -> list[np.ndarray]:
            ids = feeds["input_ids"]  # (B, T)
            logits = np.zeros((*ids.shape, gpt.vocab_size), np.float32)  # (B, T, V)
            logits[:, -1, script[min(len(calls), len(script) - 1)]] = 1.0
            calls.append(ids)
            new = np.zeros((ids.shape[0], cache.heads, ids.shape[1], cache.head_dim), np.float32)
            presents = [np.concatenate([feeds[name], new], axis=2) for name in cache.past_names()]
            return [logits, *presents]

    return Scripted()


def test_stream_never_splits_a_character(gpt: TextGenerator, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "日本語 ünïcödé 🙂. Done."
    script = gpt.tokenizer.encode(text)
    eos = gpt.tokenizer.special_tokens["eos"]
    assert len(script) > len(text) - 5  # byte-level: most of these characters are several tokens
    options = {"temperature": 0, "max_new_tokens": len(script) + 1}
    monkeypatch.setattr(gpt, "_decoder", scripted_decoder(gpt, [*script, eos]))
    pieces = list(gpt.stream("x", **options))
    assert "".join(pieces) == text
    assert not any("\ufffd" in piece for piece in pieces)
    assert len(pieces) > 5
    # A stop string is held back while it may be starting, and the text ends before it.
    monkeypatch.setattr(gpt, "_decoder", scripted_decoder(gpt, [*script, eos]))
    pieces = list(gpt.stream("x", stop=["🙂."], **options))
    assert "".join(pieces) == "日本語 ünïcödé "
    monkeypatch.setattr(gpt, "_decoder", scripted_decoder(gpt, [*script, eos]))
    assert gpt.generate("x", stop=[". D"], **options) == "日本語 ünïcödé 🙂"


def test_final_end_holds_incomplete_characters_and_stop_prefixes() -> None:
    assert _final_end("abc\ufffd", ()) == 3
    assert _final_end("abc", ()) == 3
    assert _final_end("hello wo", ("world",)) == 6
    assert _final_end("hello w", ("xy", "wq")) == 6
    assert _final_end("hello", ("lo!",)) == 3


def test_bert_embed_similarity_classify_fill_mask(bert: TextEncoder) -> None:
    vectors = bert.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), bert.dim) and vectors.dtype == np.float32
    assert bert.embed(TEXTS[0]).shape == (bert.dim,)
    small_batches = bert.embed(TEXTS, batch_size=1)
    worst = float(np.abs(vectors - small_batches).max())
    print(f"embeddings, batch of {len(TEXTS)} (padded) vs batches of 1: max |diff| {worst:.2e}")
    assert worst < 1e-5
    assert bert.similarity("the cat", "the cat") == pytest.approx(1.0, abs=1e-5)
    assert -1.0 <= bert.similarity("the cat", "a table") <= 1.0
    results = bert.classify(TEXTS)
    assert len(results) == len(TEXTS)
    for result in results:
        assert result.probabilities.shape == (bert.num_labels,)
        assert result.probabilities.sum() == pytest.approx(1.0)
        assert result.label == int(np.argmax(result.probabilities))
    assert bert.classify(TEXTS[0]).label == results[0].label
    filled = bert.fill_mask("the <mask> sat on the <mask> .", top_k=4)
    assert len(filled) == 2 and all(len(options) == 4 for options in filled)
    for options in filled:
        probabilities = [p for _, p in options]
        assert probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) <= 1
        assert all(isinstance(token, str) and token not in ("<pad>", "<mask>") for token, _ in options)


def test_t5_generate_greedy_batched_and_beams(t5: TextToText) -> None:
    sources = [*t5_sources(t5)[:2], t5_sources(t5)[3]]  # generate refuses the empty text
    greedy = t5.generate_ids(sources, max_new_tokens=20)
    assert greedy == [t5.generate_ids([s], max_new_tokens=20)[0] for s in sources]
    texts = t5.generate(["The cat sat on the mat.", "A dog"], max_new_tokens=20)
    assert texts == [t5.tokenizer.decode(r.tokens) for r in greedy[:2]]
    for penalty in (1.0, 0.0, 2.0):
        beams = t5.beam_search_ids(sources, num_beams=3, max_new_tokens=20, length_penalty=penalty)
        alone = [
            t5.beam_search_ids([s], num_beams=3, max_new_tokens=20, length_penalty=penalty)[0]
            for s in sources
        ]
        assert [(b.tokens, b.finish_reason) for b in beams] == [(b.tokens, b.finish_reason) for b in alone]
        assert [b.score for b in beams] == pytest.approx([b.score for b in alone], abs=1e-5)
        for source, beam, first in zip(sources, beams, greedy, strict=True):
            # The score beam search reports is what the model gives the output (the cache was reordered
            # right), and it is at least greedy's.
            assert beam.score == pytest.approx(t5_score(t5, source, beam, penalty), abs=1e-4)
            assert beam.score >= t5_score(t5, source, first, penalty) - 1e-6, (beam, first)
        strings = t5.generate(
            ["The cat sat on the mat."], num_beams=3, max_new_tokens=20, length_penalty=penalty
        )
        assert isinstance(strings[0], str)


def t5_score(t5: TextToText, source: list[int], result, penalty: float) -> float:
    """Beam search's score of an output, recomputed in one teacher-forced decoder run."""
    stopped = result.finish_reason == "stop"
    target = [*result.tokens, t5.tokenizer.special_tokens["eos"]] if stopped else result.tokens
    return sequence_score(t5.score_ids(source, target), len(target), penalty)


def test_t5_beam_one_equals_greedy(t5: TextToText) -> None:
    sources = t5_sources(t5)
    greedy = t5.generate_ids(sources, max_new_tokens=30, stop_tokens=[t5.tokenizer.special_tokens["eos"]])
    beams = t5.beam_search_ids(sources, num_beams=1, max_new_tokens=30)
    assert [(r.tokens, r.finish_reason) for r in beams] == [(r.tokens, r.finish_reason) for r in greedy]


BAD_GPT = [
    (lambda m: m.generate_ids([[1, m.vocab_size]]), InputError, "outside the vocabulary"),
    (lambda m: m.generate_ids([[1, -1]]), InputError, "outside the vocabulary"),
    (lambda m: m.generate_ids([]), InputError, "at least one"),
    (lambda m: m.generate_ids([[]]), InputError, "empty"),
    (lambda m: m.generate_ids([[1] * (m.max_len + 1)]), InputError, "context"),
    (lambda m: m.generate([]), InputError, "at least one prompt"),
    (lambda m: m.generate(" cat" * 100), InputError, "shorten the prompt"),
    (lambda m: m.generate(b"bytes"), InputError, "str"),
    (lambda m: m.generate("a", max_new_tokens=-1), InputError, "max_new_tokens"),
    (lambda m: m.generate("a", temperature=-1.0), InputError, "temperature"),
    (lambda m: m.generate("a", top_p=0.0), InputError, "top_p"),
    (lambda m: m.generate("a", top_k=-2), InputError, "top_k"),
    (lambda m: m.generate("a", stop="."), InputError, "list of strings"),
    (lambda m: m.generate("a", stop=[""]), InputError, "non-empty"),
    (lambda m: m.generate("a", stop_tokens=[m.vocab_size]), InputError, "stop_tokens"),
    (lambda m: m.stream(["a"]), InputError, "one prompt"),
    (lambda m: m.stream("a", seed=-3), InputError, "seed"),
    (lambda m: m.generate("a", num_beams=2), InputError, "beam search runs on seq2seq exports only"),
    (lambda m: m.generate("a", temprature=0), InputError, "'temprature' is not a generation option"),
    (lambda m: m.generate_ids([[1]], stop=["x"]), InputError, "returns token ids; give stop_tokens"),
]
BAD_BERT = [
    (lambda m: m.embed([]), InputError, "at least one text"),
    (lambda m: m.embed("word " * 100, truncate=False), InputError, "shorten the text"),
    (lambda m: m.embed("a", truncate="no"), InputError, "truncate must be True or False"),
    (lambda m: m.embed(["a"], batch_size=0), InputError, "batch_size"),
    (lambda m: m.classify([]), InputError, "at least one text"),
    (lambda m: m.classify([3]), InputError, "must be a str"),
    (lambda m: m.fill_mask("no mask here"), InputError, "<mask>"),
    (lambda m: m.fill_mask("a <mask>", top_k=0), InputError, "top_k"),
]
BAD_T5 = [
    (lambda m: m.generate(""), InputError, "empty"),
    (lambda m: m.generate([]), InputError, "at least one text"),
    (lambda m: m.generate("a", num_beams=0), InputError, "num_beams"),
    (lambda m: m.generate("a", num_beams=2, temperature=0.7), InputError, "deterministically"),
    (lambda m: m.generate("a", max_new_tokens=-1), InputError, "max_new_tokens"),
    (lambda m: m.generate("a", length_penalty=float("nan")), InputError, "length_penalty"),
    (lambda m: m.generate("a", top_p=1.5), InputError, "top_p"),
    (lambda m: m.generate("word " * 100), InputError, "shorten the text"),
    (lambda m: m.generate_ids([[m.vocab_size, 2]]), InputError, "outside the vocabulary"),
    (lambda m: m.beam_search_ids([[5, 2]], num_beams=0), InputError, "num_beams"),
    (lambda m: m.beam_search_ids([[5, 2]], num_beams=1, seed=3), InputError, "leave seed unset"),
    (lambda m: m.generate("a", stop=["."]), InputError, "stop: not an option of seq2seq"),
]


@pytest.mark.parametrize(("call", "error", "message"), BAD_GPT)
def test_bad_gpt_input_fails_before_onnx_runtime(gpt, monkeypatch, call, error, message) -> None:
    monkeypatch.setattr(gpt, "_decoder", Forbidden())
    with pytest.raises(error, match=message):
        call(gpt)


@pytest.mark.parametrize(("call", "error", "message"), BAD_BERT)
def test_bad_bert_input_fails_before_onnx_runtime(bert, monkeypatch, call, error, message) -> None:
    monkeypatch.setattr(bert, "_encoder", Forbidden())
    with pytest.raises(error, match=message):
        call(bert)


@pytest.mark.parametrize(("call", "error", "message"), BAD_T5)
def test_bad_t5_input_fails_before_onnx_runtime(t5, monkeypatch, call, error, message) -> None:
    monkeypatch.setattr(t5, "_encoder", Forbidden())
    monkeypatch.setattr(t5, "_decoder", Forbidden())
    with pytest.raises(error, match=message):
        call(t5)


def test_threads_share_a_model(gpt: TextGenerator, bert: TextEncoder, t5: TextToText) -> None:
    prompts = ["The cat", "A dog sat", "", "the big red fox"]
    expected_text = [
        gpt.generate(p, max_new_tokens=8, seed=i, temperature=1.0) for i, p in enumerate(prompts)
    ]
    expected_vectors = [bert.embed(p) for p in prompts]
    expected_t5 = t5.generate("The cat sat on the mat.", max_new_tokens=8)
    failures: list[str] = []

    def work(worker: int) -> None:
        for call in range(20):
            i = (worker + call) % len(prompts)
            if gpt.generate(prompts[i], max_new_tokens=8, seed=i, temperature=1.0) != expected_text[i]:
                failures.append(f"generate {worker}/{call}")
            if not np.allclose(bert.embed(prompts[i]), expected_vectors[i], atol=1e-6):
                failures.append(f"embed {worker}/{call}")
            if call % 5 == 0 and t5.generate("The cat sat on the mat.", max_new_tokens=8) != expected_t5:
                failures.append(f"t5 {worker}/{call}")

    started = time.perf_counter()
    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"8 threads x 20 calls: {time.perf_counter() - started:.2f} s")
    assert not failures, failures[:5]


def test_runtime_runs_without_torch(
    export_root: Path, gpt: TextGenerator, bert: TextEncoder, t5: TextToText
) -> None:
    code = f"""
import json, sys
from onnxformer.runtime import load
root = {str(export_root)!r}
gpt, bert, t5 = (load(f"{{root}}/{{family}}", device="cpu") for family in ("gpt", "bert", "t5"))
out = {{
    "gpt": gpt.generate(["The cat", ""], max_new_tokens=10, temperature=0),
    "stream": "".join(gpt.stream("The cat", max_new_tokens=10, temperature=0)),
    "embed": bert.embed(["The cat", ""]).shape,
    "label": bert.classify("The cat sat.").label,
    "t5": t5.generate("The cat sat on the mat.", max_new_tokens=10),
    "beam": t5.generate("The cat sat on the mat.", max_new_tokens=10, num_beams=2),
}}
bad = ("torch", "onnxformer.builder")
leaked = sorted(m for m in sys.modules if m in bad or m.startswith(tuple(b + "." for b in bad)))
assert not leaked, leaked
print(json.dumps(out))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["gpt"] == gpt.generate(["The cat", ""], max_new_tokens=10, temperature=0)
    assert out["stream"] == out["gpt"][0]
    assert out["embed"] == [2, bert.dim]
    assert out["t5"] == t5.generate("The cat sat on the mat.", max_new_tokens=10)
    assert isinstance(out["beam"], str)


# Pure decoding pieces on fake logits (no model).


def fake_logits(history: np.ndarray, vocab: int) -> np.ndarray:
    """Deterministic logits (V,) for a row's token history."""
    seed = zlib.crc32(np.asarray(history, dtype=np.int64).tobytes())
    return np.random.default_rng(seed).normal(scale=2.0, size=vocab).astype(np.float32)


def fake_step(vocab: int):
    """A StepFn whose cache is each row's history (so reordering the cache reorders histories)."""

    def step(ids: np.ndarray, mask: np.ndarray, cache: dict) -> tuple[np.ndarray, dict]:
        history = np.concatenate([cache["history"], ids], axis=1)  # (B, P + T)
        return np.stack([fake_logits(row, vocab) for row in history]), {"history": history}

    return step


def best_by_enumeration(
    source: int, vocab: int, stop: int, budget: int, penalty: float
) -> tuple[list[int], float]:
    """The best output by scoring every sequence: any tokens then `stop`, or `budget` tokens."""
    best: tuple[float, list[int]] = (-np.inf, [])

    def walk(tokens: list[int], log_prob: float) -> None:
        nonlocal best
        probs = log_softmax(fake_logits(np.array([source, 0, *tokens]), vocab))
        ended = sequence_score(log_prob + probs[stop], len(tokens) + 1, penalty)
        best = max(best, (ended, tokens), key=lambda item: item[0])
        for token in range(vocab):
            if token == stop:
                continue
            if len(tokens) + 1 == budget:
                total = sequence_score(log_prob + probs[token], budget, penalty)
                best = max(best, (total, [*tokens, token]), key=lambda item: item[0])
            else:
                walk([*tokens, token], log_prob + probs[token])

    walk([], 0.0)
    return best[1], best[0]


@pytest.mark.parametrize("penalty", [0.0, 1.0, 2.0])
def test_wide_beam_search_finds_the_best_sequence(penalty: float) -> None:
    vocab, stop, budget, sources = 4, 3, 3, [11, 12, 13]
    beams = 64  # more than every hypothesis: beam search becomes exhaustive
    history = np.repeat(np.array(sources)[:, None], beams, axis=0)  # (B * K, 1)
    results = beam_search(
        fake_step(vocab),
        {"history": history},
        batch=len(sources),
        num_beams=beams,
        start_token=0,
        budget=budget,
        stop_tokens={stop},
        length_penalty=penalty,
    )
    for source, result in zip(sources, results, strict=True):
        tokens, score = best_by_enumeration(source, vocab, stop, budget, penalty)
        assert result.tokens == tokens
        assert result.score == pytest.approx(score)


def test_beam_search_of_one_beam_is_greedy_and_rows_are_independent() -> None:
    vocab, stop, budget, sources = 6, 5, 12, [1, 2, 3, 4, 7, 9]
    step = fake_step(vocab)
    collector = Collector([budget] * len(sources), {stop})
    history = np.array(sources)[:, None]
    start = np.zeros((len(sources), 1), np.int64)
    for _ in decode_steps(
        step, start, np.ones_like(start), {"history": history}, collector=collector, sampling=GREEDY, pad_id=0
    ):
        pass
    greedy = collector.result()
    assert {r.finish_reason for r in greedy} == {"stop", "length"}  # both endings are exercised
    one = beam_search(
        step,
        {"history": history},
        batch=len(sources),
        num_beams=1,
        start_token=0,
        budget=budget,
        stop_tokens={stop},
    )
    assert [(r.tokens, r.finish_reason) for r in one] == [(r.tokens, r.finish_reason) for r in greedy]
    wide = partial(beam_search, step, start_token=0, budget=budget, stop_tokens={stop}, num_beams=3)
    together = wide({"history": np.repeat(history, 3, axis=0)}, batch=len(sources))
    alone = [wide({"history": np.full((3, 1), s)}, batch=1)[0] for s in sources]
    assert together == alone


def test_left_pad_and_collector() -> None:
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    collector = Collector([2, 5, 0], stop_tokens={9})
    assert collector.reasons == [None, None, "length"]
    collector.add(np.array([4, 9, 4]))
    collector.add(np.array([4, 4, 4]))
    assert [(r.tokens, r.finish_reason) for r in collector.result()] == [
        ([4, 4], "length"),
        ([], "stop"),
        ([], "length"),
    ]
    assert collector.done


# Against the PyTorch reference (needs torch and the training checkpoints).


@pytest.mark.usefixtures("torch_one_thread")
def test_gpt_greedy_and_sampling_equal_the_pytorch_loop(
    checkpoint_dirs: dict[str, Path], gpt: TextGenerator
) -> None:
    from onnxformer.builder.generation import generate

    model = checkpoint_model(checkpoint_dirs, "gpt")
    prompts = gpt_prompts(gpt)
    eos = gpt.tokenizer.special_tokens["eos"]
    for sampling, stop in ((GREEDY, [eos]), (SAMPLED, [])):
        expected = generate(model, prompts, max_new_tokens=40, sampling=sampling, stop_tokens=stop)
        got = gpt.generate_ids(
            prompts,
            max_new_tokens=40,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            seed=sampling.seed,
            stop_tokens=stop,
        )
        assert [(r.tokens, r.finish_reason) for r in got] == [(r.tokens, r.finish_reason) for r in expected]


@pytest.mark.usefixtures("torch_one_thread")
def test_gpt_step_logits_match_pytorch(
    checkpoint_dirs: dict[str, Path], gpt: TextGenerator, monkeypatch
) -> None:
    from onnxformer.builder import generation
    from onnxformer.runtime.sampling import Sampler

    model = checkpoint_model(checkpoint_dirs, "gpt")
    seen: list[np.ndarray] = []

    class Recording(Sampler):
        def __call__(self, logits: np.ndarray) -> np.ndarray:
            seen.append(logits.copy())
            return super().__call__(logits)

    monkeypatch.setattr(generation, "Sampler", Recording)
    prompts = gpt_prompts(gpt)
    generation.generate(model, prompts, max_new_tokens=30, sampling=GREEDY, stop_tokens=[])
    started = time.perf_counter()
    steps = list(gpt.steps(prompts, max_new_tokens=30, temperature=0, stop_tokens=[]))
    seconds = time.perf_counter() - started
    assert len(steps) == len(seen) == 30
    worst = max(float(np.abs(s.logits - t).max()) for s, t in zip(steps, seen, strict=True))
    print(
        f"GPT per-step logits, ONNX Runtime vs PyTorch, {len(prompts)} rows x 30 steps: "
        f"max |diff| {worst:.2e}"
    )
    print(f"runtime: {seconds * 1000 / len(steps):.2f} ms per step for a batch of {len(prompts)}")
    assert worst < 1e-4


@pytest.mark.usefixtures("torch_one_thread")
def test_t5_equals_the_pytorch_loop(checkpoint_dirs: dict[str, Path], t5: TextToText) -> None:
    import torch

    from onnxformer.builder.generation import generate_seq2seq

    model = checkpoint_model(checkpoint_dirs, "t5")
    sources = t5_sources(t5)
    eos = t5.tokenizer.special_tokens["eos"]
    for sampling, stop in ((GREEDY, [eos]), (SAMPLED, [])):
        expected = generate_seq2seq(model, sources, max_new_tokens=70, sampling=sampling, stop_tokens=stop)
        got = t5.generate_ids(
            sources,
            max_new_tokens=70,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            seed=sampling.seed,
            stop_tokens=stop,
        )
        assert [(r.tokens, r.finish_reason) for r in got] == [(r.tokens, r.finish_reason) for r in expected]
    assert max(len(r.tokens) for r in got) == t5.max_len  # the decoder context bounds the output
    # The log-probability of each sampled output, teacher forced, from both.
    worst = 0.0
    for source, result in zip(sources, got, strict=True):
        target = result.tokens
        with torch.no_grad():
            source_ids = torch.tensor([source])
            memory = model.encode(source_ids).hidden  # (1, S, D)
            logits = model.decode(
                torch.tensor([[t5.start_token, *target[:-1]]]),
                cross_key_values=model.cross_key_values(memory),
            ).logits[0]  # (T, V)
        expected = float(torch.log_softmax(logits.double(), dim=-1)[torch.arange(len(target)), target].sum())
        worst = max(worst, abs(t5.score_ids(source, target) - expected))
    print(
        f"T5 teacher-forced log-probability of {len(sources)} outputs of up to {t5.max_len} tokens, "
        f"ONNX Runtime vs PyTorch: max |diff| {worst:.2e}"
    )
    assert worst < 1e-4


@pytest.mark.usefixtures("torch_one_thread")
def test_bert_outputs_match_pytorch(checkpoint_dirs: dict[str, Path], bert: TextEncoder) -> None:
    import torch

    model = checkpoint_model(checkpoint_dirs, "bert")
    ids, mask = (torch.from_numpy(a) for a in right_pad(bert._frame(TEXTS, truncate=False), 0))
    with torch.no_grad():
        out = model(ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))
    embedding_diff = float(np.abs(bert.embed(TEXTS) - out.sentence_embedding.numpy()).max())
    expected = torch.softmax(out.class_logits.double(), dim=-1).numpy()
    got = np.stack([c.probabilities for c in bert.classify(TEXTS)])
    class_diff = float(np.abs(got - expected).max())
    print(
        f"BERT vs PyTorch: sentence_embedding max |diff| {embedding_diff:.2e}, "
        f"class probabilities {class_diff:.2e}"
    )
    assert embedding_diff < 1e-4 and class_diff < 1e-4
