"""Atomic folder writes, shared by export folders and training checkpoints.

Everything is written into a hidden temporary folder beside the target and fsynced, the `marker` file
last, then swapped in; a folder being deleted loses its marker first. So a folder that holds the marker
is complete, even one a kill left behind. On Linux the swap is one
`renameat2(RENAME_EXCHANGE)`: the target path always names a whole folder, the previous one or the new
one. Elsewhere it is two renames, and a kill between them leaves the previous folder whole under a hidden
`.NAME.old-*` name beside the target. A non-empty folder that does not hold the `marker` file is never
replaced: it is not ours. Nor is a folder that holds anything its marker does not list (the marker is a
JSON object whose "files" lists what onnxformer wrote there, as paths or objects with a "path"): a
`notes.txt` or `mydata/` the user put there is named and the write refused, never deleted. A staging
folder carries its writer's pid in its name; the next write to the same target deletes those whose writer
is no longer running (a killed write's leftovers).

`staged_folder` gives the same guarantee to an output built in several steps (an export, then its int8
rewrite): every step writes the staging folder, and only the finished folder is swapped in.
"""

import contextlib
import ctypes
import ctypes.util
import errno
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
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
    legacy: frozenset[str] = frozenset(),
) -> Path:
    """Write `files` (relative path -> bytes, must include `marker`) to `target`, replacing our older one.
    `legacy`: what counts as ours in a folder whose marker predates the "files" list."""
    target = Path(target)
    check_replaceable(target, marker=marker, error=error, what=what, legacy=legacy)
    _make_parent(target, error=error, what=what)
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
        # Again at the end: the user may have put a file there while we wrote (a long training run).
        check_replaceable(target, marker=marker, error=error, what=what, legacy=legacy)
        _swap_in(staging, target, marker)
    except BaseException:
        _discard(staging, marker)
        raise
    return target


@contextlib.contextmanager
def staged_folder(
    target: str | os.PathLike,
    *,
    marker: str,
    error: type[OnnxformerError],
    what: str,
    legacy: frozenset[str] = frozenset(),
) -> Iterator[Path]:
    """A folder to build `target` in over several steps, each of which may write it (atomically, as
    above); the finished folder, which must hold `marker`, is swapped in when the block ends. If a step
    fails, nothing was written: `target` is as it was."""
    target = Path(target)
    check_replaceable(target, marker=marker, error=error, what=what, legacy=legacy)
    _make_parent(target, error=error, what=what)
    _sweep_abandoned(target, marker)
    holder = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))
    staging = holder / target.name
    try:
        yield staging
        if not (staging / marker).is_file():
            raise error(f"the {what} for {target} was not finished (no {marker}); nothing was written")
        check_replaceable(target, marker=marker, error=error, what=what, legacy=legacy)
        _swap_in(staging, target, marker)
    finally:
        _discard(holder, marker)


def check_replaceable(
    target: Path,
    *,
    marker: str,
    error: type[OnnxformerError],
    what: str,
    legacy: frozenset[str] = frozenset(),
) -> None:
    """Raise `error` unless replacing `target` loses nothing: it is missing, an empty folder, or a folder
    that holds only what its `marker` lists."""
    if target.exists() and not target.is_dir():
        raise error(f"{target} is a file; choose a folder path for the {what}")
    if not target.is_dir() or not any(target.iterdir()):
        return
    owned = owned_paths(target, marker, legacy=legacy)
    if owned is None:
        raise error(
            f"refusing to replace {target}: it is not empty and holds no readable {marker}, so it is not "
            f"an onnxformer {what}; choose another folder or empty it"
        )
    foreign = foreign_entries(target, owned)
    if foreign:
        raise error(foreign_message(target, foreign))


def owned_paths(folder: Path, marker: str, *, legacy: frozenset[str] = frozenset()) -> frozenset[str] | None:
    """The paths (relative, with "/") that onnxformer wrote in `folder`: the marker and what it lists;
    `legacy` for a marker without a "files" list. None when the marker is missing or unreadable."""
    try:
        data = json.loads((folder / marker).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    listed = data.get("files")
    if not isinstance(listed, list):
        return frozenset({marker, *legacy})
    paths = {entry.get("path") if isinstance(entry, dict) else entry for entry in listed}
    return frozenset({marker, *(path for path in paths if isinstance(path, str))})


def foreign_entries(folder: Path, owned: frozenset[str]) -> list[str]:
    """What `folder` holds that is not in `owned`: files, and folders holding nothing owned ("mydata/"),
    as paths relative to `folder`."""
    parents = {"/".join(path.split("/")[:depth]) for path in owned for depth in range(1, path.count("/") + 1)}

    def walk(here: Path, prefix: str) -> Iterator[str]:
        for entry in sorted(here.iterdir()):
            relative = prefix + entry.name
            if entry.is_dir() and not entry.is_symlink():
                if relative in parents:
                    yield from walk(entry, relative + "/")
                else:
                    yield relative + "/"
            elif relative not in owned:
                yield relative

    return list(walk(folder, ""))


def foreign_message(target: Path, foreign: list[str]) -> str:
    """One line naming what the user put in `target` (at most five entries) and what to do."""
    named = foreign[:5] + ([f"{len(foreign) - 5} more"] if len(foreign) > 5 else [])
    shown = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
    return (
        f"refusing to write to {target}: it holds {shown}, which onnxformer did not write; move "
        f"{'it' if len(foreign) == 1 else 'them'} out of the folder, or choose another folder"
    )


def _make_parent(target: Path, *, error: type[OnnxformerError], what: str) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as problem:
        raise error(
            f"cannot create the folder {target.parent} for the {what} ({problem.strerror}); "
            "choose a path whose parents are folders you can write to"
        ) from None


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
