"""A sentence-transformers folder (modules.json) as options on an encoder: its Pooling, Dense and Normalize
modules, and how long a text its Transformer module reads.

    modules.json   Transformer -> Pooling -> [Dense] -> [Normalize], in that order
    Pooling        one of mean, cls, max and last-token pooling (sentence_transformers/sentence_transformer/
                   modules/pooling.py), under either spelling: `pooling_mode` (5.x on) or the
                   `pooling_mode_*` booleans older releases wrote (all-MiniLM-L6-v2's folder has them)
    Dense          nn.Linear(in, out, bias) then its activation (Tanh, Identity, ReLU or GELU): `projection`
    Normalize      L2 normalisation: `normalize`

Every key of a module's config.json is read or refused by name, as for config.json. The Dense weights
(<path>/model.safetensors, `linear.weight` and `linear.bias`) join the checkpoint's tensors as
`<path>/linear.weight`, so that the mapping takes them like any other tensor and none is dropped.

sentence-transformers tokenizes with `truncation=True, max_length=max_seq_length` (its Transformer module):
a longer text keeps its first tokens and its special tokens ([CLS] ... [SEP]), so all-MiniLM-L6-v2 reads
256 ids of a text although its positions reach 512. Without the setting it takes min(max_position_embeddings,
the tokenizer's model_max_length). The export records the limit as the framing's `max_length`, and the
runtime cuts texts to it.
"""

from pathlib import Path
from typing import Any

import torch

from onnxformer.builder.families.bert import Pooling, ProjectionActivation, ProjectionOptions
from onnxformer.builder.pretrained.folder import read_json, read_weights
from onnxformer.builder.pretrained.mapping import Take
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
SENTENCE_CONFIG = "config_sentence_transformers.json"
ORDER = ("Transformer", "Pooling", "Dense", "Normalize")
# sentence-transformers' pooling modes -> ours; the legacy boolean keys -> the mode they select.
POOLINGS: dict[str, Pooling] = {"mean": "mean", "cls": "cls", "max": "max", "lasttoken": "last"}
LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
POOLING_WIDTH = ("embedding_dimension", "word_embedding_dimension")
# include_prompt=False leaves a prompt's tokens out of the pooling; onnxformer adds no prompt (a folder
# whose encode adds one by default is refused below), so there is none to leave out.
POOLING_NEUTRAL = ("include_prompt",)
DENSE_ACTIVATIONS: dict[str, ProjectionActivation] = {
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.GELU": "gelu",
}
DENSE_WEIGHT, DENSE_BIAS = "linear.weight", "linear.bias"
EMBEDDING = "sentence_embedding"  # the features key Dense and Normalize must read and write


def _modules(folder: Path) -> dict[str, Path]:
    """modules.json as module kind (Transformer, Pooling, ...) -> its folder, in ORDER."""
    modules = read_json(folder / MODULES_FILE, what="the sentence-transformers modules", kind=list)
    kinds: dict[str, Path] = {}
    for module in modules:
        if not isinstance(module, dict):
            raise ModelImportError(f"{folder / MODULES_FILE} lists {module!r}, not a module object")
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind not in ORDER:
            raise ModelImportError(
                f"{folder / MODULES_FILE} uses a {kind} module; onnxformer imports {', '.join(ORDER)}"
            )
        if kind in kinds:
            raise ModelImportError(f"{folder / MODULES_FILE} has two {kind} modules; onnxformer imports one")
        path = str(module.get("path", ""))
        if path.startswith(("/", "\\")) or ".." in Path(path).parts or "\\" in path:
            raise ModelImportError(
                f"{folder / MODULES_FILE} puts the {kind} module at {path!r}; a module must be a folder "
                "inside the model folder"
            )
        kinds[kind] = folder / path
    order = [kind for kind in kinds]
    if order != [kind for kind in ORDER if kind in kinds] or order[:2] != ["Transformer", "Pooling"]:
        raise ModelImportError(
            f"{folder / MODULES_FILE} runs {' -> '.join(order)}; onnxformer imports Transformer -> Pooling "
            "-> [Dense] -> [Normalize] in that order"
        )
    return kinds


def _check_keys(settings: dict[str, Any], known: set[str], *, where: Path) -> None:
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ModelImportError(
            f"{where} sets {unknown[0]}={settings[unknown[0]]!r}, a setting the import does not know: it may "
            "change the embedding, so onnxformer refuses it rather than ignore it"
        )


def _pooling(path: Path, *, d_model: int) -> Pooling:
    where = path / "config.json"
    settings = read_json(where, what="the pooling")
    _check_keys(settings, {*POOLING_WIDTH, *POOLING_NEUTRAL, "pooling_mode", *LEGACY_POOLING}, where=where)
    width = next((settings[name] for name in POOLING_WIDTH if name in settings), d_model)
    if width != d_model:
        raise ModelImportError(
            f"{where} pools {width}-wide token vectors, but the model's are {d_model} wide"
        )
    if "pooling_mode" in settings:
        mode = settings["pooling_mode"]
        modes = list(mode) if isinstance(mode, list) else [mode]
    else:  # the legacy booleans; none set is mean, as sentence-transformers reads them
        modes = [name for key, name in LEGACY_POOLING.items() if settings.get(key)] or ["mean"]
    if len(modes) != 1 or modes[0] not in POOLINGS:
        raise ModelImportError(
            f"{where} pools by {modes}; onnxformer imports exactly one of {', '.join(POOLINGS)} pooling "
            "(several modes concatenate, which is not built)"
        )
    return POOLINGS[modes[0]]


def _dense(path: Path, *, d_model: int) -> ProjectionOptions:
    where = path / "config.json"
    settings = read_json(where, what="the Dense module")
    keys = {"in_features", "out_features", "bias", "activation_function", "module_input_name"}
    _check_keys(settings, keys | {"module_output_name", "use_residual"}, where=where)
    if settings.get("use_residual", False):
        raise ModelImportError(f"{where} use_residual=true: a residual Dense is not built")
    for name in ("module_input_name", "module_output_name"):
        if settings.get(name, EMBEDDING) not in (EMBEDDING, None):
            raise ModelImportError(
                f"{where} {name}={settings[name]!r}: onnxformer imports a Dense on the {EMBEDDING} only"
            )
    if settings.get("in_features") != d_model:
        raise ModelImportError(
            f"{where} in_features={settings.get('in_features')!r}, but the pooled embedding is {d_model} wide"
        )
    activation = settings.get("activation_function", "torch.nn.modules.activation.Tanh")
    if activation not in DENSE_ACTIVATIONS:
        raise ModelImportError(
            f"{where} activation_function={activation!r} is not one onnxformer builds; supported: "
            f"{sorted(DENSE_ACTIVATIONS)}"
        )
    return ProjectionOptions(
        d_out=settings.get("out_features"),  # checked by ProjectionOptions, as the weights' shape is
        bias=settings.get("bias", True),
        activation=DENSE_ACTIVATIONS[activation],
    )


def sentence_modules(folder: Path, *, d_model: int) -> dict[str, Any]:
    """Pooling, Dense and Normalize of a sentence-transformers folder as BERT options (`pooling`,
    `projection`, `normalize`); {} for a plain folder."""
    if not (folder / MODULES_FILE).is_file():
        return {}
    kinds = _modules(folder)
    if (folder / SENTENCE_CONFIG).is_file():
        settings = read_json(folder / SENTENCE_CONFIG, what="the sentence-transformers settings")
        if settings.get("default_prompt_name") is not None:
            raise ModelImportError(
                f"{folder / SENTENCE_CONFIG} default_prompt_name={settings['default_prompt_name']!r}: "
                "sentence-transformers prepends that prompt to every text, which onnxformer does not; "
                "set it to null to embed texts as they are"
            )
    projection = _dense(kinds["Dense"], d_model=d_model) if "Dense" in kinds else None
    return {
        "pooling": _pooling(kinds["Pooling"], d_model=d_model),
        "projection": projection,
        "normalize": "Normalize" in kinds,
    }


def sentence_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The Dense module's tensors as `<path>/linear.weight` ({} without one), to join the checkpoint's."""
    if not (folder / MODULES_FILE).is_file():
        return {}
    kinds = _modules(folder)
    if "Dense" not in kinds:
        return {}
    path = kinds["Dense"]
    prefix = path.relative_to(folder).as_posix()
    return {f"{prefix}/{name}": tensor for name, tensor in read_weights(path, architecture="Dense").items()}


def projection_keys(
    projection: ProjectionOptions | None, tensors: dict[str, torch.Tensor]
) -> dict[str, Take]:
    """Our projection's parameters -> the Dense module's tensors (see `sentence_weights`)."""
    if projection is None:
        return {}
    (weight,) = [key for key in tensors if key.endswith(f"/{DENSE_WEIGHT}")] or [f"Dense/{DENSE_WEIGHT}"]
    keys = {"projection.0.weight": Take(weight)}
    if projection.bias:
        keys["projection.0.bias"] = Take(weight.removesuffix(DENSE_WEIGHT) + DENSE_BIAS)
    return keys


def max_seq_length(folder: Path, *, max_len: int) -> int | None:
    """The most ids (special tokens included) sentence-transformers reads of a text in this folder, when
    fewer than the model's `max_len`; None for a folder without modules.json, or no tighter limit."""
    if not (folder / MODULES_FILE).is_file():
        return None
    module = _modules(folder)["Transformer"]
    found = [module / name for name in CONFIG_FILES if (module / name).is_file()]
    settings = read_json(found[0], what="the Transformer module's settings") if found else {}
    if settings.get("do_lower_case"):
        raise ModelImportError(
            f"{found[0]} do_lower_case=true: sentence-transformers lowercases texts before its tokenizer, "
            "which onnxformer does not; give a tokenizer.json that lowercases (a Lowercase normalizer)"
        )
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
