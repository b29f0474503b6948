"""The builder's own imports: no cycle, and the direction cli -> builder -> runtime.

The import graph is read from the source: every `import` and `from ... import` anywhere in a module,
functions included (a lazy import inside a function still counts as an edge). Importing `a.b.c` also runs
the `__init__` of every package above it, so those packages are edges too (except the importer's own
ancestors, which are already running when it is imported).
"""

import ast
import re
from pathlib import Path

BUILDER = Path(__file__).resolve().parents[1] / "builder"
PACKAGE = "onnxformer.builder"


def _modules() -> dict[str, ast.Module]:
    """Dotted module name ("onnxformer.builder.export.pipeline"; a package is its own name) -> its AST."""
    modules = {}
    for path in sorted(BUILDER.rglob("*.py")):
        parts = path.relative_to(BUILDER).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((PACKAGE, *parts))] = ast.parse(path.read_text(), filename=str(path))
    return modules


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(PACKAGE.split(".")), len(parts))]


def _imported(node: ast.AST, modules: dict[str, ast.Module]) -> list[str]:
    """The builder modules an import statement names (a `from pkg import submodule` names the submodule)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        names = [f"{node.module}.{alias.name}" for alias in node.names]
        names = [name if name in modules else node.module for name in names]
    else:
        return []
    found = []
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name.startswith(PACKAGE):
            found.append(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, tree in modules.items():
        own = set(_ancestors(name))
        for node in ast.walk(tree):
            for target in _imported(node, modules):
                for module in [*_ancestors(target), target]:
                    if module != name and module not in own:
                        graph[name].add(module)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_builder_has_no_import_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 40, f"only {len(graph)} builder modules found under {BUILDER}"
    edges = sum(len(targets) for targets in graph.values())
    cycle = find_cycle(graph)
    print(f"builder import graph: {len(graph)} modules, {edges} edges, cycle: {cycle}")
    assert cycle is None, " -> ".join(cycle)


def test_builder_never_imports_the_cli() -> None:
    modules = _modules()
    wrong = sorted(
        f"{name} imports {alias.name if isinstance(node, ast.Import) else node.module}"
        for name, tree in modules.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
        if (alias.name if isinstance(node, ast.Import) else (node.module or "")).startswith("onnxformer.cli")
    )
    assert not wrong, wrong


FAMILY_LITERAL = re.compile(r"""["'](gpt|bert|t5)["']|family\s*[!=]=""")
ROOT = BUILDER.parent
# The tables that name the families, one line per family each.
TABLES = (
    "builder/families/__init__.py",  # FAMILIES
    "builder/export/recipes/__init__.py",  # RECIPES
    "builder/training/defaults.py",  # the training defaults per family
)
NOT_YET: tuple[str, ...] = ()


def test_family_names_appear_only_in_the_tables_and_the_family_files() -> None:
    """Adding a family is its model file, its recipe, its training task and one line per table: no other
    file of builder/ or cli/ may name a family (no `if family == "gpt"` chains, no per-family dicts)."""
    found = []
    for path in sorted([*BUILDER.rglob("*.py"), *(ROOT / "cli").rglob("*.py")]):
        relative = path.relative_to(ROOT).as_posix()
        if relative in TABLES or relative in NOT_YET or path.stem.split("_")[0] in ("gpt", "bert", "t5"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if FAMILY_LITERAL.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
