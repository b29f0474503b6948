"""BERT checkpoints (BertModel, BertForMaskedLM, BertForSequenceClassification, sentence-transformers) as our
BERT: post-LN LayerNorm blocks with the checkpoint's eps, learned positions, segments, exact GELU."""

from pathlib import Path
from typing import Any

import torch

from onnxformer.builder.families import BERTConfig
from onnxformer.builder.layers.options import BlockOptions, FeedForwardOptions, NormOptions, ResidualOptions
from onnxformer.builder.pretrained.mapping import Take
from onnxformer.builder.pretrained.options import Architecture, activation, get, head_tied, refuse
from onnxformer.builder.pretrained.sentence import projection_keys, sentence_modules
from onnxformer.runtime.errors import ModelImportError

LAYER = {
    "attention.self.query": "self_attn.q_proj",
    "attention.self.key": "self_attn.k_proj",
    "attention.self.value": "self_attn.v_proj",
    "attention.output.dense": "self_attn.out_proj",
    "attention.output.LayerNorm": "self_attn_residual.norm",
    "intermediate.dense": "ffn.up",
    "output.dense": "ffn.down",
    "output.LayerNorm": "ffn_residual.norm",
}
EMBEDDINGS = {
    "word_embeddings": "token",
    "position_embeddings": "position",
    "token_type_embeddings": "segment",
    "LayerNorm": "norm",
}
HEADS = {
    "pooler.dense": "pooler.0",
    "cls.predictions.transform.dense": "mlm_transform.0",
    "cls.predictions.transform.LayerNorm": "mlm_transform.2",
    "classifier": "classifier.1",
}


def _prefix(tensors: dict[str, torch.Tensor]) -> str:
    """ "bert." in BertFor* checkpoints, "" in a BertModel's."""
    return "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""


def config(hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> BERTConfig:
    refuse(hf, "position_embedding_type", "absolute", "relative BERT positions are not supported")
    refuse(hf, "is_decoder", False, "a BERT decoder is not supported")
    refuse(hf, "add_cross_attention", False, "a BERT with cross-attention is not supported")
    prefix = _prefix(tensors)
    mlm_head = "cls.predictions.transform.dense.weight" in tensors
    words = f"{prefix}embeddings.word_embeddings.weight"
    if mlm_head and not head_tied(
        hf, tensors, head="cls.predictions.decoder.weight", embedding=words, default=True
    ):
        raise ModelImportError(
            "the masked-LM decoder is not tied to the word embeddings (tie_word_embeddings=false); "
            "onnxformer imports only the tied decoder BERT checkpoints have"
        )
    classes = hf.get("id2label") or {}
    sentence = sentence_modules(folder, d_model=get(hf, "hidden_size"))
    return BERTConfig(
        vocab_size=get(hf, "vocab_size"),
        d_model=get(hf, "hidden_size"),
        n_layers=get(hf, "num_hidden_layers"),
        n_heads=get(hf, "num_attention_heads"),
        d_ff=get(hf, "intermediate_size"),
        max_len=get(hf, "max_position_embeddings"),
        dropout=float(get(hf, "hidden_dropout_prob", default=0.1)),
        position="learned",
        block=BlockOptions(
            norm=NormOptions(eps=float(get(hf, "layer_norm_eps", default=1e-12))),
            residual=ResidualOptions("post"),
            ffn=FeedForwardOptions(activation(get(hf, "hidden_act", default="gelu"), field="hidden_act")),
        ),
        type_vocab_size=get(hf, "type_vocab_size", default=2),
        num_labels=max(len(classes), int(hf.get("num_labels", 0) or 0), 1),
        mlm_head=mlm_head,
        pooler=f"{prefix}pooler.dense.weight" in tensors,
        classifier="classifier.weight" in tensors,
        **sentence,
    )


def encoder_keys(ours: BERTConfig, prefix: str, *, position: Take | None = None) -> dict[str, Take]:
    """Embeddings and encoder layers under BERT's names (RoBERTa's too); `position` takes the position
    table otherwise than as it is."""
    keys: dict[str, Take] = {}
    for theirs, mine in EMBEDDINGS.items():
        if mine == "segment" and not ours.type_vocab_size:
            continue
        for kind in ("weight", "bias") if theirs == "LayerNorm" else ("weight",):
            keys[f"embeddings.{mine}.{kind}"] = Take(f"{prefix}embeddings.{theirs}.{kind}")
    if position is not None:
        keys["embeddings.position.weight"] = position
    for index in range(ours.n_layers):
        for theirs, mine in LAYER.items():
            for kind in ("weight", "bias"):
                keys[f"encoder.blocks.{index}.{mine}.{kind}"] = Take(
                    f"{prefix}encoder.layer.{index}.{theirs}.{kind}"
                )
    return keys


def mapping(ours: BERTConfig, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, Take], dict[str, str]]:
    prefix = _prefix(tensors)
    keys = encoder_keys(ours, prefix) | projection_keys(ours.projection, tensors)
    present = {"pooler.dense": ours.pooler, "classifier": ours.classifier}
    for theirs, mine in HEADS.items():
        if present.get(theirs, ours.mlm_head):
            head = f"{prefix}{theirs}" if theirs.startswith("pooler") else theirs
            for kind in ("weight", "bias"):
                keys[f"{mine}.{kind}"] = Take(f"{head}.{kind}")
    ignored = {f"{prefix}embeddings.position_ids": "a buffer of 0 .. max_len - 1, not a weight"}
    if ours.mlm_head:
        keys["mlm_decoder.bias"] = Take("cls.predictions.bias")
        ignored["cls.predictions.decoder.weight"] = "tied to the word embeddings"
        ignored["cls.predictions.decoder.bias"] = "the same tensor as cls.predictions.bias"
    return keys, ignored


NEUTRAL = {"tie_word_embeddings": "read where there is a masked-LM decoder to tie; nothing else is tied"}
ARCHITECTURE = Architecture("bert", config, mapping, NEUTRAL)
