"""How far an optimised graph departs from the original: on the golden cases, and on the built-in tasks.

`compare_graphs` runs the original and the optimised graph (both with ONNX Runtime) on every golden case of
that graph (the export's own parity inputs: first and cached steps, padding, shapes unlike the trace) and
reports, per output, the largest difference to the original graph and to the PyTorch outputs stored in the
goldens, and the smallest cosine similarity of a batch row to PyTorch's.

`task_metrics` scores a model export, through the runtime classes, on held-out data of the built-in tasks
(split as `onnxformer train` splits it with its default seed 0): BERT classification and masked-token
accuracy, GPT next-token accuracy and loss (teacher forced), T5 exact match of greedy outputs. Accuracies
are fractions; "1 point" is 0.01.
"""

import dataclasses
from dataclasses import dataclass

import numpy as np

from onnxformer.runtime.decoding import right_pad
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import golden_cases
from onnxformer.runtime.loader import ModelExport
from onnxformer.runtime.session import create_session

# The output whose direction int8 must keep, per (family, role): the embedding, or the logits.
MAIN_OUTPUTS = {
    ("bert", "encoder"): "sentence_embedding",
    ("gpt", "decoder"): "logits",
    ("t5", "encoder"): "last_hidden_state",
    ("t5", "decoder"): "logits",
}
TRAIN_SEED = 0  # `onnxformer train`'s default: its held-out split is the one scored here
MASK_RATE = 0.15


@dataclass(frozen=True)
class Agreement:
    cases: int
    max_abs_diff: dict[str, float]  # output -> largest |optimised - original| (both ONNX Runtime)
    max_abs_diff_pytorch: dict[str, float]  # output -> largest |optimised - PyTorch golden|
    min_cosine: dict[str, float]  # output -> smallest cosine of a batch row to the PyTorch golden
    within_golden_tolerance: bool  # every output within its golden atol + rtol * max |golden|
    worst_excess: str  # where the golden tolerance was missed by the most ("" when it held)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def compare_graphs(export: ExportFolder, originals: dict[str, bytes], optimized: dict[str, bytes]) -> dict:
    """File -> `Agreement` for each optimised graph (`originals` and `optimized` map file -> bytes)."""
    sessions = {
        path: (create_session(originals[path], device="cpu"), create_session(data, device="cpu"))
        for path, data in optimized.items()
    }
    stats: dict[str, dict] = {path: {"cases": 0, "orig": {}, "torch": {}, "cos": {}} for path in optimized}
    excess: dict[str, tuple[float, str]] = {path: (0.0, "") for path in optimized}
    for loaded in golden_cases(export):
        path = loaded.graph.file
        if path not in sessions:
            continue
        names = list(loaded.case.outputs)
        before = sessions[path][0].run(loaded.inputs, names)
        after = sessions[path][1].run(loaded.inputs, names)
        entry = stats[path]
        entry["cases"] += 1
        for name, old, new in zip(names, before, after, strict=True):
            want = loaded.expected[name]
            if new.shape != want.shape:
                raise ExportError(
                    f"{path}: the optimised graph's {name} has shape {new.shape}, not {want.shape}"
                )
            diff = _max_abs(new, old)
            to_torch = _max_abs(new, want)
            allowed = loaded.graph.atol + loaded.graph.rtol * (
                float(np.max(np.abs(want))) if want.size else 0.0
            )
            if to_torch - allowed > excess[path][0]:
                excess[path] = (
                    to_torch - allowed,
                    f"{name} at {loaded.case.label}: {to_torch:.3g} > {allowed:.3g}",
                )
            entry["orig"][name] = max(entry["orig"].get(name, 0.0), diff)
            entry["torch"][name] = max(entry["torch"].get(name, 0.0), to_torch)
            entry["cos"][name] = min(entry["cos"].get(name, 1.0), _min_row_cosine(new, want))
    results = {}
    for path, entry in stats.items():
        if entry["cases"] == 0:
            raise ExportError(
                f"{path} has no golden cases to compare the optimised graph on; re-export the folder with "
                "this version of onnxformer (exports carry goldens/)"
            )
        results[path] = Agreement(
            entry["cases"], entry["orig"], entry["torch"], entry["cos"], not excess[path][1], excess[path][1]
        )
    return results


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def _min_row_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Smallest cosine similarity between matching batch rows (axis 0) of two arrays; 1 for empty ones."""
    if a.size == 0 or a.ndim == 0:
        return 1.0
    x = a.reshape(a.shape[0], -1).astype(np.float64)
    y = b.reshape(b.shape[0], -1).astype(np.float64)
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    both_zero = (np.linalg.norm(x, axis=1) == 0) & (np.linalg.norm(y, axis=1) == 0)
    cosine = np.where(both_zero, 1.0, np.sum(x * y, axis=1) / np.maximum(norms, 1e-30))
    return float(cosine.min())


def task_metrics(export: ModelExport, *, limit: int = 400) -> dict[str, float]:
    """The built-in task scores of a model export on up to `limit` held-out examples."""
    scorers = {"bert": _bert_metrics, "gpt": _gpt_metrics, "t5": _t5_metrics}
    return scorers[export.family](export, limit)


def _bert_metrics(export: ModelExport, limit: int) -> dict[str, float]:
    from onnxformer.builder.data import classification_examples, split_held_out
    from onnxformer.builder.training.bert_task import BUILTIN_EXAMPLES
    from onnxformer.runtime.encoder import TextEncoder

    _, held_out = split_held_out(classification_examples(BUILTIN_EXAMPLES, seed=TRAIN_SEED), seed=TRAIN_SEED)
    examples = held_out[:limit]
    encoder = TextEncoder(export)
    texts = [text for text, _ in examples]
    results = encoder.classify(texts, batch_size=64)
    classification = np.mean([r.label == label for r, (_, label) in zip(results, examples, strict=True)])
    special = export.special
    rng = np.random.default_rng(1234)
    rows, targets = [], []
    for text, label in examples:
        if label != 1:
            continue
        ids = [special["cls"], *encoder.tokenizer.encode(text), special["sep"]]
        inner = np.arange(1, len(ids) - 1)
        chosen = inner[rng.random(len(inner)) < MASK_RATE] if len(inner) else inner
        if len(chosen) == 0 and len(inner):
            chosen = inner[:1]
        masked = list(ids)
        for position in chosen.tolist():
            masked[position] = special["mask"]
        rows.append(masked)
        targets.append([(position, ids[position]) for position in chosen.tolist()])
    hits = total = 0
    session = export.sessions["encoder"]
    for start in range(0, len(rows), 64):
        ids, mask = right_pad(rows[start : start + 64], special["pad"])  # (B, T)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (logits,) = session.run(feeds, ["mlm_logits"])  # (B, T, V)
        for row, wanted in enumerate(targets[start : start + 64]):
            for position, token in wanted:
                hits += int(np.argmax(logits[row, position]) == token)
                total += 1
    return {
        "classification_accuracy": float(classification),
        "masked_token_accuracy": hits / max(total, 1),
        "examples": float(len(examples)),
    }


def _gpt_metrics(export: ModelExport, limit: int) -> dict[str, float]:
    from onnxformer.builder.data import generate_sentences, split_held_out
    from onnxformer.builder.training.gpt_task import BUILTIN_SENTENCES
    from onnxformer.runtime.generator import TextGenerator

    _, held_out = split_held_out(generate_sentences(BUILTIN_SENTENCES, seed=TRAIN_SEED), seed=TRAIN_SEED)
    generator = TextGenerator(export)
    special = export.special
    rows = [[special["bos"], *generator.tokenizer.encode(text), special["eos"]] for text in held_out[:limit]]
    session, cache = export.sessions["decoder"], export.cache
    hits = count = 0
    loss = 0.0
    for start in range(0, len(rows), 64):
        ids, mask = right_pad(rows[start : start + 64], special["pad"])  # (B, T)
        feeds = {"input_ids": ids, "attention_mask": mask, **cache.empty(len(ids))}
        (logits,) = session.run(feeds, ["logits"])  # (B, T, V)
        predicted, following = logits[:, :-1], ids[:, 1:]  # position t predicts token t + 1
        real = mask[:, 1:] == 1  # (B, T - 1)
        shifted = predicted.astype(np.float64) - predicted.max(axis=-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        chosen = np.take_along_axis(log_probs, following[..., None], axis=-1)[..., 0]  # (B, T - 1)
        loss -= float(chosen[real].sum())
        hits += int((predicted.argmax(axis=-1) == following)[real].sum())
        count += int(real.sum())
    return {
        "next_token_accuracy": hits / max(count, 1),
        "val_loss": loss / max(count, 1),
        "examples": len(rows),
    }


def _t5_metrics(export: ModelExport, limit: int) -> dict[str, float]:
    from onnxformer.builder.data import passive_pairs, split_held_out
    from onnxformer.builder.training.t5_task import BUILTIN_PAIRS
    from onnxformer.runtime.seq2seq import TextToText

    _, held_out = split_held_out(passive_pairs(BUILTIN_PAIRS, seed=TRAIN_SEED), seed=TRAIN_SEED)
    pairs = held_out[: limit // 2]  # greedy generation costs more per example than a forward pass
    model = TextToText(export)
    outputs = []
    for start in range(0, len(pairs), 64):
        outputs += model.generate([source for source, _ in pairs[start : start + 64]], temperature=0.0)
    hits = sum(output == target for output, (_, target) in zip(outputs, pairs, strict=True))
    return {"exact_match": hits / max(len(pairs), 1), "examples": float(len(pairs))}
