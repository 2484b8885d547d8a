"""Job allocation on RAMP: first-fit symmetric blocks with parent chaining (spec §5.1).

Which servers a job gets, and first fit's server for every sub-op (which an op placer,
:mod:`simulator.allocation.op_placer`, may change inside the job's block). Forward ops in
topological order chain onto a parent split as many ways, else take the first free block of their
size with room; an op and its backward mirror share servers. Modes ``op_first_fit`` (paper) and
``block``: docs/simulator.md ("Job allocation").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from simulator.allocation.free_blocks import FreeBlockIndex, Region
from simulator.partition import Partitioner
from simulator.topology import Block, RampTopology, Shape
from workloads.graph import TrainingGraph, topological_order

if TYPE_CHECKING:  # the op placer imports this module
    from simulator.allocation.op_placer import BlockOpPlacer

PlacementMode = Literal["op_first_fit", "block"]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a partitioned job runs.

    Attributes:
        op_servers: For each forward op, the servers of its sub-ops (sub-op ``i`` on
            ``op_servers[op][i]``; the backward mirror uses the same servers).
        servers: Every server the job holds, ascending.
        mask: Bitmask of ``servers``.
        signature: A canonical form, equal for placements that time identically (see
            :func:`placement_signature`); the lookahead cache key.
    """

    op_servers: tuple[tuple[int, ...], ...]
    servers: tuple[int, ...]
    mask: int
    signature: tuple

    @property
    def num_servers(self) -> int:
        """Number of servers held."""
        return len(self.servers)

    def sub_op_servers(self, splits: NDArray[np.int64]) -> NDArray[np.int64]:
        """Server of every sub-op of the partitioned training graph (forward then backward)."""
        fwd = np.fromiter(chain.from_iterable(self.op_servers), dtype=np.int64, count=int(splits.sum()))
        return np.concatenate([fwd, fwd])



def placement_signature(op_servers: tuple[tuple[int, ...], ...],
                        coords: tuple[tuple[int, int, int], ...],
                        kinds: NDArray[np.int64] | None = None) -> tuple:
    """Canonical form of a placement: servers renamed by first appearance, with their coordinates
    renamed the same way (groups, racks and in-rack indices separately) and, given ``kinds`` (the
    kind index of every server), each server's kind. Step times depend on nothing else, so
    placements with equal signatures have equal step times.
    """
    # Chained ops repeat their parent's server tuple: each distinct tuple is renamed once (its
    # servers are all known by the time it repeats, so first appearances are unchanged).
    local: dict[int, int] = {}
    distinct: dict[tuple[int, ...], tuple[int, ...] | None] = {}
    for servers in op_servers:
        if servers not in distinct:
            distinct[servers] = None
            for s in servers:
                if s not in local:
                    local[s] = len(local)
    rename = local.__getitem__
    for servers in distinct:
        distinct[servers] = tuple(map(rename, servers))
    groups: dict[int, int] = {}
    racks_in_group: dict[tuple[int, int], int] = {}
    racks: dict[int, int] = {}
    slots: dict[int, int] = {}
    shape = []
    for s in local:
        c, r, k = coords[s]
        renamed = (groups.setdefault(c, len(groups)), racks_in_group.setdefault((c, r), len(racks_in_group)),
                   racks.setdefault(r, len(racks)), slots.setdefault(k, len(slots)))
        shape.append(renamed if kinds is None else (*renamed, int(kinds[s])))
    return tuple([distinct[servers] for servers in op_servers]), tuple(shape)


class _Relative:
    """A placement inside a block, as server offsets from the block's origin server: first fit in
    a free block of the same shape elsewhere is this placement shifted (blocks never wrap around).
    The ops' distinct server tuples are kept once, flat.
    """

    __slots__ = ("flat", "bounds", "op_index", "server_offsets", "mask", "signature", "size_bytes")

    def __init__(self, placement: Placement, origin_server: int) -> None:
        distinct: dict[tuple[int, ...], int] = {}
        op_index = []
        for servers in placement.op_servers:
            op_index.append(distinct.setdefault(servers, len(distinct)))
        flat: list[int] = []
        bounds = []
        for servers in distinct:
            bounds.append((len(flat), len(flat) + len(servers)))
            flat += servers
        self.flat = np.array(flat, dtype=np.int64) - origin_server
        self.bounds = tuple(bounds)
        self.op_index = tuple(op_index)
        self.server_offsets = np.array(placement.servers, dtype=np.int64) - origin_server
        self.mask = placement.mask >> origin_server
        self.signature = placement.signature
        # Rough footprint for the cache's byte bound.
        self.size_bytes = 300 + 8 * (len(flat) + len(op_index) + len(placement.servers)) + self.mask.bit_length() // 8

    def at(self, origin_server: int) -> Placement:
        """The placement in the block of the same shape whose origin is ``origin_server``."""
        flat = (self.flat + origin_server).tolist()
        distinct = [tuple(flat[a:b]) for a, b in self.bounds]
        return Placement(tuple([distinct[i] for i in self.op_index]),
                         tuple((self.server_offsets + origin_server).tolist()),
                         self.mask << origin_server, self.signature)


class _FreeMemory(dict):
    """Free memory of the servers a job's ops have used so far (an unused server: its capacity)."""

    __slots__ = ("_capacity",)

    def __init__(self, capacity: list[float]) -> None:
        super().__init__()
        self._capacity = capacity

    def __missing__(self, server: int) -> float:
        return self._capacity[server]


def block_region(block: Block) -> Region:
    """The grid box ``(c0, c1, r0, r1, s0, s1)`` a block spans (every sub-block lies inside it)."""
    x, y, z = block.shape
    c, r, k = block.origin
    return (c, c + x, r, r + x, k, k + 1) if z == -1 else (c, c + x, r, r + y, k, k + z)


def put_bounded(cache: dict, key: Any, value: Any, max_entries: int) -> None:
    """``cache[key] = value``, clearing ``cache`` first when it holds ``max_entries`` (bounded memory)."""
    if len(cache) >= max_entries:
        cache.clear()
    cache[key] = value


class _BoundedCache(dict):
    """A dict bounded by entries and by an estimate of its bytes: an insert that would cross
    either bound clears it first."""

    __slots__ = ("size_bytes",)

    def __init__(self) -> None:
        super().__init__()
        self.size_bytes = 0

    def put(self, key: Any, value: Any, size_bytes: int, max_entries: int, max_bytes: int) -> None:
        """Store ``value`` under ``key``, counting ``size_bytes`` against ``max_bytes``."""
        if len(self) >= max_entries or self.size_bytes + size_bytes > max_bytes:
            self.clear()
        self[key] = value
        self.size_bytes += size_bytes

    def clear(self) -> None:
        """Drop every entry."""
        super().clear()
        self.size_bytes = 0


class FirstFitAllocator:
    """First-fit job allocation: the servers a job gets, and first fit's server for each of its sub-ops.

    Free blocks are searched on the occupancy grid (:class:`~simulator.allocation.free_blocks.FreeBlockIndex`).
    A job confined to a block under first fit is placed once per (graph, degree, block shape) and
    shifted (:class:`_Relative`); other placements are cached by occupancy. Every cache is bounded
    by entries and by an estimate of its bytes.

    Args:
        partitioner: Gives the per-op split counts.
        mode: ``op_first_fit`` (paper) or ``block`` (see module docstring).
        op_placer: In ``block`` mode, moves the ops inside the job's block after first fit
            (:class:`simulator.allocation.op_placer.BlockOpPlacer`); ``None``: first fit as it is.
    """

    MAX_CACHE_ENTRIES = 200_000
    MAX_CACHE_BYTES = 256 * 2**20  # estimated bytes each cache may hold before it is cleared
    REUSE_WINDOW = 4096  # lookups per reuse measurement (:meth:`_note_occupancy_lookup`)
    MIN_REUSE = 0.1  # fraction of hits below which occupancy-keyed caches are kept small
    UNBOUND_MEMORY_FRACTION = 0.999  # of the smallest server's memory: see _memory_never_binds

    def __init__(self, topology: RampTopology, partitioner: Partitioner,
                 mode: PlacementMode = "op_first_fit", op_placer: BlockOpPlacer | None = None) -> None:
        if mode not in ("op_first_fit", "block"):
            raise ValueError(f"placement mode must be 'op_first_fit' or 'block', got {mode!r}")
        if op_placer is not None and mode != "block":
            raise ValueError("an op placer moves ops inside a job's block: it needs placement mode 'block'")
        self.topology = topology
        self.partitioner = partitioner
        self.mode: PlacementMode = mode
        self.op_placer = op_placer
        self.op_placer_name = "first_fit" if op_placer is None else op_placer.name
        # Kind of every server in placement signatures, only when kinds differ.
        self._sig_kinds = topology.server_kind_index if topology.heterogeneous else None
        self._kind_list: list[int] | None = topology.server_kind_index.tolist() if topology.heterogeneous else None
        self._capacity: list[float] = topology.server_memory_bytes.tolist()
        self._mask_bytes = topology.num_servers // 8 + 64  # an occupancy key
        self._cache: dict[tuple, Placement | None] = {}
        self._allowed_cache = _BoundedCache()  # (n, allowed, region) -> blocks
        self._occupancy_entries = self.MAX_CACHE_ENTRIES  # bound of the occupancy-keyed caches
        self._occupancy_window = [0, 0]  # lookups, hits in the current window
        self._relative = _BoundedCache()  # (graph, degree, shape, kinds) -> _Relative | None
        self._indexes: list[FreeBlockIndex | None] = [None, None]  # whole cluster, last region
        self._structure: dict[str, tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]] = {}
        self._min_capacity = min(self._capacity)
        self._unbound: dict[tuple[str, int], tuple[int, ...] | None] = {}
        self._by_first_blocks = _BoundedCache()  # (graph, degree, first blocks) -> Placement

    @property
    def shifts_placements(self) -> bool:
        """Whether a job confined to a block is placed by shifting a per-shape placement (first fit),
        so that its placement, hence its JCT, depends only on the block's shape (and, on a cluster of
        several GPU generations, its servers' kinds)."""
        return self.op_placer is None

    def _graph_structure(self, graph: TrainingGraph) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        """Topological order of the forward ops and each op's parents in edge order."""
        key = graph.fingerprint
        if key not in self._structure:
            fwd = graph.forward
            parents: list[list[int]] = [[] for _ in range(fwd.num_ops)]
            for s, d in fwd.edges.tolist():
                parents[d].append(s)
            self._structure[key] = (topological_order(fwd.num_ops, fwd.edges),
                                    tuple(tuple(p) for p in parents))
        return self._structure[key]

    def free_index(self, allowed: int, region: Region | None = None) -> FreeBlockIndex:
        """The free-block search of the servers in ``allowed`` (inside ``region``). The last one of
        the whole cluster is kept (a decision asks several degrees of one occupancy), and the last
        one of a region (a job's block, while its ops are placed)."""
        slot = region is not None
        index = self._indexes[slot]
        if index is None or index.allowed_mask != allowed or (slot and index.region != region):
            index = self._indexes[slot] = FreeBlockIndex(self.topology, allowed, region)
        return index

    def first_fit_block(self, degree: int, occupied_mask: int) -> Block | None:
        """The first block of ``degree`` servers free of other jobs, or ``None``."""
        return self.free_index(self.topology.all_servers_mask & ~occupied_mask).first(degree)

    def free_blocks(self, degree: int, occupied_mask: int) -> Sequence[Block]:
        """Every block of ``degree`` servers free of other jobs, in first-fit order (cached; a lazy
        sequence: a block is made when read)."""
        return self._allowed_blocks(degree, self.topology.all_servers_mask & ~occupied_mask)

    def num_free_blocks(self, degree: int, occupied_mask: int) -> int:
        """How many blocks of ``degree`` servers are free of other jobs (counted, not listed)."""
        return self.free_index(self.topology.all_servers_mask & ~occupied_mask).count(degree)

    def num_free_blocks_of(self, degrees: Sequence[int], occupied_mask: int) -> list[int]:
        """:meth:`num_free_blocks` of every degree in ``degrees``, counted in one pass."""
        return self.free_index(self.topology.all_servers_mask & ~occupied_mask).counts(degrees)

    def place(self, graph: TrainingGraph, degree: int, occupied_mask: int,
              block: Block | None = None) -> Placement | None:
        """Place ``graph`` at ``degree`` given the servers other jobs hold (``occupied_mask``), inside
        ``block`` if given (``None``: the mode decides); ``None`` if impossible."""
        if self.shifts_placements and (block is not None or self.mode == "block"):
            if block is not None:
                return None if block.mask & occupied_mask else self.place_in_block(graph, degree, block)
            found = self.free_index(self.topology.all_servers_mask & ~occupied_mask).first_origin(degree)
            return None if found is None else self._place_shifted(graph, degree, *found)
        key = (graph.fingerprint, degree, occupied_mask, None if block is None else block.mask, self.op_placer_name)
        hit = key in self._cache
        self._note_occupancy_lookup(hit)
        if hit:
            return self._cache[key]
        allowed = self.topology.all_servers_mask & ~occupied_mask
        job_block = block
        if block is not None:
            allowed &= block.mask if not block.mask & occupied_mask else 0
        elif self.mode == "block":
            job_block = self.first_fit_block(degree, occupied_mask)
            allowed = job_block.mask if job_block is not None else 0
        region = None if job_block is None else block_region(job_block)
        result = self._place(graph, degree, allowed, region) if allowed else None
        if result is not None and self.op_placer is not None and job_block is not None:
            result = self.op_placer.refine(graph, degree, result, job_block.servers)
        if result is not None and job_block is not None and not self.partitioner.split_ops:
            result = self._hold_block(result, job_block)
        put_bounded(self._cache, key, result,
                    min(self._occupancy_entries, self.MAX_CACHE_BYTES // (self._mask_bytes + 1024)))
        return result

    def _note_occupancy_lookup(self, hit: bool) -> None:
        """Count a lookup of an occupancy-keyed placement; after each :attr:`REUSE_WINDOW` lookups,
        bound the occupancy-keyed caches by :attr:`MAX_CACHE_ENTRIES` if at least :attr:`MIN_REUSE`
        of them hit, else by :attr:`REUSE_WINDOW` (a big cluster's occupancy rarely repeats)."""
        window = self._occupancy_window
        window[0] += 1
        window[1] += hit
        if window[0] >= self.REUSE_WINDOW:
            self._occupancy_entries = (self.MAX_CACHE_ENTRIES if window[1] >= self.MIN_REUSE * window[0]
                                       else self.REUSE_WINDOW)
            window[0] = window[1] = 0

    def place_in_block(self, graph: TrainingGraph, degree: int, block: Block) -> Placement | None:
        """First-fit placement of ``graph`` at ``degree`` inside ``block`` (all its servers free),
        shifted from the first one computed for a block of its shape (and kinds); ``None`` if it
        does not fit. Needs first fit (no op placer)."""
        return self._place_shifted(graph, degree, block.shape, block.servers[0], block)

    def _place_shifted(self, graph: TrainingGraph, degree: int, shape: Shape, origin: int,
                       block: Block | None = None) -> Placement | None:
        """:meth:`place_in_block` for the block of ``shape`` at server ``origin`` (made only when
        this shape, graph and degree are placed for the first time)."""
        topo = self.topology
        kinds = None
        if self._kind_list is not None:
            offsets, _ = topo.pattern(shape)
            kinds = tuple(self._kind_list[origin + s] for s in offsets)
        key = (graph.fingerprint, degree, shape, kinds)
        if key in self._relative:
            rel = self._relative[key]
            return None if rel is None else rel.at(origin)
        if block is None:
            block = topo.block_from_server(shape, origin)
        result = self._place(graph, degree, block.mask, block_region(block))
        if result is not None and not self.partitioner.split_ops:
            result = self._hold_block(result, block)
        rel = None if result is None else _Relative(result, origin)
        self._relative.put(key, rel, 200 + (0 if rel is None else rel.size_bytes),
                           self.MAX_CACHE_ENTRIES, self.MAX_CACHE_BYTES)
        return result

    def _allowed_blocks(self, n: int, allowed: int, region: Region | None = None) -> Sequence[Block]:
        """Blocks of ``n`` servers that lie inside ``allowed`` (and ``region``), in first-fit order
        (cached). Inside a region (a job's block) the region's own search keeps them: its blocks
        are of no use to another job."""
        if region is not None:
            return self.free_index(allowed, region).blocks(n)
        key = (n, allowed, region)
        found = self._allowed_cache.get(key)
        if found is None:
            found = self.free_index(allowed, region).blocks(n)
            size = self._mask_bytes + 200 + 16 * len(found)  # shape rows and origins
            self._allowed_cache.put(key, found, size, self._occupancy_entries, self.MAX_CACHE_BYTES)
        return found

    def _memory_never_binds(self, graph: TrainingGraph, degree: int) -> tuple[int, ...] | None:
        """The split sizes the graph uses at ``degree`` (ascending) when all its ops together need
        less than :attr:`UNBOUND_MEMORY_FRACTION` of the smallest server's memory (so every op fits
        on the first block it is offered), else ``None`` (cached)."""
        key = (graph.fingerprint, degree)
        found = self._unbound.get(key, False)
        if found is False:
            fwd = graph.forward
            splits = self.partitioner.splits(graph, degree)
            need_bytes = float((2 * (fwd.activation_bytes + fwd.parameter_bytes) / splits).sum())
            found = (tuple(sorted(set(splits.tolist())))
                     if need_bytes <= self.UNBOUND_MEMORY_FRACTION * self._min_capacity else None)
            self._unbound[key] = found
        return found

    def _place_unbound(self, graph: TrainingGraph, degree: int, sizes: tuple[int, ...], allowed: int,
                       region: Region | None) -> Placement | None:
        """:meth:`_place` when memory cannot bind (:meth:`_memory_never_binds`): every op of split
        size ``n`` then gets the first free block of ``n`` servers, so the placement is cached by
        those first blocks (equal to the op-by-op scan; ``tests/simulator/test_model.py``)."""
        index = self.free_index(allowed, region)
        firsts = []
        for n in sizes:
            found = index.first_origin(n)
            if found is None:
                return None
            firsts.append(found)
        key = (graph.fingerprint, degree, tuple(firsts))
        result = self._by_first_blocks.get(key)
        if result is None:
            servers = {n: self.topology.block_from_server(*f).servers for n, f in zip(sizes, firsts, strict=True)}
            result = self.make_placement(tuple(servers[n] for n in self.partitioner.splits(graph, degree).tolist()))
            size = 300 + 8 * len(result.op_servers)  # the entry's tuples (the servers tuples are shared)
            self._by_first_blocks.put(key, result, size, self.MAX_CACHE_ENTRIES, self.MAX_CACHE_BYTES)
        return result

    def _place(self, graph: TrainingGraph, degree: int, allowed: int, region: Region | None = None) -> Placement | None:
        sizes = self._memory_never_binds(graph, degree)
        if sizes is not None:
            return self._place_unbound(graph, degree, sizes, allowed, region)
        return self._place_by_op(graph, degree, allowed, region)

    def _place_by_op(self, graph: TrainingGraph, degree: int, allowed: int,
                     region: Region | None = None) -> Placement | None:
        """First fit op by op in topological order: an op takes its first parent's servers if it
        splits as many ways and they have room, else the first allowed block of its size with room."""
        order, parents = self._graph_structure(graph)
        splits = self.partitioner.splits(graph, degree).tolist()
        # Fail fast: every split size the graph uses needs at least one allowed block.
        if any(not self._allowed_blocks(n, allowed, region) for n in set(splits)):
            return None
        fwd = graph.forward
        # An op and its backward mirror are mounted together: each needs its memory share.
        pair_mem = (2 * (fwd.activation_bytes + fwd.parameter_bytes)).tolist()
        free_mem = _FreeMemory(self._capacity)  # each server its own memory (GPU generations)
        room = free_mem.__getitem__
        op_servers: list[tuple[int, ...] | None] = [None] * fwd.num_ops
        for op in order:
            n = splits[op]
            need = pair_mem[op] / n
            chosen: tuple[int, ...] | None = None
            # min(...) >= need is all(... >= need): memory sizes are finite numbers.
            for parent in parents[op]:
                ps = op_servers[parent]
                if ps is not None and len(ps) == n and min(map(room, ps)) >= need:
                    chosen = ps
                    break
            if chosen is None:
                for blk in self._allowed_blocks(n, allowed, region):
                    if min(map(room, blk.servers)) >= need:
                        chosen = blk.servers
                        break
            if chosen is None:
                return None
            for s in chosen:
                free_mem[s] = free_mem[s] - need
            op_servers[op] = chosen
        return self.make_placement(tuple(op_servers))  # type: ignore[arg-type]

    @staticmethod
    def _hold_block(placement: Placement, block: Block) -> Placement:
        """Under ``split_ops=false`` a job holds its whole block of ``degree`` servers, whichever of
        them its ops use (the signature stays that of the ops' servers)."""
        if placement.mask == block.mask:
            return placement
        return Placement(placement.op_servers, tuple(sorted(block.servers)), block.mask, placement.signature)

    def make_placement(self, op_servers: tuple[tuple[int, ...], ...]) -> Placement:
        """The :class:`Placement` of ``op_servers`` (servers held, mask, signature)."""
        held = sorted(set().union(*op_servers))
        mask = 0
        for s in held:
            mask |= 1 << s
        return Placement(op_servers, tuple(held), mask,
                         placement_signature(op_servers, self.topology.coords, self._sig_kinds))
