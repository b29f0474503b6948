"""The tools of each family and the workloads they all run, on the same inputs.

A Tool is one model in one worker: ours (one per OUR_VARIANTS entry) or a peer's. Every tool of a family
runs every workload of the family it has the kind for; the report compares tools of the same precision
("fp32", "int8" or "int4": the weights' type) on each workload.
"""

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from benchmarks.peers.llamacpp import GGUF_FILE, GGUF_VARIANTS, llama_bench
from benchmarks.peers.models import OUR_VARIANTS


@dataclass(frozen=True)
class Tool:
    name: str  # e.g. "ours:fused", "optimum:O2", "genai:int4"
    env: str  # ENVS key
    module: str  # tool_<module>.py in the worker
    args: dict  # the adapter's keyword arguments (besides threads)
    precision: str  # "fp32", "int8" or "int4"
    what: str  # one line for the report
    ours: bool = False
    # The tool's own benchmark program, run by the orchestrator after the family's timings as a cross-check
    # of the worker's figures: (threads, repeats) -> what it reports (llama.cpp: llama-bench).
    own_bench: Callable[[int, int], dict] | None = None


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    unit: str
    kind: str  # the adapters' prepare kind
    args: dict = field(repr=False)
    inner: int = 1  # calls per timed sample (short calls are timed in groups)
    check: str | None = None  # "embeddings" or "tokens": the outputs compared after timing
    max_repeats: int | None = None  # a cap (and one warm-up) for calls of seconds: a run stays near 20 min


def _ours(models: dict) -> list[Tool]:
    def what(v) -> str:
        return "the plain export" if v.options is None else " ".join(("optimize", *v.options))

    return [
        Tool(
            f"ours:{v.name}",
            "ours",
            "ours",
            {"folder": str(models["ours"][v.name])},
            v.precision,
            f"onnxformer runtime (load, public API) on {what(v)}",
            ours=True,
        )
        for v in OUR_VARIANTS
        if v.name in models["ours"]  # a variant whose build failed is reported, not run
    ]


def encoder_tools(models: dict) -> list[Tool]:
    optimum = str(models["optimum"])
    files = {
        "plain": ("model.onnx", "fp32", "optimum-cli export (feature-extraction), no ORTOptimizer"),
        "O2": ("model_O2.onnx", "fp32", "ORTOptimizer O2"),
        "O3": ("model_O3.onnx", "fp32", "ORTOptimizer O3"),
        "int8": ("model_quantized.onnx", "int8", "ORTQuantizer dynamic int8 (avx512_vnni) of the export"),
    }
    peers = [
        Tool(
            f"optimum:{name}",
            "optimum",
            "optimum",
            {"folder": optimum, "task": "encoder", "file_name": file},
            precision,
            f"Optimum ORTModelForFeatureExtraction, {what}; sentence-transformers' pooling loop",
        )
        for name, (file, precision, what) in files.items()
    ]
    torch = Tool(
        "sentence-transformers",
        "ours",
        "torch",
        {"folder": str(models["source"]), "task": "encoder"},
        "fp32",
        "sentence-transformers SentenceTransformer.encode, PyTorch fp32",
    )
    st_onnx = Tool(
        "sentence-transformers:onnx-O2",
        "optimum",
        "optimum",
        {
            "folder": str(models["st_onnx"]),
            "task": "sentence-transformers",
            "file_name": "onnx/model_O2.onnx",
        },
        "fp32",
        "sentence-transformers encode with backend='onnx' (Optimum's ORTModel) on Optimum's O2 file",
    )
    return [*_ours(models), torch, st_onnx, *peers]


def decoder_tools(models: dict) -> list[Tool]:
    genai = [
        Tool(
            f"genai:{name}",
            "genai",
            "genai",
            {"folder": str(folder)},
            name,  # fp32, int8 or int4 (its -p): int4 is its quantized CPU default
            f"onnxruntime-genai og.Generator on its model builder's -p {name} -e cpu",
        )
        for name, folder in models["genai"].items()
    ]
    llamacpp = []
    for variant in GGUF_VARIANTS:
        model = Path(models["llamacpp"][variant.name]) / GGUF_FILE
        made = (
            "convert_hf_to_gguf.py --outtype f32"
            if variant.name == "f32"
            else f"llama-quantize {variant.name}"
        )
        llamacpp.append(
            Tool(
                f"llama.cpp:{variant.name}",
                "llamacpp",
                "llamacpp",
                {"model": str(model), "kv_type": variant.kv_type, "flash_attn": variant.flash_attn},
                variant.precision,
                f"llama.cpp llama_decode (llama-cpp-python's ctypes bindings) on {made}, "
                f"KV cache {variant.kv_type}, flash attention {variant.flash_attn}",
                own_bench=partial(llama_bench, model, kv_type=variant.kv_type, flash_attn=variant.flash_attn),
            )
        )
    torch = Tool(
        "transformers",
        "ours",
        "torch",
        {"folder": str(models["source"]), "task": "decoder"},
        "fp32",
        "transformers LlamaForCausalLM, PyTorch eager fp32 (default attention)",
    )
    return [*_ours(models), torch, *genai, *llamacpp]


def seq2seq_tools(models: dict) -> list[Tool]:
    torch = Tool(
        "transformers",
        "ours",
        "torch",
        {"folder": str(models["source"]), "task": "seq2seq"},
        "fp32",
        "transformers T5ForConditionalGeneration.generate, PyTorch eager fp32",
    )
    optimum = Tool(
        "optimum",
        "optimum",
        "optimum",
        {"folder": str(models["optimum"]), "task": "seq2seq"},
        "fp32",
        "Optimum ORTModelForSeq2SeqLM.generate (its export, KV cache)",
    )
    optimum_int8 = Tool(
        "optimum:int8",
        "optimum",
        "optimum",
        {"folder": str(models["optimum"]), "task": "seq2seq", "file_name": "quantized"},
        "int8",
        "Optimum ORTModelForSeq2SeqLM.generate on ORTQuantizer dynamic int8 (avx512_vnni) of its export",
    )
    return [*_ours(models), torch, optimum, optimum_int8]


TOOLS = {"encoder": encoder_tools, "decoder": decoder_tools, "seq2seq": seq2seq_tools}

# The environments (envs.ENVS) each family builds its models and runs its tools in: `--family encoder` runs
# without onnxruntime-genai's or llama.cpp's.
FAMILY_ENVS = {
    "encoder": ("ours", "optimum"),
    "decoder": ("ours", "genai", "llamacpp"),
    "seq2seq": ("ours", "optimum"),
}

# What each adapter can run (the worker says so too, but the orchestrator skips what a tool has no kind for).
# "logits": the quality comparison's teacher-forced logits at every position of each row (quality.py).
KINDS = {
    "ours": {"embed", "prefill", "decode", "generate", "seq2seq", "logits"},
    "torch": {"embed", "prefill", "decode", "generate", "seq2seq", "logits"},
    "optimum": {"embed", "seq2seq"},
    "genai": {"prefill", "decode", "generate", "logits"},
    "llamacpp": {"prefill", "decode", "generate", "logits"},
}


def _word_texts(tokenizer, count: int, tokens: int, rng: random.Random, words: list[str]) -> list[str]:
    """`count` texts of random words that the tokenizer frames as exactly `tokens` tokens."""
    texts = []
    for _ in range(count):
        chosen: list[str] = []
        while len(tokenizer.encode(" ".join(chosen)).ids) < tokens:
            chosen.append(rng.choice(words))
        while len(tokenizer.encode(" ".join(chosen)).ids) > tokens:
            chosen.pop()
        texts.append(" ".join(chosen))
    return texts


def sentences(count: int, *, seed: int = 0) -> list[str]:
    """`count` distinct real-looking sentences of mixed lengths: the built-in grammar's sentences (short)
    and paragraphs of 2 to 12 of them (long, up to about 130 tokens), shuffled deterministically."""
    from onnxformer.builder.data import generate_sentences

    rng = random.Random(seed)
    grammar = list(dict.fromkeys(generate_sentences(count * 4, seed=seed)))
    short = grammar[: count // 2]
    texts = list(short)
    seen = set(texts)
    while len(texts) < count:
        paragraph = " ".join(rng.sample(grammar, rng.randint(2, 12)))
        if paragraph not in seen:
            seen.add(paragraph)
            texts.append(paragraph)
    rng.shuffle(texts)
    return texts


def encoder_workloads(models: dict, *, quick: bool) -> list[Workload]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(models["source"] / "tokenizer.json"))
    tokenizer.no_padding()  # MiniLM's tokenizer.json pads and truncates to 128: count the real tokens
    tokenizer.no_truncation()
    rng = random.Random(0)
    words = [w for w in {w.strip(".,").lower() for s in sentences(400) for w in s.split()} if w]
    words = sorted(w for w in words if len(tokenizer.encode(w).ids) == 3)  # [CLS] word [SEP]
    # At most 128 tokens each, so that no tool's truncation rule (128, 256 or 512) changes the input.
    many = [t for t in sentences(600 if quick else 2400) if len(tokenizer.encode(t).ids) <= 128]
    many = many[: 500 if quick else 2000]
    return [
        Workload(
            "embed-1x16",
            "MiniLM embed 1x16",
            "ms per batch",
            "embed",
            {"texts": _word_texts(tokenizer, 1, 16, rng, words), "batch_size": 32},
            inner=10,
        ),
        Workload(
            "embed-32x128",
            "MiniLM embed 32x128",
            "ms per batch",
            "embed",
            {"texts": _word_texts(tokenizer, 32, 128, rng, words), "batch_size": 32},
        ),
        Workload(
            "embed-sentences",
            f"MiniLM embed {len(many)} sentences",
            "ms per list",
            "embed",
            {"texts": many, "batch_size": 32},
            check="embeddings",
            max_repeats=3,
        ),
    ]


def _ids(rng: np.random.Generator, batch: int, length: int, vocab: int, start: int | None) -> list[list[int]]:
    """Random prompts of equal length (no padding, so every tool computes the same thing); `start` first."""
    ids = rng.integers(3, vocab, size=(batch, length)).tolist()
    if start is not None:
        for row in ids:
            row[0] = start
    return ids


def decoder_workloads(models: dict, *, quick: bool) -> list[Workload]:
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(models["source"] / "tokenizer.json")).get_vocab_size()
    rng = np.random.default_rng(0)
    steps = 8 if quick else 16
    new = 32 if quick else 128
    workloads = [
        Workload(
            "prefill-128",
            "Llama prefill 128 tokens",
            "ms per prompt",
            "prefill",
            {"ids": _ids(rng, 1, 128, vocab, 1)},
        )
    ]
    for context in (16, 256, 1024):
        workloads.append(
            Workload(
                f"decode-{context}",
                f"Llama decode step, context {context}",
                "ms per token",
                "decode",
                {"ids": _ids(rng, 1, context, vocab, 1), "steps": steps},
            )
        )
    for batch in (1, 4):
        workloads.append(
            Workload(
                f"generate-{new}-b{batch}",
                f"Llama generate {new} tokens, batch {batch}",
                "ms per generation",
                "generate",
                {"ids": _ids(rng, batch, 16, vocab, 1), "new": new},
                check="tokens",
                max_repeats=5 if batch == 1 else 3,
            )
        )
    return workloads


def seq2seq_workloads(models: dict, *, quick: bool) -> list[Workload]:
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(models["source"] / "tokenizer.json")).get_vocab_size()
    rng = np.random.default_rng(1)
    new = 32 if quick else 64
    workloads = []
    for batch in (1,) if quick else (1, 4):
        ids = _ids(rng, batch, 63, vocab, None)
        for row in ids:
            row.append(1)  # </s>: 64 source tokens
        workloads.append(
            Workload(
                f"seq2seq-64-{new}-b{batch}",
                f"T5 64 tokens to {new}, batch {batch}",
                "ms per generation",
                "seq2seq",
                {"ids": ids, "new": new},
                check="tokens",
                max_repeats=5 if batch == 1 else 3,
            )
        )
    return workloads


WORKLOADS = {"encoder": encoder_workloads, "decoder": decoder_workloads, "seq2seq": seq2seq_workloads}
