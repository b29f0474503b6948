"""Requests from many clients run as batches, with bounds: the server's queue, batching window and timeouts.

A `Batcher` owns a bounded queue and worker threads. A request is a `Job` (its batch key, its size in
rows, what it asks); a worker takes the oldest job, then every waiting job with the same key until the
batch holds `max_batch` rows or `max_wait_ms` has passed, and hands them to the batch function, which
answers each job through `Job.deliver`. The key says which jobs may share a batch: embeddings that
truncate alike, generations that share their stop tokens (each row keeps its own sampling and budget).

    client ─▶ submit ─▶ [bounded queue] ─▶ worker: oldest job + same-key jobs ─▶ run(key, jobs)
                 │ full: Overloaded (HTTP 503, Retry-After)                         │ deliver(update)
                 ◀──────────────────────── asyncio queue of each job ◀──────────────┘

A job that is cancelled (its client went away, or its time ran out) leaves the queue at once; a running
one is told through `Job.cancelled`, which a generation checks between steps. While the batches run the
event loop stays free, so the queue fills and empties while the model works (which is what makes
batches form: requests that arrive during a batch run together in the next one).
"""

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from onnxformer.runtime.errors import ConfigError, OnnxformerError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchSettings:
    """How requests are batched and bounded (`onnxformer serve --max-batch ... --max-queue ...`)."""

    max_batch: int = 32  # rows per batch: texts for embeddings, prompts for generation
    max_wait_ms: float = 0.0  # how long a batch waits for company (0: it takes those already waiting)
    max_queue: int = 256  # jobs waiting for a batch; one more is refused (HTTP 503 with Retry-After)
    timeout_s: float = 300.0  # a request's whole life, queue and run; past it: HTTP 504
    workers: int = 1  # batches that run at once (each runs with the ONNX Runtime threads it has)
    batching: bool = True  # False: every request runs alone (the load test's baseline)
    continuous: bool = True  # generations join a running batch between steps (else: batches at arrival)

    def __post_init__(self) -> None:
        for name, low in (("max_batch", 1), ("max_queue", 1), ("workers", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        for name in ("max_wait_ms", "timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
                raise ConfigError(f"{name} must be a number >= 0, got {value!r}")
        if self.timeout_s <= 0:
            raise ConfigError(f"timeout_s must be above 0 seconds, got {self.timeout_s!r}")


class Overloaded(Exception):
    """The queue is full: the request is refused now rather than queued without bound."""

    def __init__(self, what: str, waiting: int, retry_after: int) -> None:
        super().__init__(
            f"the server is busy: {waiting} {what} requests are waiting already; retry in {retry_after} s"
        )
        self.retry_after = retry_after


class Job:
    """One request waiting for, or running in, a batch. The worker thread delivers its updates (and at
    the end an exception, if the batch failed) into an asyncio queue that the request's handler reads."""

    def __init__(self, key: Hashable, rows: int, payload: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.key, self.rows, self.payload = key, rows, payload
        self.cancelled = False
        self.submitted = time.monotonic()
        self._loop = loop
        self._updates: asyncio.Queue[Any] = asyncio.Queue()

    def deliver(self, update: Any) -> None:
        """From the worker thread: hand one update (or an exception) to the waiting handler."""
        try:
            self._loop.call_soon_threadsafe(self._updates.put_nowait, update)
        except RuntimeError:  # the loop closed: the server is gone, nobody is waiting
            self.cancelled = True

    async def next(self) -> Any:
        """The next update; an exception the batch raised is raised here."""
        update = await self._updates.get()
        if isinstance(update, BaseException):
            raise update
        return update


BatchFn = Callable[[Hashable, list[Job]], None]


def failed(error: Exception) -> Exception:
    """What a job hears when its batch fails: the runtime's own error as it is (an OnnxformerError names
    the problem), anything else (ONNX Runtime's) wrapped so that the routes answer it as a model failure."""
    if isinstance(error, OnnxformerError):
        return error
    return OnnxformerError(f"the model failed on this batch ({type(error).__name__}: {error})")


class Batcher:
    """A bounded queue of jobs and the worker threads that run them in batches (see the module)."""

    def __init__(
        self,
        name: str,
        run: BatchFn,
        settings: BatchSettings,
        metrics: Any = None,
        *,
        worker: Callable[[], None] | None = None,
    ) -> None:
        """`run(key, jobs)` runs one batch; or `worker`, run by each worker thread instead of the batch
        loop, takes jobs itself (`take_up_to`): continuous batching."""
        self.name, self._run, self.settings, self._metrics = name, run, settings, metrics
        self._worker = worker
        self._pending: deque[Job] = deque()
        self._ready = threading.Condition()
        self._stopping = False
        self._workers: list[threading.Thread] = []

    def submit(self, key: Hashable, rows: int, payload: Any) -> Job:
        """Queue a job (called on the event loop), or raise Overloaded when the queue is full."""
        job = Job(key, rows, payload, asyncio.get_running_loop())
        with self._ready:
            if len(self._pending) >= self.settings.max_queue:
                if self._metrics is not None:
                    self._metrics.rejected.labels(self.name).inc()
                raise Overloaded(self.name, len(self._pending), retry_after=1)
            self._start()
            self._pending.append(job)
            self._gauge()
            self._ready.notify()
        return job

    def cancel(self, job: Job) -> None:
        """Drop a job: out of the queue if it waits, told to stop if it runs."""
        job.cancelled = True
        with self._ready:
            if job in self._pending:
                self._pending.remove(job)
                self._gauge()

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def stop(self) -> None:
        """Let the workers finish the jobs queued, then end."""
        with self._ready:
            self._stopping = True
            self._ready.notify_all()
        for worker in self._workers:
            worker.join(timeout=60)

    def _start(self) -> None:
        """The workers start with the first job (so an app built outside a running loop starts none)."""
        if self._workers:
            return
        for index in range(self.settings.workers):
            target = self._worker or self._work
            worker = threading.Thread(target=target, name=f"onnxformer-{self.name}-{index}", daemon=True)
            worker.start()
            self._workers.append(worker)

    def _gauge(self) -> None:
        if self._metrics is not None:
            self._metrics.queue_depth.labels(self.name).set(len(self._pending))

    def _take(self) -> list[Job] | None:
        """The next batch: the oldest job and the waiting jobs of its key (None: stop)."""
        settings = self.settings
        with self._ready:
            while not self._pending:
                if self._stopping:
                    return None
                self._ready.wait()
            first = self._pending.popleft()
            batch, size = [first], first.rows
            deadline = time.monotonic() + settings.max_wait_ms / 1000
            while settings.batching and size < settings.max_batch:
                for job in list(self._pending):
                    if job.key == first.key and size + job.rows <= settings.max_batch:
                        self._pending.remove(job)
                        batch.append(job)
                        size += job.rows
                remaining = deadline - time.monotonic()
                if size >= settings.max_batch or remaining <= 0:
                    break
                self._ready.wait(remaining)
            self._gauge()
        return batch

    def take_up_to(self, rows: int, *, block: bool) -> list[Job] | None:
        """The oldest waiting jobs, of any key, up to `rows` rows (at least one job when `block`, which
        waits for it). None when the batcher stops and no job waits."""
        with self._ready:
            while block and not self._pending and not self._stopping:
                self._ready.wait()
            if self._stopping and not self._pending:
                return None
            taken, size = [], 0
            while self._pending and size + self._pending[0].rows <= rows:
                job = self._pending.popleft()
                taken.append(job)
                size += job.rows
            self._gauge()
        return taken

    def observe(self, rows: int) -> None:
        """Record one batch run of `rows` rows (a step of continuous batching)."""
        if self._metrics is not None:
            self._metrics.batch_size.labels(self.name).observe(rows)

    def _work(self) -> None:
        while (batch := self._take()) is not None:
            batch = [job for job in batch if not job.cancelled]
            if not batch:
                continue
            self.observe(sum(job.rows for job in batch))
            try:
                self._run(batch[0].key, batch)
            except Exception as error:  # every job of the batch hears of it; the worker goes on
                log.exception("a %s batch failed", self.name)
                for job in batch:
                    job.deliver(failed(error))
