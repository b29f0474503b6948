"""Opens an export folder with Optimum's ORTModel classes, as a user would, and prints what they compute
as JSON for tests/test_loaders.py. Runs in .venv-optimum (Optimum pins transformers < 4.58), never in the
project's own environment.

    .venv-optimum/bin/python optimum_check.py REQUESTS_JSON

REQUESTS_JSON: a list of {"folder", "task": "generate" | "encode" | "seq2seq", "input_ids": [[...]],
"attention_mask": [[...]], "decoder_input_ids": [[...]] (seq2seq), "head": null | "masked-lm" |
"classification" (encode), "max_new_tokens", "text"}; prints the list of results.
"""

import json
import sys

import torch
from optimum.onnxruntime import (
    ORTModelForCausalLM,
    ORTModelForFeatureExtraction,
    ORTModelForMaskedLM,
    ORTModelForSeq2SeqLM,
    ORTModelForSequenceClassification,
)
from transformers import AutoTokenizer

CLASSES = {
    "generate": ORTModelForCausalLM,
    "encode": ORTModelForFeatureExtraction,
    "seq2seq": ORTModelForSeq2SeqLM,
    "masked-lm": ORTModelForMaskedLM,
    "classification": ORTModelForSequenceClassification,
}


def plain(tensor: torch.Tensor) -> dict:
    return {"dims": list(tensor.shape), "data": tensor.flatten().tolist()}


def main() -> None:
    sys.stdout.write(json.dumps([run(request) for request in json.loads(sys.argv[1])]))


def run(request: dict) -> dict:
    task = request["task"]
    head = request.get("head")
    model = CLASSES[head or task].from_pretrained(request["folder"], local_files_only=True)
    inputs = {
        "input_ids": torch.tensor(request["input_ids"]),
        "attention_mask": torch.tensor(request["attention_mask"]),
    }
    result = {"files": sorted(str(path) for path in _files(model))}
    with torch.no_grad():
        if task == "encode" and head:
            result["logits"] = plain(model(**inputs).logits)
        elif task == "encode":
            result["last_hidden_state"] = plain(model(**inputs).last_hidden_state)
        else:
            step = (
                {"decoder_input_ids": torch.tensor(request["decoder_input_ids"])} if task == "seq2seq" else {}
            )
            result["logits"] = plain(model(**inputs, **step).logits)
            sequences = model.generate(
                **inputs, max_new_tokens=request["max_new_tokens"], do_sample=False, num_beams=1
            )
            result["sequences"] = plain(sequences)
    if "text" in request:
        tokenizer = AutoTokenizer.from_pretrained(request["folder"], local_files_only=True)
        result["text_ids"] = tokenizer(request["text"]).input_ids
    return result


def _files(model) -> list[str]:
    """The ONNX files the model's sessions were made from."""
    parts = [getattr(model, name, None) for name in ("encoder", "decoder")]
    sessions = [part.session for part in parts if part is not None] or [model.session]
    return [session._model_path for session in sessions]


if __name__ == "__main__":
    main()
