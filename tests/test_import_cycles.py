"""No import cycles among the project's modules, counting function-level imports.

A function-level import hides a cycle from Python but not from a reader: the modules still need
each other. So every ``import`` and ``from ... import`` of a project module counts, wherever it
stands, except under ``if TYPE_CHECKING:`` (never run). The walk is the logic of our own tool
``import_cycles.py`` (the issue-44 audit), copied here so the test suite keeps it.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pacml", "simulator", "workloads", "analysis")

#: Modules of cycles tolerated for now: none (the pacml restructure of issue 44 removed the last one).
#: A cycle is tolerated only if all its modules are listed here; any other cycle fails the test.
KNOWN_CYCLES: frozenset[str] = frozenset()


def project_modules() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name (a package by its own name)."""
    mods: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The project module ``name`` lies in (``a.b.func`` -> ``a.b``), or ``None``."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (module- and function-level, not TYPE_CHECKING)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip |= {id(inner) for inner in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                names = [f"{base}.{alias.name}" for alias in node.names] + [base]
            else:
                continue
            graph[mod] |= {_resolve(n, mods) for n in names} - {None, mod}
    return graph


def cycles(graph: dict[str, set[str]], nodes: list[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in nodes:
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_import_cycles_beyond_the_known_one() -> None:
    mods = project_modules()
    new = [c for c in cycles(import_graph(mods), sorted(mods)) if not set(c) <= KNOWN_CYCLES]
    assert not new, "import cycles (function-level imports count): " + "; ".join(" <-> ".join(c) for c in new)


def test_the_walk_counts_function_level_imports_and_skips_type_checking(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import p.c\n\ndef f():\n    from p.b import g\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.c\nimport p.a\n")
    (tmp_path / "c.py").write_text("import os\n")
    mods = {f"p.{name}": tmp_path / f"{name}.py" for name in "abc"}
    graph = import_graph(mods)
    assert graph["p.a"] == {"p.b", "p.c"} and graph["p.b"] == {"p.a"} and not graph.get("p.c")
    assert cycles(graph, sorted(mods)) == [["p.a", "p.b"]]
