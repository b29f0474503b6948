"""`onnxformer bench`: the runtime against PyTorch eager on this machine (see benchmarks/README.md).

The benchmark is not part of the package: it lives in the source checkout (benchmarks/, beside the
package) and is its own program there, `python -m benchmarks`. This command finds the checkout and runs
that program in a child process with the checkout as its working folder, passing on the options given
here; nothing is imported from the checkout and sys.path is left alone, so an installed `onnxformer`
behaves the same wherever it is run from.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperOption

from onnxformer.cli.errors import user_errors
from onnxformer.runtime.errors import ConfigError

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the checkout, in an editable install
BENCHMARK = Path("benchmarks") / "__main__.py"
NOT_IN_CHECKOUT = (
    "`onnxformer bench` runs from a source checkout (the benchmark, benchmarks/, is not installed with the "
    "package), and {cwd} is not inside one: run it in a clone of onnxformer with the builder installed "
    "(`make setup`, then `make bench`)"
)


def find_checkout(*, package_root: Path = PACKAGE_ROOT, cwd: Path | None = None) -> Path | None:
    """The source checkout that holds the benchmark (benchmarks/__main__.py, beside pyproject.toml): the
    one the package runs from (an editable install), else the working folder or the nearest folder above
    it (a plain `pip install .` run inside its clone); None outside any."""
    here = (cwd or Path.cwd()).resolve()
    for folder in (package_root, here, *here.parents):
        if (folder / BENCHMARK).is_file() and (folder / "pyproject.toml").is_file():
            return folder
    return None


def bench_command(
    ctx: typer.Context,
    out: Annotated[Path | None, typer.Option(help="Write the result JSON here.")] = None,
    work: Annotated[
        Path | None,
        typer.Option(
            help="Folder for the benchmark models (built once, reused while up to date); default "
            "runs/bench in the checkout, runs/bench-peers with --peers."
        ),
    ] = None,
    threads: Annotated[
        int | None, typer.Option(help="Threads for both PyTorch and ONNX Runtime (default: all CPUs).")
    ] = None,
    repeats: Annotated[int, typer.Option(help="Timed repetitions per workload and variant.")] = 7,
    warmup: Annotated[int, typer.Option(help="Untimed calls per variant first.")] = 2,
    quick: Annotated[bool, typer.Option("--quick", help="3 repetitions, shorter generations.")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Rebuild the benchmark models.")] = False,
    accuracy: Annotated[
        bool, typer.Option("--accuracy/--no-accuracy", help="Measure int8's cost on the tiny exports.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result JSON instead of tables.")] = False,
    peers: Annotated[
        bool,
        typer.Option(
            "--peers",
            help="Instead: the runtime side by side with Optimum, sentence-transformers, onnxruntime-genai "
            "and transformers, each in its own environment (make peers-venvs).",
        ),
    ] = False,
    family: Annotated[
        list[str] | None,
        typer.Option(help="With --peers: only this family (encoder, decoder, seq2seq); repeatable."),
    ] = None,
) -> None:
    """Run every workload (BERT embed 1x16 and 32x128, GPT prefill, decode steps at context 16/256/1024,
    generation of 128 tokens, T5 64 to 64 tokens) with PyTorch eager and with the runtime on the plain,
    fused and int8 exports of the `small` presets (random weights), alternating in one process with the
    same thread count; then the runtime's start-up time and memory, the machine's SGEMM limit and int8's
    accuracy cost. Prints the tables; --out writes the JSON (medians, min/max, ratios, machine facts).
    Runs from a source checkout (the benchmark is not installed with the package)."""
    with user_errors(ctx):
        checkout = find_checkout()
        if checkout is None:
            raise ConfigError(NOT_IN_CHECKOUT.format(cwd=Path.cwd()))
        if importlib.util.find_spec("torch") is None:  # said here, in one line, before the child starts
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
    arguments = benchmark_arguments(ctx, checkout=checkout)
    if ctx.obj and ctx.obj.get("debug"):
        arguments.append("--debug")
    # `-m benchmarks` finds the program in its working folder, which PYTHONSAFEPATH would leave out.
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONSAFEPATH"}
    with subprocess.Popen(
        [sys.executable, "-m", "benchmarks", *arguments], cwd=checkout, env=environment
    ) as child:
        try:
            code = child.wait()
        except KeyboardInterrupt:  # the child got the same Ctrl-C: let it stop its workers and say so
            code = child.wait()
    if code:
        raise typer.Exit(code)


def _given(ctx: typer.Context, name: str) -> bool:
    # By name: typer may carry its own copy of click, whose ParameterSource is another enum class.
    source = ctx.get_parameter_source(name)
    return getattr(source, "name", None) not in (None, "DEFAULT", "DEFAULT_MAP")


def benchmark_arguments(ctx: typer.Context, *, checkout: Path) -> list[str]:
    """The options given on this command line, as `python -m benchmarks` takes them (the same names and
    defaults); paths are made relative to the checkout, the child's working folder."""
    arguments: list[str] = []
    for param in ctx.command.params:
        if not _given(ctx, param.name):
            continue
        value = ctx.params[param.name]
        if isinstance(param, TyperOption) and param.is_flag:
            arguments.append(param.opts[0] if value else param.secondary_opts[0])
            continue
        for item in value if param.multiple else [value]:
            text = _relative(item, checkout) if isinstance(item, Path) else str(item)
            arguments += [param.opts[0], text]
    return arguments


def _relative(path: Path, checkout: Path) -> str:
    absolute = path.resolve()
    return str(absolute.relative_to(checkout)) if absolute.is_relative_to(checkout) else str(absolute)
