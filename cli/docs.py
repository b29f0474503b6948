"""docs/cli.md, the command reference, generated from the commands' own `--help`.

    python -m onnxformer.cli.docs > docs/cli.md

The help is captured with typer's CliRunner at a fixed width, without colours, so the same code gives the
same bytes on every machine; `tests/test_cli_docs.py` fails when docs/cli.md differs from it.
"""

import os
import re
import sys

WIDTH = 100
PROG = "onnxformer"
REGENERATE = "python -m onnxformer.cli.docs > docs/cli.md"
# typer's rich help reads these once, when it is imported: a width or forced terminal set here would make
# the output depend on the machine. `main` drops them before importing typer.
_UNSTABLE_ENV = ("TERMINAL_WIDTH", "FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS", "TYPER_USE_RICH")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def command_names() -> list[str]:
    """The registered commands, in the order `onnxformer --help` lists them."""
    import typer
    import typer.main
    from typer.core import TyperGroup

    from onnxformer.cli.main import app

    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)  # an app of several commands
    context = typer.Context(group, info_name=PROG)
    names = []
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if command is not None and not command.hidden:
            names.append(name)
    return names


def help_text(args: list[str]) -> str:
    """`onnxformer ARGS --help` as plain text at WIDTH columns."""
    from typer.testing import CliRunner

    from onnxformer.cli.main import app

    environment = {"COLUMNS": str(WIDTH), "LINES": "50", "NO_COLOR": "1", "TERM": "dumb"}
    result = CliRunner().invoke(
        app, [*args, "--help"], prog_name=PROG, env=environment, terminal_width=WIDTH, color=False
    )
    if result.exit_code != 0:
        raise RuntimeError(f"`{PROG} {' '.join(args)} --help` failed: {result.output}")
    lines = _ANSI.sub("", result.output).splitlines()
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def render() -> str:
    """The Markdown of docs/cli.md."""
    names = command_names()
    parts = [
        f"# `{PROG}` command reference",
        "",
        f"<!-- Generated from `--help` by `{REGENERATE}`; do not edit by hand. -->",
        "",
        f"Each section below is what `{PROG} --help` or `{PROG} COMMAND --help` prints.",
        "",
        *(f"- [`{PROG} {name}`](#{PROG}-{name})" for name in names),
        "",
        f"## `{PROG}`",
        "",
        "```text",
        help_text([]),
        "```",
    ]
    for name in names:
        parts += ["", f"## `{PROG} {name}`", "", "```text", help_text([name]), "```"]
    return "\n".join(parts) + "\n"


def main() -> None:
    for name in _UNSTABLE_ENV:
        os.environ.pop(name, None)
    sys.stdout.buffer.write(render().encode("utf-8"))


if __name__ == "__main__":
    main()
