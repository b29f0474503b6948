"""Writing an export folder: the files and manifest.json, atomically (see onnxformer.builder.atomic)."""

import os
from pathlib import Path

from onnxformer.builder.atomic import write_folder_atomically
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
