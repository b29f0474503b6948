"""Our runtime, through its public API (`onnxformer.runtime.load`), in the project's .venv; the quality
comparison's teacher-forced logits come from the loaded model's decoder session, fed as the quality gate
feeds it (onnxformer.builder.optimize.gate: every position's logits of one row, from an empty cache)."""

import numpy as np
from calls import Call, TimedSteps


def versions() -> dict:
    from importlib.metadata import version

    return {name: version(name) for name in ("onnxformer", "onnxruntime", "numpy", "tokenizers")}


class Adapter:
    def __init__(self, *, folder: str, threads: int) -> None:
        from onnxformer.runtime import load

        self.model = load(folder, device="cpu", threads=threads)

    def prepare(self, kind: str, **args) -> Call:
        model = self.model
        if kind == "embed":
            texts, batch_size = args["texts"], args["batch_size"]
            return Call(lambda: model.embed(texts, batch_size=batch_size, normalize=True))
        if kind in ("prefill", "decode"):
            ids, steps = args["ids"], args.get("steps", 0)

            def run():
                loop = model.steps(ids, max_new_tokens=steps + 1, temperature=0, stop_tokens=[])
                next(loop)  # the prefill (timed alone in "prefill")
                yield kind == "prefill"
                for _ in range(steps):
                    next(loop)
                    yield True
                loop.close()

            return TimedSteps(run)
        if kind in ("generate", "seq2seq"):
            ids, new = args["ids"], args["new"]
            options = {"max_new_tokens": new, "temperature": 0, "stop_tokens": []}
            return Call(lambda: [g.tokens for g in model.generate_ids(ids, **options)])
        if kind == "logits":
            rows = args["rows"]
            return Call(lambda: np.concatenate([self.logits(row) for row in rows]))
        raise ValueError(f"our runtime has no {kind!r} workload")

    def logits(self, row: list[int]) -> np.ndarray:
        """The logits at every position of `row`, one forward pass from an empty cache: (T, V)."""
        from onnxformer.runtime.goldens import run_case
        from onnxformer.runtime.model import pick

        export = self.model.export
        io = export.io("decoder")
        ids = np.asarray([row], dtype=np.int64)  # (1, T)
        feeds = {
            **pick(io, input_ids=ids, attention_mask=np.ones_like(ids)),
            **export.cache_layout().empty(1),
        }
        decoder = export.manifest.graphs["decoder"]
        (logits,) = run_case(
            export.sessions["decoder"], export.manifest, decoder, feeds, [io.outputs["logits"]]
        )
        return logits[0]  # (T, V)
