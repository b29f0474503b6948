"""Every key of config.json is read by the import, known not to change the computation, or refused by name.

full configs   each fixture folder with config.json rewritten as transformers' complete `to_dict()`
               (every key the config class has, at its default) imports as before
unknown keys   a key no import knows, set to a value, is a ModelImportError naming it and its value
rope fields    a rope_parameters field the rope type does not use (a partial rotary factor) is refused
common         quantization_config and pruned heads are refused in any architecture
nearest        an unsupported architecture's message names the nearest supported one
"""

import json
import shutil
from pathlib import Path

import hf_encoders
import pytest

from onnxformer.builder.pretrained import ARCHITECTURES, NEAREST, from_pretrained
from onnxformer.runtime.errors import ModelImportError

transformers = pytest.importorskip("transformers")

FOLDERS = (
    "bert",
    "bert-mlm",
    "bert-cls",
    "gpt2",
    "t5",
    "t5-gated",
    "llama",
    "qwen2",
    "qwen2-sliding",
    "qwen3",
    "mistral",
    "gemma2",
    "gemma3",
    *hf_encoders.ENCODERS,  # DistilBERT, RoBERTa and XLM-R: tests/hf_encoders.py
)


@pytest.fixture(scope="module")
def hf_folders(hf_folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """conftest's folders and tests/hf_encoders.py's encoders."""
    return {**hf_folders, **hf_encoders.encoder_folders(tmp_path_factory.mktemp("encoders"), sentence=False)}


def copy_with(folder: Path, tmp_path: Path, change) -> Path:
    copy = Path(shutil.copytree(folder, tmp_path / folder.name))
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps(change(config)))
    return copy


def import_error(folder: Path) -> str:
    with pytest.raises(ModelImportError) as caught:
        from_pretrained(folder)
    return str(caught.value)


@pytest.mark.parametrize("name", FOLDERS)
def test_every_key_transformers_writes_is_accounted_for(
    hf_folders: dict[str, Path], tmp_path: Path, name: str
) -> None:
    """save_pretrained writes only the keys away from their defaults; a folder written by other versions or
    by hand may hold any of them. With all of them present the import must still know each one."""
    folder = hf_folders[name]
    full = transformers.AutoConfig.from_pretrained(folder).to_dict()
    copy = copy_with(folder, tmp_path, lambda _: full)
    imported = from_pretrained(copy)
    assert imported.config == from_pretrained(folder).config


@pytest.mark.parametrize("name", FOLDERS)
def test_an_unknown_key_is_refused_by_name(hf_folders: dict[str, Path], tmp_path: Path, name: str) -> None:
    copy = copy_with(hf_folders[name], tmp_path, lambda c: {**c, "attention_temperature": 0.5})
    before = (copy / "config.json").read_bytes()
    message = import_error(copy)
    assert "config.json attention_temperature=0.5" in message and "does not know" in message
    assert (copy / "config.json").read_bytes() == before  # the user's folder is left as it was


def test_an_unknown_key_left_null_is_unset(hf_folders: dict[str, Path], tmp_path: Path) -> None:
    """transformers reads null as "not set": so does the import."""
    copy = copy_with(hf_folders["llama"], tmp_path, lambda c: {**c, "attention_temperature": None})
    assert from_pretrained(copy).config == from_pretrained(hf_folders["llama"]).config


def test_a_rope_field_the_type_does_not_use_is_refused(hf_folders: dict[str, Path], tmp_path: Path) -> None:
    def partial(config: dict) -> dict:
        return {**config, "rope_parameters": {**config["rope_parameters"], "partial_rotary_factor": 0.5}}

    message = import_error(copy_with(hf_folders["llama"], tmp_path, partial))
    assert "rope_parameters.partial_rotary_factor=0.5" in message


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("quantization_config", {"quant_method": "gptq", "bits": 4}, "quantized weights are not read"),
        ("pruned_heads", {"0": [1]}, "pruned attention heads"),
    ],
)
def test_settings_no_architecture_imports_are_refused(
    hf_folders: dict[str, Path], tmp_path: Path, key: str, value: object, says: str
) -> None:
    message = import_error(copy_with(hf_folders["bert"], tmp_path, lambda c: {**c, key: value}))
    assert f"config.json {key}=" in message and says in message


def test_an_unsupported_architecture_names_the_nearest(hf_folders: dict[str, Path], tmp_path: Path) -> None:
    def moe(config: dict) -> dict:
        return {**config, "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe"}

    message = import_error(copy_with(hf_folders["qwen2"], tmp_path, moe))
    assert "'Qwen2MoeForCausalLM' is not supported; the nearest supported is Qwen2ForCausalLM" in message
    assert "mixture-of-experts" in message


def test_the_nearest_table_names_only_what_is_not_supported() -> None:
    """An architecture that imports must leave the table (its entry would never be read)."""
    assert not set(NEAREST) & set(ARCHITECTURES)
    assert all(nearest in ARCHITECTURES or nearest in NEAREST for nearest, _ in NEAREST.values())


# ---- tokenizer.json: every part of a type the hosts' tokenizer reads -------------------------------------


def copy_with_tokenizer(folder: Path, tmp_path: Path, change) -> Path:
    copy = Path(shutil.copytree(folder, tmp_path / folder.name))
    data = json.loads((copy / "tokenizer.json").read_text())
    (copy / "tokenizer.json").write_text(json.dumps(change(data)))
    return copy


@pytest.mark.parametrize(
    ("part", "value", "named"),
    [
        ("normalizer", {"type": "Nmt"}, "normalizer is of type 'Nmt'"),
        (
            "pre_tokenizer",
            {"type": "Sequence", "pretokenizers": [{"type": "UnicodeScripts"}]},
            "pre_tokenizer[0] is of type 'UnicodeScripts'",
        ),
    ],
)
def test_a_tokenizer_part_the_hosts_cannot_read_is_refused(
    hf_folders: dict[str, Path], tmp_path: Path, part: str, value: dict, named: str
) -> None:
    """The Python tokenizers library reads Nmt and UnicodeScripts; @huggingface/tokenizers (Node, browser)
    does not: such a folder is refused at import, not exported into one the hosts cannot open."""
    copy = copy_with_tokenizer(hf_folders["llama"], tmp_path, lambda data: {**data, part: value})
    message = import_error(copy)
    assert named in message and "@huggingface/tokenizers" in message


def test_a_word_level_model_is_refused(hf_folders: dict[str, Path], tmp_path: Path) -> None:
    def word_level(data: dict) -> dict:
        return {**data, "model": {"type": "WordLevel", "vocab": data["model"]["vocab"], "unk_token": "<unk>"}}

    assert "model is of type 'WordLevel'" in import_error(
        copy_with_tokenizer(hf_folders["llama"], tmp_path, word_level)
    )
