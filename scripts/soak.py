"""Soak test: many requests against one loaded model, watching the process's resident memory (RSS).

Runs `--encodes` encoder requests (BERT embed and classify, texts of 1 to 40 words, batches of 1 to 4)
and `--generations` generations (GPT, greedy and seeded sampling, 1 to 16 new tokens, one or two
prompts), interleaved, on the committed reference exports, and reports RSS after a warm-up (the first
10% of the requests: allocator pools and ONNX Runtime's arenas grow to their working size there) and at
the end. A leak shows as growth after warm-up that keeps pace with the request count.

    .venv-runtime/bin/python scripts/soak.py            # 20,000 encoder requests, 2,000 generations
    .venv-runtime/bin/python scripts/soak.py --json

Not a timed test: it takes about a minute on two cores.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from onnxformer.runtime import load

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "the cat sat on a mat while the small dog chased the red ball under an old table"


def rss_mb() -> float:
    """Resident set size now, in MiB (Linux /proc; elsewhere the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def soak(encodes: int, generations: int, *, exported: Path, seed: int = 0) -> dict:
    bert = load(exported / "bert", device="cpu")
    gpt = load(exported / "gpt", device="cpu")
    rng = np.random.default_rng(seed)

    def text() -> str:
        return " ".join(rng.choice(SENTENCE.split(" "), size=int(rng.integers(1, 41))))

    total = encodes + generations
    every = max(1, total // generations) if generations else total + 1  # one generation per `every`
    warm_at = total // 10
    samples: list[tuple[int, float]] = []
    done_encodes = done_generations = 0
    start = time.perf_counter()
    warm = None
    for index in range(total):
        if index == warm_at:
            warm = rss_mb()
        if done_generations < generations and (index % every == every - 1 or done_encodes >= encodes):
            prompts = [text()[:60] for _ in range(int(rng.integers(1, 3)))]
            sampled = bool(rng.integers(0, 2))
            gpt.generate(
                prompts,
                max_new_tokens=int(rng.integers(1, 17)),
                temperature=1.0 if sampled else 0.0,
                seed=int(rng.integers(0, 2**31)),
            )
            done_generations += 1
        else:
            texts = [text() for _ in range(int(rng.integers(1, 5)))]
            if rng.integers(0, 2):
                bert.embed(texts)
            else:
                bert.classify(texts)
            done_encodes += 1
        if index % max(1, total // 20) == 0:
            samples.append((index, round(rss_mb(), 1)))
    end = rss_mb()
    warm = warm if warm is not None else end
    return {
        "encoder_requests": done_encodes,
        "generations": done_generations,
        "seconds": round(time.perf_counter() - start, 1),
        "rss_after_warmup_mb": round(warm, 1),
        "rss_end_mb": round(end, 1),
        "growth_after_warmup_mb": round(end - warm, 1),
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encodes", type=int, default=20_000)
    parser.add_argument("--generations", type=int, default=2_000)
    parser.add_argument("--exported", type=Path, default=ROOT / "exported")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args(argv)
    result = soak(args.encodes, args.generations, exported=args.exported)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['encoder_requests']} encoder requests and {result['generations']} generations in "
            f"{result['seconds']} s; RSS {result['rss_after_warmup_mb']} MiB after warm-up, "
            f"{result['rss_end_mb']} MiB at the end: growth {result['growth_after_warmup_mb']} MiB"
        )
        print("RSS by request: " + ", ".join(f"{i}: {mb}" for i, mb in result["samples"]))
    return result


if __name__ == "__main__":
    main()
