"""One loaded model shared by 16 threads, 200 requests each, prompts of mixed lengths: every output equals
the one computed alone beforehand (the model classes keep no per-call state). Torch-free."""

import threading
from pathlib import Path

import numpy as np
import pytest

from onnxformer.runtime import load

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
THREADS, REQUESTS = 16, 200
SENTENCE = "the cat sat on a mat while the small dog chased the red ball under an old table"


def _texts(count: int) -> list[str]:
    """Texts from one word to 40, so requests in flight together have different shapes."""
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(SENTENCE.split(" "), size=int(n))) for n in rng.integers(1, 41, size=count)]


def _hammer(call, requests: list) -> list[tuple[int, int, object]]:
    """Run `call(request)` from THREADS threads, each taking REQUESTS requests in its own order; every
    thread starts at once. Returns (thread, request index, result or exception)."""
    barrier = threading.Barrier(THREADS)
    results: list[list] = [[] for _ in range(THREADS)]

    def worker(thread: int) -> None:
        order = np.random.default_rng(thread).integers(0, len(requests), size=REQUESTS)
        barrier.wait()
        for index in order.tolist():
            try:
                results[thread].append((thread, index, call(requests[index])))
            except Exception as error:  # reported below as a mismatch, not lost in the thread
                results[thread].append((thread, index, error))

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in workers), "a thread hung"
    return [item for per_thread in results for item in per_thread]


@pytest.mark.timeout(300)
def test_encoder_shared_by_threads_matches_sequential() -> None:
    bert = load(EXPORTED / "bert", device="cpu")
    texts = _texts(24)
    requests = [texts[i : i + 1 + i % 3] for i in range(len(texts))]  # batches of 1 to 3, ragged
    expected = [bert.embed(request) for request in requests]
    done = _hammer(bert.embed, requests)
    assert len(done) == THREADS * REQUESTS
    mismatches = [
        (thread, index)
        for thread, index, got in done
        if not isinstance(got, np.ndarray) or not np.array_equal(got, expected[index])
    ]
    assert not mismatches, f"{len(mismatches)} of {len(done)} differ, first {mismatches[:5]}"


@pytest.mark.timeout(300)
def test_generator_shared_by_threads_matches_sequential() -> None:
    gpt = load(EXPORTED / "gpt", device="cpu")
    prompts = _texts(16)
    # Greedy and seeded sampling, one prompt or two of different lengths, 1 to 4 new tokens.
    requests = [
        (
            prompts[i : i + 1 + i % 2],
            {"max_new_tokens": 1 + i % 4, "temperature": (0.0, 1.0)[i % 2], "seed": i},
        )
        for i in range(len(prompts))
    ]

    def call(request: tuple) -> list[str]:
        prompt, options = request
        return gpt.generate(prompt, **options)

    expected = [call(request) for request in requests]
    done = _hammer(call, requests)
    assert len(done) == THREADS * REQUESTS
    mismatches = [(thread, index) for thread, index, got in done if got != expected[index]]
    assert not mismatches, f"{len(mismatches)} of {len(done)} differ, first {mismatches[:5]}"
