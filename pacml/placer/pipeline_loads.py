"""Exact max-load bookkeeping for the sequential decoder under the ``pipeline`` objective.

:class:`simulator.place.objectives.PipelineObjective` charges communication per *node*: a sender
pays its longest transfer once, a receiving device pays a node's output once, a CPU pays none (the
decoder's generic per-edge estimate overstates fan-out and charges the CPU).
:class:`PipelinePlan` holds each group's node edges to groups placed before it (static, once per
problem); :class:`PipelineLoads` keeps, for ``B`` rollouts, each device's exact load of the partial
placement: ``deltas`` prices the next group on every device (``(B, D, D)`` increments), ``commit``
applies the choice. After the last group the loads equal the objective's ``compute + comm`` when
each node has one output size (as in dnn-partitioning files).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from pacml.placer.arrays import bucket
from simulator.place.objectives import BoundObjective


@dataclass(frozen=True)
class _GroupEdges:
    """Node edges of one group with nodes of groups placed before it.

    ``in_*``: one row per distinct upstream node ``u`` (its largest fixed cost / size into the group).
    ``out_*``: one row per edge from a node of the group (``out_v``: index into ``nodes``) to a
    placed node ``out_w``.
    """

    nodes: NDArray[np.int64]
    in_u: NDArray[np.int64]
    in_fixed: NDArray[np.float64]
    in_bytes: NDArray[np.float64]
    out_v: NDArray[np.int64]
    out_w: NDArray[np.int64]
    out_fixed: NDArray[np.float64]
    out_bytes: NDArray[np.float64]


class PipelinePlan:
    """Static per-group edge lists of a pipeline task placed in ``order`` (see module docstring)."""

    def __init__(self, objective: BoundObjective, order: NDArray[np.int64]) -> None:
        g, dev = objective.graph, objective.devices
        self.num_nodes, self.num_devices = g.num_nodes, dev.num_devices
        self.latency_s = np.asarray(dev.latency_s, dtype=np.float64)
        self.inv_bandwidth = 1.0 / np.asarray(dev.bandwidth_Bps, dtype=np.float64)
        self.comm_ok = ~np.asarray(dev.is_cpu, dtype=bool)
        group = np.asarray(g.group, dtype=np.int64)
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        members = g.group_members
        if g.num_edges:
            src, dst = g.edges[:, 0].astype(np.int64), g.edges[:, 1].astype(np.int64)
        else:
            src = dst = np.zeros(0, np.int64)
        fixed = np.asarray(g.edge_cost_s, dtype=np.float64)
        size = np.where(np.isnan(g.edge_bytes), 0.0, g.edge_bytes).astype(np.float64)
        gs, gd = group[src], group[dst]
        cross = gs != gd
        # Each cross edge belongs to the group placed later: an "in" edge if that is the
        # destination's group, an "out" edge if it is the source's.
        later_is_dst = rank[gd] > rank[gs]
        in_e = np.flatnonzero(cross & later_is_dst)
        out_e = np.flatnonzero(cross & ~later_is_dst)
        in_by = bucket(gd[in_e], in_e, len(order))
        out_by = bucket(gs[out_e], out_e, len(order))
        groups = []
        for k in range(len(order)):
            nodes = np.asarray(members[k], dtype=np.int64)
            e = in_by[k]
            u, inv = np.unique(src[e], return_inverse=True)
            f = np.full(len(u), -np.inf)
            np.maximum.at(f, inv, np.where(np.isnan(fixed[e]), -np.inf, fixed[e]))
            b = np.zeros(len(u))
            np.maximum.at(b, inv, size[e])
            e2 = out_by[k]
            local = np.searchsorted(nodes, src[e2]) if len(e2) else np.zeros(0, np.int64)
            groups.append(_GroupEdges(
                nodes=nodes, in_u=u.astype(np.int64), in_fixed=np.where(np.isfinite(f), f, np.nan), in_bytes=b,
                out_v=local.astype(np.int64), out_w=dst[e2], out_fixed=fixed[e2], out_bytes=size[e2]))
        self.groups = tuple(groups)

    def cost_from(self, a: NDArray[np.int64], fixed: NDArray[np.float64], size: NDArray[np.float64]
                  ) -> NDArray[np.float64]:
        """``(B, K, D)`` transfer time of each of ``K`` outputs from device ``a`` ``(B, K)`` to every
        device (0 on ``a`` itself and for an empty output without a fixed cost)."""
        return self._cost(a, fixed, size, self.latency_s, self.inv_bandwidth)

    def cost_to(self, e: NDArray[np.int64], fixed: NDArray[np.float64], size: NDArray[np.float64]
                ) -> NDArray[np.float64]:
        """``(B, J, D)`` transfer time of each of ``J`` outputs from every device to device ``e`` ``(B, J)``."""
        return self._cost(e, fixed, size, self.latency_s.T, self.inv_bandwidth.T)

    def _cost(self, end: NDArray[np.int64], fixed: NDArray[np.float64], size: NDArray[np.float64],
              latency_s: NDArray[np.float64], inv_bandwidth: NDArray[np.float64]) -> NDArray[np.float64]:
        """Transfer times between the devices ``end`` and every device, with link rows ``latency_s``
        and ``inv_bandwidth`` (transposed for transfers into ``end``)."""
        t = latency_s[end] + size[None, :, None] * inv_bandwidth[end]
        t = np.where(size[None, :, None] > 0, t, 0.0)
        t = np.where(np.isnan(fixed)[None, :, None], t, np.nan_to_num(fixed)[None, :, None])
        return np.where(end[:, :, None] == np.arange(self.num_devices), 0.0, t)


class PipelineLoads:
    """Exact loads of ``batch`` partial placements (see module docstring)."""

    def __init__(self, plan: PipelinePlan, batch: int) -> None:
        self.plan = plan
        n, d = plan.num_nodes, plan.num_devices
        self.rows = np.arange(batch)
        self.node_device = np.full((batch, n), -1, dtype=np.int64)
        self.send = np.zeros((batch, n))           # what each placed node pays for sending
        self.received = np.zeros((batch, n, d))    # what each device pays for receiving each node
        self.load = np.zeros((batch, d))           # compute + communication of each device
        self._pending: tuple | None = None

    def deltas(self, grp: int, compute_s: NDArray[np.float64]) -> NDArray[np.float64]:
        """``(B, D, D)``: increments of every device's load (last axis) if group ``grp`` goes on each
        candidate device (middle axis); ``compute_s`` ``(D,)`` is its compute on each device."""
        plan, ge = self.plan, self.plan.groups[grp]
        b, d = len(self.rows), plan.num_devices
        idx = np.arange(d)
        ok = plan.comm_ok.astype(np.float64)
        delta = np.zeros((b, d, d))
        own = np.broadcast_to(compute_s, (b, d)).copy()
        t_in = send_v = recv_ve = None
        if len(ge.in_u):
            a = self.node_device[:, ge.in_u]                                       # (B, K)
            t_in = plan.cost_from(a, ge.in_fixed, ge.in_bytes)                     # (B, K, Dc)
            own += np.maximum(t_in - self.received[:, ge.in_u, :], 0.0).sum(axis=1) * ok
            send_add = np.maximum(t_in - self.send[:, ge.in_u][:, :, None], 0.0)  # (B, K, Dc)
            delta += np.einsum("bkc,bka->bca", send_add, (a[:, :, None] == idx).astype(np.float64)) * ok
        if len(ge.out_v):
            e = self.node_device[:, ge.out_w]                                      # (B, J)
            t_out = plan.cost_to(e, ge.out_fixed, ge.out_bytes)                    # (B, J, Dc)
            nv = len(ge.nodes)
            send_v = np.zeros((b, nv, d))
            np.maximum.at(send_v, (slice(None), ge.out_v), t_out)
            own += send_v.sum(axis=1) * ok
            onehot = (e[:, :, None] == idx).astype(np.float64)                     # (B, J, De)
            recv_ve = np.zeros((b, nv, d, d))                                      # (B, v, De, Dc)
            np.maximum.at(recv_ve, (slice(None), ge.out_v), onehot[:, :, :, None] * t_out[:, :, None, :])
            delta += recv_ve.sum(axis=1).transpose(0, 2, 1) * ok
        delta[:, idx, idx] += own
        self._pending = (grp, t_in, send_v, recv_ve, delta)
        return delta

    def commit(self, grp: int, choice: NDArray[np.int64]) -> None:
        """Place group ``grp`` on ``choice`` ``(B,)`` (after :meth:`deltas` for the same group)."""
        pend_grp, t_in, send_v, recv_ve, delta = self._pending
        if pend_grp != grp:
            raise RuntimeError("commit must follow deltas() for the same group")
        ge, rows = self.plan.groups[grp], self.rows
        self.node_device[:, ge.nodes] = choice[:, None]
        self.load += delta[rows, choice, :]
        if t_in is not None:
            t = t_in[rows, :, choice]                                                   # (B, K)
            r, u = rows[:, None], ge.in_u[None, :]
            self.send[r, u] = np.maximum(self.send[r, u], t)
            c = choice[:, None]
            self.received[r, u, c] = np.maximum(self.received[r, u, c], t)
        if send_v is not None:
            r, v = rows[:, None], ge.nodes[None, :]
            self.send[r, v] = send_v[rows, :, choice]
            self.received[rows[:, None, None], ge.nodes[None, :, None], np.arange(self.plan.num_devices)] = \
                recv_ve[rows, :, :, choice]
        self._pending = None

