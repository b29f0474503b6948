"""Tiny random-weight encoder folders beside tests/hf_models.py's BERT: DistilBERT, RoBERTa and XLM-RoBERTa
(each bare, with a masked-LM head and with a classifier), and sentence-transformers folders on them built
with sentence-transformers' own modules and `save` (no download).

Hidden 32, 2 layers, 4 heads, weights at hf_models.SCALE. Each has its own kind of tokenizer.json: BERT's
WordPiece, RoBERTa's byte-level BPE with its RobertaProcessing post-processor (<s> text </s>), XLM-R's
Unigram with Metaspace and a <s> $A </s> template. RoBERTa and XLM-R number <s> <pad> </s> <unk> 0-3 as the
released checkpoints do, so padding_idx (pad_token_id) is 1 and positions start at 2.

ModernBERT (bare and masked-LM): 3 layers, global then two local layers (global_attn_every_n_layers 3) with
local_attention 8, so a query sees 4 keys on each side and a 64-token text crosses the window; its own
rope base per layer type; byte-level BPE with a [CLS] $A [SEP] template, as ModernBERT's tokenizer.
"""

import json
from pathlib import Path

import torch
from hf_models import CORPUS, SCALE, byte_bpe_tokenizer, save_tokenizer, wordpiece_tokenizer
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

# Position rows; RoBERTa's first two are before its positions (padding_idx + 1 = 2), so it reads 78 tokens.
MAX_POSITIONS = 80
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
ROBERTA_ROLES = {
    "bos_token": "<s>",
    "eos_token": "</s>",
    "cls_token": "<s>",
    "sep_token": "</s>",
    "pad_token": "<pad>",
    "unk_token": "<unk>",
    "mask_token": "<mask>",
}
SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}


def roberta_tokenizer() -> Tokenizer:
    tok = byte_bpe_tokenizer(ROBERTA_SPECIALS, prefix=None)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    return tok


def xlmr_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=150, special_tokens=ROBERTA_SPECIALS, unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return tok


def _randomize_norms(model: torch.nn.Module) -> None:
    """Norm weights and biases away from 1 and 0, so that one mapped to the wrong place shows."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name.lower():
                parameter.uniform_(0.5, 1.5) if name.endswith("weight") else parameter.normal_(0.0, 0.5)


def _save(folder: Path, model: torch.nn.Module, tok: Tokenizer, roles: dict) -> Path:
    torch.manual_seed(1)
    _randomize_norms(model)
    model.eval().save_pretrained(folder)
    save_tokenizer(folder, tok, roles)
    return folder


def distilbert_folder(folder: Path, architecture: str = "DistilBertModel") -> Path:
    import transformers

    tok, roles = wordpiece_tokenizer()
    config = transformers.DistilBertConfig(
        vocab_size=tok.get_vocab_size(with_added_tokens=True),
        dim=32,
        n_layers=2,
        n_heads=4,
        hidden_dim=64,
        max_position_embeddings=MAX_POSITIONS,
        num_labels=3,
        initializer_range=SCALE,
    )
    torch.manual_seed(0)
    return _save(folder, getattr(transformers, architecture)(config), tok, roles)


def roberta_folder(folder: Path, architecture: str = "RobertaModel") -> Path:
    """A RoBERTa (Roberta*) or XLM-RoBERTa (XLMRoberta*) folder, by the architecture's name."""
    import transformers

    xlmr = architecture.startswith("XLMRoberta")
    tok = xlmr_tokenizer() if xlmr else roberta_tokenizer()
    kind = transformers.XLMRobertaConfig if xlmr else transformers.RobertaConfig
    config = kind(
        vocab_size=tok.get_vocab_size(with_added_tokens=True),
        max_position_embeddings=MAX_POSITIONS,
        type_vocab_size=1,
        num_labels=3,
        initializer_range=SCALE,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        **SIZES,
    )
    torch.manual_seed(0)
    # The tokenizer reads as many tokens as there are positions, as roberta-base's (512 of 514 rows).
    roles = {**ROBERTA_ROLES, "model_max_length": MAX_POSITIONS - 2}
    return _save(folder, getattr(transformers, architecture)(config), tok, roles)


MODERNBERT_SPECIALS = ["[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"]
MODERNBERT_ROLES = {
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "mask_token": "[MASK]",
}
LOCAL_ATTENTION = 8  # a query sees local_attention // 2 = 4 keys on each side in the local layers


def modernbert_tokenizer() -> Tokenizer:
    tok = byte_bpe_tokenizer(MODERNBERT_SPECIALS, prefix=None)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", 0), ("[SEP]", 2)],
    )
    return tok


def modernbert_folder(folder: Path, architecture: str = "ModernBertModel", **overrides) -> Path:
    """`overrides`: ModernBertConfig fields (biases on, say)."""
    import transformers

    tok = modernbert_tokenizer()
    config = transformers.ModernBertConfig(
        vocab_size=tok.get_vocab_size(with_added_tokens=True),
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=MAX_POSITIONS,
        local_attention=LOCAL_ATTENTION,
        global_attn_every_n_layers=3,
        initializer_range=SCALE,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        cls_token_id=0,
        sep_token_id=2,
        **overrides,
    )
    torch.manual_seed(0)
    model = getattr(transformers, architecture)(config)
    with torch.no_grad():  # transformers starts biases at zero; a mapping that drops one would not show
        for name, parameter in model.named_parameters():
            if name.endswith("bias") and "norm" not in name:
                parameter.normal_(0.0, SCALE)
    return _save(folder, model, tok, {**MODERNBERT_ROLES, "model_max_length": MAX_POSITIONS})


# sentence-transformers' Pooling modes (its `pooling_mode` values) -> the legacy boolean key older releases
# wrote, and all-MiniLM-L6-v2's folder still has.
LEGACY_POOLING = {
    "mean": "pooling_mode_mean_tokens",
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}


def sentence_folder(
    folder: Path,
    encoder: Path,
    *,
    pooling: str,
    dense: tuple[int, str, bool] | None = None,
    normalize: bool = False,
    max_seq_length: int | None = None,
    legacy: bool = False,
) -> Path:
    """A sentence-transformers folder on the Hugging Face folder `encoder`: Transformer, Pooling(pooling),
    an optional Dense (out_features, activation "tanh" or "identity", bias) and Normalize, saved by
    sentence-transformers. `legacy` rewrites the Pooling config with the boolean keys older releases wrote."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules

    transformer = modules.Transformer(str(encoder), max_seq_length=max_seq_length)
    width = transformer.get_embedding_dimension()
    stack: list[torch.nn.Module] = [transformer, modules.Pooling(width, pooling_mode=pooling)]
    if dense is not None:
        out, activation, bias = dense
        function = {"tanh": torch.nn.Tanh(), "identity": torch.nn.Identity()}[activation]
        torch.manual_seed(2)
        layer = modules.Dense(width, out, bias=bias, activation_function=function)
        with torch.no_grad():  # at SCALE, so that a wrong activation or transpose shows
            layer.linear.weight.normal_(0.0, 0.5)
            if bias:
                layer.linear.bias.normal_(0.0, 0.5)
        stack.append(layer)
    if normalize:
        stack.append(modules.Normalize())
    SentenceTransformer(modules=stack, device="cpu").save(str(folder))
    if legacy:
        (path,) = folder.glob("*_Pooling/config.json")
        settings = json.loads(path.read_text())
        mode = settings.pop("pooling_mode")
        legacy_settings = {"word_embedding_dimension": settings.pop("embedding_dimension"), **settings}
        legacy_settings |= {key: key == LEGACY_POOLING[mode] for key in LEGACY_POOLING.values()}
        legacy_settings |= {
            "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False,
        }
        path.write_text(json.dumps(legacy_settings, indent=2))
    return folder


# name -> (builder, architecture): the Hugging Face encoder folders.
ENCODERS = {
    "distilbert": (distilbert_folder, "DistilBertModel"),
    "distilbert-mlm": (distilbert_folder, "DistilBertForMaskedLM"),
    "distilbert-cls": (distilbert_folder, "DistilBertForSequenceClassification"),
    "roberta": (roberta_folder, "RobertaModel"),
    "roberta-mlm": (roberta_folder, "RobertaForMaskedLM"),
    "roberta-cls": (roberta_folder, "RobertaForSequenceClassification"),
    "xlmr": (roberta_folder, "XLMRobertaModel"),
    "xlmr-mlm": (roberta_folder, "XLMRobertaForMaskedLM"),
    "xlmr-cls": (roberta_folder, "XLMRobertaForSequenceClassification"),
    "modernbert": (modernbert_folder, "ModernBertModel"),
    "modernbert-mlm": (modernbert_folder, "ModernBertForMaskedLM"),
}
# name -> (the encoder folder it is on, sentence_folder's options): one per pooling, on each encoder.
SENTENCE = {
    "st-bert-last": (
        "bert",
        {"pooling": "lasttoken", "dense": (16, "tanh", True), "normalize": True, "legacy": True},
    ),
    "st-distilbert-mean": ("distilbert", {"pooling": "mean", "normalize": True, "max_seq_length": 24}),
    "st-roberta-max": ("roberta", {"pooling": "max", "dense": (24, "identity", False)}),
    "st-xlmr-cls": ("xlmr", {"pooling": "cls", "normalize": True, "legacy": True}),
}


def encoder_folders(root: Path, *, sentence: bool = True) -> dict[str, Path]:
    """name -> folder: ENCODERS, and with `sentence` a BertModel ("bert") and the SENTENCE folders."""
    from hf_models import bert_folder

    folders = {name: build(root / name, architecture) for name, (build, architecture) in ENCODERS.items()}
    if sentence:
        folders["bert"] = bert_folder(root / "bert")
        for name, (encoder, options) in SENTENCE.items():
            folders[name] = sentence_folder(root / name, folders[encoder], **options)
    return folders
