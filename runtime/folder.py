"""Opening an export folder: the manifest is parsed and every file is checked before anything uses it.

Files are read through `ExportFolder.read`, which refuses paths that leave the folder (absolute, `..`,
symlinks) and anything but a regular file, and checks size and sha256 of the bytes it returns; callers
hand those same bytes to ONNX Runtime or the tokenizer, so what is checked is what is run.
"""

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from onnxformer.runtime.errors import ManifestError
from onnxformer.runtime.manifest import MANIFEST_NAME, FileEntry, Manifest


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ExportFolder:
    root: Path
    manifest: Manifest

    @classmethod
    def open(cls, folder: str | os.PathLike) -> "ExportFolder":
        root = Path(folder)
        if not root.exists():
            raise ManifestError(f"{root} does not exist; pass the folder an `onnxformer export` wrote")
        if not root.is_dir():
            raise ManifestError(f"{root} is not a folder; pass the export folder, not a file inside it")
        manifest_path = root / MANIFEST_NAME
        if not manifest_path.is_file():
            raise ManifestError(
                f"{root} is not an onnxformer export: it has no {MANIFEST_NAME}; "
                "pass the folder an `onnxformer export` wrote"
            )
        try:
            text = _read_regular_file(manifest_path).decode("utf-8")
        except UnicodeDecodeError:
            raise ManifestError(f"{manifest_path} is not UTF-8 text; re-export the folder") from None
        return cls(root, Manifest.from_json(text))

    def path_of(self, relative: str) -> Path:
        """The checked location of a manifest entry, inside the folder."""
        pure = PurePosixPath(relative)
        if not relative or pure.is_absolute() or "\\" in relative or ".." in pure.parts:
            raise ManifestError(f"{MANIFEST_NAME} names {relative!r}, which is not a plain relative path")
        path = self.root.joinpath(*pure.parts)
        root = self.root.resolve()
        if not path.resolve().is_relative_to(root):
            raise ManifestError(f"{relative!r} leads outside the export folder {self.root}; refusing it")
        for parent in [path, *path.parents]:
            if parent.resolve() == root:
                break
            if parent.is_symlink():
                raise ManifestError(f"{relative!r} goes through a symbolic link; refusing it")
        return path

    def read(self, relative: str) -> bytes:
        """The bytes of a listed file after checking its size and sha256 against the manifest."""
        entry = self.manifest.file(relative)
        path = self.path_of(entry.path)
        if not path.exists():
            raise ManifestError(f"{path} is listed in {MANIFEST_NAME} but missing; re-export the folder")
        data = _read_regular_file(path)
        _check(entry, data)
        return data

    def verify(self) -> list[FileEntry]:
        """Check every listed file; return the entries (raises `ManifestError` at the first problem)."""
        for entry in self.manifest.files:
            self.read(entry.path)
        return list(self.manifest.files)


def _check(entry: FileEntry, data: bytes) -> None:
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


def _read_regular_file(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as error:
        raise ManifestError(f"cannot open {path}: {error.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ManifestError(f"{path} is not a regular file; refusing it")
        return handle.read()
