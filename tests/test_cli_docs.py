"""docs/cli.md is generated from `--help` (onnxformer.cli.docs) and must not drift from the commands."""

import difflib
import subprocess
import sys
from pathlib import Path

import pytest

from onnxformer.cli.docs import REGENERATE, WIDTH, command_names, render
from onnxformer.cli.main import app

DOCS = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_docs_cli_md_matches_the_generator() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "onnxformer.cli.docs"], capture_output=True, check=False, cwd=DOCS.parents[1]
    )
    assert result.returncode == 0, result.stderr.decode()
    generated = result.stdout.decode("utf-8")
    committed = DOCS.read_text(encoding="utf-8") if DOCS.exists() else ""
    if generated != committed:
        diff = difflib.unified_diff(
            committed.splitlines(), generated.splitlines(), "docs/cli.md", "generated", lineterm="", n=1
        )
        shown = "\n".join(list(diff)[:40])
        pytest.fail(f"docs/cli.md is out of date with the CLI; run `{REGENERATE}`\n{shown}", pytrace=False)


def test_every_registered_command_is_documented() -> None:
    registered = [info.name for info in app.registered_commands]
    assert set(command_names()) == set(registered) and len(registered) >= 8
    text = DOCS.read_text(encoding="utf-8")
    for name in registered:
        assert f"## `onnxformer {name}`" in text, f"{name} missing from docs/cli.md; run `{REGENERATE}`"
        assert f"Usage: onnxformer {name} [OPTIONS]" in text, name


def test_render_is_plain_fixed_width_and_stable() -> None:
    text = render()
    assert text == render()
    assert "\x1b" not in text and "\r" not in text
    fenced = text.split("```text\n")[1:]
    assert len(fenced) == len(command_names()) + 1
    for block in fenced:
        for line in block.split("\n```")[0].splitlines():
            assert len(line) <= WIDTH and line == line.rstrip(), line
