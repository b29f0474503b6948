"""Launch the 2-process training of tests/test_distributed_training.py many times in a row and count the
launches that failed, aborted or hung.

Each launch is the run that test's half-batch cases start (torchrun, gloo on CPU, the tiny model, 12
steps): gpt and bert in turn unless `--family` picks one. An abort is a launch whose output holds
"terminate called" (rank 0 ended by SIGABRT after its last evaluation, the flake of issue 22: a gloo
thread torn down while the interpreter exited); a hang is a launch still running after `--timeout`
seconds, then killed. The test's worker also fails a launch whose process group outlived train().
Prints one line per launch, then a summary (or one JSON object with `--json`); exits 1 when any launch
went wrong, printing the end of its output.

    .venv/bin/python scripts/distributed_launches.py 50            # about 12 minutes on 2 cores
    .venv/bin/python scripts/distributed_launches.py 10 --family gpt --json
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import test_distributed_training as worker  # noqa: E402 - the worker and its run, from tests/

from onnxformer.builder.training.distributed import launch_command  # noqa: E402


def launch(family: str, out: Path, *, timeout: float) -> dict:
    """One 2-process run of the test's worker: its outcome and how long it took."""
    command = launch_command(2, "", [json.dumps(worker._spec(family, out))])
    at = command.index("-m", command.index("torch.distributed.run"))
    command[at : at + 2] = [worker.__file__]  # a script, not a module
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # torchrun and its workers: the launch's own session
        output, _ = process.communicate()
        hung = True
    return {
        "family": family,
        "returncode": process.returncode,
        "aborted": "terminate called" in output,
        "hung": hung,
        "seconds": round(time.perf_counter() - start, 1),
        "output": output,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("launches", type=int, help="how many launches, one after another")
    parser.add_argument("--family", choices=["gpt", "bert"], help="only this family (default: both in turn)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds before a launch counts as hung")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    args = parser.parse_args()
    if args.launches < 1:
        parser.error(f"launches must be at least 1, got {args.launches}")
    families = [args.family] if args.family else ["gpt", "bert"]
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for index in range(args.launches):
            result = launch(families[index % len(families)], Path(folder) / str(index), timeout=args.timeout)
            results.append(result)
            if not args.json:
                print(
                    f"{index} {result['family']}: exit {result['returncode']}, aborted {result['aborted']}, "
                    f"hung {result['hung']}, {result['seconds']} s",
                    flush=True,
                )
    bad = [r for r in results if r["returncode"] != 0 or r["aborted"] or r["hung"]]
    summary = {
        "launches": len(results),
        "failed": len(bad),
        "aborted": sum(r["aborted"] for r in results),
        "hung": sum(r["hung"] for r in results),
        "seconds": round(sum(r["seconds"] for r in results), 1),
    }
    for result in bad:
        print(f"--- a {result['family']} launch went wrong; the end of its output:", file=sys.stderr)
        print(result["output"][-3000:], file=sys.stderr)
    print(json.dumps(summary) if args.json else " ".join(f"{k} {v}" for k, v in summary.items()))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
