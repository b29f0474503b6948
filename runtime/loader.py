"""`load(folder)`: the model in an export folder, as the class that runs its task.

    load(folder)  ->  TextGenerator ("generate") | TextEncoder ("encode") | TextToText ("seq2seq")

The manifest's `task` picks the class; nothing here knows a family. This module sits above the three
model classes, which sit above `onnxformer.runtime.model` (opening and verifying a folder); `open_export`
and `ModelExport` are re-exported here for callers that open a folder without a model class.
"""

import os

from onnxformer.runtime.encoder import TextEncoder
from onnxformer.runtime.errors import ManifestError
from onnxformer.runtime.generator import TextGenerator
from onnxformer.runtime.model import ExportModel, ModelExport, open_export
from onnxformer.runtime.seq2seq import TextToText
from onnxformer.runtime.session import Device

__all__ = ["CLASSES", "ExportModel", "ModelExport", "load", "model_class", "open_export"]

ModelClass = type[TextGenerator] | type[TextEncoder] | type[TextToText]
# Per task (manifest `task`), the class that runs it.
CLASSES: dict[str, ModelClass] = {cls.task: cls for cls in (TextGenerator, TextEncoder, TextToText)}


def model_class(export: ModelExport) -> ModelClass:
    """The class that runs `export`'s task."""
    try:
        return CLASSES[export.task]
    except KeyError:
        raise ManifestError(
            f"{export.folder.root} has task {export.task!r}, which this onnxformer cannot run "
            f"(it runs {sorted(CLASSES)}); upgrade onnxformer"
        ) from None


def load(
    folder: str | os.PathLike[str],
    *,
    device: Device = "auto",
    threads: int | None = None,
    untrusted: bool = False,
) -> TextGenerator | TextEncoder | TextToText:
    """The model in an export folder, as the class for its task (see CLASSES).

    `threads`: ONNX Runtime's intra-op threads, None (its default) or 1 .. the CPUs this process may use
    (`check_threads`). Pass `untrusted=True` for a folder from someone you do not trust (see
    `open_export`)."""
    export = open_export(folder, device=device, threads=threads, untrusted=untrusted)
    return model_class(export)(export)
