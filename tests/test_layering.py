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


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_import_forbidden_modules(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imports(path) & FORBIDDEN[package]
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_running_the_simulator_loads_neither_torch_nor_gymnasium() -> None:
    code = ("import sys; import simulator.run, simulator.build, workloads; "
            "from simulator.policies import heuristics; "
            "bad = [m for m in ('torch', 'gymnasium', 'torch_geometric') if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""
