"""`onnxformer verify DIR`: re-check an export folder (runs without torch unless --checkpoint is given)."""

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from onnxformer.cli.errors import user_errors
from onnxformer.cli.printing import console, echo_json
from onnxformer.cli.untrusted import UNTRUSTED_HELP, probe_or_exit
from onnxformer.runtime.check import check_export
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.goldens import GoldenResult, run_goldens


def verify_command(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="An export folder (it holds manifest.json).")],
    checkpoint: Annotated[
        Path | None,
        typer.Option(help="Re-run the parity checks against this training checkpoint (needs the builder)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    untrusted: Annotated[bool, typer.Option("--untrusted", help=UNTRUSTED_HELP)] = False,
) -> None:
    """Check every file of an export against the sha256 in its manifest, load each ONNX graph in ONNX
    Runtime (CPU) and compare its inputs and outputs with the manifest, then run the golden test data
    written at export (each graph on its recorded inputs; token ids, greedy generations and embeddings)
    and print the differences. With --checkpoint, also run every graph against the PyTorch model again and
    print the max abs/rel differences per file and output. Exits 1 if anything is wrong."""
    with user_errors(ctx):
        if untrusted:
            probe_or_exit(folder, as_json=as_json)
        export = ExportFolder.open(folder)
        results = check_export(export)
        files_ok = all(result.ok for result in results)
        goldens = run_goldens(export) if files_ok else []
        reverified = {}
        if checkpoint is not None:
            from onnxformer.builder.export.models import reverify_export

            reverified = reverify_export(folder, checkpoint)
    failed = [result for result in results if not result.ok] + [g for g in goldens if not g.ok]
    rows = []
    for result in results:
        parity = reverified.get(result.entry.path, result.entry.parity)
        outputs = {}
        if parity is not None:
            for name, diff in parity.max_abs_diff.items():
                scale = parity.max_abs_value.get(name, 0.0)
                outputs[name] = {
                    "max_abs_diff": diff,
                    "max_rel_diff": diff / scale if scale else None,
                    # float64-reference exports: the distance to the exact answer, and PyTorch fp32's own
                    "error": parity.error.get(name),
                    "torch_error": parity.torch_error.get(name),
                }
        rows.append(
            {"path": result.entry.path, "ok": result.ok, "problem": result.problem, "outputs": outputs}
        )
    if as_json:
        payload = {
            "folder": str(folder),
            "ok": not failed,
            "rechecked": bool(reverified),
            "files": rows,
            "goldens": [golden.__dict__ | {"ok": golden.ok} for golden in goldens],
        }
        echo_json(payload)
    else:
        source = "re-run against the checkpoint" if reverified else "recorded at export"
        passed = sum(result.ok for result in results)
        title = f"{folder}: {passed}/{len(results)} files verified ({source})"
        goldens_listed = {e.path for e in export.manifest.files if e.kind == "golden"}
        console.print(_files_table(title, rows, goldens_listed))
        if not files_ok:
            console.print("goldens not run: fix the files that failed their checks first")
        else:
            console.print(_goldens_table(folder, export, goldens))
    if failed:
        raise typer.Exit(1)


def _files_table(title: str, rows: list[dict], goldens_listed: set[str]) -> Table:
    """One row per file and output; the golden files, often hundreds, folded into one row."""
    table = Table(title=title)
    for column in ("file", "sha256 + load", "output", "max abs diff", "max rel diff", "to float64"):
        table.add_column(column, overflow="fold")
    golden_rows = [row for row in rows if row["path"] in goldens_listed]
    if golden_rows:
        bad = [row for row in golden_rows if not row["ok"]]
        folded: dict[str, Any] = {
            "path": f"goldens/ ({len(golden_rows)} files)",
            "ok": not bad,
            "problem": bad[0]["problem"] if bad else None,
            "outputs": {},
        }
        rows = [row for row in rows if row["path"] not in goldens_listed] + [folded]
    for row in rows:
        status = "[green]ok[/]" if row["ok"] else f"[red]{row['problem']}[/]"
        if not row["outputs"]:
            table.add_row(row["path"], status, "-", "-", "-", "-")
        for index, (name, figures) in enumerate(row["outputs"].items()):
            rel = figures["max_rel_diff"]
            table.add_row(
                row["path"] if index == 0 else "",
                status if index == 0 else "",
                name,
                f"{figures['max_abs_diff']:.1e}",
                "-" if rel is None else f"{rel:.1e}",
                "-" if figures["error"] is None else f"{figures['error']:.1e}",
            )
    return table


def _goldens_table(folder: Path, export: ExportFolder, goldens: list[GoldenResult]) -> Table:
    """One row per graph (cases passed, worst difference) and per failing or end-to-end golden."""
    if export.manifest.goldens is None:
        return Table(title=f"{folder} carries no golden test data (exported before goldens existed)")
    passed = sum(golden.ok for golden in goldens)
    table = Table(title=f"goldens: {passed}/{len(goldens)} cases pass")
    for column in ("file", "cases", "max abs diff", "allowed there", "problem"):
        table.add_column(column, overflow="fold")
    by_file: dict[str, list[GoldenResult]] = {}
    for golden in goldens:
        by_file.setdefault(golden.file, []).append(golden)
    for file, cases in by_file.items():
        measured = [(case.max_abs_diff, case) for case in cases if case.max_abs_diff is not None]
        worst = max(measured, key=lambda pair: pair[0], default=None)  # (the largest difference, its case)
        problems = [f"{case.label}: {case.problem}" for case in cases if not case.ok]
        table.add_row(
            file,
            f"{sum(case.ok for case in cases)}/{len(cases)}",
            "-" if worst is None else f"{worst[0]:.1e}",
            "-" if worst is None else f"{worst[1].allowed:.1e}",
            "[red]" + "; ".join(problems[:3]) + "[/]" if problems else "[green]ok[/]",
        )
    return table
