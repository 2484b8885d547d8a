"""A person's split: the shipped human-expert splits, a user's split file, or contiguous layers.

Both the file format and the contiguous split: docs/op-placement.md ("The heuristics and searches
in detail").
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError
from simulator.place.devices import CPU_KIND
from simulator.place.objectives import BoundObjective
from simulator.place.placer import PlacerResult, expand_groups, timed_place
from workloads.errors import WorkloadError
from workloads.io import read_text
from workloads.loaders import DNN_PARTITIONING_DIR

log = logging.getLogger(__name__)

#: Where the shipped human-expert splits live.
EXPERT_DIR = DNN_PARTITIONING_DIR / "human-experts"


def shipped_expert_file(graph_name: str) -> Path | None:
    """The shipped split for a graph name, or for its inference graph when it is a training graph."""
    for stem in (graph_name, graph_name.removesuffix("_training") + "_inference"):
        path = EXPERT_DIR / f"{stem}_expert.json"
        if path.is_file():
            return path
    return None


def read_split(path: str | Path, objective: BoundObjective) -> NDArray[np.int64]:
    """Read a split file into a placement of ``objective.graph`` on ``objective.devices``; a
    WorkloadError names the file and the bad id, key or device."""
    g, dev = objective.graph, objective.devices
    text = read_text(Path(path))
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno) from None
    if not isinstance(document, dict) or not ({"cpus", "fpgas"} & set(document)):
        raise WorkloadError("expected a JSON object with 'cpus' and 'fpgas' lists of {\"nodes\": [ids]}", path=path)
    # Node ids: the file's own ids for dnn-partitioning graphs, else the node names.
    ids = list(g.meta.get("node_ids") or g.node_names)
    index: dict[Any, int] = {nid: i for i, nid in enumerate(ids)}
    cpus = [i for i, d in enumerate(dev.devices) if d.kind == CPU_KIND]
    accs = [i for i, d in enumerate(dev.devices) if d.kind != CPU_KIND]
    placement = np.full(g.num_nodes, -1, dtype=np.int64)
    for key, devices in (("cpus", cpus), ("fpgas", accs)):
        machines = document.get(key, [])
        if not isinstance(machines, list):
            raise WorkloadError("expected a list", path=path, field=key)
        for m, machine in enumerate(machines):
            where = f"{key}[{m}]"
            if not isinstance(machine, dict) or not isinstance(machine.get("nodes", []), list):
                raise WorkloadError(f"{where}: expected an object with a 'nodes' list", path=path)
            nodes = machine.get("nodes", [])
            if nodes and m >= len(devices):
                raise WorkloadError(f"{where}: the split uses {len(machines)} {key} but {dev.name} has "
                                    f"{len(devices)} {'CPU' if key == 'cpus' else 'accelerator'} devices", path=path)
            for nid in nodes:
                if isinstance(nid, bool) or nid not in index:
                    raise WorkloadError(f"{where}: node id {nid!r} is not in graph {g.name!r}", path=path)
                i = index[nid]
                if placement[i] >= 0:
                    raise WorkloadError(f"{where}: node id {nid!r} is placed twice", path=path)
                placement[i] = devices[m]
    # Unnamed nodes follow their group (the backward nodes of a training graph).
    for group, members in enumerate(g.group_members):
        placed = np.unique(placement[members][placement[members] >= 0])
        if len(placed) > 1:
            names = [dev.names[d] for d in placed.tolist()]
            raise WorkloadError(f"group {group} (node {ids[members[0]]!r} and others) is split "
                                f"across {', '.join(names)}; a group is placed whole", path=path)
        if len(placed) == 0:
            raise WorkloadError(f"node id {ids[members[0]]!r} is not placed and nothing in its "
                                "group is", path=path)
        placement[members] = placed[0]
    return placement


def layer_order(graph) -> list[int]:
    """Groups in the order a person reads the layers: forward nodes as late as possible (a weight or
    constant sits just before its consumer, not at the start), then backward nodes."""
    n = graph.num_nodes
    topo = list(graph.topological_order)
    position = np.empty(n, dtype=np.int64)
    position[topo] = np.arange(n)
    fwd = ~graph.is_backward
    hops = np.zeros(n, dtype=np.int64)  # longest forward path to a sink, in edges
    out: list[list[int]] = [[] for _ in range(n)]
    for s, d in graph.edges.tolist():
        if fwd[s] and fwd[d]:
            out[s].append(d)
    for v in reversed(topo):
        if out[v]:
            hops[v] = 1 + max(hops[w] for w in out[v])
    by_layer = sorted(topo, key=lambda v: (bool(graph.is_backward[v]), -hops[v], position[v]))
    return list(dict.fromkeys(int(graph.group[v]) for v in by_layer))


def contiguous_layers(objective: BoundObjective) -> tuple[NDArray[np.int64], dict[str, Any]]:
    """Groups in layer order (:func:`layer_order`) cut into one chunk per accelerator, balanced by
    compute (docs/op-placement.md); returns the placement and facts for ``summary.json``."""
    g, dev = objective.graph, objective.devices
    cpus = [i for i, d in enumerate(dev.devices) if d.kind == CPU_KIND]
    accs = [i for i, d in enumerate(dev.devices) if d.kind != CPU_KIND] or cpus[:1]
    # Work of a group: its time on the first accelerator (forward and backward) times that device's speed.
    ref = accs[0]
    node_t = objective.time_s[:, ref] * dev.devices[ref].speed
    work = np.bincount(g.group, weights=np.where(np.isfinite(node_t), node_t, 0.0), minlength=g.num_groups)
    mem = g.group_memory_bytes
    speeds = np.array([dev.devices[d].speed for d in accs])
    shares = np.cumsum(speeds) / speeds.sum() * work.sum()  # cumulative compute target after each chunk
    group_device = np.full(g.num_groups, accs[-1], dtype=np.int64)
    chunk, done, used = 0, 0.0, 0.0
    spilled, respected = False, True
    for k in layer_order(g):
        if spilled:
            group_device[k] = cpus[0]
            continue
        last = chunk == len(accs) - 1
        cap = dev.devices[accs[chunk]].memory_bytes
        # Close the chunk when the group crosses the target by more than half its work, or would not fit.
        over_target = done + work[k] / 2 > shares[chunk]
        if not last and used > 0 and (over_target or used + mem[k] > cap):
            chunk += 1
            used = 0.0
            cap = dev.devices[accs[chunk]].memory_bytes
        elif last and used + mem[k] > cap * (1 + 1e-12) and cpus and accs[chunk] not in cpus:
            spilled = True
            group_device[k] = cpus[0]
            continue
        group_device[k] = accs[chunk]
        used += mem[k]
        done += work[k]
        if used > cap * (1 + 1e-12):
            respected = False
    return expand_groups(objective, group_device), {"memory_respected": respected, "host_spill": spilled}


class ExpertPlacer:
    """A person's split (see module docstring); arguments: ``conf/method/expert.yaml``."""

    name = "expert"

    def __init__(self, path: str | None = None, shipped: bool = True) -> None:
        if path is not None and (not isinstance(path, str | Path) or not str(path)):
            raise ConfigError(f"expected a split file or null, got {path!r}", field="method.path")
        if path is not None and not Path(path).expanduser().is_file():
            raise ConfigError(f"no such file: {path}", field="method.path")
        if not isinstance(shipped, bool):
            raise ConfigError(f"expected true or false, got {shipped!r}", field="method.shipped")
        self.path = None if path is None else Path(path).expanduser()
        self.shipped = shipped

    @timed_place
    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """The split from a file when there is one, else contiguous layers balanced by compute."""
        path = self.path or (shipped_expert_file(objective.graph.name) if self.shipped else None)
        if path is not None:
            placement = read_split(path, objective)
            info: dict[str, Any] = {"split": "file", "file": str(path)}
        else:
            placement, info = contiguous_layers(objective)
            info = {"split": "contiguous_layers", **info}
        reason = objective.infeasibility(placement)
        if reason:
            info["feasible"] = False
            info["reason"] = reason
            log.info("expert: %s", reason)
        info["devices_used"] = int(len(np.unique(placement))) if len(placement) else 0
        return PlacerResult(placement, info=info)


__all__ = ["ExpertPlacer", "contiguous_layers", "read_split", "shipped_expert_file"]
