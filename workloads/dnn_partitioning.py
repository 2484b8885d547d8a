"""Reader for the JSON graphs of msr-fiddle/dnn-partitioning (Tarnawski et al., NeurIPS 2020).

The format: ``workloads/data/dnn_partitioning/README.md``. The result is a :class:`ComputeGraph`
with kinds ``cpu`` and ``accelerator`` (reference), times in seconds, one group per colour class,
and the file's own device set in ``meta`` (``max_accelerators``, ``accelerator_memory_bytes``,
``max_cpus``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from workloads.compute_graph import ComputeGraph
from workloads.errors import WorkloadError
from workloads.graph import MAX_OP_BYTES, MAX_OP_TIME_S, find_cycle
from workloads.io import read_text, show
from workloads.json_format import Locator, parse_json_document

#: Seconds per unit of the file's times (milliseconds).
DNN_PARTITIONING_TIME_UNIT_S = 1e-3
#: Device kinds of the format.
CPU_KIND, ACCELERATOR_KIND = "cpu", "accelerator"
TOP_KEYS = {"maxSizePerFPGA", "maxFPGAs", "maxCPUs", "nodes", "edges"}
NODE_KEYS = {"id", "supportedOnFpga", "cpuLatency", "fpgaLatency", "isBackwardNode", "colorClass", "size",
             "name", "layerId"}
EDGE_KEYS = {"sourceId", "destId", "cost", "size"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _number(value: Any, path: str, where: str, *, bound: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            0 <= value <= bound if isinstance(value, int) else math.isfinite(value) and 0 <= value <= bound):
        raise WorkloadError(f"expected a number in [0, {bound:g}], got {show(value)}", path=path, field=where)
    return float(value)


def _flag(value: Any, path: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if type(value) is int and value in (0, 1):
        return bool(value)
    raise WorkloadError(f"expected true/false or 0/1, got {show(value)}", path=path, field=where)


def _integer(value: Any, path: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadError(f"expected an integer, got {show(value)}", path=path, field=where)
    if abs(value) >= 2**63:  # ids become int64 arrays downstream
        raise WorkloadError(f"integer {show(value, 24)} out of range", path=path, field=where)
    return value


def _text(value: Any, path: str, where: str) -> str:
    if not isinstance(value, str) or not value or _CONTROL.search(value):
        raise WorkloadError(f"expected a non-empty string without control characters, got {show(value)}",
                            path=path, field=where)
    return value


_ELEMENT = re.compile(r"(nodes|edges)\[(\d+)\](?:\.(\w+))?")


def _check_record(item: Any, allowed: set[str], required: tuple[str, ...], path: str, where: str) -> None:
    """One node or edge: an object with only ``allowed`` keys and every ``required`` one."""
    if not isinstance(item, dict):
        raise WorkloadError(f"expected an object, got {show(item)}", path=path, field=where)
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise WorkloadError(f"unknown key (expected {', '.join(sorted(allowed))})", path=path,
                            field=f"{where}.{unknown[0]}")
    for key in required:
        if key not in item:
            raise WorkloadError("missing", path=path, field=f"{where}.{key}")


def parse_dnn_partitioning(document: Any, *, path: str | Path = "", name: str | None = None,
                           text: str | None = None) -> ComputeGraph:
    """Build a :class:`ComputeGraph` from a parsed dnn-partitioning document.

    ``text`` is the document's source text, if any: errors then also name the line.

    Raises:
        WorkloadError: On any missing, unknown or bad field (one line naming it, and the node or
            edge index: ``field 'nodes[3].cpuLatency'``).
    """
    try:
        return _parse(document, path=path, name=name)
    except WorkloadError as exc:
        if text is None or exc.line is not None or exc.field is None:
            raise
        loc = Locator(text)
        m = _ELEMENT.fullmatch(exc.field)
        line = loc.element_line(m[1], int(m[2]), m[3]) if m else loc.key_line(exc.field.split("[")[0])
        raise WorkloadError(exc.message, path=exc.path, line=line, field=exc.field) from None


def _parse(document: Any, *, path: str | Path, name: str | None) -> ComputeGraph:
    path = str(path)
    if not isinstance(document, dict):
        raise WorkloadError("expected a JSON object", path=path, line=1)
    unknown = sorted(set(document) - TOP_KEYS)
    if unknown:
        raise WorkloadError(f"unknown key (expected {', '.join(sorted(TOP_KEYS))})", path=path, field=unknown[0])
    for key in ("maxSizePerFPGA", "maxFPGAs", "nodes", "edges"):
        if key not in document:
            raise WorkloadError("missing", path=path, field=key)
    mem = _number(document["maxSizePerFPGA"], path, "maxSizePerFPGA", bound=MAX_OP_BYTES)
    if mem <= 0:
        raise WorkloadError("must be > 0", path=path, field="maxSizePerFPGA")
    fpgas = _integer(document["maxFPGAs"], path, "maxFPGAs")
    cpus = _integer(document.get("maxCPUs", 1), path, "maxCPUs")
    if not 1 <= fpgas <= 4096:
        raise WorkloadError(f"must be in 1..4096, got {fpgas}", path=path, field="maxFPGAs")
    if not 0 <= cpus <= 4096:
        raise WorkloadError(f"must be in 0..4096, got {cpus}", path=path, field="maxCPUs")
    nodes, edges = document["nodes"], document["edges"]
    if not isinstance(nodes, list) or not nodes:
        raise WorkloadError("expected a non-empty list", path=path, field="nodes")
    if not isinstance(edges, list):
        raise WorkloadError("expected a list", path=path, field="edges")
    bound_ms = MAX_OP_TIME_S / DNN_PARTITIONING_TIME_UNIT_S
    index: dict[int, int] = {}
    names: list[str] = []
    cpu_ms, acc_ms, size, backward, colour = [], [], [], [], []
    for i, node in enumerate(nodes):
        where = f"nodes[{i}]"
        _check_record(node, NODE_KEYS, ("id", "cpuLatency", "fpgaLatency", "size"), path, where)
        nid = _integer(node["id"], path, f"{where}.id")
        if nid in index:
            raise WorkloadError(f"node id {nid} given twice (also nodes[{index[nid]}])", path=path,
                                field=f"{where}.id")
        index[nid] = i
        names.append(_text(node["name"], path, f"{where}.name") if "name" in node else str(nid))
        if "layerId" in node:
            _integer(node["layerId"], path, f"{where}.layerId")  # debug field: checked, not used
        cpu_ms.append(_number(node["cpuLatency"], path, f"{where}.cpuLatency", bound=bound_ms))
        fpga = _number(node["fpgaLatency"], path, f"{where}.fpgaLatency", bound=bound_ms)
        supported = _flag(node.get("supportedOnFpga", True), path, f"{where}.supportedOnFpga")
        acc_ms.append(fpga if supported else math.inf)
        size.append(_number(node["size"], path, f"{where}.size", bound=MAX_OP_BYTES))
        backward.append(_flag(node.get("isBackwardNode", False), path, f"{where}.isBackwardNode"))
        c = node.get("colorClass")
        colour.append(None if c is None else _integer(c, path, f"{where}.colorClass"))
    src, dst, cost_ms, ebytes = [], [], [], []
    seen: dict[tuple[int, int], int] = {}
    for k, edge in enumerate(edges):
        where = f"edges[{k}]"
        _check_record(edge, EDGE_KEYS, ("sourceId", "destId", "cost"), path, where)
        s, d = _integer(edge["sourceId"], path, f"{where}.sourceId"), _integer(edge["destId"], path, f"{where}.destId")
        for end in (s, d):
            if end not in index:
                raise WorkloadError(f"node id {end} does not exist", path=path, field=where)
        if s == d:
            raise WorkloadError(f"self-loop on node {s}", path=path, field=where)
        if (s, d) in seen:
            raise WorkloadError(f"duplicate edge {s} -> {d} (also edges[{seen[s, d]}])", path=path, field=where)
        seen[s, d] = k
        src.append(index[s])
        dst.append(index[d])
        cost_ms.append(_number(edge["cost"], path, f"{where}.cost", bound=bound_ms))
        ebytes.append(_number(edge["size"], path, f"{where}.size", bound=MAX_OP_BYTES) if "size" in edge else math.nan)
    cycle = find_cycle(len(nodes), list(zip(src, dst, strict=True)))
    if cycle is not None:
        ids = {v: k for k, v in index.items()}
        shown = " -> ".join(str(ids[v]) for v in [*cycle[:6], cycle[0]])
        raise WorkloadError(f"the graph has a cycle: {shown}", path=path, field="edges")
    # Colour classes become groups; a node without a class is a group of its own.
    group_of: dict[tuple, int] = {}
    group = [group_of.setdefault(("c", c) if c is not None else ("n", i), len(group_of))
             for i, c in enumerate(colour)]
    if len(set(names)) != len(names):
        # Names are debug fields: placements need distinct node names, so use the ids instead.
        names = [str(nid) for nid in index]
    unit = DNN_PARTITIONING_TIME_UNIT_S
    graph_name = name or (Path(path).stem if path else "dnn-partitioning")
    return ComputeGraph(
        name=graph_name, node_names=tuple(names),
        kind_time_s={CPU_KIND: np.asarray(cpu_ms) * unit, ACCELERATOR_KIND: np.asarray(acc_ms) * unit},
        reference_kind=ACCELERATOR_KIND, memory_bytes=np.asarray(size),
        is_backward=np.asarray(backward, dtype=bool), group=np.asarray(group, dtype=np.int64),
        edges=np.asarray([src, dst], dtype=np.int64).T.reshape(-1, 2), edge_bytes=np.asarray(ebytes),
        edge_cost_s=np.asarray(cost_ms) * unit, source=path,
        meta={"format": "dnn-partitioning", "max_accelerators": fpgas, "accelerator_memory_bytes": mem,
              "max_cpus": cpus, "node_ids": tuple(index), "colour_class": tuple(colour),
              "backward_after_forward": bool(any(backward))})


def load_dnn_partitioning(path: str | Path) -> ComputeGraph:
    """Read a dnn-partitioning JSON file (see :func:`parse_dnn_partitioning`)."""
    # Control characters outside strings are JSON syntax errors, inside strings json rejects them.
    text = read_text(Path(path), allow_controls=True)
    return parse_dnn_partitioning(parse_json_document(text, path=path), path=path, text=text)
