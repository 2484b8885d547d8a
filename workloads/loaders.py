"""Resolve graph specifications (files, directories, shipped model names) into graphs."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workloads.compute_graph import ComputeGraph
from workloads.dnn_partitioning import (
    TOP_KEYS as DNN_TOP_KEYS,
)
from workloads.dnn_partitioning import (
    parse_dnn_partitioning,
)
from workloads.errors import WorkloadError
from workloads.graph import TIME_UNIT_RANGE_S, OpGraph, TrainingGraph
from workloads.io import read_text
from workloads.json_format import (
    COMPUTE_FORMAT_VERSION,
    json_document_version,
    parse_compute_graph,
    parse_json_document,
    parse_json_graph,
)
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


#: The graph formats, by the name messages use, and what tells each apart (the content, not the
#: file name).
PIPEDREAM = "PipeDream graph.txt"
PACML_JSON = "pacml JSON"
DNN_PARTITIONING = "dnn-partitioning JSON"
FORMATS_TRIED = (f"{PIPEDREAM} (lines 'node<ID> -- ...')", f"{PACML_JSON} (\"format\": \"pacml-graph\")",
                 f"{DNN_PARTITIONING} (\"maxFPGAs\", \"nodes\")")
_PACML_KEYS = frozenset({"format", "version", "ops"})
#: Keys of a dnn-partitioning *split* (``human-experts/*.json``): a placement, not a graph.
_SPLIT_KEYS = frozenset({"cpus", "fpgas"})


@dataclass(frozen=True)
class DetectedGraph:
    """A graph file whose format was recognised from its content.

    Attributes:
        path: The file.
        format: :data:`PIPEDREAM`, :data:`PACML_JSON` or :data:`DNN_PARTITIONING`.
        version: The pacml JSON version (1 or 2), else ``None``.
        text: The file's text.
        document: The parsed JSON document (``None`` for PipeDream).
    """

    path: Path
    format: str
    version: int | None
    text: str
    document: Any = None

    @property
    def description(self) -> str:
        """The format in words, e.g. ``pacml JSON version 2``."""
        return f"{self.format} version {self.version}" if self.version else self.format


def _unknown_format(path: Path, what: str) -> WorkloadError:
    return WorkloadError(f"{what}: not a graph in any known format (tried {'; '.join(FORMATS_TRIED)})",
                         path=path, line=1)


def detect_graph_format(path: str | Path) -> DetectedGraph:
    """Read ``path`` and recognise its format from the content, not the suffix (the rules:
    docs/workloads.md, "Graph formats").

    Raises:
        WorkloadError: If the file cannot be read, is not valid JSON (once it looks like JSON) or
            is in no known format (one line listing the formats tried).
    """
    path = Path(path)
    # Controls are checked per format: JSON rejects them itself, PipeDream's reader names them.
    text = read_text(path, allow_controls=True)
    head = text.lstrip(" \t\r\n")
    if head.startswith(("{", "[")):
        doc = parse_json_document(text, path=path)
        if isinstance(doc, dict):
            keys = set(doc)
            if keys & _PACML_KEYS:
                return DetectedGraph(path, PACML_JSON, json_document_version(doc), text, doc)
            if keys & DNN_TOP_KEYS:
                return DetectedGraph(path, DNN_PARTITIONING, None, text, doc)
            if keys >= _SPLIT_KEYS:
                raise WorkloadError("a dnn-partitioning split (cpus/fpgas: which node goes where), not a graph",
                                    path=path, line=1)
            shown = ", ".join(sorted(keys)[:5]) or "none"
            raise _unknown_format(path, f"a JSON object with keys {shown}")
        raise _unknown_format(path, f"a JSON {type(doc).__name__.replace('dict', 'object')}")
    if not head:
        raise _unknown_format(path, "empty graph file")
    if head.startswith("node"):
        return DetectedGraph(path, PIPEDREAM, None, text)
    read_text(path)  # a control character or NUL byte: say that, naming its line
    raise _unknown_format(path, "text that is neither JSON nor a PipeDream profile")


def _check_time_unit(time_unit_s: float) -> None:
    low, high = TIME_UNIT_RANGE_S
    if not (isinstance(time_unit_s, int | float) and PIPEDREAM_TIME_UNIT_S / high <= time_unit_s
            <= PIPEDREAM_TIME_UNIT_S / low):
        raise WorkloadError(f"must be a number of seconds in [{PIPEDREAM_TIME_UNIT_S / high:g}, "
                            f"{PIPEDREAM_TIME_UNIT_S / low:g}], got {time_unit_s!r}",
                            field="workload.profile_time_unit_s")


def compute_graph_of(detected: DetectedGraph) -> ComputeGraph:
    """The :class:`ComputeGraph` of a recognised file (a PipeDream or version-1 JSON graph becomes
    its training step: forward ops and their backward mirrors, on the physical clock)."""
    if detected.format == DNN_PARTITIONING:
        return parse_dnn_partitioning(detected.document, path=detected.path, text=detected.text)
    if detected.format == PACML_JSON and detected.version == COMPUTE_FORMAT_VERSION:
        return parse_compute_graph(detected.text, path=detected.path, document=detected.document)
    graph = op_graph_of(detected, time_unit_s=PIPEDREAM_TIME_UNIT_S)
    return ComputeGraph.from_training_graph(TrainingGraph(graph))


def op_graph_of(detected: DetectedGraph, *, time_unit_s: float = PIPEDREAM_TIME_UNIT_S) -> OpGraph:
    """The cluster simulator's :class:`OpGraph` of a recognised file, on the clock ``time_unit_s``
    sets (see :func:`load_graph`); a computation graph is mapped by :func:`op_graph_from_compute_graph`."""
    path = detected.path
    if detected.format == PIPEDREAM:
        return load_pipedream(path, time_unit_s=time_unit_s)
    if detected.format == PACML_JSON and detected.version != COMPUTE_FORMAT_VERSION:
        graph = parse_json_graph(detected.text, path=path, document=detected.document)
    else:
        graph = op_graph_from_compute_graph(compute_graph_of(detected))
    clock = PIPEDREAM_TIME_UNIT_S / time_unit_s  # real seconds per simulated second
    if graph.time_unit_s != clock:
        log.info("%s: times in units of %g s converted to the scenario's unit of %g s (x%g)",
                 path, graph.time_unit_s, clock, graph.time_unit_s / clock)
        graph = graph.in_time_unit(clock)
    return graph


def op_graph_from_compute_graph(graph: ComputeGraph) -> OpGraph:
    """Map a computation graph onto the cluster simulator's forward graph, in seconds (the rules:
    docs/workloads.md, "Graph formats").

    Raises:
        WorkloadError: If that cannot be done: a forward node that cannot run on the reference
            kind, or backward nodes in a group with no forward node (their time would be lost).
    """
    forward = np.flatnonzero(~graph.is_backward)
    backward = np.flatnonzero(graph.is_backward)
    if not len(forward):
        raise WorkloadError("has no forward node: cannot be a workload graph of the cluster simulator",
                            path=graph.source, field="nodes")
    time_s = graph.kind_time_s[graph.reference_kind]
    bad = [*forward[np.isinf(time_s[forward])], *backward[np.isinf(time_s[backward])]]
    if bad:
        raise WorkloadError(f"node {graph.node_names[bad[0]]!r} cannot run on the {graph.reference_kind!r} kind: "
                            "the cluster simulator runs every op on an accelerator", path=graph.source,
                            field="nodes")
    fwd_of_group = np.zeros(graph.num_groups, dtype=np.int64)
    np.add.at(fwd_of_group, graph.group[forward], 1)
    orphan = backward[fwd_of_group[graph.group[backward]] == 0]
    if len(orphan):
        raise WorkloadError(
            f"{len(orphan)} backward node(s), e.g. {graph.node_names[orphan[0]]!r}, belong to no forward node's "
            "group (colour class): their time cannot be given to a forward op, so the graph cannot be a "
            "workload of the cluster simulator (it can still be placed op by op)", path=graph.source,
            field="nodes")
    # Backward time of each group, shared among its forward nodes by forward time.
    group_backward_s = np.bincount(graph.group[backward], weights=time_s[backward], minlength=graph.num_groups)
    group_forward_s = np.bincount(graph.group[forward], weights=time_s[forward], minlength=graph.num_groups)
    g = graph.group[forward]
    share = np.where(group_forward_s[g] > 0, time_s[forward] / np.where(group_forward_s[g] > 0, group_forward_s[g], 1),
                     1.0 / fwd_of_group[g])
    backward_s = group_backward_s[g] * share
    position = np.full(graph.num_nodes, -1, dtype=np.int64)
    position[forward] = np.arange(len(forward))
    keep = ~graph.is_backward[graph.edges[:, 0]] & ~graph.is_backward[graph.edges[:, 1]]
    edges = position[graph.edges[keep]].reshape(-1, 2)
    activation = np.zeros(len(forward))
    sizes = np.nan_to_num(graph.edge_bytes[keep], nan=0.0)
    np.maximum.at(activation, edges[:, 0], sizes)
    has_succ = np.zeros(len(forward), dtype=bool)
    has_succ[edges[:, 0]] = True
    names = tuple(graph.node_names[i] for i in forward.tolist())
    return OpGraph(
        name=graph.name, op_ids=names, labels=names,
        forward_time_s=time_s[forward], backward_time_s=backward_s,
        activation_bytes=activation, parameter_bytes=graph.memory_bytes[forward], edges=edges,
        loss_index=int(np.flatnonzero(~has_succ)[-1]), source=graph.source, time_unit_s=1.0)


def load_graph(path: str | Path, *, time_unit_s: float = PIPEDREAM_TIME_UNIT_S) -> OpGraph:
    """Load one graph file, recognising its format from the content, on the clock ``time_unit_s`` sets.

    ``time_unit_s`` is the scenario's ``workload.profile_time_unit_s`` (simulated seconds per
    PipeDream profile millisecond); every format is converted to that clock (docs/workloads.md,
    "Time units of graphs"). A computation graph is mapped by :func:`op_graph_from_compute_graph`.
    """
    _check_time_unit(time_unit_s)
    return op_graph_of(detect_graph_format(path), time_unit_s=time_unit_s)


def _graph_files(directory: Path) -> list[Path]:
    files = sorted(p for p in directory.rglob("*") if p.is_file() and (
        p.suffix.lower() == ".json" or p.name == "graph.txt"))
    if not files:
        raise WorkloadError("directory holds no graph files (*.json or */graph.txt)", path=directory)
    return files


def resolve_graph_paths(spec: str | Path | Iterable[str | Path]) -> list[Path]:
    """Turn a graph set specification into a list of files.

    ``spec`` is a file, a directory (searched recursively for ``*.json`` and ``graph.txt``),
    the name of a shipped model (e.g. ``"resnet18"``) or dnn-partitioning graph (e.g.
    ``"bert24_training"``), the word ``"paper"`` (the paper's five
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
        elif text in shipped_placement_graphs():  # a dnn-partitioning graph, e.g. bert24_training
            paths.append(shipped_placement_graphs()[text])
        else:
            raise WorkloadError(
                f"graph {text!r} is not a file, a directory or a shipped model "
                f"(shipped: {', '.join(shipped_models())}; dnn-partitioning: "
                f"{', '.join(n for n in shipped_placement_graphs() if n not in shipped_models())})",
                field="workload.graphs")
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
    """Name -> file of every shipped graph usable by ``pacml place``: the PipeDream models and the
    dnn-partitioning throughput inputs (e.g. ``bert24_training``)."""
    out = {m: PIPEDREAM_DIR / m / "graph.txt" for m in shipped_models()}
    for path in sorted((DNN_PARTITIONING_DIR / "throughput-inputs").glob("*/*.json")):
        out[path.stem] = path
    return out


def load_compute_graph(spec: str | Path) -> ComputeGraph:
    """A graph to place op by op, in seconds: a shipped name (see :func:`shipped_placement_graphs`)
    or a file in any format, recognised by its content (see :func:`detect_graph_format`):
    dnn-partitioning and pacml JSON version 2 files keep their per-kind times, groups, backward
    nodes and edge costs; PipeDream and version-1 files load as training graphs (forward ops and
    their backward mirrors) on the physical clock. A directory is read as ``pacml sim``'s
    ``workload.graphs`` reads one (:func:`resolve_graph_paths`: its ``*.json`` and ``graph.txt``
    files, e.g. a PipeDream model folder) and must hold exactly one graph."""
    text = str(spec)
    shipped = shipped_placement_graphs()
    path = shipped.get(text, Path(text).expanduser())
    if path.is_dir():
        files = resolve_graph_paths(path)
        if len(files) > 1:
            shown = ", ".join(str(f.relative_to(path)) for f in files[:4]) + (", ..." if len(files) > 4 else "")
            raise WorkloadError(f"directory holds {len(files)} graph files ({shown}); name one of them",
                                path=path, field="graph")
        path = files[0]
    if not path.is_file():
        raise WorkloadError(f"graph {text!r} is not a file, a directory or a shipped graph "
                            f"(shipped: {', '.join(sorted(shipped))})", field="graph")
    return compute_graph_of(detect_graph_format(path))
