"""A benchmark result as table rows (for the terminal) and as Markdown (for benchmarks/README.md)."""

VARIANT_COLUMNS = ("pytorch", "onnx", "fused", "int8")


def workload_rows(result: dict) -> list[list[str]]:
    """[title, unit, PyTorch ms, onnx ms, fused ms, int8 ms, fused x, int8 x] per workload."""
    rows = []
    for workload in result["workloads"]:
        times = [f"{workload['variants'][v]['median_ms']:.2f}" for v in VARIANT_COLUMNS]
        speedups = [f"{workload['speedup_vs_pytorch'][v]:.2f}x" for v in ("onnx", "fused", "int8")]
        rows.append([workload["title"], workload["unit"], *times, *speedups])
    return rows


WORKLOAD_HEADER = ["workload", "unit", "PyTorch", "onnx", "fused", "int8", "onnx x", "fused x", "int8 x"]
TARGET_HEADER = ["target", "value", "wanted", "met"]


def target_rows(result: dict) -> list[list[str]]:
    rows = []
    for target in result["targets"]:
        met = {True: "yes", False: "NO", None: "-"}[target["met"]]
        rows.append([target["target"], str(target["value"]), target["wanted"], met])
    return rows


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def markdown(result: dict) -> str:
    machine, load = result["machine"], result["load"]
    sgemm = result["sgemm_gflops"]
    facts = (
        f"{machine['cpu']}, {machine['logical_cpus']} logical CPUs ({', '.join(machine['cpu_flags'])}), "
        f"threads: {result['settings']['threads']} for both; torch {machine['torch']}, onnxruntime "
        f"{machine['onnxruntime']}. SGEMM limit {sgemm['limit']} GFLOP/s. Other processes used "
        f"{load.get('others_busy_cores', '?')} cores on average during the run "
        f"(load average {load['loadavg_start']} -> {load['loadavg_end']})."
    )
    return "\n\n".join(
        [
            facts,
            _markdown(WORKLOAD_HEADER, workload_rows(result)),
            _markdown(TARGET_HEADER, target_rows(result)),
        ]
    )


def print_tables(console, result: dict) -> None:
    """The workload and target tables, and the load line, on a rich Console."""
    from rich.table import Table

    for title, header, rows in (
        ("median ms (speedup = PyTorch / runtime)", WORKLOAD_HEADER, workload_rows(result)),
        ("targets", TARGET_HEADER, target_rows(result)),
    ):
        table = Table(title=title)
        for column in header:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    load = result["load"]
    console.print(
        f"other processes used {load.get('others_busy_cores', '?')} cores on average "
        f"(load {load['loadavg_start']} -> {load['loadavg_end']})"
    )


if __name__ == "__main__":  # python -m benchmarks.report RESULT.json: the Markdown for the README
    import json
    import sys
    from pathlib import Path

    sys.stdout.write(markdown(json.loads(Path(sys.argv[1]).read_text())) + "\n")
