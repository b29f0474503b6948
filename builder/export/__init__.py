"""ONNX export: per-block graphs (blocks.py) with their parity proof and atomic folder writing."""

from onnxformer.builder.export.blocks import build_block, export_block, export_blocks, select_blocks
from onnxformer.builder.export.catalog import BlockDims, BlockSpec, block_catalog
from onnxformer.builder.export.graph import DEFAULT_OPSET, export_graph
from onnxformer.builder.export.parity import DEFAULT_TOLERANCE

__all__ = [
    "DEFAULT_OPSET",
    "DEFAULT_TOLERANCE",
    "BlockDims",
    "BlockSpec",
    "block_catalog",
    "build_block",
    "export_block",
    "export_blocks",
    "export_graph",
    "select_blocks",
]
