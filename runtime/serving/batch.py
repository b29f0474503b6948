"""Batch inference on an export folder: the callable class for Ray Data's `Dataset.map_batches`, the plain
loop that needs no Ray, and the `onnxformer batch` run on top of both.

    ds.map_batches(
        BatchPredictor,
        fn_constructor_kwargs={"folder": "exported/bert", "column": "text"},
        batch_size=32,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=2),
    )

Each actor loads the folder once; each call runs the task (embed / generate / seq2seq, from the
manifest's family) on the batch's column in model batches of `batch_size` rows, in order. A model batch's
numbers depend on its rows (padding to the longest), so the command cuts the input into the same
consecutive chunks of `batch_size` rows in both modes: one Ray Data block per chunk, which `map_batches`
with the same `batch_size` hands over whole. That is what makes the Ray output equal the plain loop's,
byte for byte.
"""

import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

import numpy as np

from onnxformer.runtime.encoder import TextEncoder
from onnxformer.runtime.errors import ConfigError, InferenceError, InputError, OnnxformerError
from onnxformer.runtime.loader import load
from onnxformer.runtime.serving.jsonl import Record, check_output, output_line, read_records, write_lines
from onnxformer.runtime.serving.tasks import TASKS, GenerationOptions, Task, task_for, texts_of
from onnxformer.runtime.session import Device

# The fields an earlier output has: --overwrite replaces only such a file.
OUTPUT_FIELDS = tuple(task.output for task in TASKS.values())

log = logging.getLogger(__name__)

LINE = "line"  # the column holding each record's input line number (for error messages)
TEXT = "text"  # the column the command feeds the texts in
ERROR = "error"  # with errors="column": "" or why the row's chunk failed (Ray Data drops exception types)


class BatchPredictor:
    """A `map_batches` callable: loads the export once, then maps batches (dicts of numpy arrays) to the
    same batch with the task's output column added (`embedding`: (N, D) float32, else str objects)."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        column: str = TEXT,
        batch_size: int = 32,
        options: GenerationOptions | None = None,
        threads: int | None = None,
        device: Device = "auto",
        errors: Literal["raise", "column"] = "raise",
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self.model = load(folder, device=device, threads=threads)
        self.task = task_for(self.model)
        self.options = options or GenerationOptions()
        self.task.check(self.options)
        self.column = column
        self.batch_size = batch_size
        self.errors = errors

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.column not in batch:
            raise InputError(f"the batch has no {self.column!r} column (it has {sorted(batch)})")
        texts = texts_of(list(batch[self.column]), what=self.column)
        parts, problems = [], []
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            try:
                parts.append(self.task(self.model, chunk, self.options))
                problems += [""] * len(chunk)
            except InputError as error:
                culprit = self._culprit(chunk, start, batch, error)
                if self.errors == "raise":
                    raise culprit from None
                parts.append(self._placeholder(len(chunk)))
                problems += [str(culprit)] * len(chunk)
        if self.task.output == "embedding":
            values: np.ndarray = np.concatenate(parts, axis=0)  # (N, D)
        else:
            values = np.array([text for part in parts for text in part], dtype=object)  # (N,)
        extra = {ERROR: np.array(problems, dtype=object)} if self.errors == "column" else {}
        return {**batch, self.task.output: values, **extra}

    def _placeholder(self, rows: int) -> Any:
        if isinstance(self.model, TextEncoder):  # the embed task
            return np.zeros((rows, self.model.dim), dtype=np.float32)
        return [""] * rows

    def _culprit(
        self, chunk: list[str], start: int, batch: dict[str, np.ndarray], error: InputError
    ) -> InputError:
        """The first row of a failed chunk that fails alone, named by its input line when known."""
        for offset, text in enumerate(chunk):
            try:
                self.task(self.model, [text], self.options)
            except InputError as alone:
                where = batch[LINE][start + offset] if LINE in batch else f"row {start + offset}"
                prefix = f"line {where}" if LINE in batch else where
                return InputError(f"{prefix}: {alone}", field=alone.field)
        return error


class PredictorOptions(TypedDict):
    """The `BatchPredictor` keywords `run_batch` passes, in both modes (Ray: `fn_constructor_kwargs`)."""

    column: str
    batch_size: int
    options: GenerationOptions | None
    threads: int | None


@dataclass(frozen=True)
class BatchRun:
    """What `run_batch` did."""

    output: Path
    records: int
    task: str
    mode: str  # "local" or "ray (N actors)"
    seconds: float  # from loading the model to the last result (reading included, writing not)

    @property
    def per_second(self) -> float:
        return self.records / max(self.seconds, 1e-9)


def run_batch(
    folder: str | os.PathLike[str],
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    column: str = TEXT,
    batch_size: int = 32,
    options: GenerationOptions | None = None,
    overwrite: bool = False,
    ray_address: str | None = None,
    actors: int = 1,
    threads: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> BatchRun:
    """Run the folder's task on every record of `source` (JSONL) and write `out` (JSONL) atomically.

    Without `ray_address` a plain loop in this process; with it ("auto", a cluster address, or "local" to
    start a local instance) Ray Data with `actors` actors. Both give the same bytes.
    `progress` is called with the number of records done so far."""
    if isinstance(actors, bool) or not isinstance(actors, int) or actors < 1:
        raise InputError(f"actors must be an integer >= 1, got {actors!r}")
    if _same_file(source, out):
        raise InputError(
            f"--out {out} is the input file; write the results to another file (the input is kept as it is)"
        )
    check_output(out, overwrite=overwrite, outputs=OUTPUT_FIELDS)
    kwargs: PredictorOptions = {
        "column": TEXT,
        "batch_size": batch_size,
        "options": options,
        "threads": threads,
    }
    started = time.perf_counter()
    try:
        if ray_address is None:
            predictor = BatchPredictor(folder, **kwargs)
            records = read_records(source, column=column, output=predictor.task.output)
            values = list(_local(predictor, records, progress))
            task, mode = predictor.task, "local"
        else:
            task = _peek_task(folder, options)
            records = read_records(source, column=column, output=task.output)
            values = _on_ray(
                folder, records, kwargs, ray_address=ray_address, actors=actors, progress=progress
            )
            mode = f"ray ({actors} actor{'s' if actors > 1 else ''})"
    except InputError as error:
        if str(error).startswith("line "):  # a text the model refused: say which file too
            raise InputError(f"{source} {error}", field=error.field) from None
        raise
    seconds = time.perf_counter() - started
    lines = (output_line(r, task.output, _jsonable(v)) for r, v in zip(records, values, strict=True))
    written = write_lines(out, lines, overwrite=overwrite, outputs=OUTPUT_FIELDS)
    return BatchRun(Path(out), written, task.name, mode, seconds)


def _same_file(source: str | os.PathLike[str], out: str | os.PathLike[str]) -> bool:
    """Whether `out` names `source` (the same path, or a link or another path to the same file)."""
    try:
        return os.path.samefile(source, out)
    except OSError:  # one of them does not exist (yet)
        return Path(source).resolve() == Path(out).resolve()


def chunks(records: list[Record], batch_size: int) -> Iterator[list[Record]]:
    """Consecutive chunks of `batch_size` records: the model batches of both modes."""
    for start in range(0, len(records), batch_size):
        yield records[start : start + batch_size]


def as_batch(chunk: list[Record]) -> dict[str, np.ndarray]:
    """One chunk as a map_batches batch (numpy format)."""
    return {
        LINE: np.array([r.line for r in chunk], dtype=np.int64),
        TEXT: np.array([r.text for r in chunk], dtype=object),
    }


def _local(
    predictor: BatchPredictor, records: list[Record], progress: Callable[[int], None] | None
) -> Iterator[Any]:
    done = 0
    for chunk in chunks(records, predictor.batch_size):
        yield from predictor(as_batch(chunk))[predictor.task.output]
        done += len(chunk)
        if progress is not None:
            progress(done)


def _peek_task(folder: str | os.PathLike[str], options: GenerationOptions | None) -> Task:
    """The folder's task, checked against the options, before Ray starts anything (loads it once here:
    the driver also checks the folder's hashes before shipping the path to the actors)."""
    task = task_for(load(folder, device="cpu", threads=1))
    task.check(options or GenerationOptions())
    return task


def _on_ray(
    folder: str | os.PathLike[str],
    records: list[Record],
    kwargs: PredictorOptions,
    *,
    ray_address: str,
    actors: int,
    progress: Callable[[int], None] | None,
) -> list[Any]:
    ray, started_here = connect(ray_address)
    try:
        import pandas as pd

        frames = [pd.DataFrame(as_batch(chunk)) for chunk in chunks(records, kwargs["batch_size"])]
        dataset = ray.data.from_pandas(frames).map_batches(
            BatchPredictor,
            fn_constructor_args=(str(Path(folder).resolve()),),
            fn_constructor_kwargs={**kwargs, "threads": kwargs["threads"] or 1, "errors": "column"},
            batch_size=kwargs["batch_size"],
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=actors),
            num_cpus=1,
        )
        line_index = {record.line: index for index, record in enumerate(records)}
        values: list[Any] = [None] * len(records)
        problems: dict[int, str] = {}
        done = 0
        try:
            for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
                output = next(key for key in batch if key not in (LINE, TEXT, ERROR))
                for line, value, problem in zip(
                    batch[LINE].tolist(), batch[output], batch[ERROR], strict=True
                ):
                    values[line_index[line]] = value
                    if problem:
                        problems[line] = problem
                done += len(batch[LINE])
                if progress is not None:
                    progress(done)
        except Exception as error:
            raise InferenceError(
                f"batch inference failed on Ray: {_root_line(error)}; rerun with --debug for Ray's traceback"
            ) from error
        if problems:
            raise InputError(problems[min(problems)])
        if done != len(records):
            raise OnnxformerError(f"Ray returned {done} results for {len(records)} records")
        return values
    finally:
        if started_here:
            ray.shutdown()


def connect(address: str) -> tuple[Any, bool]:
    """Ray, connected to `address` ("local" starts a local instance on this machine's CPUs, loopback only);
    reuses a connection this process already has. Returns (ray, whether this call started it)."""
    from onnxformer.runtime.serving.tasks import require

    require("ray", "ray")
    import ray

    if ray.is_initialized():
        return ray, False
    try:
        if address == "local":
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except ConnectionError as error:
        raise ConfigError(
            f"cannot reach a Ray cluster at {address!r} ({error}); start one with `ray start --head`, "
            "or pass --ray local to start one here"
        ) from None
    return ray, True


def _root_line(error: BaseException) -> str:
    """The original exception's line in a Ray error's text ("ValueError: ..."), else its first line."""
    lines = str(error).splitlines()
    found = [line.strip() for line in lines if re.match(r"^\s*[\w.]+(Error|Exception): ", line)]
    return found[0] if found else (lines[0] if lines else type(error).__name__)


def _jsonable(value: Any) -> Any:
    """An output value as JSON: float32 vectors as lists of floats (exact), texts as str."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
