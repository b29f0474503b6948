"""Opening an export folder: the manifest is parsed and every file is checked before anything uses it.

Files are read through `ExportFolder.read`, and callers hand the bytes it returns to ONNX Runtime or the
tokenizer, so what is checked is what is run. An export folder may come from anyone, so a file is only
read when all of this holds (otherwise `ManifestError`, and nothing outside the folder is opened):

- its manifest path is plain and relative: no absolute path, no `..`, `.` or empty part, no backslash,
  colon or control character;
- the folders on the way are walked one at a time from the export folder with `O_NOFOLLOW`, so no
  symbolic link is followed, wherever it sits and even if it is swapped in while we look;
- it is a regular file with one hard link, checked with `lstat` before it is opened (so a FIFO, device
  or socket is never opened, and neither is a file outside the folder that a hard link shares) and again
  with `fstat` on the opened descriptor (`O_NONBLOCK`: opening can never hang), which must be the same
  inode;
- its size is the manifest's before a byte is read (a huge or endless file is never read), and its
  sha256 is the manifest's after;
- an ONNX file's external data (weights kept beside a graph past protobuf's 2 GB limit) is allowed
  only for the graph's main initializers, and only in a file the manifest lists as that graph's weights
  (`FileEntry.weights_of`), named by its plain relative location, every tensor's offset and length
  inside that file's checked size. Anything else is refused: a location leaving the folder
  (`../../etc/passwd`, an absolute path), one the manifest does not list for this graph, ONNX Runtime's
  `*/_ORT_MEM_ADDR_/*` marker (which reads process memory), external data in a Constant, attribute,
  subgraph or function. ONNX Runtime is then never given a path: `ExportFolder.graph` reads the weights
  file once (size and sha256 checked), slices the tensors out of those bytes, and `create_session` hands
  them over with `SessionOptions.add_external_initializers`, which replaces every external tensor before
  ONNX Runtime would open a file.

Hard links are refused outright rather than judged: a second name for an inode cannot be told from a
link to a file outside the folder. Copy an export with `cp -r`, not `cp -l`.
"""

import errno
import hashlib
import io
import os
import posixpath
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, overload

import numpy as np

from onnxformer.runtime import protobuf
from onnxformer.runtime.errors import ManifestError
from onnxformer.runtime.manifest import MANIFEST_NAME, FileEntry, Manifest
from onnxformer.runtime.tensorproto import ExternalTensor, is_external, read_external_tensor

MAX_MANIFEST_BYTES = 64 * 2**20  # far above any real manifest; a bigger one is refused unread
MAX_MODEL_BYTES = 2**31  # protobuf's limit on one serialized message
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FILE_FLAGS = (
    os.O_RDONLY
    | _NOFOLLOW
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_DIR_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_WALK_BY_FD = os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd


def sha256_bytes(data: bytes | bytearray) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class GraphBytes:
    """A graph as ONNX Runtime is given it: the checked model bytes and, for each tensor the model keeps
    in external data, its value sliced from the checked weights bytes (`create_session` passes them with
    `SessionOptions.add_external_initializers`)."""

    model: bytes
    initializers: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class ExportFolder:
    root: Path
    manifest: Manifest
    manifest_sha256: str = ""  # of the manifest.json bytes that were parsed

    @classmethod
    def open(cls, folder: str | os.PathLike[str]) -> "ExportFolder":
        root = Path(folder)
        if not root.exists():
            raise ManifestError(f"{root} does not exist; pass the folder an `onnxformer export` wrote")
        if not root.is_dir():
            raise ManifestError(f"{root} is not a folder; pass the folder an `onnxformer export` wrote")
        if not (root / MANIFEST_NAME).exists() and not (root / MANIFEST_NAME).is_symlink():
            raise ManifestError(
                f"{root} is not an onnxformer export: it has no {MANIFEST_NAME}; "
                "pass the folder an `onnxformer export` wrote"
            )
        data = read_inside(root, MANIFEST_NAME, size=None, limit=MAX_MANIFEST_BYTES)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ManifestError(f"{root / MANIFEST_NAME} is not UTF-8 text; re-export the folder") from None
        try:
            manifest = Manifest.from_json(text)
        except ManifestError:
            raise
        except (RecursionError, ValueError, TypeError, KeyError, AttributeError) as error:
            # A hostile manifest may nest or size its JSON to trip the parser; never let that escape.
            raise ManifestError(
                f"{root / MANIFEST_NAME} is malformed ({type(error).__name__}: {str(error)[:200]}); "
                "re-export the folder"
            ) from None
        for entry in manifest.files:
            plain_parts(entry.path)
        return cls(root, manifest, sha256_bytes(data))

    def path_of(self, relative: str) -> Path:
        """The location of a manifest entry inside the folder (checked as a plain relative path that
        goes through no symbolic link; `read` checks again while it opens the file)."""
        parts = plain_parts(relative)
        path = self.root.joinpath(*parts)
        for depth in range(1, len(parts) + 1):
            if self.root.joinpath(*parts[:depth]).is_symlink():
                raise ManifestError(f"{relative!r} goes through a symbolic link; refusing it")
        return path

    def read(self, relative: str) -> bytes:
        """The bytes of a listed file after checking its size and sha256 against the manifest (and, for a
        graph, that any external data it uses is in its listed weights, see the module docstring).

        A graph's bytes alone cannot run when it keeps weights outside: give ONNX Runtime `graph()`."""
        entry, data = self._read_checked(relative)
        if self._is_graph(entry):
            self._external_tensors(entry, data)
        return data

    def graph(self, relative: str) -> GraphBytes:
        """A listed graph ready for `create_session`: its checked bytes and, when it keeps weights in
        external data, those tensors built from its weights file (read once, size and sha256 checked)."""
        entry, data = self._read_checked(relative)
        tensors = self._external_tensors(entry, data)
        paths = sorted({path for path, _ in tensors})
        weights = {path: self._read_checked(path, buffer=True)[1] for path in paths}
        initializers = {}
        for path, tensor in tensors:
            array = np.frombuffer(
                weights[path],
                dtype=tensor.dtype,
                count=tensor.length // tensor.dtype.itemsize,
                offset=tensor.offset,
            )
            if not array.flags.aligned:  # an offset that is no multiple of the item size: copy it aligned
                array = array.copy()
            array.setflags(write=False)  # the checked bytes stay as checked
            initializers[tensor.name] = array.reshape(tensor.dims)
        return GraphBytes(data, initializers)

    @overload
    def _read_checked(self, relative: str, *, buffer: Literal[False] = False) -> tuple[FileEntry, bytes]: ...
    @overload
    def _read_checked(self, relative: str, *, buffer: bool) -> tuple[FileEntry, bytes | bytearray]: ...
    def _read_checked(self, relative: str, *, buffer: bool = False) -> tuple[FileEntry, bytes | bytearray]:
        entry = self.manifest.file(relative)
        data = read_inside(self.root, entry.path, size=entry.size, buffer=buffer)
        _check(entry, data)
        return entry, data

    def _is_graph(self, entry: FileEntry) -> bool:
        return entry.path.endswith(".onnx") or entry.path in self.manifest.graphs.values()

    def _external_tensors(self, entry: FileEntry, data: bytes) -> list[tuple[str, ExternalTensor]]:
        """(weights file, tensor) for each external tensor of the graph `entry`, every one checked against
        the manifest; `ManifestError` at the first that is not allowed."""
        tensors = external_tensors(data, name=entry.path)
        if not tensors:
            return []
        if not self._is_graph(entry):
            raise ManifestError(f"{entry.path} is not a graph; refusing to load it as one")
        weights = {item.path: item for item in self.manifest.files if item.weights_of == entry.path}
        folder = posixpath.dirname(entry.path)
        checked, names = [], set()
        for tensor in tensors:
            shown = f"{entry.path}: tensor {tensor.name!r} has its data in external file {tensor.location!r}"
            if "_ORT_MEM_ADDR_" in tensor.location:
                raise ManifestError(
                    f"{shown}, ONNX Runtime's marker for reading process memory; refusing the model"
                )
            try:
                parts = plain_parts(tensor.location)
            except ManifestError:
                raise ManifestError(
                    f"{shown}, which is not a plain relative path inside the folder (external data may "
                    "only name the graph's listed weights file); refusing the model"
                ) from None
            path = posixpath.join(folder, *parts)
            listed = weights.get(path)
            if listed is None:
                raise ManifestError(
                    f"{shown}, which {MANIFEST_NAME} does not list as {entry.path}'s weights (listed: "
                    f"{sorted(weights)}); external data is only read from listed weights files; "
                    "re-export the folder"
                )
            if tensor.end > listed.size:
                raise ManifestError(
                    f"{shown} at bytes {tensor.offset}..{tensor.end}, past the end of {path} "
                    f"({listed.size} bytes): the graph or its weights were altered; re-export the folder"
                )
            if tensor.name in names:
                raise ManifestError(f"{entry.path} keeps tensor {tensor.name!r} in external data twice")
            names.add(tensor.name)
            checked.append((path, tensor))
        return checked

    def verify(self) -> list[FileEntry]:
        """Check every listed file; return the entries (raises `ManifestError` at the first problem)."""
        for entry in self.manifest.files:
            self.read(entry.path)
        return list(self.manifest.files)


def plain_parts(relative: object) -> tuple[str, ...]:
    """The parts of a manifest path, refused unless it is a plain relative path of forward slashes."""
    refusal = ManifestError(
        f"{MANIFEST_NAME} names {relative!r}, which is not a plain relative path inside the folder; "
        "re-export the folder"
    )
    if not isinstance(relative, str) or not relative or relative.startswith("/"):
        raise refusal
    if any(ord(c) < 32 or ord(c) == 127 or c in "\\:" for c in relative):
        raise refusal
    parts = tuple(relative.split("/"))
    if any(part in ("", ".", "..") for part in parts):
        raise refusal
    return parts


@overload
def read_inside(
    root: Path, relative: str, *, size: int | None, limit: int | None = None, buffer: Literal[False] = False
) -> bytes: ...
@overload
def read_inside(
    root: Path, relative: str, *, size: int | None, limit: int | None = None, buffer: bool
) -> bytes | bytearray: ...
def read_inside(
    root: Path, relative: str, *, size: int | None, limit: int | None = None, buffer: bool = False
) -> bytes | bytearray:
    """The bytes of `relative` under `root`, opened as described in the module docstring.

    `size` (the manifest's) is checked before reading; otherwise at most `limit` bytes are accepted.
    With `buffer` (and a `size`), the file is read into one bytearray of that size and returned as is:
    a weights file of many gigabytes is then held once, not twice (chunks, then joined bytes).
    """
    parts = plain_parts(relative)
    shown = root.joinpath(*parts)
    if not _WALK_BY_FD:  # no openat (Windows): check by path, then open without following the last link
        return _read_by_path(root, parts, shown, size=size, limit=limit, buffer=buffer)
    fds = []
    try:
        fds.append(_open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0), None, shown))
        for part in parts[:-1]:
            fds.append(_open(part, _DIR_FLAGS, fds[-1], shown))
        before = _lstat(parts[-1], fds[-1], shown)
        _check_stat(before, shown, size=size, limit=limit)
        fd = _open(parts[-1], _FILE_FLAGS, fds[-1], shown)
        fds.append(fd)
        after = os.fstat(fd)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise ManifestError(f"{shown} was replaced while it was being opened; refusing it")
        _check_stat(after, shown, size=size, limit=limit)
        return _read_fd(fd, shown, size=size, limit=limit, buffer=buffer)
    finally:
        for fd in reversed(fds):
            os.close(fd)


def read_regular_file(path: str | os.PathLike[str], *, limit: int) -> bytes:
    """The bytes of a file the user named directly (a symbolic link they name is followed: they chose
    it), refused unless it is a regular file of at most `limit` bytes; a FIFO or device is never opened."""
    shown = Path(path)
    try:
        before = os.stat(shown)
    except FileNotFoundError:
        raise ManifestError(f"{shown} does not exist") from None
    except OSError as error:
        raise _open_error(error, shown) from None
    _check_kind_and_limit(before, shown, limit)
    fd = _open(shown, os.O_RDONLY | (_FILE_FLAGS & ~_NOFOLLOW) | getattr(os, "O_BINARY", 0), None, shown)
    try:
        after = os.fstat(fd)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise ManifestError(f"{shown} was replaced while it was being opened; refusing it")
        _check_kind_and_limit(after, shown, limit)
        return _read_fd(fd, shown, size=None, limit=limit)
    finally:
        os.close(fd)


def _check_kind_and_limit(info: os.stat_result, shown: Path, limit: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _KINDS.items() if test(info.st_mode)), "not a regular file")
        raise ManifestError(f"{shown} is {kind}, not a regular file; refusing it")
    if info.st_size > limit:
        raise ManifestError(f"{shown} has {info.st_size} bytes, more than the {limit} allowed; refusing it")


def _read_by_path(
    root: Path, parts: tuple[str, ...], shown: Path, *, size: int | None, limit: int | None, buffer: bool
) -> bytes | bytearray:
    for depth in range(1, len(parts) + 1):
        if root.joinpath(*parts[:depth]).is_symlink():
            raise ManifestError(f"{shown} goes through a symbolic link; refusing it")
    _check_stat(_lstat(str(shown), None, shown), shown, size=size, limit=limit)
    fd = _open(shown, _FILE_FLAGS | getattr(os, "O_BINARY", 0), None, shown)
    try:
        _check_stat(os.fstat(fd), shown, size=size, limit=limit)
        return _read_fd(fd, shown, size=size, limit=limit, buffer=buffer)
    finally:
        os.close(fd)


def _open(name: str | Path, flags: int, dir_fd: int | None, shown: Path) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd) if dir_fd is not None else os.open(name, flags)
    except OSError as error:
        raise _open_error(error, shown) from None


def _lstat(name: str, dir_fd: int | None, shown: Path) -> os.stat_result:
    try:
        if dir_fd is None:
            return os.stat(name, follow_symlinks=False)
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as error:
        raise _open_error(error, shown) from None


def _open_error(error: OSError, shown: Path) -> ManifestError:
    if error.errno == errno.ENOENT:
        return ManifestError(f"{shown} is listed in {MANIFEST_NAME} but missing; re-export the folder")
    if error.errno in (errno.ELOOP, errno.ENOTDIR):  # O_NOFOLLOW met a link, or a file where a folder was
        return ManifestError(f"{shown} goes through a symbolic link or a non-folder; refusing it")
    return ManifestError(f"cannot open {shown}: {error.strerror}; check the folder's permissions")


_KINDS = {
    stat.S_ISLNK: "a symbolic link",
    stat.S_ISDIR: "a folder",
    stat.S_ISFIFO: "a FIFO",
    stat.S_ISCHR: "a character device",
    stat.S_ISBLK: "a block device",
    stat.S_ISSOCK: "a socket",
}


def _check_stat(info: os.stat_result, shown: Path, *, size: int | None, limit: int | None) -> None:
    _check_kind_and_limit(info, shown, limit if limit is not None else info.st_size)
    if info.st_nlink > 1:
        raise ManifestError(
            f"{shown} has {info.st_nlink} hard links, so it may be a file outside the folder; refusing it "
            "(copy exports with `cp -r`, not as hard links)"
        )
    if size is not None and info.st_size != size:
        raise ManifestError(
            f"{shown} has {info.st_size} bytes but {MANIFEST_NAME} says {size}: the file was truncated or "
            "altered; re-export the folder"
        )


@overload
def _read_fd(
    fd: int, shown: Path, *, size: int | None, limit: int | None, buffer: Literal[False] = False
) -> bytes: ...
@overload
def _read_fd(
    fd: int, shown: Path, *, size: int | None, limit: int | None, buffer: bool
) -> bytes | bytearray: ...
def _read_fd(
    fd: int, shown: Path, *, size: int | None, limit: int | None, buffer: bool = False
) -> bytes | bytearray:
    """Exactly the expected bytes; one more than expected (a file growing while read) is refused."""
    if buffer and size is not None:
        data = bytearray(size)
        view, total = memoryview(data), 0
        with io.FileIO(fd, closefd=False) as handle:
            while total < size:
                count = handle.readinto(view[total : total + (1 << 24)])
                if not count:
                    break
                total += count
            grew = bool(handle.read(1))
        view.release()
        if grew:
            raise ManifestError(f"{shown} grew while it was read; refusing it")
        return data if total == size else data[:total]  # a short read: `_check` names the sizes
    most = size if size is not None else limit
    chunks, total = [], 0
    while True:
        want = (most + 1 - total) if most is not None else 1 << 20
        if want <= 0:
            break
        chunk = os.read(fd, min(want, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if most is not None and total > most:
        raise ManifestError(f"{shown} grew while it was read; refusing it")
    return b"".join(chunks)


def _check(entry: FileEntry, data: bytes | bytearray) -> None:
    if len(data) != entry.size:
        raise ManifestError(
            f"{entry.path} has {len(data)} bytes but {MANIFEST_NAME} says {entry.size}: the file was "
            "truncated or altered; re-export the folder"
        )
    digest = sha256_bytes(data)
    if digest != entry.sha256:
        raise ManifestError(
            f"{entry.path} does not match its sha256 in {MANIFEST_NAME} (got {digest[:12]}..., expected "
            f"{entry.sha256[:12]}...): the file was altered; re-export the folder"
        )


# External data. Where a TensorProto can sit in a serialized ModelProto (onnx.proto field numbers):
# message -> {field number: message it holds}. TensorProto fields 13 (external_data) and 14
# (data_location, 1 = EXTERNAL) mark external data.
_MODEL, _GRAPH, _NODE, _ATTRIBUTE, _FUNCTION, _SPARSE, _TENSOR, _TRAINING = range(8)
_HOLDS = {
    _MODEL: {7: _GRAPH, 20: _TRAINING, 25: _FUNCTION},
    _TRAINING: {1: _GRAPH, 2: _GRAPH},
    _GRAPH: {1: _NODE, 5: _TENSOR, 15: _SPARSE},
    _NODE: {5: _ATTRIBUTE},
    _ATTRIBUTE: {5: _TENSOR, 6: _GRAPH, 10: _TENSOR, 11: _GRAPH, 22: _SPARSE, 23: _SPARSE},
    _FUNCTION: {7: _NODE, 11: _ATTRIBUTE},
    _SPARSE: {1: _TENSOR, 2: _TENSOR},
    _TENSOR: {},
}
_MAX_DEPTH = 64  # subgraphs nest (If, Loop, Scan); no real model nests this deep


def external_tensors(data: bytes, *, name: str) -> list[ExternalTensor]:
    """The main graph's initializers that keep their data in external files (where each says it is; the
    caller judges the place). `ManifestError` if `data` is not a serialized ONNX model, or if any other
    tensor (a Constant, attribute, sparse initializer, subgraph, function) uses external data, or an
    external initializer is incomplete."""
    found: list[ExternalTensor] = []
    try:
        for number, wire, value in protobuf.fields(memoryview(data)):
            if number not in _HOLDS[_MODEL]:
                continue
            if wire != 2:
                raise ValueError(f"field {number} has wire type {wire}, not a message")
            message = protobuf.as_bytes(number, value)
            if number != 7:  # training info, functions: no external data there
                if _uses_external_data(message, _HOLDS[_MODEL][number], 1):
                    raise _NotAllowed("a function or training graph")
                continue
            for inner, inner_wire, item in protobuf.fields(message):  # the main graph
                if inner not in _HOLDS[_GRAPH]:
                    continue
                if inner_wire != 2:
                    raise ValueError(f"field {inner} has wire type {inner_wire}, not a message")
                inner_message = protobuf.as_bytes(inner, item)
                if inner == 5:
                    if is_external(inner_message):
                        found.append(read_external_tensor(inner_message))
                elif _uses_external_data(inner_message, _HOLDS[_GRAPH][inner], 2):
                    raise _NotAllowed("a node's attribute, a subgraph or a sparse initializer")
    except _NotAllowed as error:
        raise ManifestError(
            f"{name} keeps tensor data of {error} in an external file; external data is allowed only "
            "for the main graph's initializers, so the model is refused; re-export the folder"
        ) from None
    except ValueError as error:
        raise ManifestError(
            f"{name} is not a valid ONNX model or describes its external data wrongly ({error}); "
            "re-export the folder"
        ) from None
    return found


class _NotAllowed(Exception):
    pass


def refuse_external_data(data: bytes, *, name: str) -> None:
    """Raise `ManifestError` unless `data` is a serialized ONNX model whose tensors all hold their own
    bytes: no tensor (initializer, Constant, attribute, subgraph or function) may use external data."""
    try:
        found = uses_external_data(data)
    except ValueError as error:
        raise ManifestError(f"{name} is not a valid ONNX model ({error}); re-export the folder") from None
    if found:
        raise ManifestError(
            f"{name} keeps tensor data in an external file, which could read files outside any folder, "
            "so the model is refused; external data is loaded only from an export folder whose "
            "manifest lists the weights file (with its size and sha256)"
        )


def uses_external_data(data: bytes) -> bool:
    """Whether any tensor of a serialized ONNX model uses external data (`ValueError` if it is no model)."""
    return _uses_external_data(memoryview(data), _MODEL, 0)


def _uses_external_data(buffer: memoryview, kind: int, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        raise ValueError(f"messages nested more than {_MAX_DEPTH} deep")
    holds = _HOLDS[kind]
    for number, wire, value in protobuf.fields(buffer):
        if kind == _TENSOR and (number == 13 or (number == 14 and wire == 0 and value != 0)):
            return True
        if number in holds:
            if wire != 2:
                raise ValueError(f"field {number} has wire type {wire}, not a message")
            if _uses_external_data(protobuf.as_bytes(number, value), holds[number], depth + 1):
                return True
    return False
