"""Whole-model parity at export: each graph against PyTorch on cases unlike the trace shapes.

First steps and cached steps (with caches the PyTorch model itself produced), batch 1 and batch > 1 with
padding (left padding for decoders, right for encoders), sequence length 1. A miss raises `ParityError`.
"""

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree
from torch import nn

from onnxformer.builder.export.model_graphs import GraphSpec
from onnxformer.builder.export.parity import Record
from onnxformer.runtime.errors import ParityError
from onnxformer.runtime.manifest import Parity
from onnxformer.runtime.session import Session

MODEL_TOLERANCE = 1e-4  # fp32 max abs difference for full models...
# ...plus this much per unit of the output's magnitude. A trained model's logits reach |x| ~ 100-150, where
# one fp32 step is 1.5e-5: an absolute 1e-4 would leave room for only ~6 rounding steps after thousands of
# multiply-adds. 1e-6 relative is ~8 fp32 epsilons; it adds nothing for outputs of order 1.
MODEL_RTOL = 1e-6


def _ids(model: nn.Module, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(7, model.config.vocab_size, (batch, length), generator=generator)


def _mask(batch: int, length: int, *, left: bool) -> torch.Tensor:
    """Row r has r * 2 padding positions (at most length - 1), on the left or the right."""
    mask = torch.ones(batch, length, dtype=torch.long)
    for row in range(1, batch):
        padding = min(length - 1, 2 * row)
        if padding:
            mask[row, :padding] = 0 if left else 1
            if not left:
                mask[row, length - padding :] = 0
    return mask


def _empty_cache(model: nn.Module, batch: int):
    c = model.config
    shape = (batch, c.n_heads, 0, c.d_model // c.n_heads)
    return tuple((torch.zeros(shape), torch.zeros(shape)) for _ in range(c.n_layers))


@torch.no_grad()
def gpt_decoder_cases(model, generator: torch.Generator) -> Iterator[tuple[str, dict[str, Any]]]:
    long = model.config.max_len - 4  # learned positions end at max_len; leave room for the cached steps
    shapes = [(1, 7), (3, 9), (2, 1)] + ([(2, long)] if long > 9 else [])
    for batch, length in shapes:
        ids, mask = _ids(model, batch, length, generator), _mask(batch, length, left=True)
        yield (
            f"first step B={batch} T={length}",
            {
                "input_ids": ids,
                "attention_mask": mask,
                "past_key_values": _empty_cache(model, batch),
            },
        )
        past = model(ids, attention_mask=mask).present
        for new in (1, 3):
            yield (
                f"cached step B={batch} P={length} T={new}",
                {
                    "input_ids": _ids(model, batch, new, generator),
                    "attention_mask": torch.cat([mask, torch.ones(batch, new, dtype=torch.long)], dim=1),
                    "past_key_values": past,
                },
            )


def _plain_cases(model, generator, *, left: bool, names: tuple[str, ...]):
    for batch, length in ((1, 4), (4, 17), (2, 1), (2, model.config.max_len)):
        inputs = {
            "input_ids": _ids(model, batch, length, generator),
            "attention_mask": _mask(batch, length, left=left),
        }
        if "token_type_ids" in names:
            inputs["token_type_ids"] = (
                (torch.arange(length) >= length // 2).long().expand(batch, -1).contiguous()
            )
        yield f"B={batch} T={length}", inputs


def gpt_attention_cases(model, generator):
    yield from _plain_cases(model, generator, left=True, names=())


def bert_cases(model, generator):
    yield from _plain_cases(model, generator, left=False, names=("token_type_ids",))


def t5_encoder_cases(model, generator):
    yield from _plain_cases(model, generator, left=False, names=())


@torch.no_grad()
def t5_decoder_cases(model, generator: torch.Generator):
    for batch, source in ((1, 4), (3, 11), (2, model.config.max_len)):
        source_mask = _mask(batch, source, left=False)
        memory = model.encode(_ids(model, batch, source, generator), attention_mask=source_mask).hidden
        cross = model.cross_key_values(memory)
        for length in (1, 4):
            ids = _ids(model, batch, length, generator)
            mask = torch.ones(batch, length, dtype=torch.long)
            yield (
                f"first step B={batch} S={source} T={length}",
                {
                    "decoder_input_ids": ids,
                    "decoder_attention_mask": mask,
                    "encoder_attention_mask": source_mask,
                    "cross_key_values": cross,
                    "past_key_values": _empty_cache(model, batch),
                },
            )
            past = model.decode(
                ids, cross_key_values=cross, encoder_attention_mask=source_mask, attention_mask=mask
            ).present
            yield (
                f"cached step B={batch} S={source} P={length} T=1",
                {
                    "decoder_input_ids": _ids(model, batch, 1, generator),
                    "decoder_attention_mask": torch.ones(batch, length + 1, dtype=torch.long),
                    "encoder_attention_mask": source_mask,
                    "cross_key_values": cross,
                    "past_key_values": past,
                },
            )


def t5_attention_cases(model, generator):
    for batch, source, length in ((1, 5, 1), (2, 9, 4)):
        yield (
            f"B={batch} S={source} T={length}",
            {
                "input_ids": _ids(model, batch, source, generator),
                "attention_mask": _mask(batch, source, left=False),
                "decoder_input_ids": _ids(model, batch, length, generator),
            },
        )


CASES = {
    ("gpt", "decoder"): gpt_decoder_cases,
    ("gpt", "attentions"): gpt_attention_cases,
    ("bert", "encoder"): bert_cases,
    ("bert", "attentions"): bert_cases,
    ("t5", "encoder"): t5_encoder_cases,
    ("t5", "decoder"): t5_decoder_cases,
    ("t5", "attentions"): t5_attention_cases,
}


def measure_model_parity(
    family: str,
    spec: GraphSpec,
    model: nn.Module,
    wrapper: nn.Module,
    session: Session,
    *,
    tolerance: float = MODEL_TOLERANCE,
    rtol: float = MODEL_RTOL,
    seed: int = 0,
    record: Record | None = None,
) -> Parity:
    layers = model.config.n_layers
    input_names = list(spec.dim_names(layers))
    output_names = spec.output_names(layers)
    generator = torch.Generator().manual_seed(seed)
    worst = dict.fromkeys(output_names, 0.0)
    largest = dict.fromkeys(output_names, 0.0)
    labels = []
    model.eval()
    for label, inputs in CASES[(family, spec.role)](model, generator):
        with torch.no_grad():
            expected = wrapper(**inputs)
        leaves = pytree.tree_leaves(inputs)
        feeds = {name: leaf.numpy() for name, leaf in zip(input_names, leaves, strict=True)}
        got = session.run(feeds)
        for name, want, have in zip(output_names, expected, got, strict=True):
            want = want.numpy()
            if want.shape != have.shape:
                raise ParityError(
                    f"{spec.filename}: {name} has shape {have.shape}, PyTorch {want.shape} at {label}"
                )
            diff = float(np.max(np.abs(want - have))) if want.size else 0.0
            scale = float(np.max(np.abs(want))) if want.size else 0.0
            allowed = tolerance + rtol * scale
            if not np.isfinite(diff) or diff > allowed:
                raise ParityError(
                    f"{spec.filename}: {name} differs from PyTorch by {diff:.3g} at {label} "
                    f"(allowed {allowed:.3g} = {tolerance:g} + {rtol:g} x {scale:.3g}); the export is refused"
                )
            worst[name] = max(worst[name], diff)
            largest[name] = max(largest[name], scale)
        labels.append(label)
        if record is not None:
            record(
                label,
                feeds,
                {name: tensor.numpy() for name, tensor in zip(output_names, expected, strict=True)},
                dict(zip(output_names, got, strict=True)),
            )
    return Parity(
        tolerance=tolerance,
        cases=len(labels),
        max_abs_diff=worst,
        shapes=tuple(labels),
        rtol=rtol,
        max_abs_value=largest,
    )
