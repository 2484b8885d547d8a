"""Loader for PipeDream profiler ``graph.txt`` files (spec §2.2).

Node line (no leading tab)::

    node<ID> -- <layer description> -- forward_compute_time=<ms>, backward_compute_time=<ms>,
    activation_size=<bytes or [b; b; ...]>, parameter_size=<bytes>[ -- stage_id=<int>]

Edge line (leading tab)::

    \\tnode<SRC> -- node<DST>

List-valued activation sizes (GNMT's multi-output LSTMs) are summed, as PipeDream's own parser
does. Times are milliseconds in the profiles; ``time_unit_s`` converts them to seconds.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from workloads.errors import WorkloadError
from workloads.graph import OpGraph, topological_order

#: Unit of PipeDream profile times, in seconds (the profiler reports milliseconds).
PIPEDREAM_TIME_UNIT_S = 1e-3

_FIELDS = ("forward_compute_time", "backward_compute_time", "activation_size", "parameter_size")
_KV = re.compile(r"(\w+)=(\[[^\]]*\]|[^,\s]+)")


def _number(text: str, *, path: Path, line: int, field: str) -> float:
    text = text.strip()
    try:
        if text.startswith("["):
            parts = [p for p in re.split(r"[;,]", text.strip("[]")) if p.strip()]
            if not parts:
                raise ValueError("empty list")
            value = sum(float(p) for p in parts)
        else:
            value = float(text)
    except ValueError:
        raise WorkloadError(f"not a number: {text!r}", path=path, line=line, field=field) from None
    if math.isnan(value) or math.isinf(value):
        raise WorkloadError(f"value is {value}", path=path, line=line, field=field)
    if value < 0:
        raise WorkloadError(f"negative value {value}", path=path, line=line, field=field)
    return value


def load_pipedream(path: str | Path, *, name: str | None = None,
                   time_unit_s: float = PIPEDREAM_TIME_UNIT_S) -> OpGraph:
    """Parse a PipeDream ``graph.txt`` into an :class:`OpGraph` (times in seconds).

    Args:
        path: The ``graph.txt`` file.
        name: Model name; defaults to the parent directory name (``profiles/<model>/graph.txt``)
            or the file stem.
        time_unit_s: Seconds per profile time unit (1e-3 for real PipeDream profiles; the
            ``paper`` preset uses 1.0, treating profile numbers as the time unit, spec §9.1).

    Raises:
        WorkloadError: On any malformed line, unknown node, cycle or bad value; the message
            names the file, the line and the field.
    """
    path = Path(path)
    if name is None:
        name = path.parent.name if path.stem == "graph" else path.stem
    try:
        text = path.read_text()
    except OSError as exc:
        raise WorkloadError(f"cannot read graph file: {exc.strerror}", path=path) from None

    ids: list[str] = []
    labels: list[str] = []
    values: list[tuple[float, float, float, float]] = []
    index: dict[str, int] = {}
    edges: list[tuple[int, int]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        tokens = [t.strip() for t in raw.strip().split(" -- ")]
        if raw.startswith("\t") or (len(tokens) == 2 and not any("=" in t for t in tokens)):
            if len(tokens) != 2 or not all(tokens):
                raise WorkloadError(f"malformed edge line {raw.strip()!r} (expected 'nodeA -- nodeB')",
                                    path=path, line=lineno)
            for end, tok in zip(("src", "dst"), tokens, strict=True):
                if tok not in index:
                    raise WorkloadError(f"edge refers to unknown node {tok!r}", path=path,
                                        line=lineno, field=end)
            edges.append((index[tokens[0]], index[tokens[1]]))
            continue
        if edges:
            raise WorkloadError("node line after edge lines", path=path, line=lineno)
        meta_pos = next((i for i, t in enumerate(tokens) if "forward_compute_time" in t), None)
        if len(tokens) < 2 or meta_pos is None or meta_pos == 0:
            raise WorkloadError(
                "malformed node line (expected 'nodeID -- description -- forward_compute_time=..., ...')",
                path=path, line=lineno)
        node_id = tokens[0]
        if not re.fullmatch(r"node\d+", node_id):
            raise WorkloadError(f"bad node id {node_id!r} (expected node<integer>)", path=path,
                                line=lineno, field="id")
        if node_id in index:
            raise WorkloadError(f"duplicate node id {node_id!r}", path=path, line=lineno, field="id")
        kv = dict(_KV.findall(tokens[meta_pos]))
        missing = [f for f in _FIELDS if f not in kv]
        if missing:
            raise WorkloadError(f"missing {', '.join(missing)}", path=path, line=lineno, field=missing[0])
        fwd, bwd, act, par = (_number(kv[f], path=path, line=lineno, field=f) for f in _FIELDS)
        index[node_id] = len(ids)
        ids.append(node_id)
        labels.append(" -- ".join(tokens[1:meta_pos]))
        values.append((fwd, bwd, act, par))

    if not ids:
        raise WorkloadError("no nodes found", path=path)
    edge_arr = np.array(edges, dtype=np.int64).reshape(-1, 2)
    if len(set(edges)) != len(edges):
        dup = next(e for i, e in enumerate(edges) if e in edges[:i])
        raise WorkloadError(f"duplicate edge {ids[dup[0]]} -> {ids[dup[1]]}", path=path)
    try:
        topological_order(len(ids), edge_arr)
    except ValueError:
        raise WorkloadError(_cycle_message(ids, edges), path=path) from None
    # The original joins the backward pass at the op with the highest numeric id (the loss).
    loss_index = max(range(len(ids)), key=lambda i: int(ids[i][4:]))
    vals = np.array(values, dtype=np.float64)
    return OpGraph(
        name=name, op_ids=tuple(ids), labels=tuple(labels),
        forward_time_s=vals[:, 0] * time_unit_s, backward_time_s=vals[:, 1] * time_unit_s,
        activation_bytes=vals[:, 2], parameter_bytes=vals[:, 3],
        edges=edge_arr, loss_index=loss_index, source=str(path),
    )


def _cycle_message(ids: list[str], edges: list[tuple[int, int]]) -> str:
    """Describe one cycle as 'a -> b -> a'.

    Kahn's algorithm leaves every node on or behind a cycle with a remaining predecessor;
    walking remaining predecessors from any of them must revisit a node, closing a cycle.
    """
    n = len(ids)
    indeg = [0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    for s, d in edges:
        succ[s].append(d)
        pred[d].append(s)
        indeg[d] += 1
    queue = [i for i in range(n) if indeg[i] == 0]
    removed = [False] * n
    while queue:
        u = queue.pop()
        removed[u] = True
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                queue.append(v)
    node = next(i for i in range(n) if not removed[i])
    seen: dict[int, int] = {}
    walk: list[int] = []
    while node not in seen:
        seen[node] = len(walk)
        walk.append(node)
        node = next(p for p in pred[node] if not removed[p])
    cycle = walk[seen[node]:][::-1]
    return "graph has a cycle: " + " -> ".join(ids[i] for i in [*cycle, cycle[0]])
