"""Tiny random-weight Hugging Face model folders, built locally with transformers and `save_pretrained`
(no download): the checkpoints the import tests read. Each folder has config.json, model.safetensors and
the model's own kind of tokenizer.json (WordPiece for BERT, byte-level BPE for GPT-2 and Llama, Unigram
for T5) with its tokenizer_config.json."""

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

CORPUS = [
    "the cat sat on the mat.",
    "a dog sleeps near the old house",
    "The teacher finds a small red book!",
    "birds sing in the morning; children play outside.",
    "Hello world, this is a tiny model for tests.",
] * 4
# Weights 10x transformers' default scale (0.02): logits (and BERT's pooler and classifier outputs) of
# order 1 rather than 0.1 or less at this width, so that an option imported wrong shows in the parity's
# absolute tolerance (1e-4).
SCALE = 0.2
# gpt2_folder's generation_config.json: its second stop id ends this prompt's greedy continuation early.
GENERATION_PROMPT = "the cat sat"
GENERATION_BUDGET = 10
WORDS = sorted({w.strip(".,;!").lower() for line in CORPUS for w in line.split()})


def wordpiece_tokenizer() -> tuple[Tokenizer, dict]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = [
        *specials,
        *WORDS,
        *"abcdefghijklmnopqrstuvwxyz.,;!",
        *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"),
    ]
    vocab = {piece: index for index, piece in enumerate(dict.fromkeys(pieces))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    tok.decoder = decoders.WordPiece()
    roles = {
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
    }
    return tok, roles


def byte_bpe_tokenizer(specials: list[str], *, prefix: str | None) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    if prefix is None:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{prefix} $A", special_tokens=[(prefix, tok.token_to_id(prefix))]
        )
    return tok


def unigram_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=150, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return tok


def save_tokenizer(folder: Path, tok: Tokenizer, roles: dict) -> None:
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=tok, **roles).save_pretrained(folder)


def _vocab(tok: Tokenizer) -> int:
    # Exactly the tokenizer's: a random model would otherwise pick padded ids that decode to nothing.
    return tok.get_vocab_size(with_added_tokens=True)


def bert_folder(folder: Path, architecture: str = "BertModel") -> Path:
    import transformers

    tok, roles = wordpiece_tokenizer()
    config = transformers.BertConfig(
        vocab_size=_vocab(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=80,
        num_labels=3,
        layer_norm_eps=1e-12,
        initializer_range=SCALE,
    )
    torch.manual_seed(0)
    getattr(transformers, architecture)(config).eval().save_pretrained(folder)
    save_tokenizer(folder, tok, roles)
    return folder


def gpt2_folder(folder: Path, *, generation_config: bool = True) -> Path:
    """A GPT-2 folder; `generation_config` writes the generation_config.json below (it needs a greedy
    continuation that changes token, which weights at SCALE give)."""
    import transformers

    tok = byte_bpe_tokenizer(["<|endoftext|>"], prefix=None)
    eos = tok.token_to_id("<|endoftext|>")
    config = transformers.GPT2Config(
        vocab_size=_vocab(tok),
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=80,
        initializer_range=SCALE,
        bos_token_id=eos,
        eos_token_id=eos,
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(folder)
    save_tokenizer(
        folder,
        tok,
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"},
    )
    # A generation_config.json as released checkpoints write one: greedy (no do_sample), a budget, and a
    # second stop id, one that this random model's greedy continuation of GENERATION_PROMPT reaches after
    # a few steps (so that transformers' generate and ours both stop there, or neither).
    if not generation_config:
        return folder
    prompt = torch.tensor([tok.encode(GENERATION_PROMPT).ids])
    with torch.no_grad():
        steps = model.generate(prompt, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=eos)
    continuation = steps[0, prompt.shape[1] :].tolist()
    later = next((token for token in continuation if token not in (continuation[0], eos)), None)
    assert later is not None, f"the greedy continuation {continuation} repeats one token; change the prompt"
    settings = {"eos_token_id": [eos, later], "max_new_tokens": GENERATION_BUDGET, "pad_token_id": eos}
    (folder / "generation_config.json").write_text(json.dumps(settings, indent=2))
    return folder


def llama_folder(
    folder: Path, *, tied: bool = False, dtype: torch.dtype = torch.float32, shard: str | None = None
) -> Path:
    import transformers

    return _llama_like_folder(
        folder, transformers.LlamaConfig, transformers.LlamaForCausalLM, dtype=dtype, shard=shard,
        rope_theta=5e5, tie_word_embeddings=tied,
    )  # fmt: skip


def qwen2_folder(folder: Path) -> Path:
    """A Qwen2: Llama's layout with biases on q, k and v and none on the output projection."""
    import transformers

    return _llama_like_folder(
        folder, transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
        rope_theta=1e6, tie_word_embeddings=False, use_sliding_window=False,
    )  # fmt: skip


def qwen3_folder(folder: Path) -> Path:
    """A Qwen3: RMSNorm on each head's queries and keys, a head width (16) apart from hidden / heads (8)."""
    import transformers

    return _llama_like_folder(
        folder, transformers.Qwen3Config, transformers.Qwen3ForCausalLM,
        rope_theta=1e6, tie_word_embeddings=True, head_dim=16, attention_bias=False,
    )  # fmt: skip


MISTRAL_WINDOW = 8  # smaller than the parity's prompts (up to 64) and its greedy runs (27 tokens)


def mistral_folder(folder: Path) -> Path:
    """A Mistral: Llama's layout, every layer's attention over the last MISTRAL_WINDOW keys only."""
    import transformers

    return _llama_like_folder(
        folder, transformers.MistralConfig, transformers.MistralForCausalLM,
        rope_theta=1e6, tie_word_embeddings=False, sliding_window=MISTRAL_WINDOW,
    )  # fmt: skip


def _llama_like_folder(
    folder: Path, config_class, model_class, *, dtype=torch.float32, shard=None, **options
) -> Path:
    """A tiny decoder of a Llama-like architecture: 4 heads, 2 KV heads, random norm weights and biases."""
    tok = byte_bpe_tokenizer(["<unk>", "<s>", "</s>"], prefix="<s>")
    config = config_class(
        vocab_size=_vocab(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=80,
        initializer_range=SCALE,
        bos_token_id=1,
        eos_token_id=2,
        rms_norm_eps=1e-6,
        **options,
    )
    torch.manual_seed(0)
    model = model_class(config).eval()
    # Random norm weights and biases, so that one mapped to the wrong place shows in the parity.
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                parameter.normal_(0.0, 0.5)
    model.to(dtype).save_pretrained(folder, **({"max_shard_size": shard} if shard else {}))
    save_tokenizer(folder, tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    return folder


def t5_folder(folder: Path, *, gated: bool) -> Path:
    import transformers

    tok = unigram_tokenizer()
    config = transformers.T5Config(
        vocab_size=_vocab(tok),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_heads=4,
        num_layers=2,
        num_decoder_layers=3 if gated else 2,
        feed_forward_proj="gated-gelu" if gated else "relu",
        tie_word_embeddings=not gated,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
        relative_attention_max_distance=20,
    )
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(config).eval()
    if gated:  # v1.1's own head; transformers 5 unties on load when the checkpoint holds one that differs
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name:
                parameter.uniform_(0.5, 1.5)
            elif not gated and name.endswith(("q.weight", "k.weight", "v.weight", "o.weight", "wi.weight")):
                # At the default scale the v1.0 decoder mostly copies its input token through the tied
                # head, so greedy decoding repeats the start token whatever the source; stronger
                # attention and FFN weights make the generated tokens depend on the source.
                parameter.mul_(3.0)
    model.save_pretrained(folder)
    save_tokenizer(folder, tok, {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"})
    return folder
