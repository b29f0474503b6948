"""The peers' model folders, built in a peer environment (standalone, no onnxformer import):

    build_hf.py llama OUT CORPUS     LlamaForCausalLM, random weights, BPE tokenizer trained on CORPUS
    build_hf.py llama-trained OUT CORPUS  a small LlamaForCausalLM trained on CORPUS (the quality comparison)
    build_hf.py t5 OUT CORPUS        T5ForConditionalGeneration (t5-small's shape), random weights, Unigram
    build_hf.py optimum-encoder SRC OUT   Optimum's export of SRC + ORTOptimizer O2/O3 + ORTQuantizer int8
    build_hf.py optimum-t5 SRC OUT        ORTModelForSeq2SeqLM's export of SRC, and its int8 (ORTQuantizer)
    build_hf.py gguf SRC OUT              llama.cpp's convert_hf_to_gguf.py --outtype f32 of SRC, to
                                          OUT/model.gguf (PYTHONPATH: llama.cpp's sources and their gguf-py)

Nothing is downloaded: every input is a local folder or text file. Sizes are the issue's (Llama: hidden
512, 8 layers, 8 heads, 2 KV heads, intermediate 1408, vocabulary 32000, context 2048; T5: d_model 512,
6 + 6 layers, 8 heads, d_ff 2048, vocabulary 32128). The tokenizers are trained on the built-in corpus and
have fewer ids than the vocabulary (the models' extra rows are never fed; every tool gets the same ids).
The trained Llama of the quality comparison (benchmarks/peers/quality.py) is smaller, see TRAINED.
"""

import json
import math
import random
import shutil
import sys
import time
from pathlib import Path

SEED = 0
# The trained Llama: every width a multiple of 32 (llama.cpp's Q4_0 and Q8_0 and our int4 quantize the
# input dimension of each weight in blocks of 32; llama.cpp's Q6_K output projection, in Q4_0's recipe,
# rows of 256), head width 64 as in the benchmark's Llama. Trained with AdamW on whole sentences
# (<s> ids </s>, right padded, the padding not scored) until its next-token distributions are peaked.
TRAINED = {
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
TRAINING = {"steps": 400, "batch": 32, "lr": 3e-3, "warmup": 40, "weight_decay": 0.1, "threads": 2}


def _texts(corpus: str) -> list[str]:
    return [line for line in Path(corpus).read_text().splitlines() if line.strip()]


def _save_tokenizer(folder: Path, tok, roles: dict) -> None:
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=tok, **roles).save_pretrained(folder)


def llama(out: Path, corpus: str) -> None:
    import torch
    import transformers

    tok = _bpe_tokenizer(_texts(corpus))
    config = transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
    )
    torch.manual_seed(SEED)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norm gains that are not all ones, so no norm is an identity
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.uniform_(0.5, 1.5)
    model.save_pretrained(out)
    _save_tokenizer(out, tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})


def _bpe_tokenizer(texts: list[str]):
    """A byte-level BPE with <unk>, <s>, </s> (ids 0, 1, 2) trained on `texts`; encoding adds <s>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=32000,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


def _train(model, rows: list[list[int]], *, pad: int) -> dict:
    """TRAINING's AdamW steps on batches of `rows` (drawn in a seeded order, whole epochs), linear warm-up
    then cosine decay to a tenth; the figures of the run."""
    import torch

    settings = TRAINING
    torch.set_num_threads(settings["threads"])
    steps, batch, warmup = settings["steps"], settings["batch"], settings["warmup"]
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings["lr"], betas=(0.9, 0.95), weight_decay=settings["weight_decay"]
    )

    def rate(step: int) -> float:
        decay = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps))
        return min(1.0, (step + 1) / warmup) * decay

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    rng = random.Random(SEED)
    order: list[int] = []
    losses = []
    started = time.perf_counter()
    model.train()
    for _ in range(steps):
        if len(order) < batch:
            order += rng.sample(range(len(rows)), len(rows))
        chosen, order = [rows[i] for i in order[:batch]], order[batch:]
        length = max(len(row) for row in chosen)
        ids = torch.full((batch, length), pad, dtype=torch.long)  # (B, T)
        mask = torch.zeros((batch, length), dtype=torch.long)  # (B, T)
        for i, row in enumerate(chosen):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    model.eval()
    return {
        **settings,
        "seconds": round(time.perf_counter() - started, 1),
        "sentences": len(rows),
        "first_loss": round(losses[0], 4),
        "final_loss": round(sum(losses[-20:]) / 20, 4),  # the mean of the last 20 steps, nats per token
    }


def llama_trained(out: Path, corpus: str) -> None:
    """TRAINED's LlamaForCausalLM, its vocabulary the BPE's trained on CORPUS, trained on CORPUS's
    sentences (`_train`); its training's figures in OUT/training.json."""
    import torch
    import transformers

    texts = _texts(corpus)
    tok = _bpe_tokenizer(texts)
    vocab = tok.get_vocab_size()
    config = transformers.LlamaConfig(
        vocab_size=vocab,
        **TRAINED,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,  # as Llama
        rms_norm_eps=1e-6,
    )
    torch.manual_seed(SEED)
    model = transformers.LlamaForCausalLM(config)
    rows = [[1, *encoding.ids, 2] for encoding in tok.encode_batch(texts, add_special_tokens=False)]
    figures = _train(model, rows, pad=2)
    figures["parameters"] = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out)
    _save_tokenizer(out, tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    (out / "training.json").write_text(json.dumps(figures, indent=2) + "\n")


def t5(out: Path, corpus: str) -> None:
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=8000, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(_texts(corpus), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    config = transformers.T5Config(
        vocab_size=32128,
        d_model=512,
        d_kv=64,
        d_ff=2048,
        num_heads=8,
        num_layers=6,
        num_decoder_layers=6,
        feed_forward_proj="relu",
        tie_word_embeddings=True,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(SEED)
    model = transformers.T5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name:
                parameter.uniform_(0.5, 1.5)
    model.save_pretrained(out)
    _save_tokenizer(out, tok, {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"})


def optimum_encoder(src: str, out: Path) -> None:
    from optimum.exporters.onnx import main_export
    from optimum.onnxruntime import ORTModelForFeatureExtraction, ORTOptimizer, ORTQuantizer
    from optimum.onnxruntime.configuration import AutoOptimizationConfig, AutoQuantizationConfig

    # The transformers model (last_hidden_state), pooled by the caller as sentence-transformers does.
    main_export(src, output=out, task="feature-extraction", library_name="transformers", do_validation=False)
    model = ORTModelForFeatureExtraction.from_pretrained(out, file_name="model.onnx")
    for level in ("O2", "O3"):
        optimizer = ORTOptimizer.from_pretrained(model)
        config = getattr(AutoOptimizationConfig, level)()
        optimizer.optimize(save_dir=out, optimization_config=config, file_suffix=level)
    int8 = AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False)
    # Of the plain export, as Optimum's guide does: its quantizer cannot type O2's fused contrib ops
    # ("Unable to find data type for weight_name=...", shape inference stops at them).
    ORTQuantizer.from_pretrained(out, file_name="model.onnx").quantize(
        save_dir=out, quantization_config=int8, file_suffix="quantized"
    )


def optimum_t5(src: str, out: Path) -> None:
    from optimum.onnxruntime import ORTModelForSeq2SeqLM
    from transformers import AutoTokenizer

    ORTModelForSeq2SeqLM.from_pretrained(src, export=True).save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    # int8: ORTQuantizer dynamic (avx512_vnni) on each of the three graphs, as for the encoder.
    from optimum.onnxruntime import ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    int8 = AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False)
    for name in ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"):
        ORTQuantizer.from_pretrained(out, file_name=name).quantize(
            save_dir=out, quantization_config=int8, file_suffix="quantized"
        )


def gguf(src: str, out: Path) -> None:
    import convert_hf_to_gguf
    from conversion.base import TextModel

    # The converter names a BPE tokenizer's pre-tokenizer from a hash of its output on a test text, and knows
    # only published tokenizers; ours is trained here, so it would stop. llama.cpp is fed token ids in the
    # benchmark and never tokenizes: record its "default" pre-tokenizer (GPT-2's split), whatever the hash.
    def default_pre_tokenizer(self, tokenizer) -> str:
        return "default"

    TextModel.get_vocab_base_pre = default_pre_tokenizer
    sys.argv = ["convert_hf_to_gguf.py", src, "--outtype", "f32", "--outfile", str(out / "model.gguf")]
    convert_hf_to_gguf.main()


# name -> (builder, whether its first argument is the output folder); the stamp of a build is its function's
# source and its PARTS' (benchmarks/peers/models.py), so changing one recipe rebuilds that model only.
BUILDS = {
    "llama": (llama, True),
    "llama-trained": (llama_trained, True),
    "t5": (t5, True),
    "optimum-encoder": (optimum_encoder, False),
    "optimum-t5": (optimum_t5, False),
    "gguf": (gguf, False),
}
# What else a recipe's stamp covers: the helpers and settings it uses.
PARTS = {"llama-trained": (_bpe_tokenizer, _train, TRAINED, TRAINING)}


def main(argv: list[str]) -> None:
    what, first, second = argv
    build, out_first = BUILDS[what]
    out = Path(first if out_first else second)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    if out_first:
        build(partial, second)
    else:
        build(first, partial)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)


if __name__ == "__main__":
    main(sys.argv[1:])
