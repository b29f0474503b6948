"""The committed exports under engines other than the one they were checked with at export time.

"Export once, run anywhere": every ONNX file of exported/{gpt,bert,t5} must load in ONNX Runtime and in
tract (sonos/tract, an independent ONNX engine written in Rust, here through its Python bindings), at an
opset each engine supports, and tract must reproduce every graph golden (docs/goldens.md) within the
manifest's atol / rtol.

tract runs in child processes: a tract panic aborts the whole process (it cannot unwind through the C
API), and the test must still say which file and case did it and run the other files.
"""

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import GoldenResult, compare, golden_cases
from onnxformer.runtime.inspect import inspect_onnx_file

EXPORTED = Path(__file__).resolve().parents[2] / "exported"
FAMILIES = ("gpt", "bert", "t5")
TRACT_REQUIREMENT = "tract==0.23.9"

# The highest ai.onnx opset each engine handles, and where the figure comes from.
MAX_OPSET = {
    # onnxruntime 1.32.0 refuses a model stamped 29 at load: "ONNX Runtime only *guarantees* support for
    # models stamped with official released onnx opset versions. Opset 29 is under development ...
    # Current official support for domain ai.onnx is till opset 28."
    "onnxruntime 1.32 (PyPI)": 28,
    # onnxruntime-node and onnxruntime-web 1.30.0 (npm) give the same refusal at 27: "... till opset 26."
    "onnxruntime-node / onnxruntime-web 1.30 (npm)": 26,
    # tract accepts any stamp (checked up to 40) but is tested against the ONNX 1.13.0 backend suite, which
    # is opset 18 (sonos/tract harness/onnx-test-suite/Cargo.toml: default feature "onnx_1_13_0").
    "tract 0.23": 18,
}


def _onnx_files(export: ExportFolder) -> list[str]:
    return [entry.path for entry in export.manifest.files if entry.path.endswith(".onnx")]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_file_is_at_an_opset_every_engine_supports(family: str) -> None:
    export = ExportFolder.open(EXPORTED / family)
    files = _onnx_files(export)
    stamped = {file: inspect_onnx_file(export.path_of(file))["opset"] for file in files}  # ORT loads each
    assert set(stamped.values()) == {export.manifest.opset}, stamped
    too_new = {engine: limit for engine, limit in MAX_OPSET.items() if export.manifest.opset > limit}
    assert not too_new, f"{family} is exported at opset {export.manifest.opset}, above {too_new}"
    print(f"{family}: {len(files)} files at opset {export.manifest.opset}, ONNX Runtime loads them all")


def _require_tract() -> None:
    if importlib.util.find_spec("tract") is None:
        pytest.fail(
            f"tract is not installed in {sys.prefix}; install it with `pip install '{TRACT_REQUIREMENT}'` "
            "(the second ONNX engine these tests run the exports on)",
            pytrace=False,
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_tract_reproduces_every_graph_golden(family: str) -> None:
    _require_tract()
    export = ExportFolder.open(EXPORTED / family)
    results = _goldens_in_tract(export)
    for file in _onnx_files(export):
        mine = [result for result in results if result.file == file]
        failed = [result for result in mine if not result.ok]
        worst = max((r.max_abs_diff for r in mine if r.max_abs_diff is not None), default=float("nan"))
        verdict = f"FAILED {len(failed)}: {failed[0].problem}" if failed else "pass"
        print(f"tract {family}/{file}: {len(mine)} cases, max abs diff {worst:.2e}, {verdict}")
    problems = sorted({f"{r.file}: {r.problem}" for r in results if not r.ok})
    assert not problems, "tract does not reproduce the goldens:\n" + "\n".join(problems)
    expected = sum(len(graph.cases) for graph in export.manifest.goldens.graphs)
    assert len(results) == expected, f"tract ran {len(results)} of the {expected} golden cases"
    assert {result.file for result in results} == set(_onnx_files(export))


def _goldens_in_tract(export: ExportFolder) -> list[GoldenResult]:
    """Every graph golden through tract in a child process. When a case kills the child, its file keeps
    the results it had and the crash, and a fresh child runs the goldens again without that file."""
    crashes: list[GoldenResult] = []
    while True:
        child = subprocess.run(
            [sys.executable, __file__, str(export.root), *(crash.file for crash in crashes)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "RUST_BACKTRACE": "0"},
        )
        if child.returncode == 0:
            return [GoldenResult(**json.loads(line)) for line in child.stdout.splitlines()] + crashes
        started = [line for line in child.stderr.splitlines() if line.startswith("running ")]
        if not started:
            pytest.fail(f"the tract child failed (exit {child.returncode}): {_crash_message(child.stderr)}")
        file, label = started[-1].removeprefix("running ").split(" | ", 1)
        done = [GoldenResult(**json.loads(line)) for line in child.stdout.splitlines()]
        crashes += [result for result in done if result.file == file]
        problem = f"tract killed the process (exit {child.returncode}): {_crash_message(child.stderr)}"
        crashes.append(GoldenResult(file, label, problem))


def _crash_message(stderr: str) -> str:
    """The first Rust panic in the child's stderr ("... panicked at FILE:LINE:" and its message), else
    the last lines; an abort prints a backtrace whatever RUST_BACKTRACE says."""
    lines = stderr.splitlines()
    for at, line in enumerate(lines):
        if " panicked at " in line:
            message = []
            for follow in lines[at + 1 :]:
                if follow.startswith(("note:", "thread ", "stack backtrace:")):
                    break
                message.append(follow.strip())
            return line.split(" panicked at ", 1)[1] + " " + " ".join(message)
    return " / ".join(line.strip() for line in lines[-6:] if line.strip())


def _tract_error(error: Exception) -> str:
    """tract's message chain ("Caused by: 0: ... 1: ...") on one line, without the backtrace."""
    text = str(error).split("Stack backtrace:")[0]
    return "tract: " + " / ".join(line.strip() for line in text.splitlines() if line.strip())


def _run_goldens_in_tract(folder: Path, skip: set[str]) -> None:
    """The child process: one JSON GoldenResult per golden case on stdout, progress on stderr; the files
    in `skip` (those that crashed an earlier child) are left out."""
    import tract

    export = ExportFolder.open(folder)
    plans: dict[str, tuple | str] = {}  # file -> (runnable, input names) or the error that stopped it
    for loaded in golden_cases(export):
        file, label = loaded.graph.file, loaded.case.label
        if file in skip:
            continue
        print(f"running {file} | {label}", file=sys.stderr, flush=True)
        if file not in plans:
            export.read(file)  # size and sha256 against the manifest; tract then loads it by path
            try:
                model = tract.onnx().load(str(export.path_of(file))).into_model()
                names = [model.input_name(i) for i in range(model.input_count())]
                plans[file] = (model.into_runnable(), names)
            except tract.TractError as error:
                plans[file] = _tract_error(error)
        plan = plans[file]
        if isinstance(plan, str):
            result = GoldenResult(file, label, plan)
        else:
            runnable, names = plan
            try:
                outputs = runnable.run([loaded.inputs[name] for name in names])
            except tract.TractError as error:
                result = GoldenResult(file, label, _tract_error(error))
            else:
                # tract names outputs after their nodes; they come in the graph's order, as the goldens do
                got = [tensor.to_numpy() for tensor in outputs]
                if len(got) == len(loaded.case.outputs):
                    result = compare(loaded, dict(zip(loaded.case.outputs, got, strict=True)))
                else:
                    problem = f"tract gave {len(got)} outputs, the goldens have {len(loaded.case.outputs)}"
                    result = GoldenResult(file, label, problem)
        print(json.dumps(asdict(result)), flush=True)


if __name__ == "__main__":
    _run_goldens_in_tract(Path(sys.argv[1]), set(sys.argv[2:]))
