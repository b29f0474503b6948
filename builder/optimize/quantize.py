"""Weight quantization of an optimised graph, and which MatMuls stay in float32.

    int8: ONNX Runtime's dynamic quantization of every MatMul with constant weights (int8 weights, one scale
          per output column; activations quantized per call);
    int4: MatMulNBits, 4-bit weights in blocks of `block_size` input rows, each block with a scale and a
          zero point; accuracy level 4 runs the product with int8 activations where ONNX Runtime's CPU kernel
          has it (AVX2, AVX-512 VNNI), float otherwise.

A tied output head reads the token embedding through a Transpose, which neither quantizer takes (they quantize
constant weights only): `untie_head` gives the head its own transposed copy first. The embedding itself is
not quantized: a step gathers one row of it per token, so its bytes hardly count in the time of a step.

The MatMuls kept at a higher precision are named by `Keep`: the FFN output projections (the widest
activations), the output head, the first and last blocks, in float32 or in 8-bit blocks. The quality gate
(gate.py) walks a ladder of these, from none kept up.
"""

import tempfile
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import numpy_helper

from onnxformer.runtime.errors import ExportError

BLOCK_SIZES = (32, 128)
DEFAULT_BLOCK_SIZE = 32
ACCURACY_LEVEL = 4  # int8 activations (MLAS's CompInt8) where the CPU has the kernel
# int8's FFN output projections in 8-bit blocks (MatMulNBits): blocks of 128 measured faster than 32 on
# MiniLM at 32x128 (297 against 340 ms, one thread, AMD EPYC Zen 5) and at 1x16 (1.18 against 1.32 ms).
EIGHT_BIT_BLOCK_SIZE = 128


@dataclass(frozen=True)
class Keep:
    """Which MatMuls stay float32."""

    ffn_output: bool = False
    head: bool = False
    edge_blocks: bool = False  # the first and the last block
    head_8bit: bool = False  # int4: the output head in 8-bit blocks instead of 4-bit ones
    # int8: the FFN output projections in 8-bit blocks (a scale and zero point per 128 weights, the
    # activation quantized per block) instead of int8 with one activation scale per tensor
    ffn_output_8bit: bool = False

    def describe(self, *, has_head: bool = True) -> str:
        """What stays at a higher precision, in words (`has_head=False`: the model has no output head)."""
        eight = ["the output head in 8 bits"] if self.head_8bit and has_head else []
        eight += ["the FFN output projections in 8-bit blocks"] if self.ffn_output_8bit else []
        fp32 = [
            name
            for name, kept in (
                ("the output head", self.head and has_head),
                ("the FFN output projections", self.ffn_output),
                ("the first and last blocks", self.edge_blocks),
            )
            if kept
        ]
        parts = eight + ([f"{', '.join(fp32)} in float32"] if fp32 else [])
        return ", ".join(parts) if parts else "nothing"


NOTHING_KEPT = Keep()
LADDERS = {
    "int8": (
        Keep(),
        Keep(ffn_output_8bit=True),
        Keep(ffn_output=True),
        Keep(ffn_output=True, head=True),
    ),
    "int4": (
        Keep(),
        Keep(head_8bit=True),
        Keep(head_8bit=True, ffn_output=True),
        Keep(head_8bit=True, ffn_output=True, edge_blocks=True),
    ),
}


def untie_head(model: onnx.ModelProto) -> int:
    """Replace each MatMul weight computed as Transpose(initializer) by a transposed initializer of its own
    (in place); how many. The Transpose stays for its other readers, if any."""
    initializers = {init.name: init for init in model.graph.initializer}
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    transposes = {
        node.output[0]: node
        for node in model.graph.node
        if node.op_type == "Transpose" and node.input[0] in initializers and _is_2d_swap(node, initializers)
    }
    untied = 0
    for node in model.graph.node:
        if node.op_type != "MatMul" or node.input[1] not in transposes:
            continue
        transpose = transposes[node.input[1]]
        weight = numpy_helper.to_array(initializers[transpose.input[0]]).T.copy()
        name = f"{transpose.input[0]}.transposed"
        if name not in initializers:
            model.graph.initializer.append(numpy_helper.from_array(weight, name))
            initializers[name] = model.graph.initializer[-1]
        node.input[1] = name
        readers[transpose.output[0]] -= 1
        untied += 1
    for output, transpose in transposes.items():
        if readers.get(output, 0) == 0:
            model.graph.node.remove(transpose)
    return untied


def _is_2d_swap(node: onnx.NodeProto, initializers: dict[str, onnx.TensorProto]) -> bool:
    if len(initializers[node.input[0]].dims) != 2:
        return False
    perm = [list(attr.ints) for attr in node.attribute if attr.name == "perm"]
    return not perm or perm[0] == [1, 0]


def weight_matmuls(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The MatMuls with a constant 2-D weight, in graph order."""
    shapes = {init.name: tuple(init.dims) for init in model.graph.initializer}
    return [
        node
        for node in model.graph.node
        if node.op_type == "MatMul" and len(shapes.get(node.input[1], ())) == 2
    ]


def kept_matmuls(model: onnx.ModelProto, keep: Keep, *, d_ff: int, vocab: int, layers: int) -> list[str]:
    """The names of the MatMuls `keep` leaves in float32."""
    shapes = {init.name: tuple(init.dims) for init in model.graph.initializer}
    matmuls = weight_matmuls(model)
    names: list[str] = []
    if keep.ffn_output:
        names += [node.name for node in matmuls if shapes[node.input[1]][0] == d_ff]
    heads = [node for node in matmuls if shapes[node.input[1]][1] == vocab]
    if keep.head:
        names += [node.name for node in heads]
    if keep.edge_blocks:
        blocks = [node for node in matmuls if node not in heads]
        if layers < 1 or len(blocks) % layers:
            raise ExportError(
                f"the graph's {len(blocks)} weight MatMuls do not split evenly into its {layers} blocks, so "
                "its first and last blocks cannot be kept in float32; this is a bug, please report it"
            )
        per_block = len(blocks) // layers
        names += [node.name for node in blocks[:per_block] + blocks[-per_block:]]
    return names


def quantize_int8(
    model: onnx.ModelProto, *, keep: list[str], eight_bit: list[str] | None = None
) -> onnx.ModelProto:
    """int8 for every MatMul with constant weights but those in `keep` (float32) and in `eight_bit` (8-bit
    blocks of EIGHT_BIT_BLOCK_SIZE: the FFN output projections, whose outlier channels one activation scale
    per tensor serves badly)."""
    eight_bit = eight_bit or []
    model = _dynamic_int8(model, keep=keep + eight_bit)
    if eight_bit:
        model = _nbits(model, bits=8, block_size=EIGHT_BIT_BLOCK_SIZE, include=eight_bit)
    return model


def _dynamic_int8(model: onnx.ModelProto, *, keep: list[str]) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "int8.onnx"
        quantize_dynamic(
            model,
            out,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            # One scale per output column: the same speed, and far closer on real checkpoints (MiniLM's
            # worst embedding cosine to fp32: 0.95 per tensor, 0.99 per channel).
            per_channel=True,
            nodes_to_exclude=keep,
            # Weights only (activation x activation stays fp32); our MatMuls are all float32.
            extra_options={"MatMulConstBOnly": True, "DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        return onnx.load(out)


def quantize_int4(
    model: onnx.ModelProto, *, keep: list[str], block_size: int, eight_bit: list[str] | None = None
) -> onnx.ModelProto:
    """4-bit blocks for every MatMul with constant weights but those in `keep` (float32) and in
    `eight_bit` (8-bit blocks: the head, when 4 bits move the next-token distribution too far)."""
    if block_size not in BLOCK_SIZES:
        raise ExportError(f"block size must be one of {BLOCK_SIZES}, got {block_size}")
    eight_bit = eight_bit or []
    model = _nbits(model, bits=4, block_size=block_size, exclude=keep + eight_bit)
    return _nbits(model, bits=8, block_size=block_size, include=eight_bit) if eight_bit else model


def _nbits(
    model: onnx.ModelProto,
    *,
    bits: int,
    block_size: int,
    exclude: list[str] | None = None,
    include: list[str] | None = None,
) -> onnx.ModelProto:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(
        model,
        bits=bits,
        block_size=block_size,
        is_symmetric=False,  # a zero point per block: closer on weights that are not centred
        accuracy_level=ACCURACY_LEVEL,
        nodes_to_exclude=exclude,
        nodes_to_include=include,
        op_types_to_quantize=("MatMul",),
    )
    quantizer.process()
    return quantizer.model.model
