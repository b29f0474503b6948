"""Output paths, checked before any work so that nothing already on disk is lost.

Every command that writes names its target with `--out` (or an argument) and checks it here first:

- an empty path is refused (a path of "" would otherwise mean the current folder);
- a folder is written only where it is missing, empty, or holds an onnxformer output of the same kind and
  nothing else (its manifest.json or checkpoint.json lists what onnxformer wrote there: a `notes.txt` the
  user added is named and the folder refused, even with `--overwrite`); an output of the same kind is
  replaced only with `--overwrite`; anything else is never touched;
- a PNG replaces only a heatmap that onnxformer wrote (it carries onnxformer's mark), and only with
  `--overwrite`; a picture of the user's own is never replaced.

The writers themselves stay atomic (onnxformer.builder.atomic): a refused or failed command leaves the
target as it was.
"""

import json
import struct
from pathlib import Path
from typing import Annotated

import typer

from onnxformer.runtime.attention import HEATMAP_SOFTWARE
from onnxformer.runtime.errors import ConfigError

MANIFEST = "manifest.json"
CHECKPOINT = "checkpoint.json"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

OVERWRITE_HELP = "Replace an earlier onnxformer output of the same kind at the target."
Overwrite = Annotated[bool, typer.Option("--overwrite", help=OVERWRITE_HELP)]


def parse_path(value: str | Path) -> Path:
    """Typer parser for output paths: "" is refused instead of being read as the current folder."""
    if isinstance(value, Path):  # a command's default
        return value
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
    wanted = "model export" if model else "blocks export"
    if same_as is not None and _same(out, same_as):
        _check_own_files(out, marker=MANIFEST)
        return
    _check_folder(out, found=export_kind, wanted=wanted, marker=MANIFEST, overwrite=overwrite)


def check_checkpoint_out(out: Path, *, overwrite: bool, resume: bool = False) -> None:
    """`resume`: the run in `out` is continued; it must still hold nothing but the checkpoint."""
    if resume:
        _check_own_files(out, marker=CHECKPOINT)
        return
    _check_folder(
        out, found=checkpoint_kind, wanted="training checkpoint", marker=CHECKPOINT, overwrite=overwrite
    )


def check_folder_out(out: Path, *, what: str) -> None:
    """A folder that collects several outputs (demo's runs/): it must be a folder, or not exist yet."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder for the {what}")


def check_png_out(out: Path, *, overwrite: bool) -> None:
    """A PNG target: a .png name; an existing file is replaced only if it is a heatmap that onnxformer
    wrote, and only with --overwrite."""
    if out.suffix.lower() != ".png":
        raise ConfigError(f"{out} does not end in .png; the picture is a PNG, so name it e.g. attention.png")
    if out.is_dir():
        raise ConfigError(f"{out} is a folder; give a file name such as {out / 'attention.png'}")
    if not out.exists() and not out.is_symlink():
        return
    if not written_by_onnxformer(out):
        raise ConfigError(
            f"refusing to replace {out}: onnxformer did not write it; choose another name, or move it away"
        )
    if not overwrite:
        raise ConfigError(
            f"{out} already holds a heatmap onnxformer wrote; pass --overwrite to replace it, or choose "
            "another name"
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
    _check_own_files(out, marker=marker)
    if not overwrite:
        raise ConfigError(
            f"{out} already holds a {held}; pass --overwrite to replace it, or choose another folder"
        )


def _check_own_files(out: Path, *, marker: str) -> None:
    """Refuse a folder that holds anything its marker does not list: the user's own files."""
    from onnxformer.builder.atomic import foreign_entries, foreign_message, owned_paths

    legacy = _unlisted_checkpoint_files() if marker == CHECKPOINT else frozenset()
    owned = owned_paths(out, marker, legacy=legacy) if out.is_dir() else None
    foreign = foreign_entries(out, owned) if owned is not None else []
    if foreign:
        raise ConfigError(foreign_message(out, foreign))


def _unlisted_checkpoint_files() -> frozenset[str]:
    """What a checkpoint.json from before checkpoints listed their files stood for."""
    from onnxformer.builder.training.checkpoint import UNLISTED_FILES

    return UNLISTED_FILES


def written_by_onnxformer(path: Path) -> bool:
    """Whether `path` is a PNG whose text chunks, before its image data, carry onnxformer's mark."""
    try:
        with open(path, "rb") as handle:
            if handle.read(8) != PNG_SIGNATURE:
                return False
            while header := handle.read(8):
                if len(header) < 8:
                    return False
                length, kind = struct.unpack(">I4s", header)
                if kind in (b"IDAT", b"IEND") or length > 1 << 20:
                    return False
                body = handle.read(length)
                handle.seek(4, 1)  # the chunk's CRC
                keyword, _, text = body.partition(b"\0")
                if kind == b"tEXt" and keyword == b"Software" and text == HEATMAP_SOFTWARE.encode("latin-1"):
                    return True
    except OSError:
        return False
    return False


def _same(first: Path, second: Path) -> bool:
    try:
        return first.resolve() == second.resolve()
    except OSError:
        return False
