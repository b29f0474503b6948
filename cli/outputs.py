"""Output paths, checked before any work so that nothing already on disk is lost.

Every command that writes names its target with `--out` (or an argument) and checks it here first:

- an empty path is refused (a path of "" would otherwise mean the current folder);
- a folder is written only where it is missing, empty, or holds an onnxformer output of the same kind; an
  output of the same kind is replaced only with `--overwrite`; anything else is never touched;
- a file (a PNG, a JSON report) replaces only a file of the same kind that onnxformer wrote, or any file
  with `--overwrite`.

The writers themselves stay atomic (onnxformer.builder.atomic): a refused or failed command leaves the
target as it was.
"""

import json
from pathlib import Path
from typing import Annotated

import typer

from onnxformer.runtime.errors import ConfigError

MANIFEST = "manifest.json"
CHECKPOINT = "checkpoint.json"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

OVERWRITE_HELP = "Replace an earlier onnxformer output of the same kind at the target."
Overwrite = Annotated[bool, typer.Option("--overwrite", help=OVERWRITE_HELP)]


def parse_path(value: str) -> Path:
    """Typer parser for output paths: "" is refused instead of being read as the current folder."""
    if not value.strip():
        raise typer.BadParameter("the path is empty; give a folder or file name")
    return Path(value)


def export_kind(folder: Path) -> str | None:
    """What an onnxformer export folder holds ("model export of gpt", "blocks export"); None if it holds
    no readable manifest."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("export_kind") == "model":
        return f"model export of {data.get('family')}"
    return "blocks export" if data.get("export_kind") == "blocks" else None


def checkpoint_kind(folder: Path) -> str | None:
    try:
        data = json.loads((folder / CHECKPOINT).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return f"training checkpoint of {data.get('family')}" if isinstance(data, dict) else None


def check_export_out(out: Path, *, model: bool, overwrite: bool, same_as: Path | None = None) -> None:
    """Refuse `out` for an export unless writing there loses nothing (see the module docstring).
    `same_as`: the folder being rewritten in place (optimize FOLDER FOLDER), always allowed."""
    if same_as is not None and _same(out, same_as):
        return
    wanted = "model export" if model else "blocks export"
    _check_folder(out, found=export_kind, wanted=wanted, marker=MANIFEST, overwrite=overwrite)


def check_checkpoint_out(out: Path, *, overwrite: bool) -> None:
    _check_folder(
        out, found=checkpoint_kind, wanted="training checkpoint", marker=CHECKPOINT, overwrite=overwrite
    )


def check_folder_out(out: Path, *, what: str) -> None:
    """A folder that collects several outputs (demo's runs/): it must be a folder, or not exist yet."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder for the {what}")


def check_png_out(out: Path, *, overwrite: bool) -> None:
    """A PNG target: a .png name; an existing file is replaced only if it is a PNG that matplotlib wrote
    (an earlier heatmap), or with --overwrite."""
    if out.suffix.lower() != ".png":
        raise ConfigError(f"{out} does not end in .png; the picture is a PNG, so name it e.g. attention.png")
    if out.is_dir():
        raise ConfigError(f"{out} is a folder; give a file name such as {out / 'attention.png'}")
    if out.exists() and not overwrite and not _written_by_matplotlib(out):
        raise ConfigError(
            f"refusing to replace {out}: it is not a PNG that onnxformer wrote; pass --overwrite to "
            "replace it, or choose another name"
        )


def _check_folder(out: Path, *, found, wanted: str, marker: str, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} is a file; choose a folder path for the {wanted}")
    if not out.is_dir() or not any(out.iterdir()):
        return
    held = found(out)
    if held is None:
        raise ConfigError(
            f"refusing to write into {out}: it is not empty and holds no onnxformer {wanted} "
            f"({marker} missing or unreadable); choose another folder or empty it"
        )
    kind = held.split(" of ")[0]
    if kind != wanted:
        raise ConfigError(
            f"refusing to replace {out}: it holds a {held}, not a {wanted}; choose another folder"
        )
    if not overwrite:
        raise ConfigError(
            f"{out} already holds a {held}; pass --overwrite to replace it, or choose another folder"
        )


def _written_by_matplotlib(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    return head.startswith(PNG_SIGNATURE) and b"Software" in head and b"Matplotlib" in head


def _same(first: Path, second: Path) -> bool:
    try:
        return first.resolve() == second.resolve()
    except OSError:
        return False
