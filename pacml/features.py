"""Observation encoding: a pure function of ``(job, ClusterState)``.

The same encoder feeds the Gymnasium environment (training) and the policy plug-in (``pacml-sim``),
so a trained agent sees identical inputs in both.

* **Graph** (the job's unpartitioned training graph, cached per graph): node features
  ``[compute / max compute, is max compute, memory / max memory, is max memory, depth / max depth,
  is backward, compute / step time]`` (spec §8.5 with the always-zero "is max compute" fixed) and
  edge features ``[size / max size, is max size]``.
* **Globals**: beta, cluster occupancy, running jobs per server, the fraction of servers that
  come back within 1, 2, 4 and 8 mean inter-arrival times, the job's sequential JCT in
  inter-arrival times (log-scaled), its op count (log-scaled) and the episode's progress.
* **Action features** (one row per action ``a = 0..max_degree``; ``a`` is the partition
  degree, 0 rejects): is reject, a / max degree, in the action set, enough free servers,
  placeable now, meets the target, JCT / target, servers held / cluster size, extra servers
  beyond ``a`` / a, free blocks of size ``a`` / all blocks of size ``a``, and the server-time the
  job would hold, in cluster-interarrival units (log-scaled). These come from the simulator's
  shared feasibility function, so the agent's inputs are the same facts heuristics use.
* **Mask**: from the same feasibility function (``feasible`` by default: placeable and meeting the
  target; reject is always allowed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simulator.cluster import ClusterState
from simulator.feasibility import MaskKind
from workloads.graph import TrainingGraph
from workloads.jobs import JobSpec

NODE_FEATURES = 7
EDGE_FEATURES = 2
GLOBAL_FEATURES = 11
ACTION_FEATURES = 11


@dataclass(frozen=True)
class GraphFeatures:
    """Node and edge features of one job graph (float32, read-only).

    Attributes:
        key: The graph's content fingerprint.
        nodes: ``(num_ops, NODE_FEATURES)``.
        edges: ``(num_edges, EDGE_FEATURES)``.
        edge_index: ``(2, num_edges)`` int64 source/destination op indices.
    """

    key: str
    nodes: NDArray[np.float32]
    edges: NDArray[np.float32]
    edge_index: NDArray[np.int64]


def _norm(x: NDArray[np.float64]) -> NDArray[np.float64]:
    top = x.max() if x.size else 0.0
    return x / top if top > 0 else np.zeros_like(x)


def _is_max(x: NDArray[np.float64]) -> NDArray[np.float64]:
    out = np.zeros_like(x)
    if x.size and x.max() > 0:
        out[int(np.argmax(x))] = 1.0
    return out


def graph_features(graph: TrainingGraph) -> GraphFeatures:
    """Encode a training graph (pure; callers cache it by ``graph.fingerprint``)."""
    c = graph.compute_time_s
    m = graph.memory_bytes
    depth = graph.depth.astype(np.float64)
    n = graph.num_forward_ops
    is_bwd = np.concatenate([np.zeros(n), np.ones(n)])
    step = graph.step_time_s
    nodes = np.stack([_norm(c), _is_max(c), _norm(m), _is_max(m), _norm(depth), is_bwd,
                      c / step if step > 0 else np.zeros_like(c)], axis=1)
    size = graph.edge_bytes
    edges = np.stack([_norm(size), _is_max(size)], axis=1)
    out = GraphFeatures(graph.fingerprint, nodes.astype(np.float32), edges.astype(np.float32),
                        graph.edges.T.astype(np.int64).copy())
    for arr in (out.nodes, out.edges, out.edge_index):
        arr.setflags(write=False)
    return out


def _log_scaled(x: float) -> float:
    """Map a positive ratio to roughly [-1, 1]: log10(x) / 4, clipped."""
    if not (x > 0) or math.isinf(x):
        return 0.0 if not x > 0 else 1.0
    return float(np.clip(math.log10(x) / 4.0, -1.0, 1.0))


def _interarrival(state: ClusterState, fallback_s: float) -> float:
    gap = state.mean_interarrival_s
    return gap if gap > 0 and math.isfinite(gap) else fallback_s


def global_features(job: JobSpec, state: ClusterState, fallback_interarrival_s: float = 1.0) -> NDArray[np.float32]:
    """Job and cluster features for one decision (see module docstring)."""
    num = state.num_servers
    gap = _interarrival(state, fallback_interarrival_s)
    back = []
    for k in (1, 2, 4, 8):
        limit = state.time_s + k * gap
        back.append(sum(servers for end, servers in state.releases if end <= limit) / num)
    progress = state.time_s / state.horizon_s if state.horizon_s else 0.0
    return np.array([
        job.beta,
        state.occupancy,
        state.num_running_jobs / num,
        *back,
        _log_scaled(job.sequential_jct_s / gap),
        _log_scaled(job.graph.num_ops),
        min(progress, 1.0),
        job.num_training_steps / 100.0,
    ], dtype=np.float32)


def action_features(job: JobSpec, state: ClusterState, max_degree: int,
                    fallback_interarrival_s: float = 1.0) -> NDArray[np.float32]:
    """Per-action features, ``(max_degree + 1, ACTION_FEATURES)`` (see module docstring)."""
    table = state.feasibility
    num = state.num_servers
    gap = _interarrival(state, fallback_interarrival_s)
    out = np.zeros((max_degree + 1, ACTION_FEATURES), dtype=np.float32)
    out[0, 0] = 1.0
    out[0, 2] = 1.0
    for d in table.degrees:
        if d > max_degree:
            continue
        row = out[d]
        row[1] = d / max_degree
        row[2] = 1.0
        row[3] = float(table.enough_servers(d))
        all_blocks = len(state.topology.blocks(d))
        row[9] = len(table.free_blocks(d)) / all_blocks if all_blocks else 0.0
        placement = table.placement(d)
        if placement is None:
            continue
        jct = table.jct_s(d)
        assert jct is not None
        row[4] = 1.0
        row[5] = float(table.meets_target(d))
        row[6] = min(jct / job.max_jct_s, 4.0) / 4.0 if job.max_jct_s > 0 else 0.0
        row[7] = placement.num_servers / num
        row[8] = (placement.num_servers - d) / d
        row[10] = _log_scaled(placement.num_servers * jct / (num * gap))
    return out


def action_mask(state: ClusterState, max_degree: int, kind: MaskKind = "feasible") -> NDArray[np.bool_]:
    """Valid actions ``0..max_degree`` from the shared feasibility function."""
    return state.feasibility.mask(kind, max_degree)


class Encoder:
    """Builds observations, caching graph features by fingerprint.

    Args:
        max_degree: Largest action (the action space is ``0..max_degree``).
        mask: Which feasibility mask the agent acts under.
        fallback_interarrival_s: Inter-arrival time used before two arrivals were seen.
    """

    def __init__(self, max_degree: int, mask: MaskKind = "feasible", fallback_interarrival_s: float = 1.0) -> None:
        self.max_degree = max_degree
        self.mask: MaskKind = mask
        self.fallback_interarrival_s = fallback_interarrival_s
        self._graphs: dict[str, GraphFeatures] = {}

    def graph(self, graph: TrainingGraph) -> GraphFeatures:
        """Graph features (cached)."""
        feats = self._graphs.get(graph.fingerprint)
        if feats is None:
            feats = self._graphs[graph.fingerprint] = graph_features(graph)
        return feats

    def encode(self, job: JobSpec, state: ClusterState) -> dict:
        """The observation dict: ``graph`` (GraphFeatures), ``globals``, ``actions``, ``action_mask``."""
        return {
            "graph": self.graph(job.graph),
            "globals": global_features(job, state, self.fallback_interarrival_s),
            "actions": action_features(job, state, self.max_degree, self.fallback_interarrival_s),
            "action_mask": action_mask(state, self.max_degree, self.mask),
        }
