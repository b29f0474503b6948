"""`onnxformer bench`: the runtime against PyTorch eager on this machine (see benchmarks/README.md)."""

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from onnxformer.cli.errors import user_errors
from onnxformer.cli.printing import console, echo_json, finite
from onnxformer.runtime.errors import ConfigError

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the checkout, in an editable install
BENCHMARK = Path("benchmarks") / "run.py"


def find_checkout(*, package_root: Path = PACKAGE_ROOT, cwd: Path | None = None) -> Path | None:
    """The source checkout that holds the benchmark (benchmarks/run.py, beside pyproject.toml): the one the
    package runs from (an editable install), else the working folder or the nearest folder above it (a
    plain `pip install .` run inside its clone); None outside any."""
    here = (cwd or Path.cwd()).resolve()
    for folder in (package_root, here, *here.parents):
        if (folder / BENCHMARK).is_file() and (folder / "pyproject.toml").is_file():
            return folder
    return None


def bench_command(
    ctx: typer.Context,
    out: Annotated[Path | None, typer.Option(help="Write the result JSON here.")] = None,
    work: Annotated[
        Path, typer.Option(help="Folder for the benchmark models (built once, reused while up to date).")
    ] = Path("runs/bench"),
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
            "and transformers, each in its own environment (make peers-venvs); models in runs/bench-peers.",
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
    accuracy cost. Prints the tables; --out writes the JSON (medians, min/max, ratios, machine facts)."""
    with user_errors(ctx):
        checkout = find_checkout()
        if checkout is None:
            raise ConfigError(
                f"the benchmark lives in the source checkout ({BENCHMARK}), and {Path.cwd()} is not inside "
                "one; cd into a clone of onnxformer and run it there"
            )
        if str(checkout) not in sys.path:
            sys.path.insert(0, str(checkout))
        if peers:
            work = Path("runs/bench-peers") if work == Path("runs/bench") else work
            result = _run_peers(work, threads, repeats, warmup, quick, fresh, family)
            _write(out, result)
            if as_json:
                echo_json(result)
            else:
                from benchmarks.peers.report import print_peers

                print_peers(console, result)
            return
        from benchmarks.report import print_tables
        from benchmarks.run import BenchOptions, run_benchmark

        options = BenchOptions(
            work=work,
            threads=threads or os.cpu_count() or 1,
            warmup=warmup,
            repeats=repeats,
            quick=quick,
            fresh=fresh,
            accuracy=accuracy,
        )
        with console.status("benchmark") as status:
            result = run_benchmark(options, progress=lambda message: status.update(message))
        _write(out, result)
    if as_json:
        echo_json(result)
    else:
        print_tables(console, result)


def _write(out: Path | None, result: dict) -> None:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(finite(result), indent=2, allow_nan=False) + "\n")


def _run_peers(
    work: Path,
    threads: int | None,
    repeats: int,
    warmup: int,
    quick: bool,
    fresh: bool,
    family: list[str] | None,
) -> dict:
    """`--peers` (benchmarks/peers/run.py): every tool in its own worker process, alternating."""
    from benchmarks.peers.run import FAMILIES, PeersOptions, run_peers

    unknown = sorted(set(family or ()) - set(FAMILIES))
    if unknown:
        raise ConfigError(f"--family takes {', '.join(FAMILIES)}, not {', '.join(unknown)}")
    options = PeersOptions(
        work=work,
        threads=threads or os.cpu_count() or 1,
        warmup=warmup,
        repeats=repeats,
        quick=quick,
        fresh=fresh,
        families=tuple(f for f in FAMILIES if f in family) if family else FAMILIES,
    )
    with console.status("peers") as status:
        return run_peers(options, progress=lambda message: status.update(message))
