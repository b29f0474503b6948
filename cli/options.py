"""Options and loading shared by the commands that run exports."""

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from onnxformer.runtime.errors import InputError

BOM = "\ufeff"  # a UTF-8 byte order mark, as read from text

Device = Annotated[str, typer.Option(help="auto (CUDA when a CUDA session starts, else CPU), cpu or cuda.")]
Seed = Annotated[int | None, typer.Option(help="Seed for sampling; the same seed gives the same text.")]
Threads = Annotated[
    int | None,
    typer.Option(min=1, help="ONNX Runtime threads per graph (default: ONNX Runtime's, one per core)."),
]
TextFile = Annotated[
    str | None,
    typer.Option(
        "--file",
        "-f",
        metavar="FILE",
        help="Read the texts from FILE, one per line (- reads standard input).",
    ),
]

NoTruncate = Annotated[
    bool,
    typer.Option(
        "--no-truncate",
        help="Refuse a text longer than the export reads (a sentence-transformers folder's max_seq_length, "
        "else the context) instead of cutting it to its first tokens, as sentence-transformers does.",
    ),
]


@contextlib.contextmanager
def noting_truncation(model, texts: list[str], *, truncate: bool) -> Iterator[None]:
    """Print a note on stderr for each text the encoder will cut, then run the block with the encoder's
    own warning (the same news, once per call) held back."""
    if truncate:
        for index, length in enumerate(model.lengths(texts)):
            if length > model.max_length:
                typer.echo(
                    f"note: text {index} is {length} tokens; the model reads its first {model.max_length} "
                    "(--no-truncate refuses it instead)",
                    err=True,
                )
    encoder_log = logging.getLogger("onnxformer.runtime.encoder")
    level = encoder_log.level
    encoder_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        encoder_log.setLevel(level)


def load_model(folder: Path, task: str, device: str, threads: int | None = None):
    """The runtime model in `folder`, refusing an export made for another task with a clear error. The
    commands are named after the manifest's tasks (generate, encode, seq2seq)."""
    from onnxformer.runtime.errors import ManifestError
    from onnxformer.runtime.loader import load

    model = load(folder, device=device, threads=threads)
    if model.task != task:
        raise ManifestError(
            f"{folder} is a {model.family} export (task {model.task}); this command needs {_a(task)} export "
            f"(use `onnxformer {model.task}` for {model.family})"
        )
    return model


def _a(word: str) -> str:
    """`word` with its indefinite article: "an encode", "a generate"."""
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def gather_texts(texts: list[str] | None, file: str | None, *, what: str) -> list[str]:
    """The command's texts: its arguments, then the lines of --file (blank lines skipped). A UTF-8 byte
    order mark at the start of the file (Windows tools write one) is not part of its first text."""
    gathered = list(texts or [])
    if file is not None:
        if file == "-":
            lines = sys.stdin.read().removeprefix(BOM).splitlines()
        else:
            try:
                lines = Path(file).read_text(encoding="utf-8-sig").splitlines()
            except FileNotFoundError:
                raise InputError(
                    f"--file {file} does not exist; give a text file, one {what} per line"
                ) from None
            except IsADirectoryError:
                raise InputError(
                    f"--file {file} is a folder; give a text file, one {what} per line"
                ) from None
            except UnicodeDecodeError:
                raise InputError(f"--file {file} is not UTF-8 text; save it as UTF-8") from None
            except OSError as error:
                raise InputError(f"cannot read --file {file}: {error.strerror}") from None
        gathered += [line for line in lines if line.strip()]
    if not gathered:
        source = "in --file" if file is not None else "given"
        raise InputError(
            f"no {what} {source}; pass one or more as arguments or use --file FILE (- for stdin)"
        )
    return gathered
