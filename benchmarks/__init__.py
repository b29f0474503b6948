"""The runtime against PyTorch eager on CPU, side by side on the same weights (see benchmarks/README.md).

    onnxformer bench --out benchmarks/results/<machine>.json     # or: python -m benchmarks ...

Lives in the source checkout, beside the package: it needs the builder (torch) for the PyTorch side and
for building the models, and is not installed with onnxformer. It is a program of its own (__main__.py),
run from the checkout's root; `onnxformer bench` starts it there in a child process. It uses the package
(builder, runtime) like any other program and never imports the CLI.
"""
