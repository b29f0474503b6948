"""Optimisation of an export, beside the export package: attention fusion (fusion.py, over the graph
helpers of onnx_graph.py), ONNX Runtime's fusions (export.py), int8 and int4 weights (quantize.py), and what
they cost (quality.py against the goldens, gate.py against fp32 on held-out text)."""

from onnxformer.builder.optimize.export import QUANTIZATIONS, optimize_export, optimize_graph

__all__ = ["QUANTIZATIONS", "optimize_export", "optimize_graph"]
