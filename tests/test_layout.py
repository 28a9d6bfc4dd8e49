"""The layout's import graph, read from the source with ast (imports under `if TYPE_CHECKING:` aside, imports inside
functions counted): no module imports itself through others, model.py imports only layers/ of this repo (its
parts, which import nothing of it), and every import runs down the floors of
docs/code_map.md (a package never imports one above it): what model.py is built from lies below it, what uses
it above."""

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("layers", "gpt", "text", "training", "study", "benchmarks")
# Each floor imports only its own and those below it (docs/code_map.md). A name is a package or a root module.
FLOORS = (("errors",), ("options", "files"), ("layers", "text"), ("model",), ("gpt",), ("training",),
          ("train", "sample"), ("study",), ("ablate", "bench", "benchmarks", "score"))


def modules(root: Path) -> dict[str, Path]:
    """{dotted name: file} of the root's modules and of its packages' (a package's __init__ under its own name)."""
    found = {path.stem: path for path in root.glob("*.py")}
    for package in (p for p in sorted(root.iterdir()) if (p / "__init__.py").is_file()):
        for path in sorted(package.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_names(tree: ast.AST) -> list[str]:
    """Every module name an import statement names (`from a import b` names a and a.b), outside TYPE_CHECKING."""
    names = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def import_graph(root: Path) -> dict[str, set[str]]:
    """{module: the modules of root it imports}; `import a.b` also imports package a (its __init__)."""
    found = modules(root)
    graph = {}
    for name, path in found.items():
        targets = set()
        for imported in imported_names(ast.parse(path.read_text(encoding="utf-8"))):
            parts = imported.split(".")
            targets.update(prefix for i in range(1, len(parts) + 1) if (prefix := ".".join(parts[:i])) in found)
        graph[name] = targets - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of the graph as [a, b, ..., a], or [] when it has none."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def floor_of(module: str) -> int:
    top = module.split(".")[0]
    return next(i for i, floor in enumerate(FLOORS) if top in floor)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if floor_of(b) > floor_of(a))


def test_the_import_graph_has_no_cycle():
    assert find_cycle(import_graph(REPO_ROOT)) == []


def test_model_imports_only_its_layers():
    graph = import_graph(REPO_ROOT)
    pieces = {"layers.kernels", "layers.value_embeddings", "layers.smear", "layers.bigram"}
    assert graph["model"] == {"layers", "layers.positions", *pieces}
    assert all(graph[piece] == set() for piece in pieces)
    assert graph["layers.positions"] <= {"layers", "errors"}


def test_every_import_runs_down_the_floors():
    graph = import_graph(REPO_ROOT)
    assert sorted({name.split(".")[0] for name in graph} - {n for floor in FLOORS for n in floor}) == [], \
        "a module on no floor: add it to FLOORS and docs/code_map.md"
    assert upward_imports(graph) == []


def test_packages_hold_no_code_in_their_init():
    for package in PACKAGES:
        init = REPO_ROOT / package / "__init__.py"
        if init.is_file():
            body = ast.parse(init.read_text(encoding="utf-8")).body
            assert all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body), init


def test_the_checker_finds_a_cycle_and_an_upward_import(tmp_path):
    (tmp_path / "gpt").mkdir()
    (tmp_path / "gpt" / "__init__.py").write_text('"""a package"""\n')
    (tmp_path / "gpt" / "model.py").write_text("import typing\nfrom gpt import positions\n"
                                               "if typing.TYPE_CHECKING:\n    from study import config\n")
    (tmp_path / "gpt" / "positions.py").write_text("def f():\n    from gpt.model import GPT\n")
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "__init__.py").write_text("")
    (tmp_path / "study" / "config.py").write_text("import gpt.model\n")
    graph = import_graph(tmp_path)
    assert graph["gpt.model"] == {"gpt", "gpt.positions"}  # the TYPE_CHECKING import is no edge
    assert find_cycle(graph) == ["gpt.model", "gpt.positions", "gpt.model"]
    assert upward_imports(graph) == []
    (tmp_path / "gpt" / "positions.py").write_text("import study.config\n")
    (tmp_path / "study" / "config.py").write_text("import math\n")
    assert find_cycle(import_graph(tmp_path)) == []
    assert upward_imports(import_graph(tmp_path)) == ["gpt.positions -> study", "gpt.positions -> study.config"]
