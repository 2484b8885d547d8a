"""Resolve graph specifications (files, directories, shipped model names) into graphs."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

from workloads.compute_graph import ComputeGraph
from workloads.dnn_partitioning import looks_like_dnn_partitioning, parse_dnn_partitioning
from workloads.errors import WorkloadError
from workloads.graph import TIME_UNIT_RANGE_S, OpGraph, TrainingGraph
from workloads.io import read_text
from workloads.json_format import load_json_graph
from workloads.pipedream import PIPEDREAM_TIME_UNIT_S, load_pipedream

log = logging.getLogger(__name__)

#: Directory of the data shipped with the package.
DATA_DIR = Path(__file__).resolve().parent / "data"
#: Directory of the shipped PipeDream profiles (one sub-directory per model).
PIPEDREAM_DIR = DATA_DIR / "pipedream"
#: The five graphs of the PAC-ML paper (spec §2.1).
PAPER_MODELS = ("alexnet", "gnmt", "resnet18", "squeezenet1_0", "vgg16")


def shipped_models() -> tuple[str, ...]:
    """Names of the PipeDream graphs shipped with the package."""
    return tuple(sorted(p.parent.name for p in PIPEDREAM_DIR.glob("*/graph.txt")))


def clock_unit_s(time_unit_s: float) -> float:
    """Real seconds per simulated second when PipeDream profile numbers get ``time_unit_s`` each.

    A profile number is a millisecond, so ``time_unit_s=1e-3`` (physical) gives 1.0 and the
    paper scenario's ``1.0`` (profile numbers used as the time unit) gives 1e-3.
    """
    return PIPEDREAM_TIME_UNIT_S / time_unit_s


def load_graph(path: str | Path, *, time_unit_s: float = PIPEDREAM_TIME_UNIT_S) -> OpGraph:
    """Load one graph file, choosing the format by suffix, on the clock ``time_unit_s`` sets.

    ``time_unit_s`` is the scenario's ``workload.profile_time_unit_s``: simulated seconds per
    PipeDream profile millisecond. PipeDream ``graph.txt`` times are multiplied by it; a ``.json``
    graph records the unit of its own times (``time_unit_s``, seconds by default) and is converted
    to the same clock, so a graph gives the same job whichever format it comes in (in the paper
    scenario a JSON graph in seconds has its times multiplied by 1000).
    """
    path = Path(path)
    low, high = TIME_UNIT_RANGE_S
    if not (isinstance(time_unit_s, int | float) and PIPEDREAM_TIME_UNIT_S / high <= time_unit_s
            <= PIPEDREAM_TIME_UNIT_S / low):
        raise WorkloadError(f"must be a number of seconds in [{PIPEDREAM_TIME_UNIT_S / high:g}, "
                            f"{PIPEDREAM_TIME_UNIT_S / low:g}], got {time_unit_s!r}",
                            field="workload.profile_time_unit_s")
    if path.suffix.lower() != ".json":
        return load_pipedream(path, time_unit_s=time_unit_s)
    graph = load_json_graph(path)
    clock = clock_unit_s(time_unit_s)
    if graph.time_unit_s != clock:
        log.info("%s: times in units of %g s converted to the scenario's unit of %g s (x%g)",
                 path, graph.time_unit_s, clock, graph.time_unit_s / clock)
        graph = graph.in_time_unit(clock)
    return graph


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
    if isinstance(spec, str | Path):
        items = [spec]
    elif isinstance(spec, Iterable) and not isinstance(spec, bytes | dict):
        items = list(spec)
    else:
        raise WorkloadError(f"expected a file, directory, shipped model or a list of these, got {spec!r}",
                            field="workload.graphs")
    if not items:
        raise WorkloadError("the graph set is empty", field="workload.graphs")
    paths: list[Path] = []
    for item in items:
        if not isinstance(item, str | Path):
            raise WorkloadError(f"expected a file, directory or shipped model name, got {item!r}",
                                field="workload.graphs")
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


#: Shipped dnn-partitioning graphs (Tarnawski et al.), throughput inputs, by file stem.
DNN_PARTITIONING_DIR = DATA_DIR / "dnn_partitioning"


def shipped_placement_graphs() -> dict[str, Path]:
    """Name -> file of every shipped graph usable by ``pacml-place``: the PipeDream models and the
    dnn-partitioning throughput inputs (e.g. ``bert24_training``)."""
    out = {m: PIPEDREAM_DIR / m / "graph.txt" for m in shipped_models()}
    for path in sorted((DNN_PARTITIONING_DIR / "throughput-inputs").glob("*/*.json")):
        out[path.stem] = path
    return out


def load_compute_graph(spec: str | Path) -> ComputeGraph:
    """A graph to place op by op, in seconds: a shipped name (see :func:`shipped_placement_graphs`)
    or a file. A dnn-partitioning document is recognised by its content; other files load as
    training graphs (forward ops and their backward mirrors) on the physical clock."""
    text = str(spec)
    shipped = shipped_placement_graphs()
    path = shipped.get(text, Path(text).expanduser())
    if not path.is_file():
        raise WorkloadError(f"graph {text!r} is not a file or a shipped graph "
                            f"(shipped: {', '.join(sorted(shipped))})", field="graph")
    if path.suffix.lower() == ".json":
        document = json.loads(read_text(path)) if path.stat().st_size < 200_000_000 else None
        if looks_like_dnn_partitioning(document):
            return parse_dnn_partitioning(document, path=path)
    graph = load_graph(path, time_unit_s=PIPEDREAM_TIME_UNIT_S)
    return ComputeGraph.from_training_graph(TrainingGraph(graph))
