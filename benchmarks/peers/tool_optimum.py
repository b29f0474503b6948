"""Hugging Face Optimum's ORTModel classes (ONNX Runtime) in .venv-optimum: the feature-extraction model
run the way sentence-transformers' ONNX backend runs it, that backend itself (SentenceTransformer with
backend="onnx" on a sentence-transformers folder holding Optimum's files in onnx/), and
ORTModelForSeq2SeqLM.generate."""

import numpy as np
from calls import Call, greedy_tokens


def versions() -> dict:
    from importlib.metadata import version

    names = (
        "optimum",
        "optimum-onnx",
        "onnxruntime",
        "transformers",
        "sentence-transformers",
        "torch",
        "numpy",
    )
    return {name: version(name) for name in names}


def _session_options(threads: int):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return options


class Adapter:
    def __init__(self, *, folder: str, threads: int, task: str, file_name: str | None = None) -> None:
        import torch
        from transformers import AutoTokenizer

        torch.set_num_threads(threads)  # generate()'s own tensor work
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        options = {"session_options": _session_options(threads), "provider": "CPUExecutionProvider"}
        self.sentence_transformer = None
        if task == "sentence-transformers":  # its ONNX backend: Optimum's ORTModel inside its own encode
            from sentence_transformers import SentenceTransformer

            kwargs = {"file_name": file_name, **options}
            self.sentence_transformer = SentenceTransformer(
                folder, backend="onnx", device="cpu", model_kwargs=kwargs
            )
        elif task == "encoder":
            from optimum.onnxruntime import ORTModelForFeatureExtraction

            self.model = ORTModelForFeatureExtraction.from_pretrained(folder, file_name=file_name, **options)
        else:
            from optimum.onnxruntime import ORTModelForSeq2SeqLM

            files = {}
            if file_name is not None:  # e.g. "quantized": the *_quantized.onnx files
                files = {
                    f"{part}_file_name": f"{part}_model_{file_name}.onnx"
                    for part in ("encoder", "decoder", "decoder_with_past")
                }
            self.model = ORTModelForSeq2SeqLM.from_pretrained(folder, **files, **options)

    def embed(self, texts: list[str], batch_size: int) -> np.ndarray:
        """sentence-transformers' encode loop: longest texts first, batches of `batch_size`, padded to the
        batch's longest, mean pooling over the real tokens, L2 normalisation, the original order back."""
        order = np.argsort([-len(text) for text in texts], kind="stable")
        parts = []
        for start in range(0, len(texts), batch_size):
            batch = [texts[i] for i in order[start : start + batch_size]]
            feeds = self.tokenizer(batch, padding=True, truncation=True, return_tensors="np")
            hidden = self.model(**feeds).last_hidden_state  # (B, T, D)
            mask = feeds["attention_mask"][..., None].astype(np.float32)  # (B, T, 1)
            pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)  # (B, D)
            parts.append(pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12))
        vectors = np.concatenate(parts)  # (N, D) in length order
        result = np.empty_like(vectors)
        result[order] = vectors
        return result

    def prepare(self, kind: str, **args) -> Call:
        if kind == "embed" and self.sentence_transformer is not None:
            texts, batch_size = args["texts"], args["batch_size"]
            encode = self.sentence_transformer.encode
            return Call(lambda: encode(texts, batch_size=batch_size, convert_to_numpy=True))
        if kind == "embed":
            texts, batch_size = args["texts"], args["batch_size"]
            return Call(lambda: self.embed(texts, batch_size))
        if kind == "seq2seq":
            ids, new = args["ids"], args["new"]  # rows of equal length
            return Call(lambda: greedy_tokens(self.model, ids, new))
        raise ValueError(f"Optimum's adapter has no {kind!r} workload")
