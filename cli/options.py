"""Options and loading shared by the commands that run exports."""

import contextlib
import functools
import inspect
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from onnxformer.cli.errors import user_errors
from onnxformer.runtime.errors import InputError
from onnxformer.runtime.generation_options import DEFAULTS, KINDS, OPTIONS, GenerationOptions

BOM = "\ufeff"  # a UTF-8 byte order mark, as read from text

Device = Annotated[str, typer.Option(help="auto (CUDA when a CUDA session starts, else CPU), cpu or cuda.")]
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


# The default of a command's `options` parameter, which `generation_options` replaces with the flags.
FROM_FLAGS = GenerationOptions()
# The command-line type of each kind of GenerationOptions field (a list option is a repeated flag).
_TYPES = {"int": int, "number": float, "bool": bool, "strings": list[str], "ints": list[int]}


def generation_options(*tasks: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command one flag per GenerationOptions field in place of its `options` parameter:
    --max-new-tokens, --temperature, ... (a list field is a repeated flag; --truncate/--no-truncate), each
    with its field's help, type and default. The command receives them as one checked GenerationOptions
    (a value out of range is an `error:` line). `tasks` are the manifest tasks the command runs: the flags
    of other tasks' options are hidden from --help and refused, saying why."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command)
        flags = [_flag(name, tasks) for name in OPTIONS]
        parameters = [
            flag
            for parameter in signature.parameters.values()
            for flag in (flags if parameter.name == "options" else [parameter])
        ]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> None:
            values = {name: kwargs.pop(name) for name in OPTIONS}
            # A list flag not given may come as an empty list: unset, so that it takes the export's default.
            values.update(
                {name: None for name, value in values.items() if isinstance(value, list) and not value}
            )
            with user_errors(kwargs["ctx"]):
                options = GenerationOptions(**values)
                if len(tasks) == 1:  # refused before the model loads
                    options.check(tasks[0])
            command(*args, options=options, **kwargs)

        # what typer reads; functools.wraps' return type does not declare __signature__
        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return run

    return decorate


def _flag(name: str, tasks: tuple[str, ...]) -> inspect.Parameter:
    """The typer parameter of one GenerationOptions field."""
    kind, optional = KINDS[name]
    option = OPTIONS[name]
    dashed = name.replace("_", "-")
    declaration = f"--{dashed}/--no-{dashed}" if kind == "bool" else f"--{dashed}"
    help_text = option.help
    if len(tasks) > 1 and set(tasks) - set(option.tasks):  # a command for several tasks: say whose
        help_text += f" For {' and '.join(option.tasks)} exports."
    if kind in ("strings", "ints"):
        help_text += " Repeat the flag for more."
    hidden = not set(tasks) & set(option.tasks)
    annotation = _TYPES[kind] | None if optional else _TYPES[kind]
    return inspect.Parameter(
        name,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        default=DEFAULTS[name],
        annotation=Annotated[annotation, typer.Option(declaration, help=help_text, hidden=hidden)],
    )


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
    from onnxformer.runtime.session import device_of

    model = load(folder, device=device_of(device), threads=threads)
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
