"""onnxformer: Transformers built from their parts in PyTorch, exported to ONNX, run anywhere.

The subpackages live in the repository's top-level folders: `onnxformer.builder` (builder/, PyTorch),
`onnxformer.runtime` (runtime/, torch-free) and `onnxformer.cli` (cli/). This package only holds
`__main__`, so that `python -m onnxformer` runs the command; importing it imports nothing else.
"""
