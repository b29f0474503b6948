"""`python -m benchmarks`, from the checkout's root: the benchmark (run.py) or, with --peers, the peers
(peers/run.py); prints the tables or the JSON, and --out writes the JSON.

`onnxformer bench` runs this program in a child process (cwd: the checkout) with the options it was given,
so the options, their defaults and their help are `onnxformer bench --help`'s; tests/test_bench.py keeps
the two in step. Errors are one `error: ...` line and exit code 1 (the traceback with --debug).
"""

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onnxformer.runtime.errors import ConfigError, OnnxformerError

WORK = Path("runs/bench")
PEERS_WORK = Path("runs/bench-peers")
UNWRAPPED = 10_000  # table columns when the output is piped: a table folded at 80 columns splits names


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="The runtime against PyTorch eager on this machine (benchmarks/README.md); the same "
        "options as `onnxformer bench`, whose --help says more.",
    )
    add = parser.add_argument
    add("--out", type=Path, help="write the result JSON here")
    add("--work", type=Path, help=f"folder for the models (default {WORK}, {PEERS_WORK} with --peers)")
    add("--threads", type=int, help="threads for PyTorch and ONNX Runtime (default: all CPUs)")
    add("--repeats", type=int, default=7, help="timed repetitions per workload and variant")
    add("--warmup", type=int, default=2, help="untimed calls per variant first")
    add("--quick", action="store_true", help="3 repetitions, shorter generations")
    add("--fresh", action="store_true", help="rebuild the models")
    add("--accuracy", action=argparse.BooleanOptionalAction, default=True, help="int8's cost on exported/")
    add("--json", dest="as_json", action="store_true", help="print the result JSON instead of tables")
    add("--peers", action="store_true", help="instead: the runtime against the tools users would pick")
    add("--family", action="append", help="with --peers: only this family; repeatable")
    add("--debug", action="store_true", help="show the traceback of an error")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from rich.console import Console

    width = None if sys.stdout.isatty() or "COLUMNS" in os.environ else UNWRAPPED
    console = Console(highlight=False, width=width)
    try:
        with console.status("peers" if args.peers else "benchmark") as status:
            run = _peers if args.peers else _benchmark
            result = run(args, progress=lambda message: status.update(message))
    except (OnnxformerError, ModuleNotFoundError) as error:
        if args.debug:
            raise
        missing = isinstance(error, ModuleNotFoundError)
        hint = "; install the builder and dev extras in the checkout (`make setup`)" if missing else ""
        sys.stderr.write(f"error: {error}{hint}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    text = json.dumps(_finite(result), indent=2, allow_nan=False)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.as_json:
        sys.stdout.write(text + "\n")
    elif args.peers:
        from benchmarks.peers.report import print_peers

        print_peers(console, result)
    else:
        from benchmarks.report import print_tables

        print_tables(console, result)
    return 0


def _benchmark(args: argparse.Namespace, *, progress: Callable[[str], None]) -> dict:
    from benchmarks.run import BenchOptions, run_benchmark

    options = BenchOptions(
        work=args.work or WORK,
        threads=args.threads or os.cpu_count() or 1,
        warmup=args.warmup,
        repeats=args.repeats,
        quick=args.quick,
        fresh=args.fresh,
        accuracy=args.accuracy,
    )
    return run_benchmark(options, progress=progress)


def _peers(args: argparse.Namespace, *, progress: Callable[[str], None]) -> dict:
    """`--peers` (peers/run.py): every tool in its own worker process, alternating."""
    from benchmarks.peers.run import FAMILIES, PeersOptions, run_peers

    unknown = sorted(set(args.family or ()) - set(FAMILIES))
    if unknown:
        raise ConfigError(f"--family takes {', '.join(FAMILIES)}, not {', '.join(unknown)}")
    options = PeersOptions(
        work=args.work or PEERS_WORK,
        threads=args.threads or os.cpu_count() or 1,
        warmup=args.warmup,
        repeats=args.repeats,
        quick=args.quick,
        fresh=args.fresh,
        families=tuple(f for f in FAMILIES if f in args.family) if args.family else FAMILIES,
    )
    return run_peers(options, progress=progress)


def _finite(value: Any) -> Any:
    """`value` with every NaN or infinite float replaced by None: JSON parsers reject NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
