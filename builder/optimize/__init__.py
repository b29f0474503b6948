"""Optimisation of an export, beside the export package: attention fusion (fusion.py, over the graph
helpers of onnx_graph.py), ONNX Runtime's fusions and int8 quantization (export.py), and what they cost
(quality.py)."""

from onnxformer.builder.optimize.export import QUANTIZATIONS, optimize_export, optimize_graph

__all__ = ["QUANTIZATIONS", "optimize_export", "optimize_graph"]
