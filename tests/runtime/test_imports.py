"""The runtime's own imports: one direction, no cycle, a light `errors` module, no family tables.

The import graph is read from the source (every `import` and `from ... import` anywhere in a module,
functions included, except under `if TYPE_CHECKING:`), so an import hidden inside a function to dodge a
cycle still counts as an edge.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
PACKAGE = "onnxformer.runtime"
FAMILIES = ("gpt", "bert", "t5")


def _modules() -> dict[str, ast.Module]:
    """Module name ("loader", "serving.x", "__init__") -> its parsed source, for every file under runtime/."""
    modules = {}
    for path in sorted(RUNTIME.rglob("*.py")):
        name = ".".join(path.relative_to(RUNTIME).with_suffix("").parts)
        modules[name] = ast.parse(path.read_text(), filename=str(path))
    return modules


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of import nodes under `if TYPE_CHECKING:` (never run)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skipped |= {id(child) for child in ast.walk(node)}
    return skipped


def _resolve(target: str, modules: dict[str, ast.Module]) -> str | None:
    """The runtime module an absolute import name refers to ("onnxformer.runtime.x.y" -> "x.y")."""
    if target == PACKAGE:
        return "__init__"
    if not target.startswith(PACKAGE + "."):
        return None
    name = target[len(PACKAGE) + 1 :]
    while name and name not in modules and f"{name}.__init__" not in modules:
        name = name.rpartition(".")[0]
    if not name:
        return None
    return name if name in modules else f"{name}.__init__"


def import_graph() -> dict[str, set[str]]:
    """Runtime module -> the runtime modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, tree in modules.items():
        skipped = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's own package upwards
                    package = name.split(".")[: -node.level] if not name.endswith("__init__") else None
                    parts = name.split(".")[:-1] if package is None else package
                    if package is None and node.level > 1:
                        parts = parts[: -(node.level - 1)]
                    base = ".".join([PACKAGE, *parts, *([base] if base else [])])
                # `from onnxformer.runtime import protobuf` imports the submodule protobuf.
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            for target in targets:
                resolved = _resolve(target, modules)
                if resolved is not None and resolved != name:
                    graph[name].add(resolved)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle as a path of module names (first == last), or None: depth-first search with colours."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for following in sorted(graph[node]):
            if state.get(following) == 1:
                return [*path[path.index(following) :], following]
            if following not in state and (cycle := visit(following)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_runtime_has_no_import_cycle() -> None:
    graph = import_graph()
    assert {"loader", "model", "generator", "encoder", "seq2seq", "probe", "probe_child"} <= set(graph)
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_the_runtime_depends_on_itself_in_one_direction() -> None:
    graph = import_graph()
    classes = {"generator", "encoder", "seq2seq"}

    def below(module: str) -> set[str]:
        seen, todo = set(), [module]
        while todo:
            for following in graph[todo.pop()] - seen:
                seen.add(following)
                todo.append(following)
        return seen

    assert classes <= graph["loader"]  # load sits above the classes
    for name in classes:
        assert "model" in graph[name] and "loader" not in below(name), name
    assert not below("model") & (classes | {"loader", "probe_child", "goldens", "attention"})
    assert below("probe") <= {"errors"}  # the parent side of the probe, which load uses
    assert "loader" in graph["probe_child"]  # the child runs a model: it sits at the top
    assert graph["__init__"] == set()  # lazy: it imports nothing until a name is asked for
    manifest_parts = {"manifest_schema", "manifest_keys", "manifest_parse", "manifest_checks"}
    assert below("errors") == set() and below("manifest") <= {"errors", *manifest_parts}


@pytest.mark.parametrize("module", ["errors", "manifest"])
def test_importing_errors_or_manifest_loads_no_heavy_library(module: str) -> None:
    code = (
        f"import sys, onnxformer.runtime.{module}\n"
        "heavy = [m for m in ('numpy', 'tokenizers', 'onnxruntime', 'torch') if m in sys.modules]\n"
        "ours = sorted(m for m in sys.modules if m.startswith('onnxformer.'))\n"
        "print(heavy, ours)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    loaded = result.stdout.split("] ", 1)[1]
    assert "onnxformer.runtime.loader" not in loaded and "onnxformer.runtime.tokenizer" not in loaded, loaded


def test_the_package_exports_load_lazily() -> None:
    code = (
        "import sys, onnxformer.runtime as rt\n"
        "assert 'numpy' not in sys.modules\n"
        "assert rt.InputError.__module__ == 'onnxformer.runtime.errors'\n"
        "assert 'numpy' not in sys.modules\n"
        "from onnxformer.runtime import load, TextGenerator\n"
        "assert 'numpy' in sys.modules and load.__module__ == 'onnxformer.runtime.loader'\n"
        "assert sorted(rt.__all__) == sorted(n for n in rt.__all__ if hasattr(rt, n))\n"
        "try:\n    rt.no_such_name\nexcept AttributeError as e:\n    print('refused', e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "refused" in result.stdout, result.stdout + result.stderr


def test_no_family_name_is_a_literal_in_the_runtime() -> None:
    """Family names appear in prose (docstrings, messages), never as a table key or a comparison: the
    runtime learns everything about a model from its manifest."""
    found = []
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in FAMILIES:
                found.append(f"{name}.py:{node.lineno} {node.value!r}")
    assert found == []
