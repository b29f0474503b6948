"""RoBERTa and XLM-RoBERTa checkpoints (Roberta*/XLMRoberta* Model, ForMaskedLM, ForSequenceClassification,
sentence-transformers) as our BERT: BERT's layers under BERT's names (prefix "roberta."), one token type,
and positions offset by padding_idx + 1.

Positions. RoBERTa numbers a text's real tokens from padding_idx + 1 (pad_token_id, 1 in the released
checkpoints) and gives padding the row padding_idx (transformers' `create_position_ids_from_input_ids`,
after fairseq). Our positions count real tokens from 0, so the import keeps the table's rows from
padding_idx + 1 on: row padding_idx + 1 + p is our position p, and the context is
max_position_embeddings - padding_idx - 1 (514 - 2 = 512 for roberta-base). The rows before are those of
padding, whose outputs are never read.

Heads. The masked-LM head (lm_head: dense, exact GELU whatever hidden_act is, LayerNorm, the decoder tied to
the word embeddings, lm_head.bias) is BERT's. The classification head (classifier: dense and tanh on <s>,
then out_proj) is BERT's pooler and classifier, so its dense output is the export's pooler_output.
"""

from pathlib import Path
from typing import Any

import torch

from onnxformer.builder.families import BERTConfig
from onnxformer.builder.layers.options import BlockOptions, FeedForwardOptions, NormOptions, ResidualOptions
from onnxformer.builder.pretrained.bert import encoder_keys
from onnxformer.builder.pretrained.mapping import Take
from onnxformer.builder.pretrained.options import Architecture, activation, get, head_tied, refuse
from onnxformer.builder.pretrained.sentence import projection_keys, sentence_modules
from onnxformer.runtime.errors import ModelImportError

PREFIX = "roberta."
# their head (without .weight / .bias) -> ours
MLM_HEAD = {"lm_head.dense": "mlm_transform.0", "lm_head.layer_norm": "mlm_transform.2"}
CLASSIFIER = {"classifier.dense": "pooler.0", "classifier.out_proj": "classifier.1"}


def _prefix(tensors: dict[str, torch.Tensor]) -> str:
    """ "roberta." in the For* checkpoints, "" in a RobertaModel's."""
    return PREFIX if f"{PREFIX}embeddings.word_embeddings.weight" in tensors else ""


def _offset(ours: BERTConfig, tensors: dict[str, torch.Tensor]) -> int:
    """padding_idx + 1: the rows of the position table before our position 0."""
    table = tensors[f"{_prefix(tensors)}embeddings.position_embeddings.weight"]
    return table.shape[0] - ours.max_len


def config(hf: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path) -> BERTConfig:
    refuse(hf, "position_embedding_type", "absolute", "relative RoBERTa positions are not supported")
    refuse(hf, "is_decoder", False, "a RoBERTa decoder is not supported")
    refuse(hf, "add_cross_attention", False, "a RoBERTa with cross-attention is not supported")
    prefix = _prefix(tensors)
    padding_idx = get(hf, "pad_token_id", default=1)
    positions = get(hf, "max_position_embeddings")
    if not isinstance(padding_idx, int) or not 0 <= padding_idx < positions - 1:
        raise ModelImportError(
            f"config.json pad_token_id={padding_idx!r}: RoBERTa's positions start at pad_token_id + 1, which "
            f"must leave rows of its max_position_embeddings={positions} table"
        )
    hidden_act = activation(get(hf, "hidden_act", default="gelu"), field="hidden_act")
    mlm_head = "lm_head.dense.weight" in tensors
    if mlm_head and hidden_act != "gelu":
        raise ModelImportError(
            f"config.json hidden_act={get(hf, 'hidden_act')!r}: RoBERTa's masked-LM head applies exact "
            "GELU whatever hidden_act is, and onnxformer's head applies the layers' activation; onnxformer "
            "imports a RoBERTa masked-LM head only with hidden_act='gelu'"
        )
    words = f"{prefix}embeddings.word_embeddings.weight"
    if mlm_head and not head_tied(hf, tensors, head="lm_head.decoder.weight", embedding=words, default=True):
        raise ModelImportError(
            "the masked-LM decoder is not tied to the word embeddings (tie_word_embeddings=false); "
            "onnxformer imports only the tied decoder RoBERTa checkpoints have"
        )
    pooler, classifier = f"{prefix}pooler.dense.weight" in tensors, "classifier.dense.weight" in tensors
    if pooler and classifier:
        raise ModelImportError(
            "the checkpoint has both a pooler and a classification head; onnxformer builds one dense layer "
            "on <s>, so it imports RobertaModel (pooler) or RobertaForSequenceClassification (head)"
        )
    classes = hf.get("id2label") or {}
    return BERTConfig(
        vocab_size=get(hf, "vocab_size"),
        d_model=get(hf, "hidden_size"),
        n_layers=get(hf, "num_hidden_layers"),
        n_heads=get(hf, "num_attention_heads"),
        d_ff=get(hf, "intermediate_size"),
        max_len=positions - padding_idx - 1,
        dropout=float(get(hf, "hidden_dropout_prob", default=0.1)),
        position="learned",
        block=BlockOptions(
            norm=NormOptions(eps=float(get(hf, "layer_norm_eps", default=1e-12))),
            residual=ResidualOptions("post"),
            ffn=FeedForwardOptions(hidden_act),
        ),
        type_vocab_size=get(hf, "type_vocab_size", default=1),
        num_labels=max(len(classes), int(hf.get("num_labels", 0) or 0), 1),
        mlm_head=mlm_head,
        pooler=pooler or classifier,
        classifier=classifier,
        **sentence_modules(folder, d_model=get(hf, "hidden_size")),
    )


def mapping(ours: BERTConfig, tensors: dict[str, torch.Tensor]) -> tuple[dict[str, Take], dict[str, str]]:
    prefix, offset = _prefix(tensors), _offset(ours, tensors)
    table = f"{prefix}embeddings.position_embeddings.weight"
    rows = Take(table, lambda t: t[offset:], f"rows {offset} on (positions start at padding_idx + 1)")
    keys = encoder_keys(ours, prefix, position=rows) | projection_keys(ours.projection, tensors)
    heads = dict(CLASSIFIER) if ours.classifier else {}
    if ours.pooler and not ours.classifier:
        heads[f"{prefix}pooler.dense"] = "pooler.0"
    if ours.mlm_head:
        heads |= MLM_HEAD
        keys["mlm_decoder.bias"] = Take("lm_head.bias")
    for theirs, mine in heads.items():
        for kind in ("weight", "bias"):
            keys[f"{mine}.{kind}"] = Take(f"{theirs}.{kind}")
    ignored = {
        f"{prefix}embeddings.position_ids": "a buffer of 0 .. max_len - 1, not a weight",
        f"{prefix}embeddings.token_type_ids": "a buffer of zeros, not a weight",
        "lm_head.decoder.weight": "tied to the word embeddings",
        "lm_head.decoder.bias": "the same tensor as lm_head.bias",
    }
    return keys, ignored


NEUTRAL = {"tie_word_embeddings": "read where there is a masked-LM decoder to tie; nothing else is tied"}
ROBERTA = Architecture("roberta", config, mapping, NEUTRAL)
XLM_ROBERTA = Architecture("xlm-roberta", config, mapping, NEUTRAL)
ARCHITECTURES = {
    **dict.fromkeys(("RobertaModel", "RobertaForMaskedLM", "RobertaForSequenceClassification"), ROBERTA),
    **dict.fromkeys(
        ("XLMRobertaModel", "XLMRobertaForMaskedLM", "XLMRobertaForSequenceClassification"), XLM_ROBERTA
    ),
}
