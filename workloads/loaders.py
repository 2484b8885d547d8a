"""Resolve graph specifications (files, directories, shipped model names) into graphs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from workloads.errors import WorkloadError
from workloads.graph import OpGraph
from workloads.json_format import load_json_graph
from workloads.pipedream import PIPEDREAM_TIME_UNIT_S, load_pipedream

#: Directory of the data shipped with the package.
DATA_DIR = Path(__file__).resolve().parent / "data"
#: Directory of the shipped PipeDream profiles (one sub-directory per model).
PIPEDREAM_DIR = DATA_DIR / "pipedream"
#: The five graphs of the PAC-ML paper (spec §2.1).
PAPER_MODELS = ("alexnet", "gnmt", "resnet18", "squeezenet1_0", "vgg16")


def shipped_models() -> tuple[str, ...]:
    """Names of the PipeDream graphs shipped with the package."""
    return tuple(sorted(p.parent.name for p in PIPEDREAM_DIR.glob("*/graph.txt")))


def load_graph(path: str | Path, *, time_unit_s: float = PIPEDREAM_TIME_UNIT_S) -> OpGraph:
    """Load one graph file, choosing the format by suffix.

    ``.json`` files are pacml JSON graphs (times already in seconds); other files are PipeDream
    ``graph.txt`` profiles whose times are converted with ``time_unit_s``.
    """
    path = Path(path)
    if path.suffix.lower() == ".json":
        return load_json_graph(path)
    return load_pipedream(path, time_unit_s=time_unit_s)


def _graph_files(directory: Path) -> list[Path]:
    files = sorted(p for p in directory.rglob("*") if p.is_file() and (
        p.suffix.lower() == ".json" or p.name == "graph.txt"))
    if not files:
        raise WorkloadError("directory holds no graph files (*.json or */graph.txt)", path=directory)
    return files


def resolve_graph_paths(spec: str | Path | Iterable[str | Path]) -> list[Path]:
    """Turn a graph set specification into a list of files.

    ``spec`` is a file, a directory (searched recursively for ``*.json`` and ``graph.txt``),
    the name of a shipped model (e.g. ``"resnet18"``), the word ``"paper"`` (the paper's five
    graphs) or ``"all"`` (every shipped graph), or a list of any of these.
    """
    items: Sequence[str | Path]
    items = [spec] if isinstance(spec, str | Path) else list(spec)
    if not items:
        raise WorkloadError("the graph set is empty", field="workload.graphs")
    paths: list[Path] = []
    for item in items:
        text = str(item)
        candidate = Path(text).expanduser()
        if text == "paper":
            paths += [PIPEDREAM_DIR / m / "graph.txt" for m in PAPER_MODELS]
        elif text == "all":
            paths += [PIPEDREAM_DIR / m / "graph.txt" for m in shipped_models()]
        elif candidate.is_dir():
            paths += _graph_files(candidate)
        elif candidate.is_file():
            paths.append(candidate)
        elif (PIPEDREAM_DIR / text / "graph.txt").is_file():
            paths.append(PIPEDREAM_DIR / text / "graph.txt")
        else:
            raise WorkloadError(
                f"graph {text!r} is not a file, a directory or a shipped model "
                f"(shipped: {', '.join(shipped_models())})", field="workload.graphs")
    return paths


def load_graph_set(spec: str | Path | Iterable[str | Path], *,
                   time_unit_s: float = PIPEDREAM_TIME_UNIT_S) -> tuple[OpGraph, ...]:
    """Load every graph of a specification (see :func:`resolve_graph_paths`).

    Raises:
        WorkloadError: If a file is bad or two graphs share a name.
    """
    graphs: list[OpGraph] = []
    names: dict[str, Path] = {}
    for path in resolve_graph_paths(spec):
        graph = load_graph(path, time_unit_s=time_unit_s)
        if graph.name in names:
            raise WorkloadError(f"two graphs are named {graph.name!r} (also {names[graph.name]})",
                                path=path, field="name")
        names[graph.name] = path
        graphs.append(graph)
    return tuple(graphs)
