"""The layer rules as tests: the import-linter contracts in pyproject.toml (the benchmarks beside the
library and the dashboard, the layer map of docs/development.md, no streamlit or app in the library,
pure chart and derive modules) and no module importing another module's private names."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    """`lint-imports` over the contracts in pyproject.toml; a breach names the importing line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(path: Path) -> list[str]:
    """`from other import _name` lines, and imports of another package's `_module`, in one file."""
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules, names = [node.module], [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            modules, names = [a.name for a in node.names], []
        else:
            continue
        for module in modules:
            if not module.startswith(("workbench", "app", "benchmarks")) or module == me:
                continue
            parts = module.split(".")
            for i, part in enumerate(parts):
                # a private module may be imported from inside the package that holds it
                if _private(part) and not (package + ".").startswith(".".join(parts[:i]) + "."):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports private module {module}")
            found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {module}.{n}" for n in names if _private(n)]
    return found


def test_no_module_imports_another_modules_private_names():
    files = [f for part in ("workbench", "app", "benchmarks") for f in sorted((ROOT / part).rglob("*.py"))]
    bad = [line for f in files for line in private_imports(f)]
    assert not bad, "\n".join(bad)


def test_the_private_import_check_can_fail(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    pkg = tmp_path / "workbench" / "engine"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("from workbench.control.apply import _apply_one\n"
                              "from workbench.allocators._config import check_int\n"
                              "from workbench.engine._own import fine\n"
                              "from workbench.store import open_store\n")
    assert private_imports(pkg / "x.py") == [
        "workbench/engine/x.py:1 imports workbench.control.apply._apply_one",
        "workbench/engine/x.py:2 imports private module workbench.allocators._config",
    ]


def test_test_files_have_unique_names():
    """pytest imports test folders without `__init__.py` by their file's name alone: two `test_x.py`
    in two folders collide, and the second fails to collect ("import file mismatch")."""
    from collections import Counter

    names = Counter(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert [n for n, k in names.items() if k > 1] == []


def package_edges(graph: Any, root: str = "workbench") -> dict[str, dict[str, str]]:
    """Between the top-level packages (and modules) of `root` in an import graph (grimp's): importer ->
    imported -> one importing module's line ("workbench.a.x -> workbench.b.y")."""
    prefix = root.split(".")

    def top(module: str) -> str | None:
        parts = module.split(".")
        return parts[len(prefix)] if len(parts) > len(prefix) and parts[:len(prefix)] == prefix else None

    edges: dict[str, dict[str, str]] = {}
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            a, b = top(module), top(imported)
            if a and b and a != b:
                edges.setdefault(a, {}).setdefault(b, f"{module} -> {imported}")
    return edges


def package_cycles(edges: dict[str, dict[str, str]]) -> list[list[str]]:
    """Each strongly connected group of two or more packages (sorted): the cycles. The layers contract
    only checks the packages it lists; this checks every one."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            group: list[str] = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in order:
            visit(v)
    return sorted(groups)


def test_no_import_cycle_between_top_level_packages():
    """No package of the library imports (directly or through others) a package that imports it back;
    a failure names each import inside the cycle."""
    import grimp

    edges = package_edges(grimp.build_graph("workbench"))
    cycles = package_cycles(edges)
    assert cycles == [], "\n".join(
        " <-> ".join(c) + ": " + "; ".join(edges[a][b] for a in c for b in c if b in edges.get(a, {}))
        for c in cycles)


def test_no_import_cycle_between_files_of_the_engine():
    """The engine's files import each other one way (type-only imports included: grimp counts them):
    the run's context, setup and guards once formed a cycle."""
    import grimp

    cycles = package_cycles(package_edges(grimp.build_graph("workbench"), root="workbench.engine"))
    assert cycles == [], cycles


def test_the_cycle_check_can_fail():
    import grimp

    graph = grimp.ImportGraph()
    for m in ("workbench", "workbench.a", "workbench.a.x", "workbench.b", "workbench.c", "workbench.d"):
        graph.add_module(m)
    graph.add_import(importer="workbench.a.x", imported="workbench.b")
    graph.add_import(importer="workbench.b", imported="workbench.c")
    graph.add_import(importer="workbench.c", imported="workbench.a")
    graph.add_import(importer="workbench.d", imported="workbench.a")  # into the cycle, not part of it
    edges = package_edges(graph)
    assert edges["a"] == {"b": "workbench.a.x -> workbench.b"}
    assert package_cycles(edges) == [["a", "b", "c"]]
