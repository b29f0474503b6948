"""`onnxformer inspect PATH`: what an export folder or one of its .onnx files holds (runs without torch)."""

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from onnxformer.cli.errors import user_errors
from onnxformer.cli.printing import console, echo_json
from onnxformer.cli.untrusted import UNTRUSTED_HELP, probe_or_exit
from onnxformer.runtime.inspect import inspect_path


def inspect_command(
    ctx: typer.Context,
    path: Annotated[
        Path, typer.Argument(help="An export folder (it holds manifest.json) or a single .onnx file.")
    ],
    verify: Annotated[
        bool,
        typer.Option(
            "--verify", help="Also check every file's size and sha256 and load each graph; exit 1 on a miss."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the description as JSON.")] = False,
    untrusted: Annotated[bool, typer.Option("--untrusted", help=UNTRUSTED_HELP)] = False,
) -> None:
    """Show what an export holds: family, config, every file with its size and role, graph inputs and
    outputs with their symbolic dims, opset, tool versions, KV-cache layout, special tokens, generation
    defaults and the parity to PyTorch recorded at export. For a single .onnx file: its inputs, outputs,
    opset and metadata, and its entry in the surrounding folder's manifest.json."""
    with user_errors(ctx):
        probe = probe_or_exit(path, as_json=as_json) if untrusted else None
        report = inspect_path(path, verify=verify)
    report["probe"] = None if probe is None else probe.to_dict()
    if as_json:
        echo_json(report)
    elif report["type"] == "folder":
        _show_folder(report)
    else:
        _show_file(report)
    if probe is not None and not as_json:
        console.print(
            f"untrusted probe ({probe.seconds:.1f} s in a separate process): {escape(probe.detail)}"
        )
    if report["verify"] is not None and not report["verify"]["ok"]:
        raise typer.Exit(1)


def _show_folder(report: dict[str, Any]) -> None:
    what = f"{report['family']} export" if report["export_kind"] == "model" else "blocks export"
    console.print(f"[bold]{what}[/] {escape(report['path'])}")
    _key_values(
        "",
        {
            "format version": report["format_version"],
            "opset": report["opset"],
            "versions": ", ".join(
                f"{tool} {version}" for tool, version in sorted(report["versions"].items())
            ),
            "files": f"{len(report['files'])}, {_size(report['total_size'])}",
            "tokenizer": report["tokenizer"],
            "graphs": ", ".join(f"{role} {file}" for role, file in report["graphs"].items()),
            "special tokens": ", ".join(f"{name} {id_}" for name, id_ in report["special_tokens"].items()),
        },
    )
    _key_values("config", report["config"])
    _files_table(report)
    _key_values("KV cache", report["kv_cache"])
    _key_values("generation defaults", report["generation"])
    _io_table(report["files"])
    _parity_table(report["files"])
    _verdict(report)


def _show_file(report: dict[str, Any]) -> None:
    console.print(f"[bold]ONNX file[/] {escape(report['path'])}")
    opsets = ", ".join(f"{domain} {version}" for domain, version in report["opset_imports"].items())
    _key_values(
        "",
        {
            "size": _size(report["size"]),
            "sha256": report["sha256"],
            "opset": opsets or "not readable from the file; see the folder's manifest.json",
            "ir version": report["ir_version"],
            "producer": " ".join(str(p) for p in (report["producer"], report["producer_version"]) if p),
            "graph": report["graph_name"],
        },
    )
    _key_values("onnxformer metadata", report["onnxformer"])
    _key_values("other metadata", report["metadata"])
    _io_table([{"path": Path(report["path"]).name, "inputs": report["inputs"], "outputs": report["outputs"]}])
    export = report["export"]
    if export is None:
        console.print("not inside an export folder (no manifest.json above it)")
    elif export["entry"] is None:
        console.print(f"export folder {escape(export['folder'])}: {escape(export['problem'])}")
    else:
        entry = export["entry"]
        matches = "match" if export["sha256_matches"] else "do NOT match"
        console.print(
            f"listed in {escape(export['folder'])}/manifest.json as {escape(entry['path'])} "
            f"({escape(_role(entry))}); its size and sha256 {matches} the manifest"
        )
        _parity_table([entry])
    _verdict(report)


def _key_values(title: str, values: dict[str, Any]) -> None:
    values = {key: value for key, value in values.items() if value not in (None, "")}
    if not values:
        return
    table = Table(title=title or None, title_justify="left", show_header=False, box=None, padding=(0, 1))
    table.add_column("key", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in values.items():
        table.add_row(escape(key), escape(_text(value)))
    console.print(table)


def _files_table(report: dict[str, Any]) -> None:
    checks = {c["path"]: c for c in report["verify"]["files"]} if report["verify"] else {}
    table = _table("files (parity: the output closest to its limit)")
    table.add_column("file", no_wrap=True)
    table.add_column("role (kind)", no_wrap=True)
    for column in ("size", "worst error", "of limit"):
        table.add_column(column, justify="right", no_wrap=True)
    if checks:
        table.add_column("check", no_wrap=True)
    goldens = [entry for entry in report["files"] if entry["role"] == "golden"]
    for entry in report["files"]:
        if entry["role"] == "golden":
            continue
        parity = entry["parity"]
        row = [entry["path"], _role(entry), _size(entry["size"])]
        if parity:
            name = max(parity["used"], key=lambda n: parity["used"][n])
            row += [f"{parity['error'][name]:.1e}", f"{parity['used'][name]:.0%}"]
        else:
            row += ["-", "-"]
        if checks:
            check = checks[entry["path"]]
            row.append("ok" if check["ok"] else "FAILED")
        table.add_row(*map(escape, row))
    if goldens:
        summary = report["goldens"]
        row = [f"goldens/ ({len(goldens)} files)", "golden test data", _size(sum(e["size"] for e in goldens))]
        row += [f"{summary['cases']} cases", "-"]
        if checks:
            row.append("ok" if all(checks[e["path"]]["ok"] for e in goldens) else "FAILED")
        table.add_row(*map(escape, row))
    console.print(table)
    for check in checks.values():
        if not check["ok"]:
            problem = check["problem"]
            where = "" if check["path"] in problem else f"{check['path']}: "
            console.print(f"[red]FAILED[/] {escape(where + problem)}")


def _io_table(files: list[dict[str, Any]]) -> None:
    table = _table("inputs and outputs")
    table.add_column("tensor", no_wrap=True)
    table.add_column("dtype", no_wrap=True)
    table.add_column("shape", overflow="fold")
    for entry in files:
        if not entry["inputs"] and not entry["outputs"]:
            continue
        table.add_row(f"[bold]{escape(entry['path'])}[/]", "", "")
        for direction, tensors in (("in ", entry["inputs"]), ("out", entry["outputs"])):
            for tensor in tensors:
                shape = ", ".join("?" if dim is None else str(dim) for dim in tensor["shape"])
                table.add_row(f"{direction} {escape(tensor['name'])}", tensor["dtype"], escape(f"({shape})"))
        table.add_section()
    console.print(table)


def _parity_table(files: list[dict[str, Any]]) -> None:
    files = [entry for entry in files if entry["parity"]]
    if not files:
        return
    table = _table("parity to PyTorch, recorded at export (error: distance to the reference answer)")
    table.add_column("output", no_wrap=True)
    for column in ("error", "PyTorch fp32", "max |torch|", "of limit"):
        table.add_column(column, justify="right", no_wrap=True)
    limits: dict[str, list[str]] = {}
    for entry in files:
        parity = entry["parity"]
        table.add_row(f"[bold]{escape(entry['path'])}[/] ({parity['cases']} cases)", "", "", "", "")
        for name, error in parity["error"].items():
            value = parity["max_abs_value"].get(name)
            magnitude = "-" if value is None else f"{value:.3g}"
            own = parity["torch_error"].get(name)
            table.add_row(
                f"  {escape(name)}",
                f"{error:.2e}",
                "-" if own is None else f"{own:.2e}",
                magnitude,
                f"{parity['used'][name]:.0%}",
            )
        table.add_section()
        limits.setdefault(f"{parity['reference']} reference: {parity['rule']}", []).append(entry["path"])
    groups = "; ".join(f"{limit} for {', '.join(paths)}" for limit, paths in limits.items())
    table.caption = escape(groups)
    console.print(table)


def _verdict(report: dict[str, Any]) -> None:
    verify = report["verify"]
    if verify is None:
        return
    if verify["ok"]:
        console.print("[green]verified[/]: sizes, sha256 and graphs match manifest.json")
    elif "problem" in verify:
        console.print(f"[red]verify failed[/]: {escape(verify['problem'])}")
    else:
        failed = sum(not check["ok"] for check in verify["files"])
        console.print(f"[red]verify failed[/]: {failed} of {len(verify['files'])} files")


def _table(title: str) -> Table:
    return Table(
        title=title,
        title_justify="left",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )


def _role(entry: dict[str, Any]) -> str:
    return entry["role"] if entry["role"] == entry["kind"] else f"{entry['role']} ({entry['kind']})"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(not isinstance(item, dict | list) for item in value):
        return "[" + ", ".join(str(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024**2:
        return f"{size / 1024:.1f} KiB"
    return f"{size / 1024**2:.2f} MiB"
