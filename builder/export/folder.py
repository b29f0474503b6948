"""Atomic writing of an export folder.

Everything is written into a hidden temporary folder beside the target, fsynced, and only then swapped in
with renames. A crash or kill at any moment leaves either the previous export or the new one, never a
mixture; a folder that is not an onnxformer export is never replaced.
"""

import os
import shutil
import tempfile
from pathlib import Path

from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.manifest import MANIFEST_NAME, Manifest


def write_export_folder(out: str | os.PathLike, files: dict[str, bytes], manifest: Manifest) -> Path:
    """Write `files` (relative path -> bytes) and manifest.json to `out`, replacing an earlier export."""
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise ExportError(f"--out {target} is a file; choose a folder path")
    if target.is_dir() and any(target.iterdir()) and not (target / MANIFEST_NAME).is_file():
        raise ExportError(
            f"refusing to replace {target}: it is not empty and holds no {MANIFEST_NAME}, so it is not an "
            "onnxformer export; choose another --out or empty it"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        for relative, data in {**files, MANIFEST_NAME: manifest.to_json().encode()}.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        _swap_in(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _swap_in(staging: Path, target: Path) -> None:
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.rmdir(old)
        os.rename(target, old)
    os.rename(staging, target)
    _fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
