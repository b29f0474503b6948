"""Install layout: `pip install .` gives the namespaced import names, and the bare install has no torch."""

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_plain_install_gives_namespaced_packages(tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(ROOT)],
        check=True,
        capture_output=True,
    )  # fmt: skip
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
