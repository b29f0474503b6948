"""The runtime against PyTorch eager on CPU, side by side on the same weights (see benchmarks/README.md).

    onnxformer bench --out benchmarks/results/<machine>.json     # or: python -m benchmarks ...

Lives in the source checkout, beside the package: it needs the builder (torch) for the PyTorch side and
for building the models, and is not installed with onnxformer.
"""
