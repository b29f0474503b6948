"""What every tool adapter's prepared calls share (imported by the tool modules inside the worker)."""

import time
from collections.abc import Callable, Iterator


class Call:
    """A prepared workload: calling it runs it once; `last` keeps its latest result (tokens, embeddings)."""

    def __init__(self, run: Callable[[], object]) -> None:
        self._run = run
        self.last: object = None

    def __call__(self) -> float | None:
        self.last = self._run()
        return None


class TimedSteps(Call):
    """A call that times itself: `steps()` yields after each untimed set-up and timed step; the figure is
    the mean of the timed steps (a decode step needs its prefill first)."""

    def __init__(self, steps: Callable[[], Iterator[bool]]) -> None:
        super().__init__(steps)
        self._steps = steps

    def __call__(self) -> float | None:
        timed = []
        start = time.perf_counter()
        for is_timed in self._steps():
            now = time.perf_counter()
            if is_timed:
                timed.append(now - start)
            start = time.perf_counter()
        return sum(timed) / len(timed) * 1e3


def greedy_tokens(model, ids: list[list[int]], new: int) -> list[list[int]]:
    """`model.generate` (transformers or Optimum) of exactly `new` greedy tokens per row of `ids` (rows of
    equal length): the new tokens only, without the prompt or the decoder start token."""
    import torch

    prompt = torch.tensor(ids, dtype=torch.long)  # (B, T)
    with torch.inference_mode():
        out = model.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            min_new_tokens=new,
            max_new_tokens=new,
            do_sample=False,
            num_beams=1,
        )
    start = 1 if model.config.is_encoder_decoder else prompt.shape[1]  # the decoder start / the prompt
    return [row[start:].tolist() for row in out]
