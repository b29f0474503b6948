"""onnxruntime-genai on the folder its model builder wrote, in .venv-genai: `og.Generator` with
`append_tokens` (the prefill) and `generate_next_token` (one decode step), greedy.

`append_tokens` runs the prompt's forward pass; each `generate_next_token` picks a token from the logits
at hand and, from the second call on, first runs the forward pass of the token picked before. So a decode
step is timed from the second call on, the way our step (forward + pick) is timed.

The quality comparison's teacher-forced logits: `append_tokens` of a whole row is one forward pass, and
`get_output("logits")` then holds every position's logits, (1, T, V) (`get_logits` has the last one's)."""

import json

import numpy as np
from calls import Call, TimedSteps


def versions() -> dict:
    from importlib.metadata import version

    names = ("onnxruntime-genai", "onnxruntime", "onnx-ir", "onnx", "transformers", "torch", "numpy")
    return {name: version(name) for name in names}


class Adapter:
    def __init__(self, *, folder: str, threads: int) -> None:
        import onnxruntime_genai as og

        self.og = og
        config = og.Config(folder)
        # The same intra-op thread count as every other tool (genai_config.json's session options).
        overlay = {"model": {"decoder": {"session_options": {"intra_op_num_threads": threads}}}}
        config.overlay(json.dumps(overlay))
        self.model = og.Model(config)

    def _generator(self, ids: np.ndarray, total: int):
        params = self.og.GeneratorParams(self.model)
        batch = ids.shape[0]
        # min_length == max_length: no early stop on EOS, exactly total - prompt new tokens.
        params.set_search_options(
            do_sample=False, max_length=total, min_length=total, batch_size=batch, num_beams=1
        )
        return self.og.Generator(self.model, params)

    def prepare(self, kind: str, **args) -> Call:
        if kind in ("prefill", "decode"):
            ids, steps = np.asarray(args["ids"], dtype=np.int32), args.get("steps", 0)  # (B, T)

            def run():
                generator = self._generator(ids, ids.shape[1] + steps + 1)  # allocates the KV buffers
                yield False
                generator.append_tokens(ids)  # the prefill: the prompt's forward pass and its logits
                yield kind == "prefill"
                generator.generate_next_token()  # picks the first token from those logits (no forward)
                yield False
                for _ in range(steps):
                    generator.generate_next_token()
                    yield True
                del generator

            return TimedSteps(run)
        if kind == "generate":
            ids, new = np.asarray(args["ids"], dtype=np.int32), args["new"]  # (B, T)

            def run():
                generator = self._generator(ids, ids.shape[1] + new)
                generator.append_tokens(ids)
                while not generator.is_done():
                    generator.generate_next_token()
                rows = [generator.get_sequence(row) for row in range(ids.shape[0])]
                return [np.asarray(row)[ids.shape[1] :].tolist() for row in rows]

            return Call(run)
        if kind == "logits":
            rows = [np.asarray([row], dtype=np.int32) for row in args["rows"]]  # (1, T) each
            return Call(lambda: np.concatenate([self.logits(ids) for ids in rows]))
        raise ValueError(f"onnxruntime-genai's adapter has no {kind!r} workload")

    def logits(self, ids: np.ndarray) -> np.ndarray:
        """ids (1, T) -> the logits at every position, (T, V)."""
        generator = self._generator(ids, ids.shape[1] + 1)
        generator.append_tokens(ids)
        logits = np.asarray(generator.get_output("logits"), dtype=np.float32)  # (1, T, V)
        if logits.shape[:2] != ids.shape:
            raise RuntimeError(f"genai returned logits of shape {logits.shape} for {ids.shape[1]} tokens")
        return logits[0]
