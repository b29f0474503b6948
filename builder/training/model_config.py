"""Model size from a config file: a flat JSON object or TOML table of the shared config fields.

    {"d_model": 256, "n_layers": 4, "n_heads": 8, "d_ff": 1024, "max_len": 128, "vocab_size": 2000,
     "dropout": 0.1}

The same names as the family configs (and the CLI's --d-model ... options, which override the file).
`vocab_size` is the tokenizer's target size; the model gets the size the tokenizer reaches.
"""

import json
import os
import sys
from pathlib import Path
from typing import Any

from onnxformer.runtime.errors import ConfigError, InputError

INTEGER_FIELDS = ("d_model", "n_layers", "n_heads", "d_ff", "max_len", "vocab_size")
TEXT_FIELDS = ("position", "norm_position", "activation")
MODEL_FIELDS = (*INTEGER_FIELDS, "dropout", *TEXT_FIELDS)


def check_model_fields(values: dict[str, Any], *, source: str) -> dict[str, Any]:
    """The fields, each of the right type; unknown names and wrong types are ConfigErrors naming `source`."""
    unknown = sorted(set(values) - set(MODEL_FIELDS))
    if unknown:
        raise ConfigError(f"{source}: unknown model field(s) {unknown}; known: {list(MODEL_FIELDS)}")
    for name, value in values.items():
        if name in INTEGER_FIELDS and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{source}: {name} must be a whole number >= 1, got {value!r}")
        if name == "dropout" and (
            isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0
        ):
            raise ConfigError(f"{source}: dropout must be a number in [0, 1), got {value!r}; 0.1 is usual")
        if name in TEXT_FIELDS and not isinstance(value, str):
            raise ConfigError(f"{source}: {name} must be text, got {value!r}")
    return dict(values)


def read_model_config(path: str | os.PathLike) -> dict[str, Any]:
    """The model fields of a .json or .toml file, checked."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"model config {path} does not exist; check the path") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"model config {path} cannot be read as UTF-8 text ({error})") from None
    if path.suffix == ".toml":
        values = _read_toml(text, path)
    elif path.suffix == ".json":
        try:
            values = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"model config {path} is not valid JSON: {error}") from None
    else:
        raise ConfigError(f"model config {path}: name a .json or .toml file")
    if not isinstance(values, dict):
        raise ConfigError(f'model config {path} must hold one object of fields, like {{"d_model": 256}}')
    return check_model_fields(values, source=str(path))


def _read_toml(text: str, path: Path) -> Any:
    # tomllib is Python 3.11's; onnxformer runs on 3.10 too, where only JSON configs can be read.
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"model config {path} is not valid TOML: {error}") from None
    raise ConfigError(f"model config {path}: reading TOML needs Python 3.11 or later; give a .json file")
