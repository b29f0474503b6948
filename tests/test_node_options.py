"""The Node host's option table (hosts/node/src/options.js) is the Python runtime's GenerationOptions: the
same options in the same order, each with its camelCase name, default, tasks and reason for refusal; and
hosts/node/README.md's table of names says the same. A new or renamed option fails here until the Node
host has it too."""

import json
import re
import shutil
import subprocess
from pathlib import Path

from onnxformer.runtime.generation_options import DEFAULTS, OPTIONS, node_name

NODE_HOST = Path(__file__).resolve().parents[1] / "hosts" / "node"
SCRIPT = 'import { OPTIONS } from "./src/options.js"; console.log(JSON.stringify(OPTIONS));'


def node_table() -> dict:
    """OPTIONS as the Node host's modules import it (options.js needs no packages)."""
    binary = shutil.which("node")
    assert binary, "Node.js is not installed; the host's tests need it (README: set-up)"
    done = subprocess.run(
        [binary, "--input-type=module", "-e", SCRIPT],
        cwd=NODE_HOST,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_node_table_is_generation_options() -> None:
    table = node_table()
    assert list(table) == list(OPTIONS), "hosts/node/src/options.js lists other options than Python"
    for name, option in OPTIONS.items():
        expected = {
            "node": node_name(name),
            "default": DEFAULTS[name],
            "tasks": list(option.tasks),
            "whyNot": option.why_not,
        }
        assert table[name] == expected, name


def test_the_readme_names_every_option_as_the_table_does() -> None:
    """The README's table of Python and Node names, row by row: every option, with its Node name."""
    readme = (NODE_HOST / "README.md").read_text(encoding="utf-8")
    named = {}
    for left, right in re.findall(r"^\| ([^|]+?) +\| ([^|]+?) +\|$", readme, flags=re.MULTILINE):
        python, node = re.findall(r"`(\w+)`", left), re.findall(r"`(\w+)`", right)
        if python and set(python) <= set(OPTIONS):
            named.update(zip(python, node, strict=True))
    assert named == {name: node_name(name) for name in OPTIONS}
