"""`onnxformer bench` runs the checkout's benchmark as its own program (`python -m benchmarks`, in a child
process whose working folder is the checkout): the options it passes on, the two option lists kept in
step, and the one-line errors. No benchmark run here (the child is replaced, or stops at its options)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from onnxformer.cli import bench
from onnxformer.cli.main import app

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def child(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """subprocess.Popen as the command uses it: each call's command line, working folder and environment;
    the child exits with 3."""
    calls: list[dict] = []

    class FakeChild:
        def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str]) -> None:
            calls.append({"args": args, "cwd": cwd, "env": env})

        def __enter__(self) -> "FakeChild":
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def wait(self) -> int:
            return 3

    monkeypatch.setattr(bench.subprocess, "Popen", FakeChild)
    monkeypatch.setenv("PYTHONSAFEPATH", "1")
    return calls


def test_bench_passes_on_only_the_options_given(child: list[dict], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT / "docs")  # relative paths are the user's; the child runs in the checkout
    args = ["bench", "--threads", "1", "--out", "x.json", "--no-accuracy", "--quick"]
    result = CliRunner().invoke(app, [*args, "--peers", "--family", "decoder", "--family", "encoder"])
    assert result.exit_code == 3, result.output  # the child's exit code
    (call,) = child
    assert call["args"] == [
        sys.executable, "-m", "benchmarks", "--out", "docs/x.json", "--threads", "1", "--quick",
        "--no-accuracy", "--peers", "--family", "decoder", "--family", "encoder",
    ]  # fmt: skip
    assert call["cwd"] == ROOT and "PYTHONSAFEPATH" not in call["env"]
    child.clear()
    outside = ROOT.parent / "elsewhere.json"
    CliRunner().invoke(app, ["--debug", "bench", "--out", str(outside), "--json"])
    assert child[0]["args"][3:] == ["--out", str(outside), "--json", "--debug"]


def test_bench_options_are_the_benchmarks_own() -> None:
    """Every option of `onnxformer bench` is one of `python -m benchmarks`, with the same default, so the
    options passed on mean the same and the ones not passed default the same."""
    command = typer.main.get_command(app).commands["bench"]
    ours = {param.opts[0]: param.default for param in command.params}
    ours |= {param.secondary_opts[0]: None for param in command.params if param.secondary_opts}
    code = (
        "import json; from benchmarks.__main__ import parser\n"
        "print(json.dumps({o: (a.default if isinstance(a.default, (int, type(None))) else str(a.default)) "
        "for a in parser()._actions for o in a.option_strings}))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    theirs = json.loads(done.stdout)
    assert set(ours) <= set(theirs), sorted(set(ours) - set(theirs))
    differ = {
        option: (default, theirs[option])
        for option, default in ours.items()
        if not option.startswith("--no-") and default != theirs[option]
    }
    assert not differ, differ


def test_bench_outside_a_checkout_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(bench, "find_checkout", lambda: None)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["bench"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: `onnxformer bench` runs from a source checkout")
    assert f"{tmp_path} is not inside one" in lines[0] and "make bench" in lines[0]


def test_find_checkout_looks_beside_the_package_then_up_from_the_working_folder(tmp_path: Path) -> None:
    assert bench.find_checkout() == ROOT  # the editable install of this checkout
    clone = tmp_path / "clone"
    (clone / "benchmarks").mkdir(parents=True)
    (clone / "pyproject.toml").write_text("")
    (clone / bench.BENCHMARK).write_text("")
    (clone / "docs").mkdir()
    assert bench.find_checkout(package_root=tmp_path, cwd=clone / "docs") == clone
    assert bench.find_checkout(package_root=tmp_path, cwd=tmp_path) is None


def test_the_benchmark_reports_a_bad_option_in_one_line() -> None:
    """The child's own errors: `error: ...` and exit code 1, as the CLI's."""
    command = [sys.executable, "-m", "benchmarks", "--peers", "--family", "nonesuch"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr == "error: --family takes encoder, decoder, seq2seq, not nonesuch\n"
