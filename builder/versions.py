"""The versions of the tools a file was made with, recorded in checkpoints and export manifests.

Its own module so that training records them without importing the export package (and so onnx).
"""

import importlib.metadata

PACKAGES = ("onnxformer", "torch", "onnx", "onnxscript", "onnxruntime", "onnxruntime-gpu")


def tool_versions() -> dict[str, str]:
    """Installed version of each of PACKAGES; a package that is not installed is left out."""
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions
