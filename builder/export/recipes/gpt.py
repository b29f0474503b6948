"""GPT's export: one decoder graph with the KV cache in and out, an attention-weights graph, the decoder
stack's blocks, and greedy generations as end-to-end goldens. Prompts are framed as <s> + text."""

from typing import Any

import torch
from torch import nn

from onnxformer.builder.export import catalog
from onnxformer.builder.export import wrappers as block_wrappers
from onnxformer.builder.export.goldens import greedy_record
from onnxformer.builder.export.parity import Cases
from onnxformer.builder.export.recipes.base import (
    CACHE_AXES,
    PAST_KEY,
    PAST_VALUE,
    PRESENT_KEY,
    PRESENT_VALUE,
    TRACE_BATCH,
    TRACE_LENGTH,
    TRACE_PAST,
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
from onnxformer.builder.families import GPT
from onnxformer.builder.generation import generate
from onnxformer.runtime.manifest import Framing, GenerationDefaults, GraphIO

FRAMING = {"prompt": Framing(prefix=("bos",))}
# (prompt, max_new_tokens, stop at </s>): most rows end at a stop token; a small budget ends one by
# length, and a long prompt without stop tokens runs into the end of the context (a row generates at
# most max_len - len(input_ids) + 1 tokens).
PROMPTS = (
    ("", 24, True),
    ("the cat", 24, True),
    ("a dog near the house", 24, True),
    ("the teacher", 3, True),
    ("the cat sees the dog . " * 5, 24, False),
)


class Decoder(nn.Module):
    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, past_key_values):  # (B,T), (B,P+T), per layer (B,H,P,Dh)
        out = self.model(input_ids, attention_mask=attention_mask, past_key_values=past_key_values)
        return out.logits, *flatten(out.present)


class Attentions(nn.Module):
    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):  # (B, T) x2 -> logits, per layer (B, H, T, T)
        out = self.model(input_ids, attention_mask=attention_mask, need_weights=True)
        return out.logits, *out.attentions


@torch.no_grad()
def decoder_cases(model: GPT, generator: torch.Generator) -> Cases:
    """First steps (left padding) and cached steps on the cache PyTorch itself produced."""
    long = model.config.max_len - 4  # learned positions end at max_len; leave room for the cached steps
    shapes = [(1, 7), (3, 9), (2, 1)] + ([(2, long)] if long > 9 else [])
    for batch, length in shapes:
        ids = random_ids(model, batch, length, generator)
        mask = padded_mask(batch, length, side="left", step=2)
        yield (
            f"first step B={batch} T={length}",
            {"input_ids": ids, "attention_mask": mask, "past_key_values": empty_cache(model, batch)},
        )
        past = model(ids, attention_mask=mask).present
        for new in (1, 3):
            yield (
                f"cached step B={batch} P={length} T={new}",
                {
                    "input_ids": random_ids(model, batch, new, generator),
                    "attention_mask": torch.cat([mask, torch.ones(batch, new, dtype=torch.long)], dim=1),
                    "past_key_values": past,
                },
            )


GRAPHS = (
    ModelGraph(
        "decoder",
        "decoder.onnx",
        Decoder,
        lambda m: {
            "input_ids": random_ids(m, TRACE_BATCH, TRACE_LENGTH),
            "attention_mask": torch.ones(TRACE_BATCH, TRACE_PAST + TRACE_LENGTH, dtype=torch.long),
            "past_key_values": random_cache(m, TRACE_BATCH, TRACE_PAST),
        },
        lambda c: {
            "input_ids": ("batch", "sequence"),
            "attention_mask": ("batch", "total_sequence"),
            **dict.fromkeys(cache_names(PAST_KEY, PAST_VALUE, c.n_layers), CACHE_AXES),
        },
        lambda c: ["logits", *cache_names(PRESENT_KEY, PRESENT_VALUE, c.n_layers)],
        decoder_cases,
        lambda c: GraphIO(("input_ids", "attention_mask"), {"logits": "logits"}),
    ),
    ModelGraph(
        "attentions",
        "attentions.onnx",
        Attentions,
        lambda m: {
            "input_ids": random_ids(m, TRACE_BATCH, TRACE_LENGTH),
            "attention_mask": torch.ones(TRACE_BATCH, TRACE_LENGTH, dtype=torch.long),
        },
        lambda c: {"input_ids": ("batch", "sequence"), "attention_mask": ("batch", "sequence")},
        lambda c: ["logits", *(f"attentions.{i}" for i in range(c.n_layers))],
        lambda m, g: plain_cases(m, g, side="left"),
        lambda c: GraphIO(("input_ids", "attention_mask"), {"self_attentions": "attentions.{i}"}),
    ),
)


def blocks(model: GPT) -> list[StackBlocks]:
    c = model.config
    template = catalog.decoder_spec(c.block, block_position(c), cross=False, cached=True, n_heads=c.n_heads)
    relative = model.decoder.relative
    return [
        StackBlocks(
            "decoder",
            model.decoder.blocks,
            template,
            lambda b: block_wrappers.Decoder(b, cached=True, relative=relative),
        )
    ]


def generation(config: Any, special: dict[str, int]) -> GenerationDefaults:
    """Sampling at temperature 1 until </s> or the end of the context."""
    return GenerationDefaults(
        max_new_tokens=config.max_len, temperature=1.0, top_k=0, top_p=1.0, stop_tokens=(special["eos"],)
    )


@torch.no_grad()
def end_to_end(context: EndToEnd[GPT]) -> dict[str, Any]:
    """Greedy generations from framed prompts, with the smallest logit margin on each path."""
    model, special = context.model.eval(), context.special
    assert context.generation is not None  # the recipe's generation() gives defaults
    stop = list(context.generation.stop_tokens)
    rows = []
    for prompt, budget, stops in PROMPTS:
        fed = context.framing["prompt"].ids(context.ids(prompt), special)
        if not fed or len(fed) >= model.config.max_len:
            continue  # nothing to start from (no <s> in an imported framing), or a context too short
        row_stop = stop if stops else []
        (result,) = generate(model, [fed], max_new_tokens=budget, stop_tokens=row_stop, pad_id=special["pad"])
        steps = len(result.tokens) + (result.finish_reason == "stop")
        path = torch.tensor([fed + result.tokens[: steps - 1]])  # (1, T): every decision's input
        logits = model(path).logits[0, len(fed) - 1 :]  # (steps, V)
        rows.append(greedy_record(prompt, fed, budget, row_stop, result, logits))
    return {"greedy": rows}


def task_metrics(export: Any, limit: int) -> dict[str, float]:
    """Next-token accuracy and loss (teacher forced) on the built-in grammar's held-out sentences."""
    import numpy as np

    from onnxformer.builder.data import generate_sentences, split_held_out
    from onnxformer.builder.training.gpt_task import BUILTIN_SENTENCES
    from onnxformer.runtime.decoding import right_pad
    from onnxformer.runtime.generator import TextGenerator

    _, held_out = split_held_out(generate_sentences(BUILTIN_SENTENCES, seed=TRAIN_SEED), seed=TRAIN_SEED)
    generator = TextGenerator(export)
    special = export.special
    frame = export.framing.ids
    rows = [[*frame(generator.tokenizer.encode(text), special), special["eos"]] for text in held_out[:limit]]
    session, cache = export.sessions["decoder"], export.cache
    hits = count = 0
    loss = 0.0
    for start in range(0, len(rows), 64):
        ids, mask = right_pad(rows[start : start + 64], special["pad"])  # (B, T)
        feeds = {"input_ids": ids, "attention_mask": mask, **cache.empty(len(ids))}
        (logits,) = session.run(feeds, ["logits"])  # (B, T, V)
        predicted, following = logits[:, :-1], ids[:, 1:]  # position t predicts token t + 1
        real = mask[:, 1:] == 1  # (B, T - 1)
        shifted = predicted.astype(np.float64) - predicted.max(axis=-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        chosen = np.take_along_axis(log_probs, following[..., None], axis=-1)[..., 0]  # (B, T - 1)
        loss -= float(chosen[real].sum())
        hits += int((predicted.argmax(axis=-1) == following)[real].sum())
        count += int(real.sum())
    return {
        "next_token_accuracy": hits / max(count, 1),
        "val_loss": loss / max(count, 1),
        "examples": len(rows),
    }


def _show(model: Any, examples: tuple[str, ...]) -> list[str]:
    return [prompt + model.generate(prompt, temperature=1.0, seed=0) for prompt in examples]


RECIPE = Recipe(
    task="generate",
    graphs=GRAPHS,
    blocks=blocks,
    framing=FRAMING,
    kv_cache=self_attention_cache,
    generation=generation,
    end_to_end=end_to_end,
    main_outputs={"decoder": "logits"},
    task_metrics=task_metrics,
    demo=Demo(("The cat", "A small dog"), _show),
)
