"""The model behind the server: what a route asks of it (embed rows, generate from a prompt, transform
texts), run through a `Batcher` so that concurrent requests share batches, within the queue's bounds and
each request's time limit.

Each request is checked alone before it is queued (its texts framed, its options checked), so one bad
request never fails a batch it would have shared; a batch then only runs what has been checked.
"""

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxformer.runtime.continuous import DecodeBatch
from onnxformer.runtime.encoder import TextEncoder
from onnxformer.runtime.errors import OnnxformerError
from onnxformer.runtime.generation_options import GenerationOptions
from onnxformer.runtime.generator import TextGenerator, Update
from onnxformer.runtime.seq2seq import TextToText
from onnxformer.runtime.serving.scheduler import Batcher, BatchSettings, Job, failed
from onnxformer.runtime.serving.tasks import Model

log = logging.getLogger(__name__)

# Texts per encoder run within a server batch: the batch's texts sorted by length run in groups of this
# many (MiniLM on 2 cores: 16 sentences of 5-27 tokens took 45 ms padded as one, 39-40 ms in sorted 8s).
EMBED_BATCH = 8


@dataclass
class Generated:
    """One generation as the answers report it: its text and token counts, and why it ended."""

    prompt_tokens: int
    text: str = ""
    completion_tokens: int = 0
    finish_reason: str = "length"

    def add(self, update: Update) -> None:
        self.text += update.text
        self.completion_tokens = update.tokens
        if update.finish_reason is not None:
            self.finish_reason = "stop" if update.finish_reason == "stop" else "length"


class TimedOut(OnnxformerError):
    """A request ran past the server's per-request time limit (HTTP 504)."""


class Engine:
    """One loaded model and the batcher of its task."""

    def __init__(self, model: Model, settings: BatchSettings | None = None, metrics: Any = None) -> None:
        self.model = model
        self.settings = settings or BatchSettings()
        self._metrics = metrics
        if isinstance(model, TextEncoder):
            self.batcher = Batcher("embeddings", self._embed_batch, self.settings, metrics)
        elif isinstance(model, TextGenerator):
            continuous = self.settings.continuous and not model.in_place_cache
            worker = self._continuous if continuous else None
            self.batcher = Batcher("generations", self._generate_batch, self.settings, metrics, worker=worker)
        else:
            self.batcher = Batcher("seq2seq", self._seq2seq_batch, self.settings, metrics)

    def stop(self) -> None:
        self.batcher.stop()

    # What the routes call (on the event loop).

    async def embed(self, rows: list[list[int]]) -> np.ndarray:
        """Embeddings (N, D) of framed rows (`TextEncoder.frame_texts`)."""
        job = self.batcher.submit(None, len(rows), rows)
        async with self._tracked(job):
            value: np.ndarray = await self._next(job)
            return value

    def start(self, row: list[int], options: GenerationOptions) -> Job:
        """Queue one generation from framed ids, checked alone first: raises now (InputError, Overloaded),
        before a streamed answer has sent its first byte."""
        assert isinstance(self.model, TextGenerator)
        self.model.follow([row], options)  # checks the row and options (nothing runs until iterated)
        return self.batcher.submit(options.stop_tokens, 1, (row, options))

    async def updates(self, job: Job) -> AsyncGenerator[Update, None]:
        """A started generation's updates, the last one with its finish_reason; leaving the loop early
        (the client went away) ends the generation at its next step."""
        async with self._tracked(job):
            while True:
                update: Update = await self._next(job)
                yield update
                if update.finish_reason is not None:
                    return

    def generate(self, row: list[int], options: GenerationOptions) -> AsyncGenerator[Update, None]:
        return self.updates(self.start(row, options))

    async def complete(self, row: list[int], options: GenerationOptions) -> Generated:
        """One whole generation from framed ids (the routes that do not stream)."""
        result = Generated(len(row))
        async with contextlib.aclosing(self.generate(row, options)) as updates:
            async for update in updates:
                result.add(update)
        return result

    async def transform(self, texts: list[str], options: GenerationOptions) -> list[str]:
        """A seq2seq export's outputs for texts (checked by the caller, `TextToText.frame_all`)."""
        job = self.batcher.submit(options, len(texts), texts)
        async with self._tracked(job):
            outputs: list[str] = await self._next(job)
            return outputs

    @contextlib.asynccontextmanager
    async def _tracked(self, job: Job) -> AsyncIterator[None]:
        """Cancel the job however its handler ends early (an error, a timeout, a client gone)."""
        try:
            yield
        finally:
            self.batcher.cancel(job)  # a no-op for a job that ended

    async def _next(self, job: Job) -> Any:
        remaining = self.settings.timeout_s - (time.monotonic() - job.submitted)
        try:
            return await asyncio.wait_for(job.next(), max(remaining, 0))
        except TimeoutError:
            raise TimedOut(
                f"the request took longer than the server's limit of {self.settings.timeout_s:g} s; "
                "ask for less (fewer texts, fewer tokens) or retry when the server is less busy"
            ) from None

    # The batches (on a worker thread).

    def _embed_batch(self, key: Hashable, jobs: list[Job]) -> None:
        assert isinstance(self.model, TextEncoder)
        rows = [row for job in jobs for row in job.payload]
        # Sorted by length into sub-batches, so that a short text is not padded to the longest one.
        vectors = self.model.embed_ids(rows, batch_size=EMBED_BATCH)  # (N, D)
        start = 0
        for job in jobs:
            job.deliver(vectors[start : start + job.rows])
            start += job.rows

    def _generate_batch(self, key: Hashable, jobs: list[Job]) -> None:
        assert isinstance(self.model, TextGenerator)
        following = self.model.follow([job.payload[0] for job in jobs], [job.payload[1] for job in jobs])
        started, tokens = time.perf_counter(), 0
        for updates in following:
            for index, job in enumerate(jobs):
                if job.cancelled:
                    following.cancel(index)
            for index, update in updates.items():
                if not jobs[index].cancelled:
                    jobs[index].deliver(update)
                if update.finish_reason is not None:
                    tokens += update.tokens
        if self._metrics is not None:
            self._metrics.generated(tokens, time.perf_counter() - started)

    def _continuous(self) -> None:
        """A generation worker's loop: admit waiting jobs into the running batch between steps, step, hand
        each row's update to its job; a row leaves when it ends or its job is cancelled."""
        assert isinstance(self.model, TextGenerator)
        batch, handles = DecodeBatch(self.model), itertools.count()
        live: dict[int, Job] = {}  # the jobs of the rows in the batch, by handle
        limit = self.settings.max_batch if self.settings.batching else 1
        while True:
            room = limit - len(batch)
            jobs = self.batcher.take_up_to(room, block=not live) if room > 0 else []
            if jobs is None:
                return
            jobs = [job for job in jobs if not job.cancelled]
            try:
                if jobs:
                    joining = {next(handles): job for job in jobs}
                    updates = batch.join(
                        [job.payload[0] for job in jobs], [job.payload[1] for job in jobs], list(joining)
                    )
                    live.update(joining)
                    self._hand_out(live, updates)
                for handle, job in list(live.items()):
                    if job.cancelled and (update := batch.cancel(handle)) is not None:
                        self._hand_out(live, {handle: update})
                if len(batch):
                    rows, started = len(batch), time.perf_counter()
                    self.batcher.observe(rows)
                    self._hand_out(live, batch.step())
                    if self._metrics is not None:  # one token per row per step
                        self._metrics.tokens_per_second.set(rows / max(time.perf_counter() - started, 1e-9))
            except Exception as error:  # every row of the batch hears of it; the worker starts afresh
                log.exception("a generation step failed")
                for job in {*live.values(), *jobs}:
                    job.deliver(failed(error))
                batch, live = DecodeBatch(self.model), {}

    def _hand_out(self, live: dict[int, Job], updates: dict[Any, Update]) -> None:
        for handle, update in updates.items():
            job = live[handle]
            if not job.cancelled:
                job.deliver(update)
            if update.finish_reason is not None:
                del live[handle]
                if self._metrics is not None:
                    self._metrics.tokens.inc(update.tokens)

    def _seq2seq_batch(self, key: Hashable, jobs: list[Job]) -> None:
        assert isinstance(self.model, TextToText) and isinstance(key, GenerationOptions)
        outputs = self.model.generate([text for job in jobs for text in job.payload], key)
        start = 0
        for job in jobs:
            job.deliver(outputs[start : start + job.rows])
            start += job.rows
