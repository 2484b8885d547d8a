"""Communication-time model for RAMP: point-to-point transfers and all-reduce collectives (spec §6).

A point-to-point transfer takes ``propagation latency + 2 x I/O latency + size / channel
bandwidth`` (zero on one server or for zero bytes; links are single-hop and uncontended). A
*collective* (a symmetric group of dependencies, spec §6.1) uses the original's RAMP-x all-reduce
model (spec §6.3). The original's quirks are switches (``sim.comm_quirks``):
``double_bandwidth_division`` (§15.2) and ``rack_index_only`` (§15.3).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from simulator.topology import RampTopology

#: Memory frequency used for the reduction's compute cost, in bytes/s (from the original).
MEM_FREQ_BPS = 2e12
#: Peak reduction throughput of one A100, in FLOP/s (from the original).
PEAK_FLOPS = 130e12
#: Bytes per reduced element (fp16).
BYTES_PER_ELEMENT = 2


@njit(cache=True)
def _collective_nb(group_bytes: NDArray[np.float64], num_cgs: NDArray[np.int64], num_racks: NDArray[np.int64],
                   num_nodes: NDArray[np.int64], x: int, per_tx: float, fixed_latency_s: float,
                   out: NDArray[np.float64]) -> None:
    """:meth:`RampCommModel.collective_s` of every group into ``out``: the message is split over
    four sub-group levels; each level with more than one member costs latency plus message /
    effective bandwidth, plus the reduction compute (the original's ``add_time``); the
    reduce-scatter and the all-gather double the communication."""
    for g in range(group_bytes.shape[0]):
        cgs = num_cgs[g]
        nodes = num_nodes[g]
        comm = 0.0
        comp = 0.0
        msg = np.ceil(group_bytes[g] / max(cgs, 1))
        for level in range(4):
            if level == 0:
                d = cgs
            elif level == 1:
                d = min(cgs, nodes)
            elif level == 2:
                d = num_racks[g]
            else:
                d = np.int64(np.ceil(nodes / x))
            d = max(d, 1)
            if level > 0:
                msg = np.ceil(msg / d)
            if d > 1:
                # Effective transceivers: the original's min(x // cont_racks, x // (d - 1)) with
                # cont_racks == 1; clamped to >= 1 so groups wider than x + 1 do not divide by zero.
                eff_trx = max(1, min(x, x // max(d - 1, 1)))
                comm += fixed_latency_s + msg / (eff_trx * per_tx)
                devices = max(d, 2)
                n_op = np.ceil(np.log2(devices))
                rate = min(MEM_FREQ_BPS * n_op / ((devices + 1) * BYTES_PER_ELEMENT), PEAK_FLOPS)
                comp += n_op * ((msg * d) / devices) / BYTES_PER_ELEMENT / rate
        out[g] = 2 * comm + comp


class RampCommModel:
    """Transfer and collective times on a :class:`RampTopology` (vectorised over groups).

    Args:
        double_bandwidth_division: Reproduce quirk §15.2 (see module docstring).
        rack_index_only: Reproduce quirk §15.3.
    """

    def __init__(self, topology: RampTopology, *, double_bandwidth_division: bool = True,
                 rack_index_only: bool = True) -> None:
        self.topology = topology
        self.double_bandwidth_division = double_bandwidth_division
        self.rack_index_only = rack_index_only
        coords = np.array(topology.coords, dtype=np.int64).reshape(-1, 3)
        self._cg = coords[:, 0]
        R = topology.num_racks_per_group
        self._rack = coords[:, 1] if rack_index_only else coords[:, 0] * R + coords[:, 1]
        self._node = coords[:, 2]
        self.fixed_latency_s = topology.propagation_latency_s + 2 * topology.io_latency_s

    def server_levels(self) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
        """Communication group, rack (as collectives count racks: see ``rack_index_only``) and
        in-rack index of every server: the three levels a collective's cost depends on."""
        return self._cg, self._rack, self._node

    def point_to_point_s(self, size_bytes: NDArray[np.float64], same_server: NDArray[np.bool_]) -> NDArray[np.float64]:
        """Time of each point-to-point transfer (0 on one server or for 0 bytes)."""
        t = self.fixed_latency_s + size_bytes / self.topology.channel_bandwidth_Bps
        return np.where(same_server | (size_bytes <= 0), 0.0, t)

    def collective_s(self, group_bytes: NDArray[np.float64], num_cgs: NDArray[np.int64],
                     num_racks: NDArray[np.int64], num_nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        """All-reduce time of each collective (spec §6.3) of ``group_bytes`` bytes, given the distinct
        communication groups, racks (see ``rack_index_only``) and in-rack indices it touches."""
        x = self.topology.num_comm_groups
        data_rate = self.topology.channel_bandwidth_Bps
        per_tx = data_rate / x if self.double_bandwidth_division else data_rate
        group_bytes = np.ascontiguousarray(group_bytes, dtype=np.float64)
        out = np.empty(group_bytes.shape[0])
        # Compiled: the same IEEE operations in the same order as the vectorised formula
        # (tests/test_decision_latency.py compares them bit for bit).
        _collective_nb(group_bytes, np.ascontiguousarray(num_cgs, dtype=np.int64),
                       np.ascontiguousarray(num_racks, dtype=np.int64), np.ascontiguousarray(num_nodes, dtype=np.int64),
                       x, per_tx, self.fixed_latency_s, out)
        return out

    def dependency_times_s(self, dep_src_server: NDArray[np.int64], dep_dst_server: NDArray[np.int64],
                           dep_bytes: NDArray[np.float64], dep_group: NDArray[np.int64],
                           group_is_sync: NDArray[np.bool_]) -> NDArray[np.float64]:
        """Duration of every dependency of a placed partitioned graph.

        A group is a collective when it is a weight-sync pair or when the multiset of its source
        servers equals that of its destination servers (a symmetric placement, spec §6.1); every
        dependency of a collective takes the collective's time (0 if all of it is on one
        server). Other dependencies are point-to-point.
        """
        same = dep_src_server == dep_dst_server
        dur = self.point_to_point_s(dep_bytes, same)
        num_groups = len(group_is_sync)
        if num_groups == 0:
            return dur
        grouped = np.flatnonzero(dep_group >= 0)
        g = dep_group[grouped]
        ns = self.topology.num_servers
        # Multiset of (group, server) over sources vs destinations: equal counts <=> symmetric.
        # Dense counting when the key space is small, sorting (np.unique) when it is sparse.
        src_keys = g * ns + dep_src_server[grouped]
        dst_keys = g * ns + dep_dst_server[grouped]
        if num_groups * ns <= 4 * len(g) + 1024:
            keys = np.arange(num_groups * ns)
            src_counts = np.bincount(src_keys, minlength=len(keys))
            dst_counts = np.bincount(dst_keys, minlength=len(keys))
        else:
            keys, inv = np.unique(np.concatenate([src_keys, dst_keys]), return_inverse=True)
            src_counts = np.bincount(inv[:len(g)], minlength=len(keys))
            dst_counts = np.bincount(inv[len(g):], minlength=len(keys))
        collective = np.ones(num_groups, dtype=bool)
        collective[keys[src_counts != dst_counts] // ns] = False
        collective |= group_is_sync
        is_coll_dep = collective[g]
        if not is_coll_dep.any():
            return dur
        idx = grouped[is_coll_dep]
        g = g[is_coll_dep]
        group_bytes = np.bincount(g, weights=dep_bytes[idx], minlength=num_groups)
        # Servers each collective touches, as (group, server) pairs.
        touched = keys[(src_counts + dst_counts) > 0]
        t_group, t_server = touched // ns, touched % ns
        keep = collective[t_group]
        t_group, t_server = t_group[keep], t_server[keep]

        def distinct(values: NDArray[np.int64], width: int) -> NDArray[np.int64]:
            seen = np.zeros(num_groups * width, dtype=bool)
            seen[t_group * width + values[t_server]] = True
            return seen.reshape(num_groups, width).sum(axis=1)

        cgs = distinct(self._cg, self.topology.num_comm_groups)
        racks = distinct(self._rack, int(self._rack.max()) + 1)
        nodes = distinct(self._node, self.topology.num_servers_per_rack)
        servers = np.bincount(t_group, minlength=num_groups)
        t = self.collective_s(group_bytes, cgs, racks, nodes)
        # No data or a single server: nothing crosses the network.
        t = np.where((servers <= 1) | (group_bytes <= 0), 0.0, t)
        dur[idx] = t[g]
        return dur
