"""DistilBERT checkpoints (DistilBertModel, DistilBertForMaskedLM, DistilBertForSequenceClassification,
sentence-transformers) as our BERT without token types: post-LN blocks with LayerNorm eps 1e-12 (fixed in
transformers' DistilBERT, not a config key), learned positions, BERT's layers under DistilBERT's names.

Heads. The masked-LM head (vocab_transform, the `activation`, vocab_layer_norm, vocab_projector tied to
the word embeddings) is BERT's. The classification head (pre_classifier and ReLU on [CLS], then classifier)
is BERT's pooler with a ReLU, and its classifier: the pre-classifier's output is the export's
pooler_output.
"""

from pathlib import Path
from typing import Any

import torch

from onnxformer.builder.families import BERTConfig
from onnxformer.builder.layers.options import BlockOptions, FeedForwardOptions, NormOptions, ResidualOptions
from onnxformer.builder.pretrained.mapping import Take
from onnxformer.builder.pretrained.options import Architecture, activation, get, head_tied, refuse
from onnxformer.builder.pretrained.sentence import projection_keys, sentence_modules
from onnxformer.runtime.errors import ModelImportError

PREFIX = "distilbert."
EPS = 1e-12  # every LayerNorm of transformers' DistilBERT
LAYER = {
    "attention.q_lin": "self_attn.q_proj",
    "attention.k_lin": "self_attn.k_proj",
    "attention.v_lin": "self_attn.v_proj",
    "attention.out_lin": "self_attn.out_proj",
    "sa_layer_norm": "self_attn_residual.norm",
    "ffn.lin1": "ffn.up",
    "ffn.lin2": "ffn.down",
    "output_layer_norm": "ffn_residual.norm",
}
EMBEDDINGS = {"word_embeddings": "token", "position_embeddings": "position", "LayerNorm": "norm"}
MLM_HEAD = {"vocab_transform": "mlm_transform.0", "vocab_layer_norm": "mlm_transform.2"}
CLASSIFIER = {"pre_classifier": "pooler.0", "classifier": "classifier.1"}


def _prefix(tensors: dict[str, torch.Tensor]) -> str:
    """ "distilbert." in the For* checkpoints, "" in a DistilBertModel's."""
    return PREFIX if f"{PREFIX}embeddings.word_embeddings.weight" in tensors else ""


def config(hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> BERTConfig:
    refuse(
        hf,
        "sinusoidal_pos_embds",
        False,
        "DistilBERT's fixed sinusoidal position table is not imported (no checkpoint with it was proven)",
    )
    prefix = _prefix(tensors)
    mlm_head = "vocab_transform.weight" in tensors
    words = f"{prefix}embeddings.word_embeddings.weight"
    if mlm_head and not head_tied(hf, tensors, head="vocab_projector.weight", embedding=words, default=True):
        raise ModelImportError(
            "the masked-LM projector is not tied to the word embeddings (tie_word_embeddings=false); "
            "onnxformer imports only the tied projector DistilBERT checkpoints have"
        )
    classifier = "pre_classifier.weight" in tensors
    classes = hf.get("id2label") or {}
    return BERTConfig(
        vocab_size=get(hf, "vocab_size"),
        d_model=get(hf, "dim", "hidden_size"),
        n_layers=get(hf, "n_layers", "num_hidden_layers"),
        n_heads=get(hf, "n_heads", "num_attention_heads"),
        d_ff=get(hf, "hidden_dim"),
        max_len=get(hf, "max_position_embeddings"),
        dropout=float(get(hf, "dropout", default=0.1)),
        position="learned",
        block=BlockOptions(
            norm=NormOptions(eps=EPS),
            residual=ResidualOptions("post"),
            ffn=FeedForwardOptions(activation(get(hf, "activation", default="gelu"), field="activation")),
        ),
        type_vocab_size=0,
        num_labels=max(len(classes), int(hf.get("num_labels", 0) or 0), 1),
        mlm_head=mlm_head,
        pooler=classifier,
        pooler_activation="relu",
        classifier=classifier,
        **sentence_modules(folder, d_model=get(hf, "dim", "hidden_size")),
    )


def mapping(ours: BERTConfig, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, Take], dict[str, str]]:
    prefix = _prefix(tensors)
    keys = projection_keys(ours.projection, tensors)
    for theirs, mine in EMBEDDINGS.items():
        for kind in ("weight", "bias") if theirs == "LayerNorm" else ("weight",):
            keys[f"embeddings.{mine}.{kind}"] = Take(f"{prefix}embeddings.{theirs}.{kind}")
    for index in range(ours.n_layers):
        for theirs, mine in LAYER.items():
            for kind in ("weight", "bias"):
                keys[f"encoder.blocks.{index}.{mine}.{kind}"] = Take(
                    f"{prefix}transformer.layer.{index}.{theirs}.{kind}"
                )
    heads = (MLM_HEAD if ours.mlm_head else {}) | (CLASSIFIER if ours.classifier else {})
    for theirs, mine in heads.items():
        for kind in ("weight", "bias"):
            keys[f"{mine}.{kind}"] = Take(f"{theirs}.{kind}")
    if ours.mlm_head:
        keys["mlm_decoder.bias"] = Take("vocab_projector.bias")
    ignored = {
        f"{prefix}embeddings.position_ids": "a buffer of 0 .. max_len - 1, not a weight",
        "vocab_projector.weight": "tied to the word embeddings",
    }
    return keys, ignored


NEUTRAL = {
    "tie_word_embeddings": "read where there is a masked-LM projector to tie; nothing else is tied",
    "tie_weights_": "a setting of the original DistilBERT training code, which transformers does not read",
}
ARCHITECTURE = Architecture("distilbert", config, mapping, NEUTRAL)
