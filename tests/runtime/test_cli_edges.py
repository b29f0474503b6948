"""The runtime commands at their edges: texts from files and stdin, strict JSON, output paths, options
checked before any work, piped output, and the commands that need an extra that is not installed.
Runs without torch."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxformer.cli.errors import EXTRAS
from onnxformer.cli.main import app
from onnxformer.cli.printing import echo_json, finite
from onnxformer.runtime import load

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
EXPORTED = ROOT / "exported"


def test_texts_from_a_file_and_from_stdin(tmp_path: Path) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("The cat sat.\n\n  \ncat The sat.\n", encoding="utf-8")
    from_file = runner.invoke(app, ["encode", str(EXPORTED / "bert"), "--file", str(texts), "--json"])
    assert from_file.exit_code == 0, from_file.output
    rows = json.loads(from_file.stdout)["results"]
    assert [row["text"] for row in rows] == ["The cat sat.", "cat The sat."]  # blank lines skipped
    from_stdin = runner.invoke(
        app, ["encode", str(EXPORTED / "bert"), "-f", "-", "--json"], input="The cat sat.\ncat The sat.\n"
    )
    assert json.loads(from_stdin.stdout)["results"] == rows
    args = ["generate", str(EXPORTED / "gpt"), "--file", "-", "--max-new-tokens", "3", "--json"]
    generated = runner.invoke(app, [*args, "--temperature", "0"], input="The cat\nA dog\n")
    assert [row["prompt"] for row in json.loads(generated.stdout)["results"]] == ["The cat", "A dog"]
    translated = runner.invoke(app, ["seq2seq", str(EXPORTED / "t5"), "-f", str(texts), "--json"])
    assert len(json.loads(translated.stdout)["results"]) == 2


def test_a_byte_order_mark_is_not_part_of_the_first_text(tmp_path: Path) -> None:
    """Windows tools begin a UTF-8 file with one (EF BB BF); read as text it is U+FEFF."""
    texts = tmp_path / "texts.txt"
    texts.write_bytes(b"\xef\xbb\xbfThe cat sat.\r\ncat The sat.\r\n")
    from_file = runner.invoke(app, ["encode", str(EXPORTED / "bert"), "--file", str(texts), "--json"])
    assert from_file.exit_code == 0, from_file.output
    rows = json.loads(from_file.stdout)["results"]
    assert [row["text"] for row in rows] == ["The cat sat.", "cat The sat."]
    plain = runner.invoke(app, ["encode", str(EXPORTED / "bert"), "The cat sat.", "cat The sat.", "--json"])
    assert json.loads(plain.stdout)["results"] == rows  # the same embeddings as without the mark
    from_stdin = runner.invoke(
        app, ["generate", str(EXPORTED / "gpt"), "-f", "-", "--json", "--max-new-tokens", "2"],
        input="\ufeffThe cat\n",
    )  # fmt: skip
    assert [row["prompt"] for row in json.loads(from_stdin.stdout)["results"]] == ["The cat"]


def test_encode_cuts_a_long_text_and_says_so() -> None:
    folder = str(EXPORTED / "bert")
    long = " ".join(["cat"] * 100)
    framed = len(load(folder).tokenizer.encode(long)) + 2  # <cls> ... <sep>
    cut = runner.invoke(app, ["encode", folder, "The cat sat.", long, "--json"])
    assert cut.exit_code == 0, cut.output
    assert cut.stderr.splitlines() == [
        f"note: text 1 is {framed} tokens; the model reads its first 64 (--no-truncate refuses it instead)"
    ]
    refused = runner.invoke(app, ["encode", folder, "The cat sat.", long, "--no-truncate"])
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr.startswith("error: ") and "reads at most 64; shorten the text" in refused.stderr
    short = runner.invoke(app, ["encode", folder, "The cat sat.", "--json"])
    assert short.exit_code == 0 and short.stderr == ""


@pytest.mark.parametrize("port", ["0", "-1", "65536", "99999"])
def test_serve_refuses_a_port_outside_1_to_65535(port: str) -> None:
    result = runner.invoke(app, ["serve", str(EXPORTED / "bert"), "--port", port])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == (
        f"error: port must be an integer from 1 to 65535, got {port}; choose a free port, e.g. 8000"
    )


@pytest.mark.parametrize("command", ["encode", "generate", "seq2seq"])
def test_no_texts_or_a_bad_file_is_one_clear_line(tmp_path: Path, command: str) -> None:
    folder = str(EXPORTED / {"encode": "bert", "generate": "gpt", "seq2seq": "t5"}[command])
    none = runner.invoke(app, [command, folder])
    assert none.exit_code == 1 and "--file" in none.stderr, none.output
    missing = runner.invoke(app, [command, folder, "--file", str(tmp_path / "nope.txt")])
    assert missing.exit_code == 1 and "does not exist" in missing.stderr
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    undecodable = runner.invoke(app, [command, folder, "--file", str(tmp_path / "latin1.txt")])
    assert undecodable.exit_code == 1 and "UTF-8" in undecodable.stderr
    assert "Traceback" not in none.output + missing.output + undecodable.output


def test_encode_prints_pairs_only_when_asked_for_many_texts() -> None:
    folder = str(EXPORTED / "bert")
    texts = [f"The cat number {i} sat." for i in range(12)]
    default = runner.invoke(app, ["encode", folder, *texts])
    assert default.exit_code == 0, default.output
    assert "cosine similarity #" not in default.stdout
    assert "66 pairwise similarities not shown" in default.stdout
    pairs = runner.invoke(app, ["encode", folder, *texts, "--similarity", "pairs"])
    assert pairs.stdout.count("cosine similarity #") == 66
    matrix = runner.invoke(app, ["encode", folder, *texts[:3], "--similarity", "matrix"])
    assert "cosine similarity" in matrix.stdout and "1.0000" in matrix.stdout
    few = runner.invoke(app, ["encode", folder, *texts[:3]])
    assert few.stdout.count("cosine similarity #") == 3
    silent = runner.invoke(app, ["encode", folder, *texts[:3], "--similarity", "none", "--json"])
    assert "cosine_similarity" not in json.loads(silent.stdout)


def test_encode_normalize_gives_unit_embeddings() -> None:
    result = runner.invoke(app, ["encode", str(EXPORTED / "bert"), "The cat sat.", "--normalize", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    norm = math.sqrt(sum(x * x for x in payload["results"][0]["embedding"]))
    assert payload["normalized"] is True
    assert abs(norm - 1.0) < 1e-5, norm


def test_stream_prints_every_prompt_and_refuses_json() -> None:
    args = ["generate", str(EXPORTED / "gpt"), "The cat", "A dog", "--stream", "--max-new-tokens", "4"]
    streamed = runner.invoke(app, [*args, "--temperature", "0"])
    assert streamed.exit_code == 0, streamed.output
    lines = streamed.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("The cat") and lines[1].startswith("A dog")
    greedy = runner.invoke(app, [*args[:4], "--max-new-tokens", "4", "--temperature", "0", "--json"])
    outputs = [row["prompt"] + row["output"] for row in json.loads(greedy.stdout)["results"]]
    assert lines == outputs  # the streamed text is the generated text
    both = runner.invoke(app, [*args, "--json"])
    assert both.exit_code == 1 and "use one of them" in both.stderr


def test_threads_must_be_a_positive_integer() -> None:
    for bad in ("0", "-1", "two"):
        result = runner.invoke(app, ["encode", str(EXPORTED / "bert"), "x", "--threads", bad])
        assert result.exit_code == 2, (bad, result.output)
    good = runner.invoke(app, ["encode", str(EXPORTED / "bert"), "x", "--threads", "1", "--json"])
    assert good.exit_code == 0, good.output


def test_json_never_holds_nan(capsys: pytest.CaptureFixture[str]) -> None:
    payload = {"loss": float("nan"), "curve": [1.0, float("inf"), (2.0, -float("inf"))], "ok": True}
    assert finite(payload) == {"loss": None, "curve": [1.0, None, [2.0, None]], "ok": True}
    echo_json(payload)
    text = capsys.readouterr().out
    parsed = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in JSON output"))
    assert parsed["loss"] is None


def test_attention_png_paths_are_checked_first(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is part of this environment")
    folder = str(EXPORTED / "gpt")
    text_file = tmp_path / "a.txt"
    result = runner.invoke(app, ["attention", folder, "The cat sat.", "--out", str(text_file)])
    assert result.exit_code == 1 and ".png" in result.stderr and not text_file.exists()
    precious = tmp_path / "photo.png"
    precious.write_bytes(b"\x89PNG\r\n\x1a\n not a heatmap")
    for flags in ([], ["--overwrite"]):  # a picture onnxformer did not write is never replaced
        refused = runner.invoke(app, ["attention", folder, "The cat sat.", "--out", str(precious), *flags])
        assert refused.exit_code == 1 and "onnxformer did not write it" in refused.stderr, refused.output
    assert precious.read_bytes() == b"\x89PNG\r\n\x1a\n not a heatmap"
    heatmap = tmp_path / "heat.png"
    first = runner.invoke(app, ["attention", folder, "The cat sat.", "--out", str(heatmap)])
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, ["attention", folder, "The cat sat.", "--out", str(heatmap)])
    assert again.exit_code == 1 and "pass --overwrite" in again.stderr  # an earlier heatmap: --overwrite
    forced = runner.invoke(app, ["attention", folder, "The cat sat.", "--out", str(heatmap), "--overwrite"])
    assert forced.exit_code == 0, forced.output
    empty = runner.invoke(app, ["attention", folder, "The cat sat.", "--out", ""])
    assert empty.exit_code == 2 and "empty" in empty.output


def test_short_help_completion_and_python_dash_m() -> None:
    short = runner.invoke(app, ["-h"])
    assert short.exit_code == 0 and "export-blocks" in short.stdout
    assert runner.invoke(app, ["encode", "-h"]).exit_code == 0
    assert "--show-completion" in short.stdout and "--install-completion" in short.stdout
    module = subprocess.run(
        [sys.executable, "-m", "onnxformer", "--version"], capture_output=True, text=True, check=False
    )
    assert module.returncode == 0 and module.stdout.startswith("onnxformer "), module.stderr


def test_piped_tables_do_not_break_names() -> None:
    """Output that is not a terminal is not folded at 80 columns: every file name stays whole."""
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    result = subprocess.run(
        [sys.executable, "-m", "onnxformer", "inspect", str(EXPORTED / "t5")],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    manifest = json.loads((EXPORTED / "t5" / "manifest.json").read_text())
    graphs = [entry["path"] for entry in manifest["files"] if entry["kind"] != "golden"]
    long_names = [name for name in graphs if len(name) > 20]
    assert long_names and all(name in result.stdout for name in long_names)


# A child interpreter in which the builder's dependencies cannot be imported, as in `pip install
# onnxformer[cpu]`: each command that needs the builder must name the extra in one line.
_WITHOUT_BUILDER = """
import sys
from importlib.abc import MetaPathFinder

class Missing(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "onnx", "onnxscript", "safetensors"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
from onnxformer.cli.main import app
app(prog_name="onnxformer")
"""


@pytest.mark.parametrize(
    "args",
    [
        ["train", "gpt", "--out", "{tmp}/run"],
        ["export", "{tmp}/nothing", "--out", "{tmp}/x"],
        ["export-blocks", "--out", "{tmp}/b"],
        ["optimize", str(EXPORTED / "bert"), "{tmp}/o"],
        ["demo", "--out", "{tmp}/demo"],
        ["bench"],
        ["verify", str(EXPORTED / "bert"), "--checkpoint", "{tmp}/ck"],
    ],
    ids=lambda args: args[0] + (" --checkpoint" if "--checkpoint" in args else ""),
)
def test_builder_commands_name_the_extra_without_torch(tmp_path: Path, args: list[str]) -> None:
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_BUILDER, *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and 'pip install "onnxformer[builder]"' in lines[-1], lines
    assert EXTRAS["torch"] == "builder"
