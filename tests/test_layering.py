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


def _project_imports(path: Path) -> set[str]:
    """Dotted names of the project modules ``path`` imports, at any level (not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in out if name.split(".")[0] in ("pacml", "simulator", "workloads", "analysis")}


def _importers(package: str, module: str) -> set[str]:
    """Files of ``package`` that import ``module`` (or something inside it)."""
    return {path.relative_to(ROOT).as_posix() for path in sorted((ROOT / package).rglob("*.py"))
            if any(n == module or n.startswith(module + ".") for n in _project_imports(path))}


def test_the_command_plumbing_is_imported_by_the_entry_points_only() -> None:
    """simulator/cli.py (argv, Hydra preflight, exit status) sits on top: nothing below imports it back."""
    assert _importers("simulator", "simulator.cli") <= {"simulator/run.py", "simulator/place/cli.py"}
    assert not _importers("workloads", "simulator.cli") and not _importers("analysis", "simulator.cli")


#: The leaves of simulator/: what each may import of the project.
LEAVES = {
    "simulator/errors.py": set(),
    "simulator/estimate.py": set(),
    "simulator/config.py": {"simulator.errors", "simulator.estimate", "workloads.errors"},
}


@pytest.mark.parametrize("rel", sorted(LEAVES))
def test_the_config_leaves_import_nothing_above_them(rel: str) -> None:
    found = {name for name in _project_imports(ROOT / rel)
             if not any(name == ok or name.startswith(ok + ".") for ok in LEAVES[rel])}
    assert not found, f"{rel} imports {sorted(found)}"


#: Job allocation (which servers a job gets) sits below the cluster state, the simulation loop and the
#: policies; op placement (simulator/place/: which device runs each op) sits below job allocation.
BELOW = {
    "simulator/allocation": ("simulator.cluster", "simulator.simulation", "simulator.policy", "simulator.policies",
                             "simulator.feasibility", "simulator.records", "simulator.build", "simulator.run",
                             "simulator.cli"),
    "simulator/place": ("simulator.allocation", "simulator.cluster", "simulator.simulation", "simulator.policy",
                        "simulator.policies", "simulator.feasibility", "simulator.build", "simulator.run"),
}


@pytest.mark.parametrize("folder", sorted(BELOW))
def test_allocation_and_op_placement_keep_their_layer(folder: str) -> None:
    for path in sorted((ROOT / folder).rglob("*.py")):
        bad = {n for n in _project_imports(path) if any(n == m or n.startswith(m + ".") for m in BELOW[folder])}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


#: pacml's one-way order: the leaves (runfiles, shipped) <- agent (per-beta) <- critic <- adaptive; the
#: learned op placer (placer/) beside them, below none of the job-level agents. What each may not import:
PACML_NEVER = {
    "pacml/agent": ("pacml.critic", "pacml.adaptive", "pacml.placer", "pacml.cli"),
    "pacml/critic": ("pacml.adaptive", "pacml.placer", "pacml.cli"),
    "pacml/adaptive": ("pacml.placer", "pacml.cli"),
    "pacml/placer": ("pacml.agent", "pacml.critic", "pacml.adaptive", "pacml.cli"),
}
#: The one crossing: the per-beta agent's ppo.random_conditions draws the adaptive agent's training
#: conditions, from the conditions leaf.
PACML_ALLOWED = {"pacml/agent/ppo.py": {"pacml.adaptive.conditions"}}
#: pacml's leaves: what each may import of the project.
PACML_LEAVES = {
    "pacml/runfiles.py": {"simulator.errors", "workloads.io"},
    "pacml/shipped.py": {"pacml.runfiles", "simulator.errors"},
    "pacml/adaptive/conditions.py": {"simulator.errors", "simulator.topology"},
}


@pytest.mark.parametrize("folder", sorted(PACML_NEVER))
def test_pacml_subpackages_import_one_way(folder: str) -> None:
    for path in sorted((ROOT / folder).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        ok = PACML_ALLOWED.get(rel, set())
        bad = {n for n in _project_imports(path) if any(n == m or n.startswith(m + ".") for m in PACML_NEVER[folder])
               and not any(n == a or n.startswith(a + ".") for a in ok)}
        assert not bad, f"{rel} imports {sorted(bad)}"


@pytest.mark.parametrize("rel", sorted(PACML_LEAVES))
def test_pacml_leaves_import_nothing_above_them(rel: str) -> None:
    found = {name for name in _project_imports(ROOT / rel)
             if not any(name == ok or name.startswith(ok + ".") for ok in PACML_LEAVES[rel])}
    assert not found, f"{rel} imports {sorted(found)}"
