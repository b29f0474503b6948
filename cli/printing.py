"""What the commands print: one console for results, strict JSON for scripts.

Piped or redirected output is read by programs and pasted into files, where a table folded to 80 columns
splits names mid-word; so when standard output is not a terminal (and COLUMNS is not set) the console
does not wrap. JSON output never holds NaN or Infinity, which JSON parsers reject: they become null.
"""

import json
import math
import os
from typing import Any

import typer
from rich.console import Console, ConsoleDimensions
from rich.progress import Progress, ProgressColumn

UNWRAPPED = 10_000  # columns, when nothing says how wide the output is


class ResultConsole(Console):
    """A rich console that measures the terminal when there is one and never folds piped output."""

    @property
    def size(self) -> ConsoleDimensions:
        if self._width is None and not self.is_terminal and "COLUMNS" not in os.environ:
            return ConsoleDimensions(UNWRAPPED, super().size.height)
        return super().size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self.width, self.height = new_size  # what Console's own size setter does


console = ResultConsole(highlight=False)


def finite(value: Any) -> Any:
    """`value` with every NaN or infinite float (in dicts, lists, tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def echo_json(payload: Any, *, indent: int | None = 2, sort_keys: bool = False) -> None:
    """Print `payload` as standard JSON (no NaN): what `--json` options print."""
    text = json.dumps(
        finite(payload), indent=indent, sort_keys=sort_keys, ensure_ascii=False, allow_nan=False
    )
    typer.echo(text)


def progress_bar(*columns: str | ProgressColumn, disable: bool = False) -> Progress:
    """A transient progress bar on standard error, shown only on a terminal: elsewhere (a pipe, a log
    file) rich would print a blank line when it stops, which lands before an `error:` line."""
    stderr = Console(stderr=True)
    return Progress(*columns, console=stderr, transient=True, disable=disable or not stderr.is_interactive)
