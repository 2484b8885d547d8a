"""Observation encoding: a pure function of ``(job, ClusterState)``.

The same encoder feeds the Gymnasium environment (training) and the policy plug-in (``pacml sim``),
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
  job would hold, in cluster-interarrival units (log-scaled), all from the shared feasibility
  function.
* **Cluster state** (the deviation critic's, :func:`server_features`, :func:`take_features`):
  *which* servers are busy, until when, and which ones each degree takes.
* **Mask**: from the same feasibility function (reject is always allowed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simulator.cluster import ClusterState
from simulator.feasibility import MaskKind
from simulator.topology import Block
from workloads.graph import TrainingGraph
from workloads.jobs import JobSpec

NODE_FEATURES = 7
EDGE_FEATURES = 2
GLOBAL_FEATURES = 11
ACTION_FEATURES = 11
PLACEMENT_ACTION_FEATURES = ACTION_FEATURES + 8


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
    back = [0.0] * 4
    releases = state.releases
    if releases:
        # One array for the four horizons (thousands of running jobs on a big cluster); server
        # counts are integers, summed exactly in float64, so each fraction is the one a Python
        # sum gives.
        ends_held = np.array(releases, dtype=np.float64)
        ends, held = ends_held[:, 0], ends_held[:, 1]
        back = [float(held[ends <= state.time_s + k * gap].sum()) / num for k in (1, 2, 4, 8)]
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


def server_features(state: ClusterState, fallback_interarrival_s: float = 1.0) -> NDArray[np.float32]:
    """``(num_servers, 2)``: whether each server is held, and ``log(1 + time until it is released
    / mean inter-arrival)`` (0 when free)."""
    gap = _interarrival(state, fallback_interarrival_s)
    out = np.zeros((state.num_servers, 2), dtype=np.float32)
    for end_s, mask in state.running:
        rest = math.log1p(max(end_s - state.time_s, 0.0) / gap)
        server = 0
        while mask:
            if mask & 1:
                out[server] = (1.0, rest)
            mask >>= 1
            server += 1
    return out


def take_features(state: ClusterState, max_degree: int, fallback_interarrival_s: float = 1.0) -> NDArray[np.float32]:
    """``(max_degree + 1, num_servers + 1)``: for every feasible degree, the servers its first-fit
    placement takes (0/1) and ``log(1 + JCT / mean inter-arrival)``; zero rows otherwise."""
    gap = _interarrival(state, fallback_interarrival_s)
    table = state.feasibility
    out = np.zeros((max_degree + 1, state.num_servers + 1), dtype=np.float32)
    for d in table.degrees:
        if d <= max_degree and table.feasible(d):
            placement = table.placement(d)
            jct = table.jct_s(d)
            assert placement is not None and jct is not None
            out[d, list(placement.servers)] = 1.0
            out[d, -1] = math.log1p(jct / gap)
    return out


def _fill_option(row: NDArray[np.float32], job: JobSpec, state: ClusterState, degree: int, max_degree: int,
                 gap_s: float, block: Block | None = None, num_free_blocks: int | None = None) -> None:
    """The 11 degree features of one action (optionally restricted to ``block``; ``num_free_blocks``:
    the degree's free-block count if already counted)."""
    table = state.feasibility
    num = state.num_servers
    row[1] = degree / max_degree
    row[2] = 1.0
    row[3] = float(table.enough_servers(degree))
    all_blocks = state.topology.num_blocks(degree)  # by formula: blocks are not enumerated
    if num_free_blocks is None:
        num_free_blocks = table.num_free_blocks(degree)
    row[9] = num_free_blocks / all_blocks if all_blocks else 0.0
    placement = table.placement(degree, block)
    if placement is None:
        return
    jct = table.jct_s(degree, block)
    assert jct is not None
    row[4] = 1.0
    row[5] = float(table.meets_target(degree, block))
    row[6] = min(jct / job.max_jct_s, 4.0) / 4.0 if job.max_jct_s > 0 else 0.0
    row[7] = placement.num_servers / num
    row[8] = (placement.num_servers - degree) / degree
    row[10] = _log_scaled(placement.num_servers * jct / (num * gap_s))


def action_features(job: JobSpec, state: ClusterState, max_degree: int,
                    fallback_interarrival_s: float = 1.0) -> NDArray[np.float32]:
    """Per-action features, ``(max_degree + 1, ACTION_FEATURES)`` (see module docstring)."""
    gap = _interarrival(state, fallback_interarrival_s)
    out = np.zeros((max_degree + 1, ACTION_FEATURES), dtype=np.float32)
    out[0, 0] = 1.0
    out[0, 2] = 1.0
    degrees = [d for d in state.feasibility.degrees if d <= max_degree]
    free = state.feasibility.num_free_blocks_of(degrees)  # every degree's count in one pass
    for d, num_free in zip(degrees, free, strict=True):
        _fill_option(out[d], job, state, d, max_degree, gap, num_free_blocks=num_free)
    return out


def action_mask(state: ClusterState, max_degree: int, kind: MaskKind = "feasible") -> NDArray[np.bool_]:
    """Valid actions ``0..max_degree`` from the shared feasibility function."""
    return state.feasibility.mask(kind, max_degree)


def placement_candidates(state: ClusterState, per_degree: int) -> list[tuple[int, Block | None]]:
    """Action slots of learned placement: slot 0 rejects; then, for each degree ascending, the
    first ``per_degree`` free blocks in first-fit order (``(degree, None)`` pads missing ones)."""
    out: list[tuple[int, Block | None]] = [(0, None)]
    for d in state.feasibility.degrees:
        blocks = state.feasibility.free_blocks(d)[:per_degree]
        out += [(d, blocks[r] if r < len(blocks) else None) for r in range(per_degree)]
    return out


def candidate_features(job: JobSpec, state: ClusterState, candidates: list[tuple[int, Block | None]],
                       max_degree: int, per_degree: int, fallback_interarrival_s: float = 1.0) -> NDArray[np.float32]:
    """Features of every placement candidate, ``(len(candidates), PLACEMENT_ACTION_FEATURES)``.

    The first 11 columns are the degree features of the block-restricted placement; then the
    block's rank in first-fit order, its shape (groups, racks, servers per rack, as fractions of
    the cluster's), its origin, and the fraction of free blocks of its size left after taking it.
    """
    gap = _interarrival(state, fallback_interarrival_s)
    C, R, S = state.topology.shape
    out = np.zeros((len(candidates), PLACEMENT_ACTION_FEATURES), dtype=np.float32)
    out[0, 0] = 1.0
    out[0, 2] = 1.0
    free_before: dict[int, int] = {}
    for i, (d, block) in enumerate(candidates[1:], start=1):
        if block is None:
            continue
        row = out[i]
        _fill_option(row, job, state, d, max_degree, gap, block)
        x, y, z = block.shape
        c, r, k = block.origin
        row[ACTION_FEATURES:] = [((i - 1) % per_degree) / per_degree, x / C, y / R, max(z, 1) / S,
                                 c / C, r / R, (k % S) / S, 0.0]
        if d not in free_before:
            free_before[d] = state.feasibility.num_free_blocks(d)
        # Blocks free once this one is taken, counted by a search (not by reading every free block).
        after = state.feasibility.engine.placer.num_free_blocks(d, state.feasibility.occupied_mask | block.mask)
        row[-1] = after / free_before[d] if free_before[d] else 0.0
    return out


class Encoder:
    """Builds observations, caching graph features by fingerprint.

    Args:
        max_degree: Largest degree (the degree-only action space is ``0..max_degree``).
        mask: Which feasibility mask the agent acts under.
        fallback_interarrival_s: Inter-arrival time used before two arrivals were seen.
        placement_candidates: 0 = the agent picks a degree and first-fit places it; ``K > 0`` =
            learned placement: an action is one of the first ``K`` free blocks of a degree (see
            :func:`placement_candidates`), and the job is placed inside that block.
    """

    def __init__(self, max_degree: int, mask: MaskKind = "feasible", fallback_interarrival_s: float = 1.0,
                 placement_candidates: int = 0, degrees: tuple[int, ...] = ()) -> None:
        self.max_degree = max_degree
        self.mask: MaskKind = mask
        self.fallback_interarrival_s = fallback_interarrival_s
        self.placement_candidates = int(placement_candidates)
        if self.placement_candidates and not degrees:
            raise ValueError("learned placement needs the cluster's degrees")
        self.degrees = tuple(degrees)
        self._graphs: dict[str, GraphFeatures] = {}

    @property
    def num_actions(self) -> int:
        """Size of the action space."""
        if self.placement_candidates:
            return 1 + len(self.degrees) * self.placement_candidates
        return self.max_degree + 1

    @property
    def num_action_features(self) -> int:
        """Columns of the per-action feature rows."""
        return PLACEMENT_ACTION_FEATURES if self.placement_candidates else ACTION_FEATURES

    def graph(self, graph: TrainingGraph) -> GraphFeatures:
        """Graph features (cached)."""
        feats = self._graphs.get(graph.fingerprint)
        if feats is None:
            feats = self._graphs[graph.fingerprint] = graph_features(graph)
        return feats

    def encode(self, job: JobSpec, state: ClusterState) -> dict:
        """The observation dict: ``graph`` (GraphFeatures), ``globals``, ``actions``, ``action_mask``
        and, with learned placement, ``candidates`` (the ``(degree, block)`` of each action)."""
        obs = {"graph": self.graph(job.graph),
               "globals": global_features(job, state, self.fallback_interarrival_s)}
        if not self.placement_candidates:
            obs["actions"] = action_features(job, state, self.max_degree, self.fallback_interarrival_s)
            obs["action_mask"] = action_mask(state, self.max_degree, self.mask)
            return obs
        candidates = placement_candidates(state, self.placement_candidates)
        table = state.feasibility
        test = {"paper": lambda d, b: table.enough_servers(d),
                "placeable": lambda d, b: table.placement(d, b) is not None,
                "feasible": table.feasible}[self.mask]
        obs["candidates"] = candidates
        obs["actions"] = candidate_features(job, state, candidates, self.max_degree, self.placement_candidates,
                                            self.fallback_interarrival_s)
        obs["action_mask"] = np.array([i == 0 or (b is not None and test(d, b))
                                       for i, (d, b) in enumerate(candidates)], dtype=bool)
        return obs

    def decision(self, obs: dict, action: int) -> tuple[int, tuple[int, ...] | None]:
        """``(degree, placement servers or None)`` that action ``action`` means for ``obs``."""
        if not self.placement_candidates:
            return action, None
        degree, block = obs["candidates"][action]
        return (degree, block.servers) if block is not None else (0, None)
