"""BERT's export: one encoder graph (hidden states, sentence embedding, and the heads the model has:
masked-LM logits, pooler output, class logits), an attention-weights graph, the encoder stack's blocks,
and sentence embeddings as end-to-end goldens. Texts are framed as [CLS] + text + [SEP].

The graphs take token_type_ids only where a model has more than one token type: DistilBERT has none, and
RoBERTa's single type is always 0 (the model adds its one row itself)."""

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from onnxformer.builder.export import catalog
from onnxformer.builder.export import wrappers as block_wrappers
from onnxformer.builder.export.goldens import GOLDEN_FLOOR, GOLDEN_MARGIN
from onnxformer.builder.export.parity import PARITY_FACTOR, Cases, float64
from onnxformer.builder.export.pipeline import AxisNames
from onnxformer.builder.export.recipes.base import (
    TRACE_BATCH,
    TRACE_LENGTH,
    TRAIN_SEED,
    Demo,
    EndToEnd,
    ModelGraph,
    Recipe,
    StackBlocks,
    block_position,
    no_cache,
    no_generation,
    plain_cases,
    random_ids,
)
from onnxformer.builder.families import BERT
from onnxformer.runtime.manifest import Framing, GraphIO

FRAMING = {"text": Framing(prefix=("cls",), suffix=("sep",))}
SENTENCES = ("the cat sees the dog", "a dog near the house sleeps", "", "the")
EMBEDDING = "sentence_embedding"
MASK_RATE = 0.15  # masked-token accuracy: the share of a sentence's tokens replaced by [MASK]
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# The encoder graph's outputs: output name -> the BERTOutput field; a head the model lacks is left out.
HEADS = {
    "last_hidden_state": "hidden",
    EMBEDDING: "sentence_embedding",
    "mlm_logits": "mlm_logits",
    "pooler_output": "pooled",
    "class_logits": "class_logits",
}
OPTIONAL_HEADS = {"mlm_logits": "mlm_head", "pooler_output": "pooler", "class_logits": "classifier"}


def inputs(config: Any) -> tuple[str, ...]:
    """The graphs' input names for this config: token_type_ids where the model has segments to choose."""
    return INPUTS if config.type_vocab_size > 1 else INPUTS[:2]


def heads(config: Any) -> list[str]:
    """The encoder graph's output names for this config, in order."""
    return [name for name in HEADS if name not in OPTIONAL_HEADS or getattr(config, OPTIONAL_HEADS[name])]


class Encoder(nn.Module):
    def __init__(self, model: BERT) -> None:
        super().__init__()
        self.model = model
        self.fields = [HEADS[name] for name in heads(model.config)]

    def forward(self, input_ids, attention_mask, token_type_ids=None):  # (B, T) x2 or x3
        out = self.model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return tuple(getattr(out, field) for field in self.fields)


class Attentions(nn.Module):
    def __init__(self, model: BERT) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids=None):  # (B, T) x2 or x3 -> (B, H, T, T) each
        out = self.model(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, need_weights=True
        )
        return tuple(out.attentions)


def _example(model: BERT) -> dict[str, Any]:
    example = {
        "input_ids": random_ids(model, TRACE_BATCH, TRACE_LENGTH),
        "attention_mask": torch.ones(TRACE_BATCH, TRACE_LENGTH, dtype=torch.long),
        "token_type_ids": torch.zeros(TRACE_BATCH, TRACE_LENGTH, dtype=torch.long),
    }
    return {name: example[name] for name in inputs(model.config)}


def _cases(model: BERT, generator: torch.Generator) -> Cases:
    return plain_cases(model, generator, side="right", segments="token_type_ids" in inputs(model.config))


def _axes(config: Any) -> AxisNames:
    return dict.fromkeys(inputs(config), ("batch", "sequence"))


GRAPHS = (
    ModelGraph(
        "encoder",
        "encoder.onnx",
        Encoder,
        _example,
        _axes,
        heads,
        _cases,
        lambda c: GraphIO(inputs(c), {name: name for name in heads(c)}),
    ),
    ModelGraph(
        "attentions",
        "attentions.onnx",
        Attentions,
        _example,
        _axes,
        lambda c: [f"attentions.{i}" for i in range(c.n_layers)],
        _cases,
        lambda c: GraphIO(inputs(c), {"self_attentions": "attentions.{i}"}),
    ),
)


def blocks(model: BERT) -> list[StackBlocks]:
    c = model.config
    template = catalog.encoder_spec(c.block, block_position(c))
    relative = model.encoder.relative
    return [
        StackBlocks("encoder", model.encoder.blocks, template, lambda b: block_wrappers.Encoder(b, relative))
    ]


def sentence_embedder(
    wrapper: nn.Module, output_names: Sequence[str]
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The sentence embedding (1, D) of input ids (1, T), through the encoder graph's wrapper: the very
    output the graph computes."""
    index = list(output_names).index(EMBEDDING)

    def embed(input_ids: torch.Tensor) -> torch.Tensor:  # (1, T) -> (1, D); segment ids all 0
        return wrapper(input_ids, torch.ones_like(input_ids))[index]

    return embed


@torch.no_grad()
def end_to_end(context: EndToEnd[BERT]) -> dict[str, Any]:
    """Sentence embeddings as the float64 answer (rounded to fp32); the allowance is GOLDEN_MARGIN x
    what parity lets ONNX Runtime have (PARITY_FACTOR x PyTorch fp32's error) + the golden floor."""
    wrapper, names = context.wrappers["encoder"]
    embed = sentence_embedder(wrapper, names)
    fed = [context.framing["text"].ids(context.ids(text), context.special) for text in SENTENCES]
    single = [embed(torch.tensor([ids]))[0] for ids in fed]  # (D,) each
    with float64(wrapper):
        exact = [embed(torch.tensor([ids]))[0] for ids in fed]  # (D,) each, float64
    atol = max(
        GOLDEN_MARGIN * PARITY_FACTOR * float((one.double() - truth).abs().max())
        + GOLDEN_FLOOR * float(truth.abs().max())
        for one, truth in zip(single, exact, strict=True)
    )
    items = [
        {"text": text, "input_ids": ids, "embedding": truth.float().tolist()}
        for text, ids, truth in zip(SENTENCES, fed, exact, strict=True)
    ]
    return {
        "embeddings": {"output": EMBEDDING, "atol": float(f"{atol * 1.01:.2e}"), "rtol": 0.0, "items": items}
    }


def task_metrics(export: Any, limit: int) -> dict[str, float]:
    """Classification accuracy and masked-token accuracy on the built-in held-out examples, for the heads
    the export has: classification only for a classifier trained on the built-in task (not imported), the
    masked tokens for any masked-LM head. {} when there is neither (all-MiniLM-L6-v2 only embeds)."""
    from onnxformer.builder.data import classification_examples, split_held_out
    from onnxformer.builder.training.bert_task import BUILTIN_EXAMPLES
    from onnxformer.runtime.encoder import TextEncoder

    _, held_out = split_held_out(classification_examples(BUILTIN_EXAMPLES, seed=TRAIN_SEED), seed=TRAIN_SEED)
    examples = held_out[:limit]
    encoder = TextEncoder(export)
    metrics: dict[str, float] = {}
    if encoder.has_classifier and encoder.label_names:
        results = encoder.classify([text for text, _ in examples], batch_size=64)
        assert isinstance(results, list)  # a list of texts in, a list out
        hits = [r.label == label for r, (_, label) in zip(results, examples, strict=True)]
        metrics["classification_accuracy"] = sum(hits) / max(len(hits), 1)
    if "mlm_logits" in export.io("encoder").outputs and "mask" in export.special:
        metrics["masked_token_accuracy"] = _masked_token_accuracy(encoder, [t for t, y in examples if y == 1])
    if metrics:
        metrics["examples"] = float(len(examples))
    return metrics


def _masked_token_accuracy(encoder: Any, texts: list[str]) -> float:
    """The share of masked tokens (MASK_RATE of each text's, at least one) the masked-LM head restores."""
    import numpy as np

    from onnxformer.runtime.decoding import right_pad
    from onnxformer.runtime.model import pick

    export, special = encoder.export, encoder.export.special
    rng = np.random.default_rng(1234)
    rows, targets = [], []
    for text in texts:
        ids = export.framing.ids(encoder.tokenizer.encode(text), special)
        inner = np.arange(1, len(ids) - 1)
        chosen = inner[rng.random(len(inner)) < MASK_RATE] if len(inner) else inner
        if len(chosen) == 0 and len(inner):
            chosen = inner[:1]
        masked = list(ids)
        for position in chosen.tolist():
            masked[position] = special["mask"]
        rows.append(masked)
        targets.append([(position, ids[position]) for position in chosen.tolist()])
    io = export.io("encoder")
    hits = total = 0
    for start in range(0, len(rows), 64):
        ids, mask = right_pad(rows[start : start + 64], special["pad"])  # (B, T)
        feeds = pick(io, input_ids=ids, attention_mask=mask, token_type_ids=np.zeros_like(ids))
        (logits,) = export.sessions["encoder"].run(feeds, [io.outputs["mlm_logits"]])  # (B, T, V)
        for row, wanted in enumerate(targets[start : start + 64]):
            for position, token in wanted:
                hits += int(np.argmax(logits[row, position]) == token)
                total += 1
    return hits / max(total, 1)


def _show(model: Any, examples: tuple[str, ...]) -> list[str]:
    similarity = model.similarity(*examples[:2])
    labels = [c.label for c in model.classify(list(examples))]
    return [f"cos(mat, rug sentences) = {similarity:.3f}; labels {labels} (1 = well-formed)"]


RECIPE = Recipe(
    task="encode",
    graphs=GRAPHS,
    blocks=blocks,
    framing=FRAMING,
    kv_cache=no_cache,
    generation=no_generation,
    end_to_end=end_to_end,
    main_outputs={"encoder": EMBEDDING},
    task_metrics=task_metrics,
    demo=Demo(
        ("The cat sat on the mat.", "The cat sat on the rug.", "mat the on sat cat The."),
        _show,
    ),
)
