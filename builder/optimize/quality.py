"""How far an optimised graph departs from the original: on the golden cases, and on the built-in tasks.

`compare_graphs` runs the original and the optimised graph (both with ONNX Runtime) on every golden case of
that graph (the export's own parity inputs: first and cached steps, padding, shapes unlike the trace) and
reports, per output, the largest difference to the original graph and to the PyTorch outputs stored in the
goldens, and the smallest cosine similarity of a batch row to PyTorch's.

`task_metrics` scores a model export, through the runtime classes, on held-out data of the built-in tasks
(split as `onnxformer train` splits it with its default seed 0), with the scorer of the family's recipe
(classification and masked-token accuracy for an encoder, next-token accuracy and loss for a decoder,
exact match of greedy outputs for text to text). Accuracies are fractions; "1 point" is 0.01.
"""

import dataclasses
from dataclasses import dataclass

import numpy as np

from onnxformer.builder.export.recipes import RECIPES, recipe_for
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import case_allowance, golden_cases, run_case
from onnxformer.runtime.loader import ModelExport
from onnxformer.runtime.manifest import Manifest
from onnxformer.runtime.session import create_session

# The output whose direction int8 must keep, per (family, role): the embedding, or the logits.
MAIN_OUTPUTS = {
    (family, role): output
    for family, family_recipe in RECIPES.items()
    for role, output in family_recipe.main_outputs.items()
}


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


def compare_graphs(
    export: ExportFolder,
    originals: dict[str, bytes],
    optimized: dict[str, bytes],
    manifest: Manifest | None = None,
) -> dict:
    """File -> `Agreement` for each optimised graph (`originals` and `optimized` map file -> bytes);
    `manifest` is the optimised folder's, when its graphs take other feeds (an in-place KV cache)."""
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
        after = run_case(sessions[path][1], manifest or export.manifest, path, loaded.inputs, names)
        entry = stats[path]
        entry["cases"] += 1
        for index, (name, old, new) in enumerate(zip(names, before, after, strict=True)):
            want = loaded.expected[name]
            if new.shape != want.shape:
                raise ExportError(
                    f"{path}: the optimised graph's {name} has shape {new.shape}, not {want.shape}"
                )
            diff = _max_abs(new, old)
            to_torch = _max_abs(new, want)
            allowed = case_allowance(loaded, index)
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
    """The built-in task scores of a model export on up to `limit` held-out examples (the family's recipe
    knows its task)."""
    return recipe_for(export.manifest).task_metrics(export, limit)
