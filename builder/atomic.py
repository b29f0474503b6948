"""Atomic folder writes, shared by export folders and training checkpoints.

Everything is written into a hidden temporary folder beside the target and fsynced, then swapped in with
renames. A crash or kill at any moment leaves either the previous folder or the new one, never a mixture.
A non-empty folder that does not hold the `marker` file is never replaced: it is not ours.
"""

import os
import shutil
import tempfile
from pathlib import Path

from onnxformer.runtime.errors import OnnxformerError


def write_folder_atomically(
    target: str | os.PathLike,
    files: dict[str, bytes],
    *,
    marker: str,
    error: type[OnnxformerError],
    what: str,
) -> Path:
    """Write `files` (relative path -> bytes, must include `marker`) to `target`, replacing our older one."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise error(f"{target} is a file; choose a folder path for the {what}")
    if target.is_dir() and any(target.iterdir()) and not (target / marker).is_file():
        raise error(
            f"refusing to replace {target}: it is not empty and holds no {marker}, so it is not an "
            f"onnxformer {what}; choose another folder or empty it"
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as problem:
        raise error(
            f"cannot create the folder {target.parent} for the {what} ({problem.strerror}); "
            "choose a path whose parents are folders you can write to"
        ) from None
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        os.chmod(staging, 0o755)  # mkdtemp makes it private; the result should read like any folder
        for relative, data in files.items():
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
