"""How long a text a sentence-transformers folder reads: its Transformer module's `max_seq_length`.

sentence-transformers tokenizes with `truncation=True, max_length=max_seq_length` (sentence_transformers/
models/Transformer.py): a longer text keeps its first tokens and its special tokens ([CLS] ... [SEP]), so
all-MiniLM-L6-v2 reads 256 ids of a text although its positions reach 512. Without the setting it takes
min(max_position_embeddings, the tokenizer's model_max_length). The export records the limit as the
framing's `max_length`, and the runtime cuts texts to it.
"""

from pathlib import Path

from onnxformer.builder.pretrained.folder import read_json
from onnxformer.runtime.errors import ModelImportError

MODULES_FILE = "modules.json"
# The Transformer module's settings, under the names sentence-transformers has written them.
CONFIG_FILES = (
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
)
TOKENIZER_CONFIG = "tokenizer_config.json"


def max_seq_length(folder: Path, *, max_len: int) -> int | None:
    """The most ids (special tokens included) sentence-transformers reads of a text in this folder, when
    fewer than the model's `max_len`; None for a folder without modules.json, or no tighter limit."""
    if not (folder / MODULES_FILE).is_file():
        return None
    modules = read_json(folder / MODULES_FILE, what="the sentence-transformers modules", kind=list)
    paths = [
        str(module.get("path", ""))
        for module in modules
        if isinstance(module, dict) and str(module.get("type", "")).endswith("Transformer")
    ]
    module = folder / (paths[0] if paths else "")
    found = [module / name for name in CONFIG_FILES if (module / name).is_file()]
    settings = read_json(found[0], what="the Transformer module's settings") if found else {}
    if settings.get("max_seq_length") is not None:
        limit, where = settings["max_seq_length"], f"{found[0]} max_seq_length"
    elif (folder / TOKENIZER_CONFIG).is_file():
        tokenizer = read_json(folder / TOKENIZER_CONFIG, what="the tokenizer's settings")
        limit, where = tokenizer.get("model_max_length"), f"{folder / TOKENIZER_CONFIG} model_max_length"
        if isinstance(limit, float) and limit > max_len:
            return None  # transformers writes 1e30 for "no limit"
    else:
        return None
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ModelImportError(f"{where}={limit!r} must be a number of tokens (an integer >= 1)")
    return limit if limit < max_len else None
