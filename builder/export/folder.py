"""Writing an export folder: the files and manifest.json, atomically (see onnxformer.builder.atomic).

manifest.json lists every file of the folder, so a later write replaces exactly those and refuses a
folder that holds anything else."""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from onnxformer.builder.atomic import staged_folder, write_folder_atomically
from onnxformer.runtime.errors import ExportError
from onnxformer.runtime.manifest import MANIFEST_NAME, Manifest


def write_export_folder(out: str | os.PathLike, files: dict[str, bytes], manifest: Manifest) -> Path:
    """Write `files` (relative path -> bytes) and manifest.json to `out`, replacing an earlier export."""
    return write_folder_atomically(
        out,
        {**files, MANIFEST_NAME: manifest.to_json().encode()},
        marker=MANIFEST_NAME,
        error=ExportError,
        what="export",
    )


@contextlib.contextmanager
def staged_export(out: str | os.PathLike) -> Iterator[Path]:
    """A folder to build the export for `out` in over several steps (export, optimize, layout), each
    writing it in place; `out` gets the finished folder, or, if a step fails, stays as it was."""
    with staged_folder(out, marker=MANIFEST_NAME, error=ExportError, what="export") as staging:
        yield staging
