"""Import a local Hugging Face model folder as one of our models: options on our parts plus a key mapping.

    pretrained = from_pretrained("path/to/folder")   # config.json, model.safetensors, tokenizer.json
    pretrained.model, pretrained.config, pretrained.tokenizer

Needs torch and safetensors only, never transformers, and never the network: the path is a folder, not a
hub id. Every checkpoint tensor is mapped onto a parameter or named as known and unneeded; anything else
(an unknown or missing key, a wrong shape, an option we cannot represent) is a ModelImportError that says
which. `ARCHITECTURES` lists what imports.
"""

import dataclasses
import difflib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from onnxformer.builder.families import FAMILIES, FamilyModel
from onnxformer.builder.pretrained import (
    bert,
    distilbert,
    gemma2,
    gpt2,
    gpt_neox,
    llama_like,
    modernbert,
    phi3,
    roberta,
    t5,
)
from onnxformer.builder.pretrained.folder import is_pretrained_folder, read_config, read_weights
from onnxformer.builder.pretrained.generation import generation_settings
from onnxformer.builder.pretrained.mapping import load_mapped
from onnxformer.builder.pretrained.options import Architecture, ConfigJson, check_accounted, refuse_common
from onnxformer.builder.pretrained.sentence import max_seq_length, sentence_weights
from onnxformer.builder.pretrained.tokenizer import chat_template, chat_tokens, load_pretrained_tokenizer
from onnxformer.runtime.errors import ModelImportError
from onnxformer.runtime.manifest import Framing

logger = logging.getLogger(__name__)

SENTENCE_TRANSFORMERS = "modules.json"  # what marks a sentence-transformers folder
# config.json `architectures[0]` -> how it imports.
ARCHITECTURES: dict[str, Architecture] = {
    "BertModel": bert.ARCHITECTURE,
    "BertForMaskedLM": bert.ARCHITECTURE,
    "BertForSequenceClassification": bert.ARCHITECTURE,
    "DistilBertModel": distilbert.ARCHITECTURE,
    "DistilBertForMaskedLM": distilbert.ARCHITECTURE,
    "DistilBertForSequenceClassification": distilbert.ARCHITECTURE,
    **roberta.ARCHITECTURES,
    **modernbert.ARCHITECTURES,
    "GPT2LMHeadModel": gpt2.ARCHITECTURE,
    "GPT2Model": gpt2.ARCHITECTURE,
    "T5ForConditionalGeneration": t5.ARCHITECTURE,
    **llama_like.ARCHITECTURES,
    **gemma2.ARCHITECTURES,
    "Phi3ForCausalLM": phi3.ARCHITECTURE,
    "GPTNeoXForCausalLM": gpt_neox.ARCHITECTURE,
}
# config.json `model_type` -> the architecture a folder without `architectures` is read as.
MODEL_TYPES = {arch.model_type: name for name, arch in reversed(ARCHITECTURES.items())}


@dataclass(frozen=True)
class Pretrained:
    family: str  # our family: the FAMILIES key of the config's class
    architecture: str  # the checkpoint's ("BertModel", "LlamaForCausalLM", ...)
    model: FamilyModel  # in eval mode, fp32
    tokenizer: Tokenizer  # its own tokenizer.json, padding and truncation removed
    special_tokens: dict[str, int]  # role -> id, the roles the tokenizer has (pad always)
    framing: Framing  # the special tokens around a text (the post-processor's), its max_seq_length
    sentence_transformers: bool = False  # a sentence-transformers folder (modules.json)
    # GenerationDefaults fields as transformers' generate would decode (generation_config.json, config.json)
    generation: dict[str, Any] = field(default_factory=dict)
    chat_template: str | None = None  # the folder's Jinja chat template (tokenizer_config.json), kept as is
    # the special-token strings the template reads by name ({"bos_token": "<s>", ...}), transformers' own
    chat_tokens: dict[str, str] = field(default_factory=dict)

    @property
    def config(self) -> Any:
        return self.model.config


# Architectures people bring that onnxformer does not import yet -> the nearest one it does, and how far.
NEAREST = {
    "Qwen2MoeForCausalLM": ("Qwen2ForCausalLM", "Qwen2 with mixture-of-experts layers, which are not built"),
    "Qwen3MoeForCausalLM": ("Qwen3ForCausalLM", "Qwen3 with mixture-of-experts layers, which are not built"),
    "MixtralForCausalLM": ("MistralForCausalLM", "Mistral with mixture-of-experts layers, not built"),
    "Qwen3NextForCausalLM": ("Qwen3ForCausalLM", "Qwen3-Next adds linear-attention layers, not built"),
    "GemmaForCausalLM": ("Gemma2ForCausalLM", "Gemma 1 has neither sandwich norms nor soft-capping"),
    "Gemma3ForConditionalGeneration": ("Gemma3ForCausalLM", "the text decoder of it imports, not the vision"),
    **dict.fromkeys(
        (
            "ModernBertForSequenceClassification",
            "ModernBertForTokenClassification",
            "ModernBertForQuestionAnswering",
            "ModernBertForMultipleChoice",
        ),
        ("ModernBertModel", "its encoder imports; ModernBERT's task heads (dense, norm, classifier) do not"),
    ),
    "MT5ForConditionalGeneration": ("T5ForConditionalGeneration", "mT5 is T5 v1.1 with a larger vocabulary"),
}


def architecture_of(hf: dict[str, Any]) -> str:
    names = hf.get("architectures") or []
    name = names[0] if isinstance(names, list) and names else MODEL_TYPES.get(str(hf.get("model_type")))
    if name not in ARCHITECTURES:
        given = name or hf.get("model_type")
        nearest = NEAREST.get(str(given))
        if nearest is None or nearest[0] not in ARCHITECTURES:
            close = difflib.get_close_matches(str(given), list(ARCHITECTURES), n=1, cutoff=0.6)
            nearest = (close[0], "the closest name") if close else None
        hint = f"; the nearest supported is {nearest[0]} ({nearest[1]})" if nearest else ""
        raise ModelImportError(
            f"architecture {given!r} is not supported{hint}; onnxformer imports {', '.join(ARCHITECTURES)}"
        )
    return name


def from_pretrained(path: str | os.PathLike) -> Pretrained:
    """Our model, its tokenizer and special tokens, from a local Hugging Face model folder."""
    folder = Path(path)
    hf = ConfigJson(read_config(folder))
    name = architecture_of(hf)
    architecture = ARCHITECTURES[name]
    refuse_common(hf)
    tensors = read_weights(folder, architecture=name) | sentence_weights(folder)  # + a Dense module's
    config = architecture.config(hf, tensors, folder)
    check_accounted(hf, source=name, neutral=architecture.neutral)
    family = next(key for key, known in FAMILIES.items() if type(config) is known.config)
    model = FAMILIES[family].model(config)
    keys, ignored = architecture.mapping(config, tensors)
    load_mapped(model, tensors, keys, ignored, source=name)
    tokenizer, special, framing = load_pretrained_tokenizer(folder, hf)
    if tokenizer.get_vocab_size(with_added_tokens=True) > config.vocab_size:
        raise ModelImportError(
            f"tokenizer.json has {tokenizer.get_vocab_size(with_added_tokens=True)} tokens, more than the "
            f"model's vocab_size {config.vocab_size}; the tokenizer is not this model's"
        )
    logger.info("imported %s from %s as %s (%d tensors)", name, folder, family, len(tensors))
    sentence = (folder / SENTENCE_TRANSFORMERS).is_file()
    limit = max_seq_length(folder, max_len=config.max_len)
    if limit is not None:
        special_count = len(framing.prefix) + len(framing.suffix)
        if limit <= special_count:
            raise ModelImportError(
                f"max_seq_length {limit} leaves no room for a text beside its {special_count} special "
                "tokens; set it in sentence_bert_config.json to the length sentence-transformers uses"
            )
        framing = dataclasses.replace(framing, max_length=limit)
        logger.info("texts are cut to %d tokens, the folder's max_seq_length", limit)
    generation = generation_settings(folder, hf, vocab_size=config.vocab_size)
    return Pretrained(
        family,
        name,
        model.eval(),
        tokenizer,
        special,
        framing,
        sentence,
        generation,
        chat_template(folder),
        chat_tokens(folder),
    )


__all__ = [
    "ARCHITECTURES",
    "NEAREST",
    "Pretrained",
    "architecture_of",
    "from_pretrained",
    "is_pretrained_folder",
]
