"""A Hugging Face folder's decoding defaults, as transformers' `generate` reads them: generation_config.json,
then config.json's generation fields (what `GenerationConfig.from_model_config` takes), then transformers'
own defaults.

transformers decodes greedily unless `do_sample` is true, whatever temperature the file gives (Llama 2's
files set temperature 0.6 and top_p 0.9 without do_sample: greedy); sampling then uses the file's
temperature, top_k and top_p, with 1.0, 50 and 1.0 where unset (`GenerationConfig.
_get_default_generation_params`). `eos_token_id` is one id or a list, any of which ends a row.

What is read becomes the manifest's `generation` section (`GenerationDefaults` fields): temperature 0 for
greedy, with the file's top_k and top_p kept for a caller who asks for sampling, as transformers keeps them
for `generate(do_sample=True)`. `max_new_tokens` is followed where set; `max_length` (prompt included) is
not: a row's budget is bounded by the context anyway. Settings our decoding does not apply (beams,
repetition penalties) are named in a warning, not silently dropped.
"""

import logging
from pathlib import Path
from typing import Any

from onnxformer.builder.pretrained.folder import read_json
from onnxformer.runtime.errors import ModelImportError

logger = logging.getLogger(__name__)

GENERATION_FILE = "generation_config.json"
# transformers' values for what a folder leaves unset (GenerationConfig._get_default_generation_params).
SAMPLING_DEFAULTS = {"temperature": 1.0, "top_k": 50, "top_p": 1.0}
# Read here: the decoding strategy, its sampling options, the stop ids, the budget, the decoder's start.
READ = {"do_sample", *SAMPLING_DEFAULTS, "eos_token_id", "max_new_tokens", "decoder_start_token_id"}
# Fields that do not change which tokens greedy or sampled decoding picks, or that the runtime decides.
NEUTRAL = {
    "transformers_version",
    "_from_model_config",
    "bos_token_id",
    "pad_token_id",
    "use_cache",
    "output_attentions",
    "output_hidden_states",
    "output_scores",
    "return_dict_in_generate",
    "max_length",
    "cache_implementation",
}
# Other fields at their transformers defaults change nothing either.
INACTIVE = {
    "num_beams": 1,
    "num_return_sequences": 1,
    "repetition_penalty": 1.0,
    "length_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "min_length": 0,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "diversity_penalty": 0.0,
    "num_beam_groups": 1,
    "early_stopping": False,
    "encoder_repetition_penalty": 1.0,
    "remove_invalid_values": False,
}


def generation_settings(folder: Path, hf: dict[str, Any], *, vocab_size: int) -> dict[str, Any]:
    """The `GenerationDefaults` fields this folder decides (temperature, top_k, top_p, stop_tokens, and
    max_new_tokens and decoder_start_token_id where set); the family's recipe gives the rest."""
    # config.json's generation fields (older folders keep them there) fill what generation_config.json
    # leaves unset: the stop and start ids at least, which every transformers config carries.
    origin = {key: "config.json" for key in READ if hf.get(key) is not None}
    settings = {key: hf[key] for key in origin}
    path = folder / GENERATION_FILE
    if path.is_file():
        written = read_json(path, what="the decoding defaults")
        settings |= {key: value for key, value in written.items() if value is not None}
        origin |= {key: GENERATION_FILE for key, value in written.items() if value is not None}

    def at(key: str) -> str:
        return f"{origin.get(key, GENERATION_FILE)} {key}={settings.get(key)!r}"

    sampled = settings.get("do_sample", False)
    if not isinstance(sampled, bool):
        raise ModelImportError(f"{at('do_sample')} must be true or false")
    options = {key: settings.get(key, default) for key, default in SAMPLING_DEFAULTS.items()}
    for key, value in options.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ModelImportError(f"{at(key)} must be a number")
    if sampled and not options["temperature"] > 0:
        raise ModelImportError(
            f"{at('temperature')} with do_sample=true: transformers refuses a temperature <= 0 when "
            "sampling; set do_sample to false for greedy decoding, or a temperature > 0"
        )
    if not isinstance(options["top_k"], int) or options["top_k"] < 0:
        raise ModelImportError(f"{at('top_k')} must be an integer >= 0 (0: no top-k cut)")
    if not 0 < options["top_p"] <= 1:
        raise ModelImportError(f"{at('top_p')} must be in (0, 1] (1: no nucleus cut)")
    found: dict[str, Any] = {
        "temperature": float(options["temperature"]) if sampled else 0.0,
        "top_k": options["top_k"],
        "top_p": float(options["top_p"]),
    }
    if "eos_token_id" in settings:
        found["stop_tokens"] = _ids(settings["eos_token_id"], at("eos_token_id"), vocab_size, many=True)
    if "decoder_start_token_id" in settings:
        (found["decoder_start_token_id"],) = _ids(
            settings["decoder_start_token_id"], at("decoder_start_token_id"), vocab_size, many=False
        )
    if "max_new_tokens" in settings:
        budget = settings["max_new_tokens"]
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ModelImportError(f"{at('max_new_tokens')} must be an integer >= 0")
        found["max_new_tokens"] = budget
    ignored = [
        at(key)
        for key, value in sorted(settings.items())
        if key not in READ | NEUTRAL and INACTIVE.get(key, object()) != value
    ]
    if ignored:
        logger.warning(
            "%s: not applied by onnxformer's decoding (greedy, or sampling with temperature, top_k and "
            "top_p); generations may differ from transformers' generate",
            "; ".join(ignored),
        )
    return found


def _ids(value: Any, where: str, vocab_size: int, *, many: bool) -> tuple[int, ...]:
    """One token id, or (when `many`) a list of them, each inside the vocabulary."""
    ids = value if many and isinstance(value, list) else [value]
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab_size:
            kinds = "a token id or a list of them" if many else "a token id"
            raise ModelImportError(
                f"{where} must be {kinds} in 0 .. {vocab_size - 1}, the model's vocabulary"
            )
    return tuple(dict.fromkeys(ids))
