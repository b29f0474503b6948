"""`onnxformer demo`: the whole path in one command, ending with a summary (the README's main job).

Its outputs live apart from the user's (runs/demo, not runs/gpt where `onnxformer train gpt` writes), and
OUT/demo.json lists each one the demo wrote: the demo replaces only those, so a checkpoint or export of
the user's in OUT is refused even with --overwrite.
"""

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from onnxformer.cli.errors import user_errors
from onnxformer.cli.outputs import (
    check_checkpoint_out,
    check_export_out,
    check_folder_out,
    check_png_out,
    parse_path,
)
from onnxformer.cli.printing import console
from onnxformer.cli.train import training_progress
from onnxformer.runtime.errors import ConfigError

SENTENCE = "The cat sat on the mat."
RECORD = "demo.json"  # in OUT: the outputs the demo wrote there (paths relative to OUT)
WRITTEN_BY = "onnxformer demo"


def demo_command(
    ctx: typer.Context,
    out: Annotated[
        Path,
        typer.Option("--out", parser=parse_path, metavar="DIR", help="Folder for checkpoints and exports."),
    ] = Path("runs/demo"),
    steps: Annotated[
        int | None,
        typer.Option(help="Training steps per model (default: each family's; fewer for a quick look)."),
    ] = None,
    blocks: Annotated[
        bool, typer.Option("--blocks/--no-blocks", help="Also export each block of each model.")
    ] = True,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite", help="Replace the checkpoints, exports and PNG an earlier demo wrote in --out."
        ),
    ] = False,
) -> None:
    """Train the tiny GPT, BERT and T5 on the built-in corpus, export them (graphs and blocks), verify the
    exports, run them with the torch-free runtime, and print a summary. Writes OUT/FAMILY (checkpoints),
    OUT/export/FAMILY, the attention PNG and OUT/demo.json, the list of what it wrote; an earlier demo's
    outputs are replaced only with --overwrite, and nothing the demo did not write is ever replaced."""
    started = time.perf_counter()
    rows = []
    with user_errors(ctx):
        check_folder_out(out, what="checkpoints and exports")
        from onnxformer.builder.export.recipes import RECIPES

        # The attention picture of the first text generator (a decoder's causal attention).
        drawn = next(family for family, recipe in RECIPES.items() if recipe.task == "generate")
        picture = out / f"attention_{drawn}.png"
        _check_written_by_demo(out, [*RECIPES, *(f"export/{family}" for family in RECIPES), picture.name])
        for family in RECIPES:  # every target checked before any work
            check_checkpoint_out(out / family, overwrite=overwrite)
            check_export_out(out / "export" / family, model=True, overwrite=overwrite)
        check_png_out(picture, overwrite=overwrite)
        from onnxformer.builder.export.models import export_checkpoint
        from onnxformer.builder.training import TrainOptions, train
        from onnxformer.builder.training.defaults import TRAINING
        from onnxformer.runtime import load
        from onnxformer.runtime.attention import attention_map, save_heatmaps
        from onnxformer.runtime.check import check_export
        from onnxformer.runtime.errors import ExportError
        from onnxformer.runtime.folder import ExportFolder
        from onnxformer.runtime.goldens import run_goldens

        for family, recipe in RECIPES.items():
            metric, examples = TRAINING[family].headline, recipe.demo.examples
            with training_progress(family) as report:
                result = train(out / family, TrainOptions(family, steps=steps), progress=report)
            _record(out, family)
            console.print(f"[bold]{family}[/] trained: {metric} = {result.metrics[metric]:.3f}")
            export = out / "export" / family
            with console.status(f"exporting {family} and checking parity"):
                manifest = export_checkpoint(result.out, export, blocks=blocks)
            _record(out, f"export/{family}")
            opened = ExportFolder.open(export)
            problems = [r.problem for r in check_export(opened) if not r.ok]
            goldens = run_goldens(opened) if not problems else []
            problems += [f"{g.file} {g.label}: {g.problem}" for g in goldens if not g.ok]
            if problems:
                raise ExportError(f"{export} failed verification: {problems[0]}")
            samples = recipe.demo.show(load(export, device="cpu"), examples)
            worst = max(max(e.parity.max_abs_diff.values()) for e in manifest.files if e.parity)
            checked = f"{worst:.1e}\ngoldens {len(goldens)}/{len(goldens)} pass"
            rows.append((family, metric, result, export, checked, samples))
        attention = attention_map(out / "export" / drawn, SENTENCE, device="cpu")
        save_heatmaps(attention, picture)
        _record(out, picture.name)
        weights = attention.row("sat")
    table = Table(title=f"onnxformer demo: done in {time.perf_counter() - started:.0f} s")
    for column in ("model", "trained (held-out)", "export", "max parity diff", "runtime output"):
        table.add_column(column, overflow="fold")
    for family, metric, result, export, checked, samples in rows:
        trained = f"{metric} {result.metrics[metric]:.3f}\n{result.parameters:,} params, "
        trained += f"{result.metrics['train_seconds']:.0f} s"
        table.add_row(family, trained, str(export), checked, "\n".join(samples))
    console.print(table)
    focus = ", ".join(
        f"{token} {weight:.2f}"
        for token, weight in zip(attention.key_tokens, weights, strict=True)
        if weight >= 0.01
    )
    console.print(f"attention from 'sat' in {SENTENCE!r} ({drawn}, averaged): {focus}")
    console.print(f"attention heatmaps: {picture}   (see also: onnxformer attention --help)")


def _recorded(out: Path) -> set[str] | None:
    """What OUT/demo.json lists; None if it is there but not the demo's."""
    record = out / RECORD
    if not record.exists() and not record.is_symlink():
        return set()
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("written_by") != WRITTEN_BY:
        return None
    written = data.get("written")
    if not isinstance(written, list):
        return None
    return {name for name in written if isinstance(name, str)}


def _check_written_by_demo(out: Path, targets: list[str]) -> None:
    """Refuse a target that exists but that no earlier demo wrote (OUT/demo.json does not list it)."""
    recorded = _recorded(out)
    if recorded is None:
        raise ConfigError(
            f"refusing to replace {out / RECORD}: `onnxformer demo` did not write it; choose another --out "
            "for the demo, e.g. a new folder"
        )
    for name in targets:
        path = out / name
        taken = path.is_file() or path.is_symlink() or (path.is_dir() and any(path.iterdir()))
        if taken and name not in recorded:
            raise ConfigError(
                f"refusing to replace {path}: `onnxformer demo` did not write it ({out / RECORD} does not "
                "list it); choose another --out for the demo, e.g. a new folder"
            )


def _record(out: Path, name: str) -> None:
    """Add `name` to OUT/demo.json (written to a temporary file, then renamed over it)."""
    written = sorted((_recorded(out) or set()) | {name})
    data = json.dumps({"written_by": WRITTEN_BY, "written": written}, indent=2) + "\n"
    descriptor, temporary = tempfile.mkstemp(prefix=f".{RECORD}.", suffix=".tmp", dir=out)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, out / RECORD)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
