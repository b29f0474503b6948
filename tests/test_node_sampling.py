"""The Node host samples as the Python runtime does: numpy's default_rng draws, the sampler's tokens on the
same logits, and seeded generations on the reference exports (GPT, T5), batches and streamed pieces
included, compared side by side (Node through hosts/node/tests/sampling_driver.js).

Token choices could differ only where a draw lands within ~1e-16 of a boundary between two tokens'
cumulative probabilities (Math.exp and numpy's exp may differ in the last bit) or, for generations, where
the two ONNX Runtimes' logits differ; these tests show no such case on their seeds.
"""

import base64
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from onnxformer.runtime import load
from onnxformer.runtime.sampling import Sampler, SamplingConfig

ROOT = Path(__file__).resolve().parents[1]
NODE_HOST = ROOT / "hosts" / "node"
EXPORTED = ROOT / "exported"
SEEDS = [0, 1, 7, 42, 2**32 + 5, 2**53 + 1, 2**64 + 7, 2**128 + 12345, 123456789012345678901234567890]


def node(request: dict) -> dict:
    binary = shutil.which("node")
    assert binary, "Node.js is not installed; the host's tests need it (README: set-up)"
    assert (NODE_HOST / "node_modules").is_dir(), "run `make node-deps` first (npm ci in hosts/node)"
    done = subprocess.run(
        [binary, "tests/sampling_driver.js"],
        cwd=NODE_HOST,
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def with_seed(options: dict) -> dict:
    """Options for the driver: seeds as decimal strings (exact past 2**53)."""
    return {**options, "seed": None if options.get("seed") is None else str(options["seed"])}


def test_default_rng_draws_equal_numpy() -> None:
    count = 2000
    draws = node({"op": "rng", "seeds": [str(seed) for seed in SEEDS], "count": count})["draws"]
    expected = [np.random.default_rng(seed).random(count) for seed in SEEDS]
    diff = max(float(np.abs(np.array(got) - want).max()) for got, want in zip(draws, expected, strict=True))
    print(f"{len(SEEDS)} seeds x {count} draws, max abs diff {diff:g}")
    for seed, got, want in zip(SEEDS, draws, expected, strict=True):
        assert got == want.tolist(), f"seed {seed}: first difference at {np.argmax(np.array(got) != want)}"


CONFIGS = [
    {"temperature": 0.9, "top_k": 20, "top_p": 0.9},
    {"temperature": 1.0, "top_k": 0, "top_p": 1.0},
    {"temperature": 0.7, "top_k": 0, "top_p": 0.8},
    {"temperature": 2.5, "top_k": 5, "top_p": 1.0},
    {"temperature": 1.3, "top_k": 50, "top_p": 0.5},
    {"temperature": 1e-310, "top_k": 0, "top_p": 1.0},  # overflows: the shifted (greedy-limit) path
    {"temperature": 0.0, "top_k": 0, "top_p": 1.0},  # greedy
]


def test_sampler_picks_pythons_tokens_on_the_same_logits() -> None:
    batch, vocab, steps = 3, 400, 60
    rng = np.random.default_rng(2026)
    logits = (rng.normal(size=(steps, batch, vocab)) * 3).astype(np.float32)  # (steps, B, V)
    logits[:, 1, 10:20] = logits[:, 1, 10:11]  # ties: the lower id first, as numpy's stable argsort
    configs = [{**config, "seed": seed} for config in CONFIGS for seed in (0, 7, 2**64 + 7)]
    got = node(
        {
            "op": "sample",
            "vocab": vocab,
            "batch": batch,
            "steps": [base64.b64encode(step.tobytes()).decode() for step in logits],
            "configs": [
                with_seed(
                    {
                        "temperature": c["temperature"],
                        "topK": c["top_k"],
                        "topP": c["top_p"],
                        "seed": c["seed"],
                    }
                )
                for c in configs
            ],
        }
    )["tokens"]
    compared = 0
    for config, tokens in zip(configs, got, strict=True):
        sampler = Sampler(SamplingConfig(**config), batch)
        expected = [sampler(step).tolist() for step in logits]
        assert tokens == expected, f"{config}: Node {tokens[:3]} vs Python {expected[:3]}"
        compared += steps * batch
    print(f"{compared} tokens compared over {len(configs)} configs x seeds: all equal")


PROMPTS = ["The cat", "a dog ran", "", "She said that the"]
SAMPLING = [
    {"temperature": 0.9, "top_k": 20, "top_p": 0.9, "seed": 7},
    {"temperature": 0.9, "top_k": 20, "top_p": 0.9, "seed": 42},
    {"temperature": 1.5, "top_k": 0, "top_p": 1.0, "seed": 2**40 + 3},
    {"temperature": 0.6, "top_k": 0, "top_p": 0.7, "seed": 0},
    {"temperature": 0.8, "top_k": 0, "top_p": 1.0, "seed": 5, "stop_tokens": []},  # the full budget
]


def camel(options: dict) -> dict:
    names = {"max_new_tokens": "maxNewTokens", "top_k": "topK", "top_p": "topP", "stop_tokens": "stopTokens"}
    return with_seed({names.get(key, key): value for key, value in options.items()})


@pytest.fixture(scope="module")
def gpt():
    return load(EXPORTED / "gpt", threads=1)


def test_gpt_seeded_generations_equal_python(gpt) -> None:
    rows = [gpt.frame(prompt, what="prompt") for prompt in PROMPTS]
    calls, expected = [], []
    for options in SAMPLING:
        options = {**options, "max_new_tokens": 24}
        for row in rows:  # one by one
            calls.append({"method": "generateIds", "input": row, "options": camel(options)})
            (result,) = gpt.generate_ids([row], **options)
            expected.append({"tokens": result.tokens, "finishReason": result.finish_reason})
        # a batch: Python's left-padded batch against Node's rows
        calls.append({"method": "generateIds", "input": rows, "options": camel(options)})
        expected.append(
            [{"tokens": r.tokens, "finishReason": r.finish_reason} for r in gpt.generate_ids(rows, **options)]
        )
        calls.append({"method": "generate", "input": PROMPTS, "options": camel(options)})
        expected.append(gpt.generate(PROMPTS, **options))
    got = node({"op": "generate", "dir": str(EXPORTED / "gpt"), "calls": calls})["results"]
    tokens = 0
    for call, mine, theirs in zip(calls, got, expected, strict=True):
        assert mine == theirs, f"{call['options']} {call['method']}({call['input']!r})"
        if call["method"] == "generateIds":
            tokens += sum(len(r["tokens"]) for r in (theirs if isinstance(theirs, list) else [theirs]))
    print(f"{len(calls)} GPT calls ({tokens} sampled token ids, one by one and in batches) equal")


def test_gpt_stream_pieces_equal_python(gpt) -> None:
    cases = []
    for seed in (3, 11, 2**33):
        cases.append(("The cat", {"temperature": 1.4, "seed": seed, "max_new_tokens": 30}))
        # Hot enough to draw lone bytes: characters split across tokens, and bytes that never complete one.
        cases.append(("The cat", {"temperature": 4.0, "seed": seed, "stop_tokens": [], "max_new_tokens": 40}))
        cases.append(
            ("a dog", {"temperature": 1.0, "seed": seed, "stop": [" the", "."], "max_new_tokens": 30})
        )
    cases.append(("The cat", {"temperature": 0, "max_new_tokens": 20}))
    calls = [{"method": "stream", "input": prompt, "options": camel(options)} for prompt, options in cases]
    got = node({"op": "generate", "dir": str(EXPORTED / "gpt"), "calls": calls})["results"]
    split = 0
    for (prompt, options), pieces in zip(cases, got, strict=True):
        expected = list(gpt.stream(prompt, **options))
        assert pieces == expected, f"{prompt!r} {options}"
        text = gpt.generate(prompt, **options)
        assert "".join(pieces) == text
        split += any(ord(character) > 127 for character in text)
    assert split >= 3, "no stream drew a character of several bytes; raise the temperature"
    print(f"{len(cases)} streams ({split} with multi-byte characters), {sum(map(len, got))} pieces equal")


def test_t5_seeded_generations_equal_python() -> None:
    t5 = load(EXPORTED / "t5", threads=1)
    texts = ["The cat chased the dog.", "a bird sang", "The dog saw the cat."]
    rows = [t5.frame(text) for text in texts]
    calls, expected = [], []
    for options in SAMPLING[:3]:
        options = {**options, "max_new_tokens": 20}
        for row in rows:
            calls.append({"method": "generateIds", "input": row, "options": camel(options)})
            (result,) = t5.generate_ids([row], **options)
            expected.append({"tokens": result.tokens, "finishReason": result.finish_reason})
        calls.append({"method": "generate", "input": texts, "options": camel(options)})
        expected.append(t5.generate(texts, **options))
    got = node({"op": "generate", "dir": str(EXPORTED / "t5"), "calls": calls})["results"]
    for call, mine, theirs in zip(calls, got, expected, strict=True):
        assert mine == theirs, f"{call['options']} {call['method']}({call['input']!r})"
    print(f"{len(calls)} T5 calls equal in Node and Python")


def test_t5_beam_search_equals_python() -> None:
    t5 = load(EXPORTED / "t5", threads=1)
    texts = ["The cat chased the dog.", "a bird sang", "The dog saw the cat."]
    rows = [t5.frame(text) for text in texts]
    cases = [{"num_beams": 2}, {"num_beams": 4, "length_penalty": 0.6}, {"num_beams": 3, "max_new_tokens": 5}]
    names = {"num_beams": "numBeams", "length_penalty": "lengthPenalty", "max_new_tokens": "maxNewTokens"}
    calls, expected = [], []
    for options in cases:
        calls.append(
            {"method": "generateIds", "input": rows, "options": {names[k]: v for k, v in options.items()}}
        )
        expected.append(t5.generate_ids(rows, **options))
        calls.append(
            {"method": "generate", "input": texts, "options": {names[k]: v for k, v in options.items()}}
        )
        expected.append(t5.generate(texts, **options))
    got = node({"op": "generate", "dir": str(EXPORTED / "t5"), "calls": calls})["results"]
    diff = 0.0
    for call, mine, theirs in zip(calls, got, expected, strict=True):
        if call["method"] == "generate":
            assert mine == theirs, call
            continue
        for row, result in zip(mine, theirs, strict=True):
            assert (row["tokens"], row["finishReason"]) == (result.tokens, result.finish_reason), call
            diff = max(diff, abs(row["score"] - result.score))
    assert diff < 1e-4, f"beam scores differ by {diff:g}"
    print(f"{len(calls)} T5 beam-search calls equal in Node and Python, scores within {diff:.2e}")


def test_beam_search_equals_python_on_a_fake_decoder() -> None:
    """The trained T5 is sure of itself (its beams mostly agree with greedy), so beam search also runs on a
    fake decoder whose logits are a random table indexed by (length, last token), where beams differ."""
    from onnxformer.runtime.decoding import beam_search

    vocab, budget = 12, 9
    table = np.random.default_rng(5).normal(size=(budget, vocab, vocab)).astype(np.float32)  # (len, tok, V)

    def step(ids, mask, cache):  # ids (B * K, 1), mask (B * K, P + 1)
        return table[mask.shape[1] - 1][ids[:, 0]], cache

    cases = [
        {"numBeams": k, "startToken": 0, "budget": budget, "stopTokens": stops, "lengthPenalty": penalty}
        for k in (1, 2, 3, 5)
        for stops in ([1], [1, 4], [])
        for penalty in (1.0, 0.0, -1.5)
    ]
    got = node(
        {
            "op": "beam",
            "vocab": vocab,
            "table": [base64.b64encode(layer.tobytes()).decode() for layer in table],
            "cases": cases,
        }
    )["results"]
    greedy = beam_search(step, {}, batch=1, num_beams=1, start_token=0, budget=budget, stop_tokens=[1])[0]
    differ, diff = 0, 0.0
    for case, mine in zip(cases, got, strict=True):
        (theirs,) = beam_search(
            step,
            {},
            batch=1,
            num_beams=case["numBeams"],
            start_token=0,
            budget=budget,
            stop_tokens=case["stopTokens"],
            length_penalty=case["lengthPenalty"],
        )
        assert (mine["tokens"], mine["finishReason"]) == (theirs.tokens, theirs.finish_reason), case
        diff = max(diff, abs(mine["score"] - theirs.score))
        differ += theirs.tokens != greedy.tokens
    assert diff < 1e-12, f"scores differ by {diff:g}"
    assert differ >= len(cases) // 2, f"only {differ} of {len(cases)} beam results differ from greedy"
    print(f"{len(cases)} fake-decoder beam searches equal ({differ} unlike greedy), scores within {diff:.1e}")


def test_text_encoder_normalize_and_similarity_equal_python() -> None:
    bert = load(EXPORTED / "bert", threads=1)
    texts = ["The cat sat on the mat.", "a dog", ""]
    pairs = [("The cat sat.", "The dog sat."), ("a bird", "The owl watched the mouse.")]
    calls = [{"method": "embed", "input": texts, "options": {"normalize": True}}]
    calls += [{"method": "similarity", "input": list(pair), "options": {}} for pair in pairs]
    got = node({"op": "generate", "dir": str(EXPORTED / "bert"), "calls": calls})["results"]
    vectors = bert.embed(texts, normalize=True)  # (N, D)
    diff = float(np.abs(np.array(got[0]) - vectors).max())
    diff = max(diff, *(abs(mine - bert.similarity(*pair)) for mine, pair in zip(got[1:], pairs, strict=True)))
    assert np.allclose(np.linalg.norm(np.array(got[0]), axis=-1), 1, atol=1e-6)
    assert diff < 1e-5, f"max abs diff {diff:g}"
    print(f"normalized embeddings and similarities: max abs diff {diff:.2e}")
