"""Compiled (numba) list scheduling: :func:`simulator.step_model.list_schedule`, faster.

The same floating-point operations in the same order on flat arrays (equal bit for bit;
``tests/simulator/place/test_objectives.py``): events ``(time, kind, task)``, finishes before
releases, then every touched idle device starts its shortest ready task (ties by index).
Compiled on first use, cached on disk.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

_FINISH, _RELEASE = 0, 1


@njit(cache=True, inline="always")
def _ev_less(t_a: float, k_a: int, t_b: float, k_b: int) -> bool:
    return t_a < t_b or (t_a == t_b and k_a < k_b)


@njit(cache=True)
def _ev_push(ev_t, ev_k, size, t, k):
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if _ev_less(t, k, ev_t[parent], ev_k[parent]):
            ev_t[i] = ev_t[parent]
            ev_k[i] = ev_k[parent]
            i = parent
        else:
            break
    ev_t[i] = t
    ev_k[i] = k
    return size + 1


@njit(cache=True)
def _ev_pop(ev_t, ev_k, size):
    # Removes the root; the caller has read it. Returns the new size.
    size -= 1
    t = ev_t[size]
    k = ev_k[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and _ev_less(ev_t[c + 1], ev_k[c + 1], ev_t[c], ev_k[c]):
            c += 1
        if _ev_less(ev_t[c], ev_k[c], t, k):
            ev_t[i] = ev_t[c]
            ev_k[i] = ev_k[c]
            i = c
        else:
            break
    if size > 0:
        ev_t[i] = t
        ev_k[i] = k
    return size


@njit(cache=True)
def _q_push(q, base, size, rank):
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if rank < q[base + parent]:
            q[base + i] = q[base + parent]
            i = parent
        else:
            break
    q[base + i] = rank
    return size + 1


@njit(cache=True)
def _q_pop(q, base, size):
    top = q[base]
    size -= 1
    last = q[base + size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and q[base + c + 1] < q[base + c]:
            c += 1
        if q[base + c] < last:
            q[base + i] = q[base + c]
            i = c
        else:
            break
    if size > 0:
        q[base + i] = last
    return top, size


@njit(cache=True, inline="always")
def _ready_queues(dur, server, num_servers):
    """Static priority and per-device ready queues of a list schedule: ``order[rank]`` is the task
    of each rank in (duration, index) order, ``rank`` its inverse, and ``base[s]`` the start of
    device ``s``'s heap region in one shared array (regions sized by task counts)."""
    n = dur.shape[0]
    order = np.argsort(dur, kind="mergesort")
    rank = np.empty(n, np.int64)
    for r in range(n):
        rank[order[r]] = r
    base = np.zeros(num_servers + 1, np.int64)
    for i in range(n):
        base[server[i] + 1] += 1
    for s in range(num_servers):
        base[s + 1] += base[s]
    return order, rank, base


@njit(cache=True, inline="always")
def _touch(touched, is_touched, ntouched, s):
    """Note device ``s`` for the dispatch at the end of this instant (once); returns the count."""
    if not is_touched[s]:
        is_touched[s] = True
        touched[ntouched] = s
        ntouched += 1
    return ntouched


@njit(cache=True)
def list_schedule_nb(out_ptr, out_dst, indeg, out_dur, dur, server, sources, num_servers, start, finish):
    """The compiled kernel; fills ``start`` and ``finish`` in place.

    ``out_ptr``, ``out_dst``, ``out_dur``: CSR successors of each task and each edge's duration;
    ``server`` in ``0..num_servers-1``; ``sources``: tasks with no in-edge. Returns whether every
    task was scheduled (``False``: the graph has a cycle).
    """
    n = dur.shape[0]
    order, rank, base = _ready_queues(dur, server, num_servers)
    q = np.empty(max(n, 1), np.int64)
    qsize = np.zeros(num_servers, np.int64)
    busy = np.zeros(num_servers, np.bool_)
    touched = np.empty(num_servers, np.int64)
    is_touched = np.zeros(num_servers, np.bool_)
    ntouched = 0
    pending = indeg.copy()
    ready_at = np.zeros(n)
    ev_t = np.empty(2 * n + 1)
    ev_k = np.empty(2 * n + 1, np.int64)
    nev = 0
    for j in range(sources.shape[0]):
        nev = _ev_push(ev_t, ev_k, nev, 0.0, _RELEASE * n + sources[j])
    for i in range(n):
        start[i] = 0.0
        finish[i] = 0.0
    while nev > 0:
        now = ev_t[0]
        while nev > 0 and ev_t[0] == now:
            key = ev_k[0]
            nev = _ev_pop(ev_t, ev_k, nev)
            op = key % n
            s = server[op]
            if key < n:  # a finish
                finish[op] = now
                busy[s] = False
                for k in range(out_ptr[op], out_ptr[op + 1]):
                    d = out_dst[k]
                    arrive = now + out_dur[k]
                    if arrive > ready_at[d]:
                        ready_at[d] = arrive
                    pending[d] -= 1
                    if pending[d] == 0:
                        if ready_at[d] <= now:
                            sd = server[d]
                            qsize[sd] = _q_push(q, base[sd], qsize[sd], rank[d])
                            ntouched = _touch(touched, is_touched, ntouched, sd)
                        else:
                            nev = _ev_push(ev_t, ev_k, nev, ready_at[d], _RELEASE * n + d)
            else:
                qsize[s] = _q_push(q, base[s], qsize[s], rank[op])
            ntouched = _touch(touched, is_touched, ntouched, s)
        for j in range(ntouched):
            s = touched[j]
            is_touched[s] = False
            if qsize[s] > 0 and not busy[s]:
                r, qsize[s] = _q_pop(q, base[s], qsize[s])
                op = order[r]
                busy[s] = True
                start[op] = now
                nev = _ev_push(ev_t, ev_k, nev, now + dur[op], _FINISH * n + op)
        ntouched = 0
    # A plain loop: numba compiles it, not a generator passed to all().
    for i in range(n):  # noqa: SIM110
        if pending[i] != 0:
            return False
    return True


def list_schedule_fast(out_ptr, out_dst, indeg, out_dur, dur, server, sources,
                       num_servers: int | None = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:func:`simulator.step_model.list_schedule` on the compiled kernel (same arguments): ``(start,
    finish)`` arrays; ``RuntimeError`` on a cycle."""
    server_a = np.ascontiguousarray(server, dtype=np.int64)
    n = server_a.shape[0]
    if num_servers is None:
        num_servers = int(server_a.max()) + 1 if n else 1
    start = np.empty(n)
    finish = np.empty(n)
    ok = list_schedule_nb(np.ascontiguousarray(out_ptr, dtype=np.int64), np.ascontiguousarray(out_dst, dtype=np.int64),
                          np.ascontiguousarray(indeg, dtype=np.int64), np.ascontiguousarray(out_dur, dtype=np.float64),
                          np.ascontiguousarray(dur, dtype=np.float64), server_a,
                          np.ascontiguousarray(sources, dtype=np.int64), int(num_servers), start, finish)
    if not ok:
        raise RuntimeError("step model deadlock: the graph has a cycle")
    return start, finish


@njit(cache=True)
def scheduled_value(placement, time_s, memory_bytes, capacity_bytes, src, dst, has_fixed, fixed_cost_s,
                    edge_bytes, latency_s, bandwidth_Bps, phase_ptr, phase_nodes, phase_edge, csr_ptr_off, csr_ptr,
                    csr_dst, phase_indeg, src_off, phase_sources, start, finish):
    """Value of a ``step`` / ``latency`` placement in one compiled call (see ``objectives._ScheduledObjective``).

    Checks device indices, memory (1e-12 relative slack) and kinds, prices every edge as
    :meth:`BoundObjective.edge_time_s` does, then list-schedules each phase behind the previous
    one, filling ``start`` and ``finish``. Returns the makespan; ``inf`` if infeasible; ``nan`` if
    a device index is out of range.
    """
    n = placement.shape[0]
    num_devices = capacity_bytes.shape[0]
    used = np.zeros(num_devices)
    for i in range(n):
        d = placement[i]
        if d < 0 or d >= num_devices:
            return np.nan
    for i in range(n):
        used[placement[i]] += memory_bytes[i]
    for d in range(num_devices):
        if used[d] > capacity_bytes[d] * (1 + 1e-12):
            return np.inf
    node_t = np.empty(n)
    for i in range(n):
        t = time_s[i, placement[i]]
        if np.isinf(t):
            return np.inf
        node_t[i] = t
    num_edges = src.shape[0]
    edge_t = np.empty(num_edges)
    for k in range(num_edges):
        a = placement[src[k]]
        b = placement[dst[k]]
        if a == b:
            edge_t[k] = 0.0
        elif has_fixed[k]:
            edge_t[k] = fixed_cost_s[k]
        elif edge_bytes[k] <= 0:
            edge_t[k] = 0.0
        else:
            edge_t[k] = latency_s[a, b] + edge_bytes[k] / bandwidth_Bps[a, b]
    offset = 0.0
    for ph in range(phase_ptr.shape[0] - 1):
        lo, hi = phase_ptr[ph], phase_ptr[ph + 1]
        m = hi - lo
        if m == 0:
            continue
        nodes = phase_nodes[lo:hi]
        eidx = phase_edge[csr_ptr_off[ph]:csr_ptr_off[ph + 1]]
        out_ptr = csr_ptr[lo + ph:hi + ph + 1]
        out_dst = csr_dst[csr_ptr_off[ph]:csr_ptr_off[ph + 1]]
        out_dur = np.empty(eidx.shape[0])
        for k in range(eidx.shape[0]):
            out_dur[k] = edge_t[eidx[k]]
        dur = np.empty(m)
        server = np.empty(m, np.int64)
        for j in range(m):
            dur[j] = node_t[nodes[j]]
            server[j] = placement[nodes[j]]
        st = np.empty(m)
        fin = np.empty(m)
        ok = list_schedule_nb(out_ptr, out_dst, phase_indeg[lo:hi], out_dur, dur, server,
                              phase_sources[src_off[ph]:src_off[ph + 1]], num_devices, st, fin)
        if not ok:
            return -1.0
        end = -np.inf
        for j in range(m):
            start[nodes[j]] = st[j] + offset
            f = fin[j] + offset
            finish[nodes[j]] = f
            if f > end:
                end = f
        offset = end
    return offset


# ---------------------------------------------------------------- the aggregate step model
# The cluster simulator's step model at op level (simulator.partition.AggregatePartition): a
# training edge u -> v stands for n_u x n_v dependencies, but all of them leave when u's sub-ops
# finish and all have one of two durations, so the edge is a barrier priced in O(n_u + n_v).


@njit(cache=True)
def repeated_sums(group_edges, group_ptr, edge_count, edge_size):
    """Per group, the sum of ``edge_count[e]`` copies of ``edge_size[e]`` over its edges, added
    one at a time in order from 0.0: the dependency-level model's ``np.bincount`` of group bytes,
    bit for bit (a product ``count x size`` would differ in the last bits)."""
    num_groups = group_ptr.shape[0] - 1
    out = np.zeros(num_groups)
    for g in range(num_groups):
        acc = 0.0
        for k in range(group_ptr[g], group_ptr[g + 1]):
            e = group_edges[k]
            x = edge_size[e]
            for _ in range(edge_count[e]):
                acc += x
        out[g] = acc
    return out


@njit(cache=True)
def compact_levels(cg, rack, node):
    """Compact keys of servers at the 7 agreement sets of their (group, rack, index) levels.

    Returns ``(levels, sizes)``: ``levels[a - 1, i]`` in ``0..sizes[a - 1]-1`` is server ``i``'s
    key at agreement set ``a`` (bits: 1 communication group, 2 rack, 4 in-rack index); two
    servers get the same key iff they agree on every level of ``a``. For :func:`aggregate_layout`.
    """
    k = cg.shape[0]
    rw = 1
    nw = 1
    for i in range(k):
        rw = max(rw, rack[i] + 1)
        nw = max(nw, node[i] + 1)
    levels = np.empty((7, k), np.int64)
    sizes = np.zeros(7, np.int64)
    key = np.empty(k, np.int64)
    for a in range(1, 8):
        for i in range(k):
            c = cg[i] if a & 1 else 0
            r = rack[i] if a & 2 else 0
            x = node[i] if a & 4 else 0
            key[i] = (c * rw + r) * nw + x
        order = np.argsort(key)
        next_id = 0
        for j in range(k):
            i = order[j]
            if j > 0 and key[i] == key[order[j - 1]]:
                levels[a - 1, i] = levels[a - 1, order[j - 1]]
            else:
                levels[a - 1, i] = next_id
                next_id += 1
        sizes[a - 1] = next_id
    return levels, sizes


@njit(cache=True)
def aggregate_layout(offset, op_splits, sub_server, num_servers, levels, level_sizes, group_key, group_ptr,
                     group_edges, edge_u, edge_v, sync_ops, sync_class_s, group_collective, group_touch,
                     edge_same, sync_extra_s, sync_pairs):
    """What a placement means for communication, at op level (fills the output arrays in place).

    Args:
        offset, op_splits: Sub-ops of each training op and their count.
        sub_server: Server of each sub-op, compacted to ``0..num_servers-1``.
        levels, level_sizes: The servers' keys per agreement set (:func:`compact_levels`).
        group_key, group_ptr, group_edges, edge_u, edge_v: The op-level groups and edges.
        sync_ops: Training ops with weight sync (split backward ops).
        sync_class_s: ``(2n, 8)`` time of one weight-sync pair of each op whose two servers
            differ exactly on the levels in class ``D`` (bit 1 group, 2 rack, 4 index; ``D = 0``:
            same server).
        group_collective: Out: whether each group runs as a collective (the multiset test of
            :meth:`simulator.comm.RampCommModel.dependency_times_s`).
        group_touch: Out ``(G, 4)``: distinct communication groups, racks, in-rack indices and
            servers the group touches.
        edge_same: Out: dependencies of each edge whose two ends share a server.
        sync_extra_s: Out: per sub-op, its longest weight-sync pair time over its partners
            (left as given, e.g. ``-inf``, for sub-ops without weight sync).
        sync_pairs: Out ``(2n, 8)``: ordered weight-sync pairs of each op per difference class ``D``.
    """
    cnt_key = np.zeros(num_servers, np.int64)
    cnt_other = np.zeros(num_servers, np.int64)
    touched = np.empty(num_servers, np.int64)
    seen = np.zeros(num_servers, np.bool_)
    lvl_seen = np.zeros((3, num_servers), np.bool_)
    for g in range(group_key.shape[0]):
        k = group_key[g]
        ntouched = 0
        for i in range(offset[k], offset[k + 1]):
            s = sub_server[i]
            cnt_key[s] += 1
            if not seen[s]:
                seen[s] = True
                touched[ntouched] = s
                ntouched += 1
        sum_other = 0
        for p in range(group_ptr[g], group_ptr[g + 1]):
            e = group_edges[p]
            o = edge_v[e] if edge_u[e] == k else edge_u[e]
            sum_other += op_splits[o]
            for i in range(offset[o], offset[o + 1]):
                s = sub_server[i]
                cnt_other[s] += 1
                if not seen[s]:
                    seen[s] = True
                    touched[ntouched] = s
                    ntouched += 1
        # Sources vs destinations as multisets: the key op's sub-ops each meet sum_other
        # partners, each other op's sub-ops meet n_k partners.
        collective = True
        n_k = op_splits[k]
        for j in range(ntouched):
            s = touched[j]
            if cnt_key[s] * sum_other != n_k * cnt_other[s]:
                collective = False
        group_collective[g] = collective
        for lv in range(3):
            distinct = 0
            for j in range(ntouched):
                key = levels[(1 << lv) - 1, touched[j]]
                if not lvl_seen[lv, key]:
                    lvl_seen[lv, key] = True
                    distinct += 1
            group_touch[g, lv] = distinct
            for j in range(ntouched):
                lvl_seen[lv, levels[(1 << lv) - 1, touched[j]]] = False
        group_touch[g, 3] = ntouched
        for j in range(ntouched):
            s = touched[j]
            cnt_key[s] = 0
            cnt_other[s] = 0
            seen[s] = False
    # Same-server dependencies of each edge: sum over servers of cnt_u(s) x cnt_v(s).
    for e in range(edge_u.shape[0]):
        u = edge_u[e]
        v = edge_v[e]
        for i in range(offset[u], offset[u + 1]):
            cnt_key[sub_server[i]] += 1
        same = 0
        for i in range(offset[v], offset[v + 1]):
            same += cnt_key[sub_server[i]]
        edge_same[e] = same
        for i in range(offset[u], offset[u + 1]):
            cnt_key[sub_server[i]] = 0
    # Weight sync: partners of sub-op l agreeing with it on exactly the level set A, by
    # inclusion-exclusion over N(S) = sub-ops agreeing with l on every level of S (l included).
    max_size = 1
    for i in range(7):
        if level_sizes[i] > max_size:
            max_size = level_sizes[i]
    counts = np.zeros((7, max_size), np.int64)
    n_s = np.empty(8, np.int64)
    for q in range(sync_ops.shape[0]):
        j = sync_ops[q]
        lo = offset[j]
        hi = offset[j + 1]
        for i in range(lo, hi):
            s = sub_server[i]
            for lv in range(7):
                counts[lv, levels[lv, s]] += 1
        for i in range(lo, hi):
            s = sub_server[i]
            n_s[0] = hi - lo
            for lv in range(7):
                n_s[lv + 1] = counts[lv, levels[lv, s]]
            longest = -np.inf
            for a in range(8):
                exact = 0
                for sup in range(8):
                    if sup & a == a:
                        diff = sup ^ a
                        sign = 1 - 2 * ((((diff >> 0) & 1) + ((diff >> 1) & 1) + ((diff >> 2) & 1)) & 1)
                        exact += sign * n_s[sup]
                if a == 7:
                    exact -= 1  # l itself
                if exact > 0:
                    d = 7 ^ a
                    sync_pairs[j, d] += exact
                    if sync_class_s[j, d] > longest:
                        longest = sync_class_s[j, d]
            sync_extra_s[i] = longest
        for i in range(lo, hi):
            s = sub_server[i]
            for lv in range(7):
                counts[lv, levels[lv, s]] = 0


@njit(cache=True)
def aggregate_schedule_nb(offset, sub_origin, dur, server, num_servers, out_ptr, out_edges, edge_v,
                          edge_p2p, edge_time_s, in_degree, sync_extra_s, finish):
    """:func:`list_schedule_nb` on op-level barrier edges; returns the step time (``-1``: a cycle).

    Each server runs one sub-op at a time, shortest ready first, ties by index, with the events
    and ready queues of :func:`list_schedule_nb` (so the schedule is the same, bit for bit). When
    the last sub-op of op ``u`` finishes (at ``now``), each out-edge ``u -> v`` delivers to every
    sub-op ``v_j`` at ``max_i(fin[u_i] + d(i, j))``:

    * ``edge_p2p[e]`` false: every dependency takes ``edge_time_s[e]`` (a collective, or no
      bytes), so the arrival is ``now + t`` (``x -> x + t`` is monotone: the max commutes);
    * ``edge_p2p[e]`` true: ``d = 0`` on a shared server, else ``t``: the arrival is
      ``max(latest u_i on v_j's server, latest u_i elsewhere + t)``, from u's per-server latest
      finish and its top two servers, in O(n_u + n_v).

    The step ends when every sub-op finished and every weight-sync message arrived: sub-op ``l``
    adds ``sync_extra_s[l]``, the longest pair time to any partner (``-inf``: none).

    Args:
        offset, sub_origin: Sub-ops of each training op and the op of each sub-op.
        dur, server: Duration and (compact) server of each sub-op.
        out_ptr, out_edges, edge_v: Out-edges of each training op and their destinations.
        edge_p2p, edge_time_s: Pricing of each edge (above).
        in_degree: Op-level in-edges of each training op.
        finish: Out: finish time of each sub-op.
    """
    n = dur.shape[0]
    num_ops = offset.shape[0] - 1
    order, rank, base = _ready_queues(dur, server, num_servers)
    q = np.empty(max(n, 1), np.int64)
    qsize = np.zeros(num_servers, np.int64)
    busy = np.zeros(num_servers, np.bool_)
    touched = np.empty(num_servers, np.int64)
    is_touched = np.zeros(num_servers, np.bool_)
    ntouched = 0
    smax = np.full(num_servers, -np.inf)
    remaining = np.empty(num_ops, np.int64)
    for o in range(num_ops):
        remaining[o] = offset[o + 1] - offset[o]
    pending = np.empty(n, np.int64)
    for i in range(n):
        pending[i] = in_degree[sub_origin[i]]
    ready_at = np.zeros(n)
    ev_t = np.empty(2 * n + 1)
    ev_k = np.empty(2 * n + 1, np.int64)
    nev = 0
    for i in range(n):
        finish[i] = 0.0
        if pending[i] == 0:
            nev = _ev_push(ev_t, ev_k, nev, 0.0, _RELEASE * n + i)
    while nev > 0:
        now = ev_t[0]
        while nev > 0 and ev_t[0] == now:
            key = ev_k[0]
            nev = _ev_pop(ev_t, ev_k, nev)
            op = key % n
            s = server[op]
            if key < n:  # a finish
                finish[op] = now
                busy[s] = False
                u = sub_origin[op]
                remaining[u] -= 1
                if remaining[u] == 0 and out_ptr[u + 1] > out_ptr[u]:
                    # u's per-server latest finish and its best two servers (for p2p edges).
                    f1 = -np.inf
                    f2 = -np.inf
                    s1 = -1
                    for i in range(offset[u], offset[u + 1]):
                        f = finish[i]
                        si = server[i]
                        if f > smax[si]:
                            smax[si] = f
                        if si == s1:
                            if f > f1:
                                f1 = f
                        elif f > f1:
                            f2 = f1
                            f1 = f
                            s1 = si
                        elif f > f2:
                            f2 = f
                    for p in range(out_ptr[u], out_ptr[u + 1]):
                        e = out_edges[p]
                        v = edge_v[e]
                        t = edge_time_s[e]
                        p2p = edge_p2p[e]
                        for d in range(offset[v], offset[v + 1]):
                            sd = server[d]
                            if p2p:
                                other = f2 if sd == s1 else f1
                                arrive = other + t
                                if smax[sd] > arrive:
                                    arrive = smax[sd]
                            else:
                                arrive = now + t
                            if arrive > ready_at[d]:
                                ready_at[d] = arrive
                            pending[d] -= 1
                            if pending[d] == 0:
                                if ready_at[d] <= now:
                                    qsize[sd] = _q_push(q, base[sd], qsize[sd], rank[d])
                                    ntouched = _touch(touched, is_touched, ntouched, sd)
                                else:
                                    nev = _ev_push(ev_t, ev_k, nev, ready_at[d], _RELEASE * n + d)
                    for i in range(offset[u], offset[u + 1]):
                        smax[server[i]] = -np.inf
            else:
                qsize[s] = _q_push(q, base[s], qsize[s], rank[op])
            ntouched = _touch(touched, is_touched, ntouched, s)
        for j in range(ntouched):
            s = touched[j]
            is_touched[s] = False
            if qsize[s] > 0 and not busy[s]:
                r, qsize[s] = _q_pop(q, base[s], qsize[s])
                op = order[r]
                busy[s] = True
                nev = _ev_push(ev_t, ev_k, nev, now + dur[op], _FINISH * n + op)
        ntouched = 0
    for i in range(n):  # noqa: SIM110
        if pending[i] != 0:
            return -1.0
    step = 0.0
    for i in range(n):
        if finish[i] > step:
            step = finish[i]
        end = finish[i] + sync_extra_s[i]
        if end > step:
            step = end
    return step
