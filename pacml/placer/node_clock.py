"""HEFT's own clock inside the decoder: every node scheduled in HEFT's order, batched over rollouts.

The sequential decoder prices a group as one block (its forward nodes back to back, ready when
every input group has finished). HEFT schedules node by node and fixes a group's device at the
group's first node in its order. The two differ on graphs whose groups hold several forward
nodes (colour classes) or are reached first through a backward node. With
``net.order=heft`` the decoder decides at each group's first node in HEFT's order and prices the
devices from this clock: every node before it, of groups already placed, is scheduled on its
group's device exactly as HEFT would (insertion into idle gaps, phases one after the other).
An untrained policy in this mode is then HEFT on every graph.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from pacml.placer.arrays import bucket
from pacml.placer.slots import earliest_starts, insert
from simulator.place.heuristics import _Problem  # HEFT's own ranks and phases
from simulator.place.objectives import BoundObjective


def heft_sequence(hp) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """HEFT's node order over the whole step and the phase of each position, from HEFT's own
    problem view ``hp`` (:class:`simulator.place.heuristics._Problem`; see ``HeftPlacer``)."""
    seq, phase_of = [], []
    for k, phase in enumerate(hp.phases):
        rank = hp.upward_rank(phase)
        nodes = sorted(phase, key=lambda x: (-rank[x], hp.topo_pos[x]))
        seq.extend(nodes)
        phase_of.extend([k] * len(nodes))
    return np.asarray(seq, dtype=np.int64), np.asarray(phase_of, dtype=np.int64)


class NodePlan:
    """Placement-independent arrays of the clock (built once per problem)."""

    def __init__(self, objective: BoundObjective) -> None:
        hp = _Problem(objective)
        self.seq, self.phase = heft_sequence(hp)
        self.group = hp.group
        self.time_s = hp.time_s
        self.group_time_s = hp.group_time_s
        self.edge_time_s = hp.edge_time_s                     # (E, D, D)
        self.preds = [(np.array([u for u, _ in hp.preds[v]], dtype=np.int64),
                       np.array([e for _, e in hp.preds[v]], dtype=np.int64)) for v in range(hp.n)]
        first = np.full(hp.num_groups, -1, dtype=np.int64)
        for pos, v in enumerate(self.seq.tolist()):
            if first[self.group[v]] < 0:
                first[self.group[v]] = pos
        #: Position in ``seq`` where each group is decided (its first node in HEFT's order).
        self.decision_pos = first
        #: Nodes of each group (a decision fixes all of their devices at once).
        self.members = bucket(self.group, np.arange(hp.n), hp.num_groups)
        self.n, self.d = hp.n, hp.d


class NodeClock:
    """The clock of ``batch`` rollouts: finish time of every node, busy intervals per device."""

    def __init__(self, plan: NodePlan, batch: int) -> None:
        self.plan, self.b = plan, batch
        n, d = plan.n, plan.d
        self.finish = np.zeros((batch, n))
        self.starts = np.zeros((batch, d, n + 1))
        self.ends = np.zeros((batch, d, n + 1))
        self.count = np.zeros((batch, d), dtype=np.int64)
        self.floor = np.zeros(batch)
        self.phase_max = np.zeros(batch)
        self.pos = 0
        self.cur_phase = int(plan.phase[0]) if len(plan.phase) else 0
        self.rows = np.arange(batch)
        # Device of every node of a placed group, kept as decisions commit (-1: not placed yet).
        self.node_dev = np.full((batch, n), -1, dtype=np.int64)

    def _enter(self, pos: int) -> None:
        """Start a new phase at ``pos`` if it begins one: HEFT's barrier between phases."""
        ph = int(self.plan.phase[pos])
        if ph != self.cur_phase:
            self.cur_phase = ph
            self.floor = np.maximum(self.floor, self.phase_max)
            self.count[:] = 1
            self.starts[:, :, 0] = -np.inf
            self.ends[:, :, 0] = self.floor[:, None]

    def _arrival(self, v: int, node_dev: NDArray[np.int64]) -> NDArray[np.float64]:
        """``(B, D)`` time all of ``v``'s inputs are on each device."""
        u, e = self.plan.preds[v]
        arrive = np.broadcast_to(self.floor[:, None], (self.b, self.plan.d)).copy()
        if len(u):
            src = node_dev[:, u]                                               # (B, k)
            cost = self.plan.edge_time_s[e[None, :], src, :]                   # (B, k, D)
            np.maximum(arrive, (self.finish[:, u][:, :, None] + cost).max(axis=1), out=arrive)
        return arrive

    def _duration(self, v: int) -> NDArray[np.float64]:
        t = self.plan.time_s[v]
        return np.where(np.isfinite(t), t, 0.0)

    def advance(self, grp: int) -> int:
        """Schedule every node before group ``grp``'s decision (their groups are placed already);
        returns the decision node."""
        target = int(self.plan.decision_pos[grp])
        node_dev = self.node_dev
        while self.pos < target:
            v = int(self.plan.seq[self.pos])
            self._enter(self.pos)
            dev = node_dev[:, v]
            dur = self._duration(v)
            start = earliest_starts(self.starts, self.ends, self.count, self._arrival(v, node_dev), dur)
            self._commit(v, dev, start[self.rows, dev], start[self.rows, dev] + dur[dev])
            self.pos += 1
        self._enter(self.pos)
        return int(self.plan.seq[self.pos])

    def price(self, v: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(start, finish)`` ``(B, D)`` of decision node ``v`` on every device."""
        dur = self._duration(v)
        start = earliest_starts(self.starts, self.ends, self.count, self._arrival(v, self.node_dev), dur)
        return start, start + dur[None, :]

    def decide(self, v: int, choice: NDArray[np.int64], start: NDArray[np.float64], finish: NDArray[np.float64]) -> None:
        """Commit decision node ``v`` (and so its whole group) on ``choice`` ``(B,)``."""
        self.node_dev[:, self.plan.members[int(self.plan.group[v])]] = choice[:, None]
        self._commit(v, choice, start[self.rows, choice], finish[self.rows, choice])
        self.pos += 1

    def _commit(self, v: int, dev: NDArray[np.int64], start: NDArray[np.float64], end: NDArray[np.float64]) -> None:
        insert(self.starts, self.ends, self.count, dev, start, end)
        self.finish[:, v] = end
        np.maximum(self.phase_max, end, out=self.phase_max)
