"""A local Hugging Face model folder: its config.json and its weights, read without transformers.

    config.json                      the architecture and its sizes (transformers 4.x or 5.x field names)
    model.safetensors                the weights, or
    model.safetensors.index.json     + the shards it names (weight_map: tensor name -> shard file)

Weights are read with safetensors only (never pickle: a `pytorch_model.bin` is refused with the command that
converts it) and converted to fp32, whatever the file holds (fp32, fp16, bf16). A shard the index names must
be a plain file name inside the folder, like every path onnxformer reads from a folder.
"""

import json
import os
from pathlib import Path
from typing import Any

import torch

from onnxformer.runtime.errors import ModelImportError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def is_pretrained_folder(path: str | os.PathLike) -> bool:
    """True for a folder with a config.json that names a transformers model (what `export` imports)."""
    config = Path(path) / CONFIG_FILE
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True  # read_config will say what is wrong with it
    return isinstance(data, dict) and ("model_type" in data or "architectures" in data)


def read_json(path: Path, *, what: str, kind: type = dict) -> Any:
    """A JSON file holding a `kind` (an object unless told otherwise)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelImportError(f"{path.parent} has no {path.name} ({what})") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ModelImportError(
            f"{path} is not valid JSON ({error}); restore the file the model came with"
        ) from None
    if not isinstance(data, kind):
        expected = "a JSON object" if kind is dict else f"a JSON {kind.__name__}"
        raise ModelImportError(f"{path} must hold {expected}, got {type(data).__name__}")
    return data


def read_config(folder: Path) -> dict[str, Any]:
    """config.json as a dict; ModelImportError when the folder is not a model folder."""
    if not folder.is_dir():
        raise ModelImportError(
            f"{folder} is not a folder; give a local Hugging Face model folder (config.json, "
            "model.safetensors, tokenizer.json). Hub ids are not fetched: onnxformer never downloads"
        )
    return read_json(
        folder / CONFIG_FILE, what="the model's architecture and sizes, written by save_pretrained"
    )


def read_weights(folder: Path, *, architecture: str = "AutoModel") -> dict[str, torch.Tensor]:
    """Every tensor of the folder's safetensors weights, as fp32 (integer buffers keep their dtype).
    `architecture` (config.json's) names the transformers class in the hint for a pickled checkpoint."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    single, index = folder / WEIGHTS_FILE, folder / INDEX_FILE
    if index.is_file():
        files = _shards(folder, read_json(index, what="the shard index"))
    elif single.is_file():
        files = [single]
    else:
        pickled = [name for name in ("pytorch_model.bin", "model.bin") if (folder / name).exists()]
        hint = (
            f"; {pickled[0]} is a pickle, which onnxformer does not load (it can run code): convert it "
            f"with transformers: `transformers.{architecture}.from_pretrained(path).save_pretrained(path)` "
            "writes model.safetensors (the class config.json names: AutoModel would drop the heads)"
            if pickled
            else ""
        )
        raise ModelImportError(f"{folder} has no {WEIGHTS_FILE} or {INDEX_FILE}{hint}")
    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        try:
            loaded = load_file(str(path))
        except (SafetensorError, OSError, ValueError) as error:
            raise ModelImportError(f"{path} is not a readable safetensors file ({error})") from None
        for name, tensor in loaded.items():
            if name in tensors:
                raise ModelImportError(f"tensor {name!r} is in two shards (again in {path.name})")
            tensors[name] = tensor.float() if tensor.dtype in FLOAT_DTYPES else tensor
    return tensors


def _shards(folder: Path, index: dict[str, Any]) -> list[Path]:
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelImportError(f"{folder / INDEX_FILE} has no weight_map (tensor name -> shard file)")
    names = sorted(set(weight_map.values()), key=str)
    shards = []
    for name in names:
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
            raise ModelImportError(
                f"{folder / INDEX_FILE} names shard {name!r}; a shard must be a file name in the folder"
            )
        path = folder / name
        if not path.is_file():
            raise ModelImportError(f"{folder / INDEX_FILE} names shard {name}, which is not in {folder}")
        shards.append(path)
    return shards
