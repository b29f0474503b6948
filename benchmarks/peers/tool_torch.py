"""PyTorch baselines: sentence-transformers' encode, transformers' LlamaForCausalLM and
T5ForConditionalGeneration (eager mode, transformers' default attention), in the project's .venv."""

from calls import Call, TimedSteps, greedy_tokens


def versions() -> dict:
    from importlib.metadata import version

    names = ("torch", "transformers", "sentence-transformers", "tokenizers", "numpy")
    return {name: version(name) for name in names}


class Adapter:
    def __init__(self, *, folder: str, threads: int, task: str) -> None:
        import torch

        torch.set_num_threads(threads)
        self.torch = torch
        if task == "encoder":
            from sentence_transformers import SentenceTransformer

            self.model = SentenceTransformer(folder, device="cpu")
        elif task == "decoder":
            from transformers import LlamaForCausalLM

            self.model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        else:
            from transformers import T5ForConditionalGeneration

            self.model = T5ForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()

    def prepare(self, kind: str, **args) -> Call:
        torch = self.torch
        if kind == "embed":
            texts, batch_size = args["texts"], args["batch_size"]
            return Call(lambda: self.model.encode(texts, batch_size=batch_size, convert_to_numpy=True))
        if kind in ("prefill", "decode"):
            ids, steps = torch.tensor(args["ids"], dtype=torch.long), args.get("steps", 0)

            def run():
                with torch.inference_mode():
                    out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)  # as generate() asks
                    yield kind == "prefill"
                    for _ in range(steps):
                        token = out.logits[:, -1:].argmax(-1)  # (B, 1)
                        out = self.model(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
                        yield True

            return TimedSteps(run)
        if kind in ("generate", "seq2seq"):
            ids, new = args["ids"], args["new"]
            return Call(lambda: greedy_tokens(self.model, ids, new))
        if kind == "logits":
            rows = args["rows"]

            def run():
                with torch.inference_mode():
                    return torch.cat(
                        [self.model(input_ids=torch.tensor([row])).logits[0] for row in rows]
                    ).numpy()  # (sum T, V)

            return Call(run)
        raise ValueError(f"the PyTorch adapter has no {kind!r} workload")
