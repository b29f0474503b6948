"""Import a local Hugging Face model folder as one of our models: options on our parts plus a key mapping.

    pretrained = from_pretrained("path/to/folder")   # config.json, model.safetensors, tokenizer.json
    pretrained.model, pretrained.config, pretrained.tokenizer

Needs torch and safetensors only, never transformers, and never the network: the path is a folder, not a
hub id. Every checkpoint tensor is mapped onto a parameter or named as known and unneeded; anything else
(an unknown or missing key, a wrong shape, an option we cannot represent) is a ModelImportError that says
which. `ARCHITECTURES` lists what imports.
"""

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from torch import nn

from onnxformer.builder.families import FAMILIES
from onnxformer.builder.pretrained import bert, gpt2, llama, t5
from onnxformer.builder.pretrained.folder import is_pretrained_folder, read_config, read_json, read_weights
from onnxformer.builder.pretrained.mapping import load_mapped
from onnxformer.builder.pretrained.options import Architecture
from onnxformer.builder.pretrained.tokenizer import load_pretrained_tokenizer
from onnxformer.runtime.errors import ModelImportError
from onnxformer.runtime.manifest import Framing

logger = logging.getLogger(__name__)

# config.json `architectures[0]` -> how it imports.
ARCHITECTURES: dict[str, Architecture] = {
    "BertModel": bert.ARCHITECTURE,
    "BertForMaskedLM": bert.ARCHITECTURE,
    "BertForSequenceClassification": bert.ARCHITECTURE,
    "GPT2LMHeadModel": gpt2.ARCHITECTURE,
    "GPT2Model": gpt2.ARCHITECTURE,
    "T5ForConditionalGeneration": t5.ARCHITECTURE,
    "LlamaForCausalLM": llama.ARCHITECTURE,
}
# config.json `model_type` -> the architecture a folder without `architectures` is read as.
MODEL_TYPES = {
    "bert": "BertModel",
    "gpt2": "GPT2LMHeadModel",
    "t5": "T5ForConditionalGeneration",
    "llama": "LlamaForCausalLM",
}
SENTENCE_POOLING = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}


@dataclass(frozen=True)
class Pretrained:
    family: str  # our family ("bert", "gpt", "t5")
    architecture: str  # the checkpoint's ("BertModel", "LlamaForCausalLM", ...)
    model: nn.Module  # in eval mode, fp32
    tokenizer: Tokenizer  # its own tokenizer.json, padding and truncation removed
    special_tokens: dict[str, int]  # role -> id, the roles the tokenizer has (pad always)
    framing: Framing  # the special tokens around a text, from the tokenizer's post-processor
    sentence_transformers: bool = False  # a sentence-transformers folder (modules.json)

    @property
    def config(self) -> Any:
        return self.model.config


def architecture_of(hf: dict[str, Any]) -> str:
    names = hf.get("architectures") or []
    name = names[0] if isinstance(names, list) and names else MODEL_TYPES.get(str(hf.get("model_type")))
    if name not in ARCHITECTURES:
        raise ModelImportError(
            f"architecture {name or hf.get('model_type')!r} is not supported; onnxformer imports "
            f"{', '.join(ARCHITECTURES)}"
        )
    return name


def _sentence_modules(folder: Path) -> dict[str, Any]:
    """Pooling and Normalize of a sentence-transformers folder as BERT options ({} for a plain folder)."""
    if not (folder / "modules.json").is_file():
        return {}
    modules = read_json(folder / "modules.json", what="the sentence-transformers modules", kind=list)
    kinds = {}
    for module in modules:
        if not isinstance(module, dict):
            raise ModelImportError(f"{folder / 'modules.json'} lists {module!r}, not a module object")
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        kinds[kind] = module
    unknown = sorted(set(kinds) - {"Transformer", "Pooling", "Normalize"})
    if unknown:
        raise ModelImportError(
            f"modules.json uses {unknown}; onnxformer imports Transformer, Pooling and Normalize"
        )
    options: dict[str, Any] = {"normalize": "Normalize" in kinds}
    if "Pooling" in kinds:
        pooling = read_json(
            folder / kinds["Pooling"].get("path", "1_Pooling") / "config.json", what="the pooling"
        )
        used = [key for key, value in pooling.items() if key.startswith("pooling_mode") and value]
        if len(used) != 1 or used[0] not in SENTENCE_POOLING:
            raise ModelImportError(
                f"the Pooling module uses {used}; onnxformer imports exactly one of mean and cls pooling"
            )
        options["pooling"] = SENTENCE_POOLING[used[0]]
    return options


def from_pretrained(path: str | os.PathLike) -> Pretrained:
    """Our model, its tokenizer and special tokens, from a local Hugging Face model folder."""
    folder = Path(path)
    hf = read_config(folder)
    name = architecture_of(hf)
    architecture = ARCHITECTURES[name]
    tensors = read_weights(folder, architecture=name)
    sentence = _sentence_modules(folder) if architecture.family == "bert" else {}
    config = architecture.config(hf, tensors, **sentence) if sentence else architecture.config(hf, tensors)
    model = FAMILIES[architecture.family].model(config)
    keys, ignored = architecture.mapping(config, tensors)
    load_mapped(model, tensors, keys, ignored, source=name)
    tokenizer, special, framing = load_pretrained_tokenizer(folder, hf)
    if tokenizer.get_vocab_size(with_added_tokens=True) > config.vocab_size:
        raise ModelImportError(
            f"tokenizer.json has {tokenizer.get_vocab_size(with_added_tokens=True)} tokens, more than the "
            f"model's vocab_size {config.vocab_size}; the tokenizer is not this model's"
        )
    logger.info("imported %s from %s as %s (%d tensors)", name, folder, architecture.family, len(tensors))
    return Pretrained(architecture.family, name, model.eval(), tokenizer, special, framing, bool(sentence))


__all__ = ["ARCHITECTURES", "Pretrained", "architecture_of", "from_pretrained", "is_pretrained_folder"]
