"""The in-place KV cache: each cached self-attention of a decoder becomes one
`com.microsoft.GroupQueryAttention` whose past and present can be the same preallocated buffer.

The plain export's cache contract is "past in, past + new out": every step, each layer's Concat copies its
whole past key and value into a new present, so a step's cost grows with the context however little it
computes. This rewrite changes the "decoder" graph's contract (manifest `kv_cache.layout` names the axis
`max_sequence`):

    past_key_values.{i}.key/value  (B, Hkv, M, Dh)  a buffer of M >= P + T positions, the first P written
    present.{i}.key/value          (B, Hkv, M, Dh)  the same positions, P .. P + T - 1 now written too
    attention_mask                 (B, P + T)       as before: which of those positions are real tokens

GroupQueryAttention (ORT contrib op, CPU and CUDA kernels, grouped or not) writes the step's keys and
values at positions P .. P + T - 1 and attends over the first P + T; when the runtime binds past and present
to the same OrtValue (IO binding), nothing is copied. Without the binding the graph still computes the same
function, copying. The past length P, which the graph read from the past's shape, becomes
attention_mask's length minus T:

    out = GroupQueryAttention(q, k, v, past_key, past_value, seqlens_k = P + T - 1 per row,
                              total_sequence_length = P + T, attention_bias) * any_key_visible

`attention_bias` is our mask (padding and causal) as MIN / 0, and `any_key_visible` keeps rows that see no
key at zero, both as in `fusion.py`. A subgraph with a position bias (T5) is left to `fusion.py`.
"""

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from onnxformer.builder.optimize.fusion import (
    MS_DOMAIN,
    SPLIT_PERM,
    Masks,
    attention_frame,
    heads_source,
    projection,
)
from onnxformer.builder.optimize.onnx_graph import (
    GraphView,
    all_found,
    axis_of,
    perm,
    remove_dead_nodes,
    sort_topologically,
)
from onnxformer.runtime.errors import ExportError

BUFFER_AXIS = "max_sequence"  # the cache tensors' axis 2 after the rewrite


@dataclass
class _Cached:
    mask: str  # bool (B, 1, T, S), True = masked out
    minimum: str  # the fill value of masked logits
    scale: float
    query: str  # (B, H, T, Dh) after the position encoding
    key: onnx.NodeProto  # Concat(past_key, new_key) -> present_key
    value: onnx.NodeProto  # Concat(past_value, new_value) -> present_value
    output: str  # (B, T, D) the merged heads


def _cache_concat(g: GraphView, name: str) -> onnx.NodeProto | None:
    """The Concat(past, new) on axis 2 behind a key or value operand: the Concat itself, or grouped-query
    attention's repeat of it, Reshape(Expand(Unsqueeze(concat, 2)))."""
    reshape = g.node(name, "Reshape")
    if reshape is not None:
        expand = g.node(reshape.input[0], "Expand")
        unsqueeze = g.node(expand.input[0], "Unsqueeze") if expand is not None else None
        if unsqueeze is None:
            return None
        axes = g.constant(unsqueeze.input[1]) if len(unsqueeze.input) > 1 else None
        if axes is None or axes.reshape(-1).tolist() != [2]:
            return None
        name = unsqueeze.input[0]
    concat = g.node(name, "Concat")
    if concat is None or len(concat.input) != 2 or axis_of(concat) not in (2, -2):
        return None
    if concat.input[0] not in g.inputs or concat.output[0] not in g.outputs:
        return None
    return concat


def _match(g: GraphView, softmax: onnx.NodeProto) -> _Cached | None:
    frame = attention_frame(g, softmax)
    if frame is None:
        return None
    scaled = g.node(frame.fill.input[2], "Mul")  # no Add: a position bias is not ours to fuse here
    scale = g.scalar(scaled.input[1]) if scaled is not None else None
    scores = g.node(scaled.input[0], "MatMul") if scaled is not None else None
    if scale is None or scores is None:
        return None
    key_t = g.node(scores.input[1], "Transpose")
    if key_t is None or perm(key_t) != [0, 1, 3, 2]:
        return None
    key, value = _cache_concat(g, key_t.input[0]), _cache_concat(g, frame.weighted.input[1])
    if key is None or value is None:
        return None
    return _Cached(frame.mask, frame.fill.input[1], scale, scores.input[0], key, value, frame.output)


@dataclass
class _Rotary:
    source: str  # (B, T, H Dh) the projection before the split into heads
    positions: str  # (B, T) int64 position ids
    inv_freq: np.ndarray  # (Dh / 2,) the rotary frequencies


def _rotary(g: GraphView, heads: str) -> _Rotary | None:
    """Our rotary position encoding of split heads X (B, H, T, Dh), in the non-interleaved form
    X * cos + cat(-X2, X1) * sin, with cos and sin Tile(Cos / Sin(positions * inv_freq), 2) (B, 1, T, Dh);
    or None."""
    add = g.node(heads, "Add")
    products = all_found(g.node(name, "Mul") for name in add.input) if add is not None else None
    if products is None or len(products) != 2:
        return None
    for straight, rotated in (products, products[::-1]):
        for x_side in (0, 1):
            x, cos = straight.input[x_side], straight.input[1 - x_side]
            for half_side in (0, 1):
                half, sin = rotated.input[half_side], rotated.input[1 - half_side]
                if _rotate_half(g, half) == x:
                    found = _angles(g, cos, "Cos"), _angles(g, sin, "Sin")
                    source = heads_source(g, x)
                    if source is not None and found[0] is not None and found[0] == found[1]:
                        positions, inv_freq = found[0]
                        frequencies = g.constant(inv_freq)
                        assert frequencies is not None  # _angles took inv_freq only as a constant
                        return _Rotary(source, positions, frequencies)
    return None


def _rotate_half(g: GraphView, name: str) -> str | None:
    """X for Concat(-X2, X1) on the last axis, X1 and X2 the halves of X; else None."""
    concat = g.node(name, "Concat")
    if concat is None or len(concat.input) != 2 or axis_of(concat) not in (-1, 3):
        return None
    neg = g.node(concat.input[0], "Neg")
    split = g.node(neg.input[0], "Split") if neg is not None else None
    if neg is None or split is None or len(split.output) != 2 or axis_of(split) not in (-1, 3):
        return None
    if list(split.output) != [concat.input[1], neg.input[0]]:
        return None
    return split.input[0]


def _angles(g: GraphView, name: str, op: str) -> tuple[str, str] | None:
    """(positions (B, T), inv_freq initializer) for Tile(Expand(op(Cast(positions[:, None, :, None]) *
    inv_freq)), [1, 1, 1, 2]); else None."""
    tile = g.node(name, "Tile")
    repeats = g.constant(tile.input[1]) if tile is not None else None
    if tile is None or repeats is None or repeats.reshape(-1).tolist() != [1, 1, 1, 2]:
        return None
    node = g.node(tile.input[0], "Expand")
    trig = g.node(node.input[0] if node is not None else tile.input[0], op)
    scaled = g.node(trig.input[0], "Mul") if trig is not None else None
    if scaled is None:
        return None
    for angle_side in (0, 1):
        inv_freq = scaled.input[1 - angle_side]
        frequencies = g.constant(inv_freq)
        cast = g.node(scaled.input[angle_side], "Cast")
        if frequencies is None or frequencies.ndim != 1 or cast is None:
            continue
        outer = g.node(cast.input[0], "Unsqueeze")
        inner = g.node(outer.input[0], "Unsqueeze") if outer is not None else None
        if inner is not None:
            return inner.input[0], inv_freq
    return None


class _Builder:
    """The nodes added by the rewrite, and the per-step tensors every layer shares."""

    def __init__(self, g: GraphView, *, ids: str, mask: str, kv_heads: int, head_dim: int) -> None:
        self.g = g
        self.nodes: list[onnx.NodeProto] = []
        self.merge_shape = g.add_initializer(np.array([0, 0, -1], np.int64), "merge_shape")
        one = g.add_initializer(np.array([1], np.int64), "one")
        scalar = g.add_initializer(np.zeros(0, np.int64), "scalar_shape")
        total = self.add("Shape", [mask], "total_length", start=1, end=2)  # [P + T]
        new = self.add("Shape", [ids], "new_length", start=1, end=2)  # [T]
        batch = self.add("Shape", [ids], "batch", start=0, end=1)  # [B]
        past = self.add("Sub", [total, new], "past_length")  # [P]
        heads = g.add_initializer(np.array([kv_heads], np.int64), "kv_heads")
        width = g.add_initializer(np.array([head_dim], np.int64), "head_dim")
        # What the graph read from each past tensor's shape, now that the buffer may be longer than P.
        self.past_shape = self.add("Concat", [batch, heads, past, width], "past_shape", axis=0)
        last = self.add("Cast", [self.add("Sub", [total, one], "last")], "last_32", to=onnx.TensorProto.INT32)
        self.seqlens = self.add("Expand", [last, batch], "seqlens_k")  # (B,) int32: P + T - 1
        total_32 = self.add("Cast", [total], "total_32", to=onnx.TensorProto.INT32)
        self.total = self.add("Reshape", [total_32, scalar], "total_sequence_length")  # scalar int32
        self.trig: dict[bytes, tuple[str, str]] = {}  # inv_freq -> (cos, sin) caches

    def add(self, op: str, inputs: list[str], hint: str, **attributes) -> str:
        out = self.g.fresh(hint)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attributes))
        return out

    def rotated(self, rotary: _Rotary, heads: int, max_positions: int) -> str:
        """(B, T, heads Dh): ONNX Runtime's RotaryEmbedding on the projection, at the graph's own positions
        (so the cache holds exactly the keys the plain graph's does)."""
        key = rotary.inv_freq.tobytes()
        if key not in self.trig:
            angles = np.arange(max_positions, dtype=np.float64)[:, None] * rotary.inv_freq[None, :]
            self.trig[key] = (
                self.g.add_initializer(np.cos(angles).astype(np.float32), "cos"),
                self.g.add_initializer(np.sin(angles).astype(np.float32), "sin"),
            )
        cos, sin = self.trig[key]
        return self.add(
            "RotaryEmbedding",
            [rotary.source, rotary.positions, cos, sin],
            "rotary",
            domain=MS_DOMAIN,
            num_heads=heads,
            interleaved=0,
        )

    def merged(self, heads: str) -> str:
        """(B, T, H Dh) from (B, H, T, Dh): the split's source when there is one, else a transpose."""
        source = heads_source(self.g, heads)
        if source is not None:
            return source
        swapped = self.add("Transpose", [heads], "merge", perm=SPLIT_PERM)  # (B, T, H, Dh)
        return self.add("Reshape", [swapped, self.merge_shape], "merged")


def in_place_cache(
    model: onnx.ModelProto,
    *,
    num_heads: int,
    kv_heads: int,
    head_dim: int,
    ids: str,
    mask: str,
    past_names: list[str],
    max_positions: int | None = None,
) -> int:
    """Rewrite every cached self-attention of the decoder `model` in place (see the module docstring);
    returns how many. `ids` and `mask` are the graph's token and attention-mask inputs, `past_names` its
    cache inputs. With `max_positions` (the model's context), rotary position encodings become ONNX
    Runtime's RotaryEmbedding with cos/sin tables of that many positions. Raises ExportError, leaving the
    graph as it was, unless every cache input was rewritten and nothing else reads them."""
    original = model.SerializeToString()
    g = GraphView(model.graph)
    matches = [m for m in (_match(g, s) for s in g.graph.node if s.op_type == "Softmax") if m is not None]
    if not matches:
        return 0  # no cached self-attention of ours (an encoder, or another pattern)
    build = _Builder(g, ids=ids, mask=mask, kv_heads=kv_heads, head_dim=head_dim)
    masks = Masks(g)
    replaced: list[onnx.NodeProto] = []
    pasts: set[str] = set()
    for m in matches:
        query_rotary, key_rotary = _rotary(g, m.query), _rotary(g, m.key.input[1])
        if query_rotary is not None and key_rotary is not None and max_positions is not None:
            query = build.rotated(query_rotary, num_heads, max_positions)
            key = build.rotated(key_rotary, kv_heads, max_positions)
        else:
            query, key = build.merged(m.query), build.merged(m.key.input[1])
        heads = g.fresh("attention")
        inputs = [
            query,
            key,
            build.merged(m.value.input[1]),
            m.key.input[0],
            m.value.input[0],
            build.seqlens,
            build.total,
            "",  # cos_cache
            "",  # sin_cache
            "",  # position_ids
            masks.attention_bias(m.mask, m.minimum, None, ids),  # ids (B, T): for T
        ]
        build.nodes.append(
            helper.make_node(
                "GroupQueryAttention",
                inputs,
                [heads, m.key.output[0], m.value.output[0]],
                name=heads,
                domain=MS_DOMAIN,
                num_heads=num_heads,
                kv_num_heads=kv_heads,
                scale=m.scale,
            )
        )
        build.nodes.append(helper.make_node("Mul", [heads, masks.any_visible(m.mask)], [m.output]))
        replaced += [g.producer[m.output], m.key, m.value]
        pasts.update((m.key.input[0], m.value.input[0]))
    bounds: dict[int, str] = {}  # one initializer per value: the layers' copies stay identical, and
    # ONNX Runtime's common-subexpression elimination then computes their masks once
    for node in [n for n in g.graph.node if n.op_type == "Shape" and n.input[0] in pasts]:
        start = next((a.i for a in node.attribute if a.name == "start"), 0)
        end = next((a.i for a in node.attribute if a.name == "end"), 4)
        for bound in (start, end):
            if bound not in bounds:
                bounds[bound] = g.add_initializer(np.array([bound], np.int64), "bound")
        slice_inputs = [build.past_shape, bounds[start], bounds[end]]
        build.nodes.append(helper.make_node("Slice", slice_inputs, list(node.output)))
        replaced.append(node)
    g.graph.node.extend(build.nodes + masks.nodes)
    for node in replaced:
        g.graph.node.remove(node)
    sort_topologically(model.graph)
    remove_dead_nodes(model.graph)
    users = {node.op_type for node in model.graph.node for name in node.input if name in pasts}
    if users != {"GroupQueryAttention"} or pasts != set(past_names):
        model.ParseFromString(original)
        missed = sorted(set(past_names) - pasts)[:2]
        raise ExportError(
            f"the decoder's KV cache can only be partly written in place (not rewritten: {missed}, other "
            f"readers: {sorted(users - {'GroupQueryAttention'})}); optimize with --kv-cache concat"
        )
    outputs = {m.key.output[0] for m in matches} | {m.value.output[0] for m in matches}
    for value in [*model.graph.input, *model.graph.output]:
        if value.name in pasts or value.name in outputs:
            value.type.tensor_type.shape.dim[2].dim_param = BUFFER_AXIS
    if not any(opset.domain == MS_DOMAIN for opset in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return len(matches)


def pack_cached_qkv(model: onnx.ModelProto) -> int:
    """One MatMul (and one bias Add) for the query, key and value projections of each GroupQueryAttention
    that takes the three from the same input, fed to it packed (B, T, (H + 2 Hkv) Dh) with no separate key
    and value, as the op allows. Returns how many were packed."""
    g = GraphView(model.graph)
    packed = 0
    for node in [n for n in g.graph.node if n.op_type == "GroupQueryAttention"]:
        parts = [projection(g, name) for name in node.input[:3]]
        matmuls = all_found(g.node(part.matmul_output, "MatMul") for part in parts)
        if matmuls is None or len({m.input[0] for m in matmuls}) != 1:
            continue
        weights = all_found(g.constant(m.input[1]) for m in matmuls)
        if weights is None or any(w.ndim != 2 for w in weights):
            continue
        if len({part.bias is None for part in parts}) != 1:
            continue
        joined = g.add_initializer(np.concatenate(weights, axis=1), "qkv_weight")  # (D, (H + 2 Hkv) Dh)
        qkv = g.fresh("qkv")
        g.graph.node.append(helper.make_node("MatMul", [matmuls[0].input[0], joined], [qkv], name=qkv))
        if parts[0].bias is not None:
            # every part has a bias (checked above), which projection() took only as a constant
            biases = all_found(g.constant(part.bias) for part in parts if part.bias is not None)
            assert biases is not None and len(biases) == len(parts)
            bias = g.add_initializer(np.concatenate(biases), "qkv_bias")
            biased = g.fresh("qkv_biased")
            g.graph.node.append(helper.make_node("Add", [qkv, bias], [biased], name=biased))
            qkv = biased
        node.input[0], node.input[1], node.input[2] = qkv, "", ""
        packed += 1
    if packed:
        sort_topologically(model.graph)
        remove_dead_nodes(model.graph)
    return packed
