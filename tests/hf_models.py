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


def qwen2_folder(folder: Path, *, sliding: bool = False) -> Path:
    """A Qwen2: Llama's layout with biases on q, k and v and none on the output projection. `sliding`:
    use_sliding_window with a window of 8 from layer max_window_layers = 1 on (the second of 2), and no
    layer_types, so the import derives them as transformers 5 does."""
    import transformers

    window = {"sliding_window": 8, "max_window_layers": 1} if sliding else {}
    folder = _llama_like_folder(
        folder, transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
        rope_theta=1e6, tie_word_embeddings=False, use_sliding_window=sliding, **window,
    )  # fmt: skip
    config = json.loads((folder / "config.json").read_text())
    config.pop("layer_types", None)  # as a transformers 4.x folder has it
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


# A ChatML template as Qwen's tokenizer_config.json carries one (shortened): kept in the export as is.
CHATML = (
    "{% for message in messages %}<s>{{ message['role'] }}\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)


def qwen3_folder(folder: Path) -> Path:
    """A Qwen3: RMSNorm on each head's queries and keys, a head width (16) apart from hidden / heads (8)."""
    import transformers

    folder = _llama_like_folder(
        folder, transformers.Qwen3Config, transformers.Qwen3ForCausalLM,
        rope_theta=1e6, tie_word_embeddings=True, head_dim=16, attention_bias=False,
    )  # fmt: skip
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(folder)
    return folder


MISTRAL_WINDOW = 8  # smaller than the parity's prompts (up to 64) and its greedy runs (27 tokens)


def mistral_folder(folder: Path) -> Path:
    """A Mistral: Llama's layout, every layer's attention over the last MISTRAL_WINDOW keys only."""
    import transformers

    return _llama_like_folder(
        folder, transformers.MistralConfig, transformers.MistralForCausalLM,
        rope_theta=1e6, tie_word_embeddings=False, sliding_window=MISTRAL_WINDOW,
    )  # fmt: skip


def with_byte_fallback(trained: Tokenizer, specials: list[str]) -> Tokenizer:
    """A trained BPE tokenizer as SentencePiece writes one: the special tokens first, then the 256 byte
    tokens <0x00> .. <0xFF> (a character outside the vocabulary falls back to its UTF-8 bytes), then its
    pieces; unknown pieces fused."""
    data = json.loads(trained.to_str())
    words = [t for t, _ in sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1]) if t not in specials]
    pieces = [*specials, *(f"<0x{b:02X}>" for b in range(256)), *words]
    data["model"]["vocab"] = {piece: index for index, piece in enumerate(pieces)}
    data["model"]["byte_fallback"] = True
    data["model"]["fuse_unk"] = True
    data["added_tokens"] = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True}
        for i, t in enumerate(specials)
    ]  # fmt: skip
    return Tokenizer.from_str(json.dumps(data))


def byte_fallback_bpe_tokenizer() -> Tokenizer:
    """SentencePiece-style BPE as Gemma's tokenizer.json has it: spaces become "▁" (no pre-tokenizer), and a
    character outside the vocabulary falls back to its UTF-8 bytes as <0xXX> tokens."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.normalizer = normalizers.Replace(" ", "\u2581")
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials, show_progress=False)
    trained.train_from_iterator(CORPUS, trainer=trainer)
    tok = with_byte_fallback(trained, specials)
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    return tok


GEMMA_WINDOW = 8
GEMMA_TOKENS = {"pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>", "unk_token": "<unk>"}


def gemma2_folder(folder: Path) -> Path:
    """A Gemma 2: sandwich norms, (1 + w) RMSNorm, GeGLU, scaled embeddings, query_pre_attn_scalar apart from
    head_dim, attention and final soft-caps small enough to bite, layers sliding (window 8) and global in
    turn, head_dim 16 apart from hidden / heads; the byte-fallback BPE tokenizer."""
    import transformers

    return _llama_like_folder(
        folder, transformers.Gemma2Config, transformers.Gemma2ForCausalLM,
        tok=byte_fallback_bpe_tokenizer(), roles=GEMMA_TOKENS, special_ids=(0, 2, 1), layers=3,
        head_dim=16, query_pre_attn_scalar=24, attn_logit_softcapping=3.0, final_logit_softcapping=4.0,
        sliding_window=GEMMA_WINDOW, rope_theta=1e4, hidden_activation="gelu_pytorch_tanh",
    )  # fmt: skip


def gemma3_folder(folder: Path) -> Path:
    """A Gemma 3 text decoder: Gemma 2's layer with QK-norm and no soft-caps, local layers (window 8) with
    their own rope base, every third layer global."""
    import transformers

    return _llama_like_folder(
        folder, transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM,
        tok=byte_fallback_bpe_tokenizer(), roles=GEMMA_TOKENS, special_ids=(0, 2, 1), layers=3,
        head_dim=16, query_pre_attn_scalar=16, sliding_window=GEMMA_WINDOW,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        },
    )  # fmt: skip


def smollm3_folder(folder: Path) -> Path:
    """A SmolLM3: Llama's layer, rotary left out of every second layer (no_rope_layer_interval 2: NoPE),
    the last layer sliding over 8 keys (layer_types), GQA, tied."""
    import transformers

    return _llama_like_folder(
        folder, transformers.SmolLM3Config, transformers.SmolLM3ForCausalLM, layers=3,
        special_ids=(0, 1, 2), tie_word_embeddings=True, no_rope_layer_interval=2, sliding_window=8,
        use_sliding_window=True, layer_types=["full_attention", "full_attention", "sliding_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 2e6},
    )  # fmt: skip


def smollm2_folder(folder: Path) -> Path:
    """A SmolLM2: a LlamaForCausalLM with SmolLM2's choices (tied head, rope_theta 1e5, 3 query heads per
    KV head), imported as Llama with nothing of its own."""
    import transformers

    folder = _llama_like_folder(
        folder, transformers.LlamaConfig, transformers.LlamaForCausalLM, special_ids=(0, 1, 2),
        tie_word_embeddings=True, rope_theta=1e5, hidden_size=48, num_attention_heads=6,
        num_key_value_heads=2, rms_norm_eps=1e-5,
    )  # fmt: skip
    # the keys nanotron's conversion writes into SmolLM2's config.json, which transformers' Llama ignores
    config = json.loads((folder / "config.json").read_text())
    config |= {"is_llama_config": True, "rope_interleaved": False, "pretraining_tp": 1}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def phi3_folder(folder: Path) -> Path:
    """A Phi-3: q/k/v fused in qkv_proj (unequal parts: 4 query heads, 2 KV heads), gate and up fused, half
    of each head rotating (partial_rotary_factor 0.5, as Phi-4-mini's 0.75), a sliding window of 8."""
    import transformers

    return _llama_like_folder(
        folder, transformers.Phi3Config, transformers.Phi3ForCausalLM,
        special_ids=(0, 1, 2), tie_word_embeddings=False, sliding_window=8,
        rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5},
    )  # fmt: skip


def phi3_longrope_folder(folder: Path) -> Path:
    """A Phi-3 with longrope scaling (the 128k checkpoints' kind): trained on 16 positions, stretched to 80;
    short factors up to 16 positions, long ones past them (the parity's 64-token cases), cos and sin scaled
    by sqrt(1 + ln 5 / ln 16); no sliding window, whole-head rotary."""
    import transformers

    pairs = 4  # head width 8: 4 rotated pairs
    return _llama_like_folder(
        folder, transformers.Phi3Config, transformers.Phi3ForCausalLM,
        special_ids=(0, 1, 2), tie_word_embeddings=False, original_max_position_embeddings=16,
        rope_parameters={
            "rope_type": "longrope", "rope_theta": 1e4,
            "short_factor": [1.0 + 0.3 * i for i in range(pairs)],
            "long_factor": [1.5 + 2.0 * i for i in range(pairs)],
        },
    )  # fmt: skip


def neox_folder(folder: Path) -> Path:
    """A GPT-NeoX (Pythia): LayerNorm with biases, exact GELU, q/k/v fused per head, a quarter of each head
    rotating (rotary_pct 0.25 of 16: 4 features), attention and MLP in parallel, an untied head."""
    import transformers

    tok = byte_bpe_tokenizer(["<|endoftext|>"], prefix=None)
    eos = tok.token_to_id("<|endoftext|>")
    config = transformers.GPTNeoXConfig(
        vocab_size=_vocab(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=80, initializer_range=SCALE,
        bos_token_id=eos, eos_token_id=eos, use_parallel_residual=True, hidden_act="gelu",
        rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.25},
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPTNeoXForCausalLM(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layernorm" in name or "layer_norm" in name:
                parameter.uniform_(0.5, 1.5) if name.endswith("weight") else parameter.normal_(0.0, 0.5)
            elif name.endswith(".bias"):
                parameter.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    roles = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
    save_tokenizer(folder, tok, roles)
    return folder


def _llama_like_folder(
    folder: Path,
    config_class,
    model_class,
    *,
    dtype=torch.float32,
    shard=None,
    tok: Tokenizer | None = None,
    roles: dict | None = None,
    special_ids: tuple[int, int, int] = (None, 1, 2),  # pad, bos, eos
    layers: int = 2,
    **options,
) -> Path:
    """A tiny decoder of a Llama-like architecture: 4 heads, 2 KV heads, random norm weights and biases."""
    tok = tok or byte_bpe_tokenizer(["<unk>", "<s>", "</s>"], prefix="<s>")
    roles = roles or {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    pad, bos, eos = special_ids
    sizes = {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6}
    config = config_class(
        vocab_size=_vocab(tok),
        intermediate_size=64,
        num_hidden_layers=layers,
        max_position_embeddings=80,
        initializer_range=SCALE,
        bos_token_id=bos,
        eos_token_id=eos,
        **({"pad_token_id": pad} if pad is not None else {}),
        **{**sizes, **options},
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
    save_tokenizer(folder, tok, roles)
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
