"""T5's export: an encoder graph that also computes every decoder layer's cross-attention keys and values
(once per input), a decoder graph with the self-attention cache in and out, an attention-weights graph,
both stacks' blocks, and greedy generations as end-to-end goldens. Sources are framed as text + </s>; the
decoder starts from decoder_start_token_id."""

from typing import Any

import torch
from torch import nn

from onnxformer.builder.export import catalog
from onnxformer.builder.export import wrappers as block_wrappers
from onnxformer.builder.export.goldens import greedy_record
from onnxformer.builder.export.parity import Cases
from onnxformer.builder.export.recipes.base import (
    CACHE_AXES,
    CROSS_KEY,
    CROSS_VALUE,
    PAST_KEY,
    PAST_VALUE,
    PRESENT_KEY,
    PRESENT_VALUE,
    TRACE_BATCH,
    TRACE_LENGTH,
    TRACE_PAST,
    TRACE_SOURCE,
    TRAIN_SEED,
    Demo,
    EndToEnd,
    ModelGraph,
    Recipe,
    StackBlocks,
    block_position,
    cache_names,
    empty_cache,
    flatten,
    plain_cases,
    random_cache,
    random_ids,
    self_attention_cache,
)
from onnxformer.builder.export.samples import padded_mask
from onnxformer.builder.families import T5
from onnxformer.builder.generation import generate_seq2seq
from onnxformer.runtime.manifest import Framing, GenerationDefaults, GraphIO, KVCache

FRAMING = {"source": Framing(suffix=("eos",))}
SOURCES = (("the cat sees the dog", 32), ("a teacher finds the old book", 32), ("the bird", 2))
SOURCE_AXES = ("batch", "encoder_sequence")
CROSS_AXES = ("batch", None, "encoder_sequence", None)


class Encoder(nn.Module):
    """The encoder and, computed once per input, every decoder layer's cross-attention keys and values."""

    def __init__(self, model: T5) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):  # (B, S) x2 -> (B, S, D), per layer (B, H, S, Dh)
        hidden = self.model.encode(input_ids, attention_mask=attention_mask).hidden
        return hidden, *flatten(self.model.cross_key_values(hidden))


class Decoder(nn.Module):
    def __init__(self, model: T5) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        decoder_input_ids,  # (B, T)
        decoder_attention_mask,  # (B, P + T)
        encoder_attention_mask,  # (B, S)
        cross_key_values,  # per layer (B, H, S, Dh) x2
        past_key_values,  # per layer (B, H, P, Dh) x2
    ):
        out = self.model.decode(
            decoder_input_ids,
            cross_key_values=cross_key_values,
            encoder_attention_mask=encoder_attention_mask,
            attention_mask=decoder_attention_mask,
            past_key_values=past_key_values,
        )
        return out.logits, *flatten(out.present)


class Attentions(nn.Module):
    def __init__(self, model: T5) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):  # (B, S), (B, S), (B, T)
        encoded = self.model.encode(input_ids, attention_mask=attention_mask, need_weights=True)
        decoded = self.model.decode(
            decoder_input_ids,
            cross_key_values=self.model.cross_key_values(encoded.hidden),
            encoder_attention_mask=attention_mask,
            need_weights=True,
        )
        return *encoded.attentions, *decoded.cross_attentions


@torch.no_grad()
def decoder_cases(model: T5, generator: torch.Generator) -> Cases:
    """First and cached steps over encoder outputs of padded sources, the cache from PyTorch itself."""
    for batch, source in ((1, 4), (3, 11), (2, model.config.max_len)):
        source_mask = padded_mask(batch, source, side="right", step=2)
        memory = model.encode(random_ids(model, batch, source, generator), attention_mask=source_mask).hidden
        cross = model.cross_key_values(memory)
        for length in (1, 4):
            ids = random_ids(model, batch, length, generator)
            mask = torch.ones(batch, length, dtype=torch.long)
            yield (
                f"first step B={batch} S={source} T={length}",
                {
                    "decoder_input_ids": ids,
                    "decoder_attention_mask": mask,
                    "encoder_attention_mask": source_mask,
                    "cross_key_values": cross,
                    "past_key_values": empty_cache(model, batch, layers=model.config.decoder_layers),
                },
            )
            past = model.decode(
                ids, cross_key_values=cross, encoder_attention_mask=source_mask, attention_mask=mask
            ).present
            yield (
                f"cached step B={batch} S={source} P={length} T=1",
                {
                    "decoder_input_ids": random_ids(model, batch, 1, generator),
                    "decoder_attention_mask": torch.ones(batch, length + 1, dtype=torch.long),
                    "encoder_attention_mask": source_mask,
                    "cross_key_values": cross,
                    "past_key_values": past,
                },
            )


def attention_cases(model: T5, generator: torch.Generator) -> Cases:
    for batch, source, length in ((1, 5, 1), (2, 9, 4)):
        yield (
            f"B={batch} S={source} T={length}",
            {
                "input_ids": random_ids(model, batch, source, generator),
                "attention_mask": padded_mask(batch, source, side="right", step=2),
                "decoder_input_ids": random_ids(model, batch, length, generator),
            },
        )


GRAPHS = (
    ModelGraph(
        "encoder",
        "encoder.onnx",
        Encoder,
        lambda m: {
            "input_ids": random_ids(m, TRACE_BATCH, TRACE_SOURCE),
            "attention_mask": torch.ones(TRACE_BATCH, TRACE_SOURCE, dtype=torch.long),
        },
        lambda c: {"input_ids": SOURCE_AXES, "attention_mask": SOURCE_AXES},
        lambda c: ["last_hidden_state", *cache_names(CROSS_KEY, CROSS_VALUE, c.decoder_layers)],
        lambda m, g: plain_cases(m, g, side="right"),
        lambda c: GraphIO(("input_ids", "attention_mask"), {"last_hidden_state": "last_hidden_state"}),
    ),
    ModelGraph(
        "decoder",
        "decoder.onnx",
        Decoder,
        lambda m: {
            "decoder_input_ids": random_ids(m, TRACE_BATCH, TRACE_LENGTH),
            "decoder_attention_mask": torch.ones(TRACE_BATCH, TRACE_PAST + TRACE_LENGTH, dtype=torch.long),
            "encoder_attention_mask": torch.ones(TRACE_BATCH, TRACE_SOURCE, dtype=torch.long),
            "cross_key_values": random_cache(m, TRACE_BATCH, TRACE_SOURCE, layers=m.config.decoder_layers),
            "past_key_values": random_cache(m, TRACE_BATCH, TRACE_PAST, layers=m.config.decoder_layers),
        },
        lambda c: {
            "decoder_input_ids": ("batch", "sequence"),
            "decoder_attention_mask": ("batch", "total_sequence"),
            "encoder_attention_mask": SOURCE_AXES,
            **dict.fromkeys(cache_names(CROSS_KEY, CROSS_VALUE, c.decoder_layers), CROSS_AXES),
            **dict.fromkeys(cache_names(PAST_KEY, PAST_VALUE, c.decoder_layers), CACHE_AXES),
        },
        lambda c: ["logits", *cache_names(PRESENT_KEY, PRESENT_VALUE, c.decoder_layers)],
        decoder_cases,
        lambda c: GraphIO(
            ("decoder_input_ids", "decoder_attention_mask", "encoder_attention_mask"), {"logits": "logits"}
        ),
    ),
    ModelGraph(
        "attentions",
        "attentions.onnx",
        Attentions,
        lambda m: {
            "input_ids": random_ids(m, TRACE_BATCH, TRACE_SOURCE),
            "attention_mask": torch.ones(TRACE_BATCH, TRACE_SOURCE, dtype=torch.long),
            "decoder_input_ids": random_ids(m, TRACE_BATCH, TRACE_LENGTH),
        },
        lambda c: {
            "input_ids": SOURCE_AXES,
            "attention_mask": SOURCE_AXES,
            "decoder_input_ids": ("batch", "sequence"),
        },
        lambda c: [
            *(f"encoder_attentions.{i}" for i in range(c.n_layers)),
            *(f"cross_attentions.{i}" for i in range(c.decoder_layers)),
        ],
        attention_cases,
        lambda c: GraphIO(
            ("input_ids", "attention_mask", "decoder_input_ids"),
            {"self_attentions": "encoder_attentions.{i}", "cross_attentions": "cross_attentions.{i}"},
        ),
    ),
)


def blocks(model: T5) -> list[StackBlocks]:
    c = model.config
    position = block_position(c)
    encoder_relative, decoder_relative = model.encoder.relative, model.decoder.relative
    return [
        StackBlocks(
            "encoder",
            model.encoder.blocks,
            catalog.encoder_spec(c.block, position),
            lambda b: block_wrappers.Encoder(b, encoder_relative),
        ),
        StackBlocks(
            "decoder",
            model.decoder.blocks,
            catalog.decoder_spec(c.block, position, cross=True, cached=True, n_heads=c.n_heads),
            lambda b: block_wrappers.CrossDecoder(b, cached=True, relative=decoder_relative),
        ),
    ]


def kv_cache(config: Any) -> KVCache:
    return self_attention_cache(config, cross=True, layers=config.decoder_layers)


def generation(config: Any, special: dict[str, int]) -> GenerationDefaults:
    """Greedy until </s> or the end of the decoder's context."""
    return GenerationDefaults(
        max_new_tokens=config.max_len,
        temperature=0.0,
        top_k=0,
        top_p=1.0,
        stop_tokens=(special["eos"],),
        decoder_start_token_id=config.decoder_start_token_id,
    )


@torch.no_grad()
def end_to_end(context: EndToEnd[T5]) -> dict[str, Any]:
    """Greedy generations from framed sources, with the smallest logit margin on each path."""
    model, special = context.model.eval(), context.special
    assert context.generation is not None  # the recipe's generation() gives defaults
    stop = list(context.generation.stop_tokens)
    rows = []
    for source, budget in SOURCES:
        fed = context.framing["source"].ids(context.ids(source), special)
        (result,) = generate_seq2seq(
            model, [fed], max_new_tokens=budget, stop_tokens=stop, pad_id=special["pad"]
        )
        steps = len(result.tokens) + (result.finish_reason == "stop")
        source_ids = torch.tensor([fed])  # (1, S)
        memory = model.encode(source_ids, attention_mask=torch.ones_like(source_ids)).hidden
        target = torch.tensor([[model.config.decoder_start_token_id, *result.tokens[: steps - 1]]])
        logits = model.decode(
            target,
            cross_key_values=model.cross_key_values(memory),
            encoder_attention_mask=torch.ones_like(source_ids),
            attention_mask=torch.ones_like(target),
        ).logits[0]  # (steps, V)
        rows.append(greedy_record(source, fed, budget, stop, result, logits))
    return {"greedy": rows}


def task_metrics(export: Any, limit: int) -> dict[str, float]:
    """Exact match of greedy outputs on the built-in held-out passive-voice pairs."""
    from onnxformer.builder.data import passive_pairs, split_held_out
    from onnxformer.builder.training.t5_task import BUILTIN_PAIRS
    from onnxformer.runtime.seq2seq import TextToText

    _, held_out = split_held_out(passive_pairs(BUILTIN_PAIRS, seed=TRAIN_SEED), seed=TRAIN_SEED)
    pairs = held_out[: limit // 2]  # greedy generation costs more per example than a forward pass
    model = TextToText(export)
    outputs: list[str] = []
    for start in range(0, len(pairs), 64):
        outputs += model.generate([source for source, _ in pairs[start : start + 64]], temperature=0.0)
    hits = sum(output == target for output, (_, target) in zip(outputs, pairs, strict=True))
    return {"exact_match": hits / max(len(pairs), 1), "examples": float(len(pairs))}


def _show(model: Any, examples: tuple[str, ...]) -> list[str]:
    outputs = model.generate(list(examples))
    return [f"{source} -> {target}" for source, target in zip(examples, outputs, strict=True)]


RECIPE = Recipe(
    task="seq2seq",
    graphs=GRAPHS,
    blocks=blocks,
    framing=FRAMING,
    kv_cache=kv_cache,
    generation=generation,
    end_to_end=end_to_end,
    main_outputs={"encoder": "last_hidden_state", "decoder": "logits"},
    task_metrics=task_metrics,
    demo=Demo(("The cat chased the dog.", "A small dog saw the red ball under an old table."), _show),
)
