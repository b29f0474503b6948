"""ONNX export: one pipeline per graph (pipeline.py: trace, checks, parity, goldens, manifest entry) used by
the block catalogue (blocks.py) and whole models (models.py, driven by the family recipes in recipes/)."""

from onnxformer.builder.export.blocks import build_block, export_block, export_blocks, select_blocks
from onnxformer.builder.export.catalog import BlockDims, BlockSpec, block_catalog
from onnxformer.builder.export.graph import DEFAULT_OPSET, export_graph
from onnxformer.builder.export.parity import ParityRule
from onnxformer.builder.export.pipeline import GraphSpec, export_one

__all__ = [
    "DEFAULT_OPSET",
    "BlockDims",
    "BlockSpec",
    "GraphSpec",
    "ParityRule",
    "block_catalog",
    "build_block",
    "export_block",
    "export_blocks",
    "export_graph",
    "export_one",
    "select_blocks",
]
