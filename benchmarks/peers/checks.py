"""What the peers' outputs are checked for after timing: embeddings against sentence-transformers' (cosine
and a retrieval check), generated tokens against transformers' greedy ones."""

import tempfile
from pathlib import Path

import numpy as np

from benchmarks.peers.envs import Worker
from benchmarks.peers.workloads import Tool, Workload


def embedding_checks(vectors: dict[str, np.ndarray], tools: dict[str, Tool], queries: int = 100) -> dict:
    """Cosine of each tool's embeddings to sentence-transformers' (PyTorch fp32), and a retrieval check:
    each of the first `queries` sentences embedded by the tool, searched among the reference embeddings
    of all sentences; the rank of the same sentence (1 = found first)."""
    reference = vectors.get("sentence-transformers")
    if reference is None:
        return {}

    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)

    reference = unit(reference)
    checks = {}
    for name, value in vectors.items():
        value = unit(value)
        cosine = (value * reference).sum(axis=-1)  # (N,)
        scores = value[:queries] @ reference.T  # (Q, N)
        own = scores[np.arange(len(scores)), np.arange(len(scores))]  # (Q,)
        ranks = 1 + (scores > own[:, None]).sum(axis=-1)  # (Q,)
        checks[name] = {
            "precision": tools[name].precision,
            "cosine_to_reference_min": round(float(cosine.min()), 6),
            "cosine_to_reference_mean": round(float(cosine.mean()), 6),
            "retrieval_queries": len(ranks),
            "retrieval_recall_at_1": round(float((ranks == 1).mean()), 3),
            "retrieval_mean_rank": round(float(ranks.mean()), 3),
            "retrieval_worst_rank": int(ranks.max()),
        }
    return {"reference": "sentence-transformers", "tools": checks}


def token_checks(tokens: dict[str, list[list[int]]], reference: str) -> dict:
    """Per tool: the rows equal to the reference's tokens, and the mean length of the common prefix."""
    base = tokens.get(reference)
    if base is None:
        return {}
    checks = {}
    for name, rows in tokens.items():
        prefixes = []
        for row, want in zip(rows, base, strict=False):
            same = next(
                (i for i, (a, b) in enumerate(zip(row, want, strict=False)) if a != b),
                min(len(row), len(want)),
            )
            prefixes.append(same)
        checks[name] = {
            "new_tokens": [len(row) for row in rows],
            "rows_equal": sum(row == want for row, want in zip(rows, base, strict=False)),
            "rows": len(rows),
            "mean_common_prefix": round(float(np.mean(prefixes)), 1) if prefixes else 0.0,
        }
    return {"reference": reference, "tools": checks}


def output_checks(workload: Workload, workers: dict[str, Worker], tools: dict[str, Tool]) -> dict:
    """The outputs of the workload's last call in every worker, compared (Workload.check)."""
    if workload.check == "embeddings":
        vectors = {}
        with tempfile.TemporaryDirectory() as tmp:
            for name, worker in workers.items():
                path = Path(tmp) / f"{name.replace(':', '-')}.npy"
                worker.request("output", key=workload.key, path=str(path))
                vectors[name] = np.load(path)
        return embedding_checks(vectors, tools)
    tokens = {name: worker.request("output", key=workload.key)["output"] for name, worker in workers.items()}
    return token_checks(tokens, "transformers")
