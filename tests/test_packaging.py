"""Install layout: `pip install .` gives the namespaced import names, and the bare install has no torch."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def plain_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A regular (not editable) install of the checkout into a folder of its own (~5 s)."""
    target = tmp_path_factory.mktemp("plain") / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(ROOT)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return target


def test_plain_install_gives_namespaced_packages(plain_install: Path, tmp_path: Path) -> None:
    target = plain_install
    top_level = sorted(p.name for p in target.iterdir() if not p.name.endswith((".dist-info", "bin")))
    assert top_level == ["onnxformer"]
    root = Path(__file__).resolve().parents[1]
    for package in ("builder", "runtime", "cli"):
        # Every source package folder is installed: a subpackage missing from pyproject fails here.
        for init in (root / package).rglob("__init__.py"):
            relative = init.relative_to(root)
            assert (target / "onnxformer" / relative).is_file(), relative
    code = (
        "import onnxformer.builder.layers, onnxformer.runtime, onnxformer.cli.main as m; "
        "print(onnxformer.runtime.__file__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(str(target))


IMPORTS = "from onnxformer.runtime import load; import onnxformer.cli.main; print(load.__module__, end=' '); "


def test_the_package_imports_in_the_checkouts_root(plain_install: Path) -> None:
    """Where a new user first runs it: the checkout's root, whose onnxformer/ folder (only __main__) comes
    first on sys.path. A regular install's subpackages are found all the same, and an editable install's."""
    # The environment's packages (numpy, typer, ...) as a plain path entry, so that its editable install
    # of this checkout (a finder its .pth file starts) is not there: only the regular install is.
    site = sysconfig.get_paths()["purelib"]
    env = {"PYTHONPATH": os.pathsep.join([str(plain_install), site]), "PATH": "/usr/bin:/bin"}
    code = IMPORTS + "import onnxformer.runtime as r; print(r.__file__)"
    regular = subprocess.run(
        [sys.executable, "-S", "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert regular.returncode == 0, regular.stderr
    assert regular.stdout.split() == [
        "onnxformer.runtime.loader",
        str(plain_install / "onnxformer/runtime/__init__.py"),
    ]
    command = subprocess.run(
        [sys.executable, "-S", "-m", "onnxformer", "--version"], env=env, cwd=ROOT, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert (command.returncode, command.stdout) == (0, "onnxformer 0.1.0\n"), command.stderr
    editable = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert editable.returncode == 0, editable.stderr
    assert editable.stdout.split()[1] == str(ROOT / "runtime" / "__init__.py")


def test_bench_finds_the_clone_it_is_run_in(plain_install: Path, tmp_path: Path) -> None:
    """A plain install holds no benchmarks/: `bench` run inside the clone runs the clone's (which gets as far
    as checking its options), and outside any clone says in one line that it runs from a checkout."""
    # -P: the working folder is not put on sys.path (as for the installed `onnxformer` script), so the
    # clone's own folders are not imported in place of the install.
    command = [sys.executable, "-P", "-m", "onnxformer", "bench", "--peers", "--family", "nonesuch"]
    env = {"PYTHONPATH": str(plain_install), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    where = [sys.executable, "-P", "-c", "import onnxformer.cli.bench as b; print(b.__file__)"]
    installed = subprocess.run(where, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert installed.stdout.startswith(str(plain_install))
    inside = subprocess.run(command, env=env, cwd=ROOT / "docs", capture_output=True, text=True, check=False)
    assert inside.returncode == 1 and inside.stderr.startswith("error: --family takes encoder"), inside.stderr
    outside = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert outside.returncode == 1, outside.stderr
    (line,) = outside.stderr.strip().splitlines()
    assert line.startswith("error: `onnxformer bench` runs from a source checkout"), line
    assert f"{tmp_path} is not inside one: run it in a clone of onnxformer" in line


def test_dependencies_keep_the_runtime_light() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"]).lower()
    assert "torch" not in base and "onnxscript" not in base
    extras = project["optional-dependencies"]
    assert any(d.startswith("onnxruntime-gpu") for d in extras["gpu"])
    assert any(d.startswith("onnxruntime>") for d in extras["cpu"])
    assert any(d.startswith("torch>=2.6") for d in extras["builder"])
    assert project["scripts"]["onnxformer"] == "onnxformer.cli.main:main"
    assert (ROOT / "constraints.txt").read_text().split() == ["torch==2.13.0"]
