"""The versions of the tools an export or a checkpoint was made with, recorded in its metadata."""

import importlib.metadata


def tool_versions() -> dict[str, str]:
    versions = {}
    for package in ("onnxformer", "torch", "onnx", "onnxscript", "onnxruntime", "onnxruntime-gpu"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions
