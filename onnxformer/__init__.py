"""onnxformer: Transformers built from their parts in PyTorch, exported to ONNX, run anywhere.

The subpackages live in the repository's top-level folders: `onnxformer.builder` (builder/, PyTorch),
`onnxformer.runtime` (runtime/, torch-free) and `onnxformer.cli` (cli/). This package only holds
`__main__`, so that `python -m onnxformer` runs the command; importing it imports no subpackage.

Run from a checkout's root (where the current folder comes first on sys.path), `import onnxformer` finds
this folder, which has no runtime/ beside `__main__`, before the installed package; extend_path adds every
other `onnxformer/` on sys.path to the package's path, so that the subpackages are found where the
install put them. An editable install finds them through its own finder either way.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
