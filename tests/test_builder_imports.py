"""The builder's own imports: no cycle, and the direction cli -> builder -> runtime (benchmarks/ beside
them, never importing the CLI); nothing edits sys.path; and family and Hugging Face architecture names
only in the files that own them.

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


PACKAGE_FOLDERS = ("builder", "cli", "runtime")
ROOT = BUILDER.parent


def _trees(*folders: str) -> dict[str, ast.Module]:
    """Path relative to the checkout ("builder/export/layout.py") -> its AST, for every file of `folders`."""
    return {
        path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(), filename=str(path))
        for folder in folders
        for path in sorted((ROOT / folder).rglob("*.py"))
    }


def _imports_the_cli(node: ast.AST) -> str | None:
    """The CLI module an import statement (or an importlib.import_module("...") call) names, else None."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0:
        names = [node.module or ""]
    elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        names = [str(node.args[0].value)] if ast.unparse(node.func).endswith("import_module") else []
    else:
        return None
    return next((name for name in names if name.split(".")[:2] == ["onnxformer", "cli"]), None)


def test_nothing_below_the_cli_imports_it() -> None:
    """cli -> builder -> runtime, and benchmarks/ uses the package as any program does: none of them
    imports the CLI (the CLI may start them; they never reach back into it)."""
    assert _imports_the_cli(ast.parse("from onnxformer.cli.main import app").body[0])
    assert _imports_the_cli(ast.parse("importlib.import_module('onnxformer.cli.bench')").body[0].value)
    wrong = [
        f"{path}:{node.lineno} imports {name}"
        for path, tree in _trees("builder", "runtime", "benchmarks").items()
        for node in ast.walk(tree)
        if (name := _imports_the_cli(node))
    ]
    assert not wrong, "\n".join(wrong)


def _edits_sys_path(node: ast.AST) -> bool:
    """`sys.path.insert/append/extend/remove/...(...)`, `sys.path = / += / [...] =`, site.addsitedir."""
    if isinstance(node, ast.Call):
        called = ast.unparse(node.func)
        return called.startswith("sys.path.") or called.endswith("addsitedir")
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
        targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        return any(ast.unparse(t).split("[")[0] == "sys.path" for t in targets)
    return False


def test_nothing_edits_sys_path() -> None:
    """Imports mean the same wherever a command runs: the package and the benchmark find what they import
    through the install (or, for `python -m benchmarks`, its working folder), never by editing sys.path."""
    for snippet in (
        "sys.path.insert(0, 'x')",
        "sys.path += ['x']",
        "sys.path[:0] = ['x']",
        "site.addsitedir('x')",
    ):
        assert any(_edits_sys_path(node) for node in ast.walk(ast.parse(snippet))), snippet
    wrong = [
        f"{path}:{node.lineno}: {ast.unparse(node)}"
        for path, tree in _trees(*PACKAGE_FOLDERS, "benchmarks", "onnxformer").items()
        for node in ast.walk(tree)
        if _edits_sys_path(node)
    ]
    assert not wrong, "\n".join(wrong)


def _known_names() -> tuple[set[str], set[str]]:
    """(our family names and the Hugging Face model types the importer reads, the Hugging Face
    architecture class names it imports), from the tables that own them."""
    from onnxformer.builder.families import FAMILIES
    from onnxformer.builder.pretrained import ARCHITECTURES

    families = set(FAMILIES) | {architecture.model_type for architecture in ARCHITECTURES.values()}
    return families, set(ARCHITECTURES)


# A Hugging Face architecture by its shape (BertForMaskedLM, GPT2LMHeadModel), importable or not.
ARCHITECTURE_SHAPE = r"[A-Z][A-Za-z0-9]*(?:For[A-Z][A-Za-z]*|LMHeadModel)"
# The tables that name the families or architectures, one line per entry each.
TABLES = (
    "builder/families/__init__.py",  # FAMILIES
    "builder/export/recipes/__init__.py",  # RECIPES
    "builder/training/defaults.py",  # the training defaults per family
    "builder/pretrained/__init__.py",  # ARCHITECTURES: Hugging Face class name -> the importer's module
)
# Help text and messages that name one for the reader: (file, the name) -> why. Keep it short.
HELP_TEXT: dict[tuple[str, str], str] = {}


def _docstrings(tree: ast.Module) -> set[int]:
    scopes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, scopes) and node.body and isinstance(node.body[0], ast.Expr)
    }


def _is_family(node: ast.AST) -> bool:
    """`family`, `x.family`, `x["family"]`: a family value."""
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "family"
    return (isinstance(node, ast.Name) and node.id == "family") or (
        isinstance(node, ast.Attribute) and node.attr == "family"
    )


def test_family_and_architecture_names_appear_only_in_the_tables_and_the_family_files() -> None:
    """Adding a family is its model file, its recipe, its training task and one line per table; adding an
    architecture is its importer module and one line in ARCHITECTURES. No other file of builder/, cli/ or
    runtime/ may name one in code: no `if family == "gpt"` chains, no per-family or per-architecture dicts
    (`{"BertForMaskedLM": ...}`), no family compared with anything but another family. Docstrings and
    comments are prose; help text that names one goes in HELP_TEXT, with the reason."""
    families, architectures = _known_names()
    assert {"gpt", "bert", "t5", "llama"} <= families and "LlamaForCausalLM" in architectures
    named = re.compile(rf"\b(?:{ARCHITECTURE_SHAPE}|{'|'.join(sorted(architectures))})\b")
    found = []
    for path, tree in _trees(*PACKAGE_FOLDERS).items():
        if path in TABLES or Path(path).stem.split("_")[0] in families:
            continue
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
                match = node.value if node.value in families else named.search(node.value)
                name = match if isinstance(match, str) or match is None else match.group()
                if name and (path, name) not in HELP_TEXT:
                    found.append(f"{path}:{node.lineno}: {node.value[:80]!r}")
            elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.Eq | ast.NotEq):
                sides = [_is_family(side) for side in (node.left, *node.comparators)]
                if any(sides) and not all(sides):
                    found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)


def _reads_a_manifests_family(node: ast.AST) -> bool:
    """`manifest.family`, `x.manifest.family`, `export.family` (a runtime export's, the manifest's)."""
    node = (
        node.args[0] if isinstance(node, ast.Call) and ast.unparse(node.func) == "str" and node.args else node
    )
    owner = node.value if isinstance(node, ast.Attribute) and node.attr == "family" else None
    return isinstance(owner, ast.Name | ast.Attribute) and ast.unparse(owner).split(".")[-1] in (
        "manifest",
        "export",
    )


def test_a_manifests_family_keys_nothing_but_its_recipe() -> None:
    """The manifest's `family` is informational (the runtime goes by `task`): the builder reads it back
    in one place, `recipe_for(manifest)`, which checks it against the task; no other lookup is keyed by it."""
    found = []
    for path, tree in _trees(*PACKAGE_FOLDERS).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript):
                keys = [node.slice]
            elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in ("recipe", "get"):
                keys = list(node.args)
            else:
                continue
            if path != "builder/export/recipes/__init__.py" and any(map(_reads_a_manifests_family, keys)):
                found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)
