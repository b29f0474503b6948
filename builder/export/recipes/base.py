"""What a family's export recipe is made of, and the helpers the recipes share.

A recipe (one file per family beside this one) holds everything about exporting a family that is not in
its model file: the graphs of a whole-model export with their trace inputs and parity cases, how the
model's blocks map onto the block catalogue, the KV-cache layout, the generation defaults, the framing of a
text with special tokens, the end-to-end goldens, what int8 must preserve and how the built-in task is
scored, and what the demo shows. `onnxformer.builder.export.recipes.RECIPES` maps family names to them.

Graph names follow Optimum and transformers.js: `input_ids`, `attention_mask`, `past_key_values.{i}.key/
value` in, `logits`, `present.{i}.key/value` out. Axis names: batch, sequence (new tokens), past_sequence,
total_sequence (past + new), encoder_sequence.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from onnxformer.builder.export.catalog import BlockSpec
from onnxformer.builder.export.parity import Cases
from onnxformer.builder.export.pipeline import AxisNames
from onnxformer.builder.export.samples import PaddingSide, padded_mask
from onnxformer.builder.families import FamilyModel
from onnxformer.builder.families.config import head_width, kv_heads
from onnxformer.runtime.manifest import Framing, GenerationDefaults, GraphIO, KVCache, Task

KeyValues = tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per layer, (B, H, L, Dh) each

PAST_KEY, PAST_VALUE = "past_key_values.{i}.key", "past_key_values.{i}.value"
PRESENT_KEY, PRESENT_VALUE = "present.{i}.key", "present.{i}.value"
CROSS_KEY, CROSS_VALUE = "cross_key_values.{i}.key", "cross_key_values.{i}.value"
CACHE_AXES = ("batch", None, "past_sequence", None)
TRACE_BATCH, TRACE_LENGTH, TRACE_PAST, TRACE_SOURCE = 2, 5, 3, 6
TRAIN_SEED = 0  # `onnxformer train`'s default: its held-out split is the one task_metrics scores

# The family's model class (GPT, BERT, T5) that a recipe and its parts take.
ModelT = TypeVar("ModelT", bound=nn.Module)


@dataclass(frozen=True)
class ModelGraph(Generic[ModelT]):
    """One graph of a whole-model export."""

    role: str  # "decoder", "encoder", "attentions": the manifest's `graphs` key
    filename: str
    wrapper: Callable[[ModelT], nn.Module]  # model -> tensor-in, tuple-out module (the traced one)
    example: Callable[[ModelT], dict[str, Any]]  # model -> forward kwargs at the trace sizes
    dim_names: Callable[[Any], AxisNames]  # config -> flattened input axes
    output_names: Callable[[Any], list[str]]  # config -> output names
    cases: Callable[[ModelT, torch.Generator], Cases]  # parity cases, unlike the trace sizes
    io: Callable[[Any], GraphIO]  # config -> the manifest's io entry: what the runtime feeds and reads


@dataclass(frozen=True)
class StackBlocks:
    """One stack's blocks, exported one by one as `blocks/<stack>_layer_<i>.onnx`."""

    stack: str
    blocks: nn.ModuleList
    template: BlockSpec  # the catalogue entry with the same inputs and options
    # block -> the catalogue's wrapper around it. Any: a block of `blocks`, whose class (EncoderBlock,
    # DecoderBlock) a ModuleList does not carry.
    wrap: Callable[[Any], nn.Module]


@dataclass(frozen=True)
class EndToEnd(Generic[ModelT]):
    """What a recipe's end-to-end goldens are computed from."""

    model: ModelT
    ids: Callable[[str], list[int]]  # text -> token ids, no special tokens
    special: dict[str, int]  # role -> id
    generation: GenerationDefaults | None  # the manifest's generation defaults
    wrappers: dict[str, tuple[nn.Module, list[str]]]  # graph role -> (traced wrapper, its output names)
    framing: dict[str, Framing]  # the export's framing (the recipe's, or an imported tokenizer's)


@dataclass(frozen=True)
class Demo:
    """What `onnxformer demo` shows for the family."""

    examples: tuple[str, ...]
    show: Callable[[Any, tuple[str, ...]], list[str]]  # (runtime model, examples) -> lines


@dataclass(frozen=True)
class Recipe(Generic[ModelT]):
    """A family's export (the manifest contract's family-specific parts: task, framing, io, kv_cache,
    generation; see onnxformer.runtime.manifest)."""

    task: Task  # what the runtime does with the export: its model class and the graph roles it runs
    graphs: tuple[ModelGraph[ModelT], ...]
    blocks: Callable[[ModelT], list[StackBlocks]]
    framing: dict[str, Framing]  # text key ("prompt", "text", "source") -> special tokens around it
    kv_cache: Callable[[Any], KVCache | None]  # config -> the cache layout (None: no cache)
    generation: Callable[[Any, dict[str, int]], GenerationDefaults | None]  # config, special ids -> defaults
    end_to_end: Callable[[EndToEnd[ModelT]], dict[str, Any]]  # the family's part of goldens/end_to_end.json
    main_outputs: dict[str, str]  # graph the runtime runs (role) -> output whose direction int8 keeps
    task_metrics: Callable[[Any, int], dict[str, float]]  # (runtime export, limit) -> built-in task scores
    demo: Demo


def cache_names(pattern_key: str, pattern_value: str, layers: int) -> list[str]:
    return [p.format(i=i) for i in range(layers) for p in (pattern_key, pattern_value)]


def flatten(pairs: KeyValues) -> list[torch.Tensor]:
    return [tensor for pair in pairs for tensor in pair]


def random_ids(
    model: FamilyModel, batch: int, length: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(B, T) ids past the special tokens (0 .. 6)."""
    return torch.randint(7, model.config.vocab_size, (batch, length), generator=generator)


def random_cache(model: FamilyModel, batch: int, length: int, *, layers: int | None = None) -> KeyValues:
    """Random keys and values for `layers` layers (default n_layers), (B, Hkv, L, Dh) each."""
    c = model.config
    shape = (batch, kv_heads(c), length, head_width(c))  # (B, Hkv, L, Dh)
    return tuple((torch.randn(shape), torch.randn(shape)) for _ in range(layers or c.n_layers))


def empty_cache(model: FamilyModel, batch: int, *, layers: int | None = None) -> KeyValues:
    c = model.config
    shape = (batch, kv_heads(c), 0, head_width(c))  # (B, Hkv, 0, Dh)
    return tuple((torch.zeros(shape), torch.zeros(shape)) for _ in range(layers or c.n_layers))


def plain_cases(
    model: FamilyModel, generator: torch.Generator, *, side: PaddingSide, segments: bool = False
) -> Cases:
    """Cases of a graph without a cache: batch 1 and > 1 (padded on `side`), length 1, and max_len."""
    for batch, length in ((1, 4), (4, 17), (2, 1), (2, model.config.max_len)):
        inputs = {
            "input_ids": random_ids(model, batch, length, generator),
            "attention_mask": padded_mask(batch, length, side=side, step=2),
        }
        if segments:
            inputs["token_type_ids"] = (
                (torch.arange(length) >= length // 2).long().expand(batch, -1).contiguous()
            )
        yield f"B={batch} T={length}", inputs


def self_attention_cache(config: Any, *, cross: bool = False, layers: int | None = None) -> KVCache:
    """The KV-cache layout of a decoder stack's self-attention cache (and its cross-attention K/V) over
    `layers` decoder layers (default n_layers)."""
    return KVCache(
        layers=layers or config.n_layers,
        kv_heads=kv_heads(config),
        head_dim=head_width(config),
        past_key=PAST_KEY,
        past_value=PAST_VALUE,
        present_key=PRESENT_KEY,
        present_value=PRESENT_VALUE,
        cross_key=CROSS_KEY if cross else None,
        cross_value=CROSS_VALUE if cross else None,
    )


def no_cache(config: Any) -> None:
    """kv_cache of a family that does not decode."""
    return None


def no_generation(config: Any, special: dict[str, int]) -> None:
    """generation defaults of a family that does not generate."""
    return None


def block_position(config: Any) -> str:
    """The catalogue's position option for a model's blocks: what acts inside them."""
    return config.position if config.position in ("relative", "rotary") else "none"
