"""Reading and editing an ONNX graph in place: who produces and who consumes each tensor, constant values,
fresh names; dropping dead nodes, restoring topological order; and one rewrite that needs nothing else
(`share_input_shapes`); counting the operators a graph runs (`graph_ops`). Used by the fusions in
`fusion.py`."""

from collections import Counter
from collections.abc import Iterable
from typing import TypeVar

import numpy as np
import onnx
from onnx import numpy_helper

T = TypeVar("T")


def all_found(items: Iterable[T | None]) -> list[T] | None:
    """The items, or None when any of them was not found (a pattern that does not match)."""
    looked_up = list(items)
    found = [item for item in looked_up if item is not None]
    return found if len(found) == len(looked_up) else None


class GraphView:
    """Producer and consumer lookups and constant values over a GraphProto, kept while rewriting.

    The lookups are taken once: nodes added afterwards are not in them."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self.producer = {out: node for node in graph.node for out in node.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.initializers = {init.name: init for init in graph.initializer}
        self.inputs = {value.name for value in graph.input}
        self.outputs = {value.name for value in graph.output}
        self.names = set(self.producer) | set(self.initializers) | self.inputs | {n.name for n in graph.node}
        self.counter = 0

    def node(self, name: str, op_type: str) -> onnx.NodeProto | None:
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type else None

    def constant(self, name: str) -> np.ndarray | None:
        if name in self.initializers:
            return numpy_helper.to_array(self.initializers[name])
        node = self.node(name, "Constant")
        if node is not None:
            for attribute in node.attribute:
                if attribute.name == "value":
                    return numpy_helper.to_array(attribute.t)
        return None

    def scalar(self, name: str) -> float | None:
        value = self.constant(name)
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None

    def only_consumer(self, name: str, op_type: str) -> onnx.NodeProto | None:
        users = self.consumers.get(name, [])
        if len(users) != 1 or users[0].op_type != op_type or name in self.outputs:
            return None
        return users[0]

    def fresh(self, hint: str) -> str:
        while True:
            self.counter += 1
            name = f"fused_{hint}_{self.counter}"
            if name not in self.names:
                self.names.add(name)
                return name

    def add_initializer(self, value: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        tensor = numpy_helper.from_array(value, name)
        self.graph.initializer.append(tensor)
        self.initializers[name] = tensor
        return name


def perm(node: onnx.NodeProto) -> list[int]:
    for attribute in node.attribute:
        if attribute.name == "perm":
            return list(attribute.ints)
    return []


def axis_of(node: onnx.NodeProto) -> int | None:
    return next((attribute.i for attribute in node.attribute if attribute.name == "axis"), None)


def reads(node: onnx.NodeProto) -> list[str]:
    """The names `node` reads: its inputs, and what the graphs in its attributes (an If's branches) take
    from the graph around them."""
    names = [name for name in node.input if name]
    for attribute in node.attribute:
        for sub in [attribute.g] if attribute.HasField("g") else attribute.graphs:
            inner = {init.name for init in sub.initializer} | {value.name for value in sub.input}
            inner.update(out for child in sub.node for out in child.output)
            names += [name for child in sub.node for name in reads(child) if name not in inner]
    return names


def remove_dead_nodes(graph: onnx.GraphProto) -> None:
    """Drop nodes none of whose outputs reach a graph output, and initializers nothing reads."""
    needed = {value.name for value in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(out in needed for out in node.output):
            kept.append(node)
            needed.update(reads(node))
    kept.reverse()
    del graph.node[:]
    graph.node.extend(kept)
    unused = [init for init in graph.initializer if init.name not in needed]
    for init in unused:
        graph.initializer.remove(init)


def sort_topologically(graph: onnx.GraphProto) -> None:
    """Order nodes so each comes after the producers of what it reads (`reads`: its inputs and its
    branches' outer names); stable for an already sorted graph."""
    available = {init.name for init in graph.initializer} | {value.name for value in graph.input} | {""}
    pending = [(node, reads(node)) for node in graph.node]  # each node's reads, walked once
    ordered: list[onnx.NodeProto] = []
    while pending:
        progress = []
        for node, names in pending:
            if all(name in available for name in names):
                ordered.append(node)
                available.update(node.output)
            else:
                progress.append((node, names))
        if len(progress) == len(pending):
            stuck = progress[0][0]
            raise ValueError(f"graph has a cycle or a missing input at {stuck.op_type} {stuck.name}")
        pending = progress
    del graph.node[:]
    graph.node.extend(ordered)


def share_input_shapes(model: onnx.ModelProto) -> int:
    """Point every Shape of a graph input at the first input declared with the same shape; returns how
    many were moved.

    ONNX declares that inputs whose dims carry the same name have the same size, so this changes nothing
    for valid inputs, and it makes the per-layer copies of the causal-mask arithmetic (the exporter reads
    each layer's past length from that layer's own cache tensor) identical, which ONNX Runtime's common
    subexpression elimination then computes once instead of once per layer.
    """

    def signature(value: onnx.ValueInfoProto) -> tuple:
        dims = value.type.tensor_type.shape.dim
        return (*(d.dim_param or d.dim_value for d in dims), value.type.tensor_type.elem_type)

    first: dict[tuple, str] = {}
    canonical = {}
    for value in model.graph.input:
        if all(d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim):
            canonical[value.name] = first.setdefault(signature(value), value.name)
    moved = 0
    for node in model.graph.node:
        if node.op_type == "Shape" and canonical.get(node.input[0], node.input[0]) != node.input[0]:
            node.input[0] = canonical[node.input[0]]
            moved += 1
    return moved


def graph_ops(graph: onnx.GraphProto) -> Counter:
    """How many nodes of each operator `graph` runs: an If counts with its else branch, so that one
    operator under an If of two variants of it counts once."""
    counts = Counter(node.op_type for node in graph.node)
    for node in graph.node:
        if node.op_type == "If":
            counts += graph_ops(next(a.g for a in node.attribute if a.name == "else_branch"))
    return counts
