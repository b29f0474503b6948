"""The workloads, each a set of callables that do the same work: PyTorch eager fp32 and the runtime on
each export variant (plain `onnx`, optimised `fused` fp32, `int8`), all on the same weights.

Graph-level workloads (encoder, prefill, one decode step) feed the runtime's ONNX Runtime session exactly
what the runtime classes feed it and ask for every output they ask for; PyTorch runs the model's forward.
Generation workloads run the whole loops: `TextGenerator.generate_ids` / `TextToText.generate_ids` against
`builder.generation.generate` / `generate_seq2seq`, greedy, no stop token, so every variant produces the
same number of tokens.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

VARIANTS = ("pytorch", "onnx", "fused", "int8")
DECODE_CONTEXTS = (16, 256, 1024)
NEW_TOKENS = 128
T5_LENGTH = 64


@dataclass
class Workload:
    key: str  # "encoder_32x128"
    title: str  # "BERT embed 32x128"
    unit: str  # what one sample measures
    variants: dict[str, Callable[[], object]]  # variant -> one call
    inner: int = 1  # calls per timed sample (short calls are timed in groups)
    flops: float | None = None  # per call, when the workload has a meaningful count
    outputs: dict[str, list[int]] = field(default_factory=dict)  # generation: variant -> tokens


def _ids(rng: np.random.Generator, vocab: int, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(7, vocab, shape, dtype=np.int64)  # ids 0..6 are the special tokens


def encoder_flops(config: dict, batch: int, length: int) -> float:
    """Multiply-add FLOPs of one BERT forward (projections, FFN, attention products, heads)."""
    d, f, v, layers = config["d_model"], config["d_ff"], config["vocab_size"], config["n_layers"]
    tokens = batch * length
    per_token = layers * 2 * (4 * d * d + 2 * d * f) + layers * 2 * 2 * length * d
    heads = tokens * 2 * (d * d + d * v) + batch * 2 * d * d  # MLM transform + decoder, pooler
    return float(tokens * per_token + heads)


def bert_workloads(model, exports: dict, *, quick: bool) -> list[Workload]:
    import torch

    vocab = model.config.vocab_size
    workloads = []
    for batch, length in ((1, 16), (32, 128)):
        rng = np.random.default_rng(batch * 1000 + length)
        ids = _ids(rng, vocab, (batch, length))
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        tensors = {name: torch.from_numpy(value) for name, value in feeds.items()}

        def torch_call(tensors=tensors):
            return model(
                tensors["input_ids"],
                attention_mask=tensors["attention_mask"],
                token_type_ids=tensors["token_type_ids"],
            )

        variants: dict[str, Callable[[], object]] = {"pytorch": torch_call}
        for name, export in exports.items():
            session = export.sessions["encoder"]
            variants[name] = lambda session=session, feeds=feeds: session.run(feeds, ["sentence_embedding"])
        workloads.append(
            Workload(
                f"encoder_{batch}x{length}",
                f"BERT embed {batch}x{length}",
                "ms per batch",
                variants,
                inner=10 if batch == 1 else 1,
                flops=encoder_flops(_config(model), batch, length),
            )
        )
    return workloads


def _config(model) -> dict:
    from dataclasses import asdict

    return asdict(model.config)


def gpt_workloads(model, exports: dict, *, quick: bool) -> list[Workload]:
    import torch

    from onnxformer.builder.generation import generate
    from onnxformer.runtime.generator import TextGenerator

    vocab = model.config.vocab_size
    rng = np.random.default_rng(7)
    workloads = []

    prompt = _ids(rng, vocab, (1, 128))
    variants: dict[str, Callable[[], object]] = {
        "pytorch": lambda: model(
            torch.from_numpy(prompt), attention_mask=torch.ones(1, 128, dtype=torch.long)
        )
    }
    generators = {name: TextGenerator(export) for name, export in exports.items()}
    for name, generator in generators.items():
        variants[name] = lambda generator=generator: _step(generator, prompt, np.ones_like(prompt), None)
    workloads.append(Workload("gpt_prefill_128", "GPT prefill 128 tokens", "ms per prompt", variants))

    contexts = (16, 1024) if quick else DECODE_CONTEXTS
    for context in contexts:
        prefix = _ids(rng, vocab, (1, context))
        token = _ids(rng, vocab, (1, 1))
        past = model(
            torch.from_numpy(prefix), attention_mask=torch.ones(1, context, dtype=torch.long)
        ).present
        mask = torch.ones(1, context + 1, dtype=torch.long)
        variants = {
            "pytorch": lambda past=past, mask=mask, token=token: model(
                torch.from_numpy(token), attention_mask=mask, past_key_values=past
            )
        }
        for name, generator in generators.items():
            _, cache = _step(generator, prefix, np.ones_like(prefix), None, room=1)
            full = np.ones((1, context + 1), np.int64)
            # The same step every call: an in-place cache rewrites position `context` with the same values.
            variants[name] = lambda g=generator, c=cache, full=full, token=token: _step(g, token, full, c)
        workloads.append(
            Workload(
                f"gpt_decode_{context}", f"GPT decode step, context {context}", "ms per token", variants, 5
            )
        )

    pad = exports[next(iter(exports))].special["pad"]
    bos = exports[next(iter(exports))].special["bos"]
    start = [bos, *_ids(rng, vocab, (7,)).tolist()]
    new = 32 if quick else NEW_TOKENS
    workload = Workload(f"gpt_generate_{new}", f"GPT generate {new} tokens", "ms per generation", {})

    def torch_generate(workload=workload):
        (result,) = generate(model, [start], max_new_tokens=new, stop_tokens=(), pad_id=pad)
        workload.outputs["pytorch"] = result.tokens

    workload.variants["pytorch"] = torch_generate
    for name, generator in generators.items():

        def runtime_generate(generator=generator, name=name, workload=workload):
            (result,) = generator.generate_ids([start], max_new_tokens=new, temperature=0.0, stop_tokens=[])
            workload.outputs[name] = result.tokens

        workload.variants[name] = runtime_generate
    workloads.append(workload)
    return workloads


def _step(generator, ids: np.ndarray, mask: np.ndarray, cache: dict | None, *, room: int = 0):
    """One decoder step as `TextGenerator` runs it (concat or in-place cache); `cache=None`: the first
    step, with a new empty cache (an in-place one with `room` positions after the prompt)."""
    if cache is None:
        cache = generator._empty_cache(ids, [room])
    return generator._step(ids, mask, cache)


def t5_workloads(model, exports: dict, *, quick: bool) -> list[Workload]:
    from onnxformer.builder.generation import generate_seq2seq
    from onnxformer.runtime.seq2seq import TextToText

    rng = np.random.default_rng(11)
    first = exports[next(iter(exports))]
    source = [*_ids(rng, model.config.vocab_size, (T5_LENGTH - 1,)).tolist(), first.special["eos"]]
    pad = first.special["pad"]
    new = 16 if quick else T5_LENGTH
    workload = Workload(
        f"t5_{T5_LENGTH}_to_{new}", f"T5 {T5_LENGTH} tokens to {new}", "ms per generation", {}
    )

    def torch_generate():
        (result,) = generate_seq2seq(model, [source], max_new_tokens=new, stop_tokens=(), pad_id=pad)
        workload.outputs["pytorch"] = result.tokens

    workload.variants["pytorch"] = torch_generate
    for name, export in exports.items():
        runner = TextToText(export)

        def runtime_generate(runner=runner, name=name):
            (result,) = runner.generate_ids([source], max_new_tokens=new, temperature=0.0, stop_tokens=[])
            workload.outputs[name] = result.tokens

        workload.variants[name] = runtime_generate
    return [workload]


BUILDERS = {"bert": bert_workloads, "gpt": gpt_workloads, "t5": t5_workloads}
