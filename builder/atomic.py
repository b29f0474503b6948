"""Atomic folder writes, shared by export folders and training checkpoints.

Everything is written into a hidden temporary folder beside the target and fsynced, the `marker` file
last, then swapped in; a folder being deleted loses its marker first. So a folder that holds the marker
is complete, even one a kill left behind. On Linux the swap is one
`renameat2(RENAME_EXCHANGE)`: the target path always names a whole folder, the previous one or the new
one. Elsewhere it is two renames, and a kill between them leaves the previous folder whole under a hidden
`.NAME.old-*` name beside the target. A non-empty folder that does not hold the `marker` file is never
replaced: it is not ours. A staging folder carries its writer's pid in its name; the next write to the
same target deletes those whose writer is no longer running (a killed write's leftovers).
"""

import contextlib
import ctypes
import ctypes.util
import errno
import os
import shutil
import sys
import tempfile
from glob import escape as glob_escape
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
    _sweep_abandoned(target, marker)
    # The writer's pid in the name lets a later write tell an abandoned staging folder from a live one.
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))
    try:
        os.chmod(staging, 0o755)  # mkdtemp makes it private; the result should read like any folder
        # The marker last: a folder that holds it is complete.
        ordered = [name for name in files if name != marker] + [name for name in files if name == marker]
        for relative in ordered:
            data = files[relative]
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        _swap_in(staging, target, marker)
    except BaseException:
        _discard(staging, marker)
        raise
    return target


def _swap_in(staging: Path, target: Path, marker: str) -> None:
    if target.exists() and _exchange(staging, target):
        _fsync_dir(target.parent)
        _discard(staging, marker)  # now the previous folder
        return
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.rmdir(old)
        os.rename(target, old)
    os.rename(staging, target)
    _fsync_dir(target.parent)
    if old is not None:
        _discard(old, marker)


def _sweep_abandoned(target: Path, marker: str) -> None:
    """Delete staging folders that killed writers left beside `target`: those whose writer (the pid in the
    name) is no longer running. A live writer's folder, or one named otherwise, is left alone."""
    for leftover in target.parent.glob(f".{glob_escape(target.name)}.tmp-*-*"):
        pid = leftover.name[len(f".{target.name}.tmp-") :].split("-", 1)[0]
        if pid.isdigit() and leftover.is_dir() and not leftover.is_symlink() and not _running(int(pid)):
            _discard(leftover, marker)


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists but belongs to someone else
        return True
    return True


def _discard(folder: Path, marker: str) -> None:
    """Delete a folder, its marker first: a folder killed halfway through deletion is not ours any more."""
    with contextlib.suppress(OSError):
        (folder / marker).unlink()
    shutil.rmtree(folder, ignore_errors=True)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux renameat2); False where the system or file system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):  # no libc found, or a libc older than glibc 2.28
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), str(second))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
