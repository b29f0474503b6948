"""Run mypy over the import names onnxformer.builder, onnxformer.runtime and onnxformer.cli.

setuptools maps those names onto the checkout's top-level folders (pyproject.toml's package-dir), which mypy
cannot read, and an editable install finds them through an import hook mypy does not run. So this builds
build/typecheck/onnxformer/ with links to builder/, runtime/ and cli/ and checks the packages there; the
settings are pyproject.toml's [tool.mypy]. Exit status and output are mypy's.

    python scripts/typecheck.py            # what `make typecheck` (and `make lint`) runs
    python scripts/typecheck.py --count    # one line: errors per package, for a before/after figure
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"
PACKAGES = ("builder", "runtime", "cli")


def link_tree() -> Path:
    package = TREE / "onnxformer"
    if TREE.exists():
        shutil.rmtree(TREE)
    package.mkdir(parents=True)
    shutil.copy(ROOT / "onnxformer" / "__init__.py", package / "__init__.py")
    for name in PACKAGES:
        (package / name).symlink_to(ROOT / name, target_is_directory=True)
    return TREE


def main(arguments: list[str]) -> int:
    tree = link_tree()
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
    command += [part for name in PACKAGES for part in ("-p", f"onnxformer.{name}")]
    count = "--count" in arguments
    command += [argument for argument in arguments if argument != "--count"]
    environment = {**os.environ, "MYPYPATH": str(tree)}
    if not count:
        return subprocess.run(command, cwd=tree, env=environment, check=False).returncode
    result = subprocess.run(command, cwd=tree, env=environment, capture_output=True, text=True, check=False)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    by_package = {name: sum(f"/{name}/" in line for line in errors) for name in PACKAGES}
    print(f"{len(errors)} errors: " + ", ".join(f"{name}/ {n}" for name, n in by_package.items()))
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
