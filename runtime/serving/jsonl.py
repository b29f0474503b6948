"""JSONL in and out for batch inference: records with their line numbers, output written atomically.

Input: one JSON object per line, the text to process in one field (`column`); blank lines are skipped,
anything else that is not such an object is an InputError naming the line. Output: each input record with
one more field (the task's output), one per line, in input order. The output file appears whole or not at
all (a temporary file beside it, fsync, then a rename), and an existing file is never replaced unless the
caller says so, and then only if it is an earlier output: its first record has one of the tasks' output
fields (a file of the user's, such as the input or notes, is never replaced).
"""

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onnxformer.runtime.errors import InputError


@dataclass(frozen=True)
class Record:
    line: int  # 1-based line number in the input file
    fields: dict[str, Any]  # the whole JSON object
    text: str  # fields[column]


def read_records(path: str | os.PathLike[str], *, column: str, output: str) -> list[Record]:
    """The records of a JSONL file; `output` is the field the task will add, which must not exist yet."""
    path = Path(path)
    try:
        handle = path.open("rb")
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from None
    records = []
    with handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{path} line {number}"
            try:
                # A UTF-8 byte order mark (Windows tools write one) is not part of the first record.
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise InputError(f"{where}: not UTF-8 text; save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                fields = json.loads(line)
            except json.JSONDecodeError as error:
                raise InputError(
                    f"{where}: not valid JSON ({error.msg}, column {error.colno}); each line must be one "
                    f'JSON object such as {{"{column}": "some text"}}'
                ) from None
            if not isinstance(fields, dict):
                raise InputError(
                    f"{where}: a JSON {type(fields).__name__}, not an object; write "
                    f'{{"{column}": "some text"}} on each line'
                )
            if column not in fields:
                raise InputError(
                    f"{where}: no {column!r} field (it has {sorted(fields)}); choose the field with --column"
                )
            if not isinstance(fields[column], str):
                raise InputError(f"{where}: {column!r} must be a string, got {type(fields[column]).__name__}")
            if output in fields:
                raise InputError(
                    f"{where}: already has an {output!r} field, which the output would overwrite; "
                    "rename that field in the input"
                )
            records.append(Record(number, fields, fields[column]))
    if not records:
        raise InputError(f"{path} holds no records; write one JSON object per line")
    return records


def output_line(record: Record, output: str, value: Any) -> str:
    """The output line of one record: its fields and the task's output (a str or a list of floats)."""
    return json.dumps({**record.fields, output: value}, ensure_ascii=False)


def check_output(path: str | os.PathLike[str], *, overwrite: bool, outputs: Iterable[str] = ()) -> Path:
    """Refuse an output path whose folder does not exist, or that exists and is not an earlier output
    (its first record holds one of the `outputs` fields), or is one and `overwrite` is not set; before any
    work."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a folder; give the output file's path, e.g. {path}/output.jsonl")
    if path.exists() or path.is_symlink():
        if not _is_output(path, set(outputs)):
            raise InputError(
                f"refusing to replace {path}: it is not an output of onnxformer batch (its first record has "
                f"none of the fields {', '.join(sorted(outputs)) or 'it adds'}); choose another --out"
            )
        if not overwrite:
            raise InputError(
                f"{path} already exists; pass --overwrite to replace it, or choose another --out"
            )
    if not path.parent.is_dir():
        raise InputError(f"the folder of {path} does not exist; create it first")
    return path


def write_lines(
    path: str | os.PathLike[str], lines: Iterable[str], *, overwrite: bool, outputs: Iterable[str] = ()
) -> int:
    """Write `lines` to `path` atomically; returns how many. Without `overwrite`, a file that appeared at
    `path` meanwhile is kept and the call fails (the new file is linked in, which never replaces); with
    it, `path` is replaced only if it is an earlier output (`check_output`)."""
    outputs = tuple(outputs)
    path = check_output(path, overwrite=overwrite, outputs=outputs)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    count = 0
    try:
        with temporary.open("w", encoding="utf-8", newline="\n") as handle:
            for line in lines:
                handle.write(line)
                handle.write("\n")
                count += 1
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(temporary, path)
        else:
            try:
                os.link(temporary, path)
            except FileExistsError:
                raise InputError(
                    f"{path} appeared while the batch ran; it was kept. Pass --overwrite to replace it"
                ) from None
            except OSError:  # a file system without hard links: check, then rename
                check_output(path, overwrite=False, outputs=outputs)
                os.replace(temporary, path)
        _sync_folder(path.parent)
    finally:
        temporary.unlink(missing_ok=True)
    return count


def _is_output(path: Path, outputs: set[str]) -> bool:
    """Whether `path` is a regular file whose first non-blank line is a JSON object with one of `outputs`
    (an earlier batch output; an empty file counts too, as one with no records)."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with path.open("rb") as handle:
            for raw in handle:
                if raw.strip():
                    fields = json.loads(raw.decode("utf-8-sig"))
                    return isinstance(fields, dict) and not outputs.isdisjoint(fields)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return True


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
