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
