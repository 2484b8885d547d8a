"""Imports point one way: workloads <- simulator <- pacml; the simulator never needs torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "workloads": {"torch", "torch_geometric", "gymnasium", "simpy", "simulator", "pacml", "analysis", "matplotlib"},
    "simulator": {"torch", "torch_geometric", "gymnasium", "pacml", "analysis", "matplotlib"},
    "analysis": {"torch", "torch_geometric", "gymnasium", "simulator", "pacml", "simpy"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


#: The one exception: pacml-place draws its Gantt chart with analysis.gantt (imported lazily).
ALLOWED = {"simulator/place/cli.py": {"analysis"}}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_import_forbidden_modules(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        bad = _imports(path) & FORBIDDEN[package] - ALLOWED.get(rel, set())
        assert not bad, f"{rel} imports {sorted(bad)}"


def test_the_one_exception_imports_only_analysis_gantt_and_lazily() -> None:
    tree = ast.parse((ROOT / "simulator/place/cli.py").read_text())
    top = {n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)}
    analysis = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("analysis")]
    assert analysis and all(n.module == "analysis.gantt" and n not in top for n in analysis)


def test_running_the_simulator_loads_neither_torch_nor_gymnasium() -> None:
    code = ("import sys; import simulator.run, simulator.build, workloads; "
            "from simulator.policies import heuristics; "
            "bad = [m for m in ('torch', 'gymnasium', 'torch_geometric') if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""
