"""Re-checking an export folder without torch: every file's size and sha256, and that ONNX Runtime loads
each graph with the inputs and outputs the manifest promises."""

from dataclasses import dataclass

from onnxformer.runtime.errors import OnnxformerError
from onnxformer.runtime.folder import ExportFolder
from onnxformer.runtime.manifest import FileEntry
from onnxformer.runtime.session import create_session


@dataclass(frozen=True)
class FileCheck:
    entry: FileEntry
    problem: str | None  # None when the file passed

    @property
    def ok(self) -> bool:
        return self.problem is None


def check_export(folder: ExportFolder) -> list[FileCheck]:
    """One result per listed file; a problem in one file does not stop the others being checked."""
    return [_check_file(folder, entry) for entry in folder.manifest.files]


def _check_file(folder: ExportFolder, entry: FileEntry) -> FileCheck:
    try:
        if not entry.path.endswith(".onnx"):
            folder.read(entry.path)
            return FileCheck(entry, None)
        session = create_session(folder.graph(entry.path), device="cpu").session
    except OnnxformerError as error:
        return FileCheck(entry, str(error))
    except Exception as error:  # ONNX Runtime's own load errors are untyped
        return FileCheck(entry, f"ONNX Runtime cannot load {entry.path}: {str(error).splitlines()[0]}")
    for what, promised, actual in (
        ("inputs", [spec.name for spec in entry.inputs], [value.name for value in session.get_inputs()]),
        ("outputs", [spec.name for spec in entry.outputs], [value.name for value in session.get_outputs()]),
    ):
        if promised != actual:
            return FileCheck(entry, f"{entry.path} {what} are {actual}, manifest says {promised}")
    problem = None if entry.parity is None else entry.parity.problem()
    return FileCheck(entry, problem)
