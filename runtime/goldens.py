"""Running an export's golden test data through this runtime (format: docs/goldens.md).

    results = run_goldens(ExportFolder.open("exported/gpt"))
    assert all(result.ok for result in results)

Graph goldens feed each ONNX file its recorded inputs and compare with the PyTorch outputs written at
export; end-to-end goldens check the tokenizer ids, the greedy generations (exact ids) and the sentence
embeddings through the runtime's own classes. Every golden file is read through `ExportFolder.read`, so
its sha256 is checked first.
"""

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxformer.runtime.decoding import with_room
from onnxformer.runtime.errors import ManifestError, OnnxformerError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.manifest import GoldenCase, GoldenGraph, Manifest, allowed_difference
from onnxformer.runtime.session import Device, Session, create_session
from onnxformer.runtime.tensorproto import read_tensor

if TYPE_CHECKING:
    from onnxformer.runtime.model import ExportModel

END_TO_END = "end_to_end"


@dataclass(frozen=True)
class GoldenResult:
    file: str  # the ONNX file, or "end_to_end"
    label: str  # the case ("cached step B=3 P=9 T=1", "greedy 'the cat'", ...)
    problem: str | None  # None when the case passed
    max_abs_diff: float | None = None  # largest |got - golden| over the outputs (None: exact checks)
    allowed: float | None = None  # the tolerance at that output

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass(frozen=True)
class LoadedCase:
    graph: GoldenGraph
    case: GoldenCase
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]


def golden_cases(export: ExportFolder) -> Iterator[LoadedCase]:
    """Every graph golden case with its tensors read (sha256-checked) from the folder."""
    goldens = export.manifest.goldens
    if goldens is None:
        return
    for graph in goldens.graphs:
        for case in graph.cases:
            inputs = _tensors(export, case.input_files(), case.inputs)
            expected = _tensors(export, case.output_files(), case.outputs)
            yield LoadedCase(graph, case, inputs, expected)


def run_case(
    session: Session, manifest: Manifest, file: str, inputs: dict[str, np.ndarray], names: list[str]
) -> list[np.ndarray]:
    """`session.run(inputs, names)` on golden inputs (past in, past + new out), fed as `file` takes them.

    The decoder of an in-place cache gets each past with room for the step's tokens, so that its presents
    have the goldens' shape; a step with a past and several new tokens runs one row at a time, since ONNX
    Runtime's GroupQueryAttention takes batch 1 there (the runtime's own steps never do: the prompt has no
    past, and later steps add one token)."""
    cache = manifest.kv_cache
    if cache is None or not cache.in_place or manifest.graphs.get("decoder") != file:
        return session.run(inputs, names)
    new = inputs["input_ids"].shape[1]
    feeds = with_room(inputs, cache, new)
    batch = inputs["input_ids"].shape[0]
    past = inputs[cache.past_names()[0]].shape[2]
    if new == 1 or past == 0 or batch == 1:
        return session.run(feeds, names)
    rows = [session.run({k: v[i : i + 1] for k, v in feeds.items()}, names) for i in range(batch)]
    return [np.concatenate(parts, axis=0) for parts in zip(*rows, strict=True)]


def _tensors(export: ExportFolder, paths: list[str], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    tensors = {}
    for path, name in zip(paths, names, strict=True):
        found, value = read_tensor(export.read(path), source=path)
        if found != name:
            raise ManifestError(f"{path} holds tensor {found!r} but the manifest says {name!r}; re-export")
        tensors[name] = value
    return tensors


def allowance(golden: np.ndarray, atol: float, rtol: float) -> float:
    """The largest |got - golden| a golden allows: atol + rtol * max |golden| (docs/goldens.md)."""
    return allowed_difference(atol, rtol, float(np.max(np.abs(golden))) if golden.size else 0.0)


def case_allowance(loaded: LoadedCase, index: int) -> float:
    """What output `index` of a loaded case may differ from its golden by: the case's own allowance
    (float64-reference exports), else the graph's atol + rtol * max |golden|."""
    want = loaded.expected[loaded.case.outputs[index]]
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    return loaded.case.allowance(index, loaded.graph.atol, loaded.graph.rtol, scale)


def compare(loaded: LoadedCase, got: dict[str, np.ndarray]) -> GoldenResult:
    """`got` (output name -> array) against the goldens of one case, with the case's allowances."""
    graph, case = loaded.graph, loaded.case
    worst, worst_allowed = 0.0, graph.atol
    for index, (name, want) in enumerate(loaded.expected.items()):
        have = got.get(name)
        if have is None:
            return GoldenResult(graph.file, case.label, f"output {name} is missing")
        if have.shape != want.shape:
            return GoldenResult(graph.file, case.label, f"{name} has shape {have.shape}, golden {want.shape}")
        diff = float(np.max(np.abs(have.astype(np.float64) - want))) if want.size else 0.0
        allowed = case_allowance(loaded, index)
        if not np.isfinite(diff) or diff > allowed:
            return GoldenResult(
                graph.file, case.label, f"{name} differs by {diff:.3g} (allowed {allowed:.3g})", diff, allowed
            )
        if diff >= worst:
            worst, worst_allowed = diff, allowed
    return GoldenResult(graph.file, case.label, None, worst, worst_allowed)


def run_graph_goldens(export: ExportFolder, *, device: Device = "cpu") -> list[GoldenResult]:
    """Every graph golden case through ONNX Runtime; a failing case does not stop the others."""
    sessions: dict[str, Session] = {}
    results = []
    for loaded in golden_cases(export):
        file = loaded.graph.file
        try:
            if file not in sessions:
                sessions[file] = create_session(export.graph(file), device=device)
            names = list(loaded.case.outputs)
            outputs = run_case(sessions[file], export.manifest, file, loaded.inputs, names)
        except OnnxformerError as error:
            results.append(GoldenResult(file, loaded.case.label, str(error)))
            continue
        except Exception as error:  # ONNX Runtime's own errors are untyped
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            results.append(GoldenResult(file, loaded.case.label, f"ONNX Runtime failed: {message}"))
            continue
        results.append(compare(loaded, dict(zip(loaded.case.outputs, outputs, strict=True))))
    return results


def run_end_to_end(export: ExportFolder, *, device: Device = "cpu") -> list[GoldenResult]:
    """The end-to-end goldens (tokenizer, greedy generation, embeddings) through the runtime's classes."""
    goldens = export.manifest.goldens
    if goldens is None or goldens.end_to_end is None:
        return []
    from onnxformer.runtime.loader import load  # the model classes sit above this module

    try:
        data = json.loads(export.read(goldens.end_to_end).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ManifestError(
            f"{goldens.end_to_end} is not valid JSON ({error}); re-export the folder"
        ) from None
    model = load(export.root, device=device)
    try:
        results = [_tokenizer_case(model, item) for item in data.get("tokenizer", [])]
        results += [_greedy_case(model, item) for item in data.get("greedy", [])]
        embeddings = data.get("embeddings")
        if embeddings:
            results += [_embedding_case(model, embeddings, item) for item in embeddings["items"]]
    except (KeyError, TypeError, AttributeError) as error:
        raise ManifestError(
            f"{goldens.end_to_end} has a missing or mistyped field ({error!r}); re-export the folder"
        ) from None
    return results


def run_goldens(export: ExportFolder, *, device: Device = "cpu") -> list[GoldenResult]:
    """Graph goldens, then end-to-end goldens."""
    return run_graph_goldens(export, device=device) + run_end_to_end(export, device=device)


def _tokenizer_case(model: "ExportModel", item: dict[str, Any]) -> GoldenResult:
    label = f"tokenize {item['text']!r}"
    got = model.tokenizer.encode(item["text"])
    if got != item["ids"]:
        return GoldenResult(END_TO_END, label, f"ids {got} differ from the golden {item['ids']}")
    return GoldenResult(END_TO_END, label, None)


def _greedy_case(model: "ExportModel", item: dict[str, Any]) -> GoldenResult:
    from onnxformer.runtime.generator import TextGenerator
    from onnxformer.runtime.seq2seq import TextToText

    if not isinstance(model, TextGenerator | TextToText):  # reported as a mistyped end-to-end field
        raise TypeError(f"greedy goldens need a model that generates, not a {type(model).__name__}")
    label = f"greedy {item['prompt']!r}"
    options = {"max_new_tokens": item["max_new_tokens"], "stop_tokens": item["stop_tokens"]}
    (result,) = model.generate_ids([item["input_ids"]], temperature=0.0, **options)  # GPT and T5 alike
    if result.tokens != item["output_ids"] or result.finish_reason != item["finish_reason"]:
        return GoldenResult(
            END_TO_END,
            label,
            f"generated {result.tokens} ({result.finish_reason}), golden {item['output_ids']} "
            f"({item['finish_reason']}); the closest call on the golden path was a logit margin of "
            f"{item.get('min_logit_margin', float('nan')):.2g}",
        )
    return GoldenResult(END_TO_END, label, None)


def _embedding_case(model: "ExportModel", embeddings: dict[str, Any], item: dict[str, Any]) -> GoldenResult:
    from onnxformer.runtime.encoder import TextEncoder

    if not isinstance(model, TextEncoder):  # reported as a mistyped end-to-end field
        raise TypeError(f"embedding goldens need a model that embeds, not a {type(model).__name__}")
    label = f"embed {item['text']!r}"
    framed = model.frame(item["text"])  # the manifest's framing (<cls> + text + <sep> for BERT)
    if framed != item["input_ids"]:
        return GoldenResult(
            END_TO_END, label, f"input ids {framed} differ from the golden {item['input_ids']}"
        )
    want = np.asarray(item["embedding"], dtype=np.float64)
    got = model.embed(item["text"]).astype(np.float64)
    diff = float(np.max(np.abs(got - want)))
    allowed = allowance(want, float(embeddings["atol"]), float(embeddings["rtol"]))
    problem = None if diff <= allowed else f"embedding differs by {diff:.3g} (allowed {allowed:.3g})"
    return GoldenResult(END_TO_END, label, problem, diff, allowed)
