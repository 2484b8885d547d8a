"""The RAMP optical cluster: servers indexed (communication group, rack, server), symmetric blocks.

RAMP (Ottino et al., arXiv 2211.15226) is an all-optical, single-hop, full-bisection network:
every server reaches every other server over a direct link, so a flow never shares a hop with
another job while the RAMP rules hold (one job per server; collectives on symmetric blocks).
See spec §3 and §5.2 for the rules reproduced here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError

Shape = tuple[int, int, int]
"""A block shape ``(num CGs, num racks, num servers)``; ``z = -1`` marks a diagonal block."""


@dataclass(frozen=True, slots=True)
class Block:
    """A set of servers forming one symmetric RAMP block, in placement order.

    Attributes:
        shape: The shape the block was cut with.
        origin: Its ``(c, r, s)`` origin.
        servers: Server indices, in the order sub-ops are assigned to them.
        mask: Bitmask of ``servers`` (bit i = server i), for fast occupancy tests.
    """

    shape: Shape
    origin: tuple[int, int, int]
    servers: tuple[int, ...]
    mask: int


def _fits(inner: Shape, outer: Shape) -> bool:
    """Whether some block of shape ``inner`` lies inside a block of shape ``outer`` (boxes nest
    extent by extent; a diagonal holds shorter diagonals and single servers; a box holds a
    diagonal of ``m`` when it spans ``m`` groups and ``m`` racks)."""
    if outer[2] == -1:
        return inner[0] <= outer[0] if inner[2] == -1 else inner == (1, 1, 1)
    if inner[2] == -1:
        return inner[0] <= outer[0] and inner[1] <= outer[1]
    return inner[0] <= outer[0] and inner[1] <= outer[1] and inner[2] <= outer[2]


class RampTopology:
    """A RAMP cluster of ``C x R x S`` single-GPU servers (spec §3).

    Args:
        num_comm_groups: Communication groups ``C`` (paper: 4).
        num_racks_per_group: Racks per group ``R`` (paper: 4).
        num_servers_per_rack: Servers per rack ``S`` (paper: 2).
        memory_capacity_bytes: GPU memory per server (A100: 80e9).
        total_node_bandwidth_Bps: Optical bandwidth per server, bytes/s (1.6e12 = 12.8 Tb/s).
        propagation_latency_s: One-hop propagation latency (paper config: 50 ns).
        io_latency_s: Worker I/O latency, paid at both ends of a transfer (paper config: 100 ns).
        max_degree: Largest partition degree offered to policies (paper: 16).
        server_kinds: GPU generations by rack index within a group: a list of ``{kind, racks,
            speed, memory_capacity_bytes}`` covering every rack index once (speed relative to the
            profiled GPU, default 1). ``None``: one kind, ``gpu``.

    Raises:
        ConfigError: For an impossible shape, non-positive capacities or a bad ``server_kinds``.
    """

    #: Kind of every server of a homogeneous cluster (the profiled GPU).
    DEFAULT_KIND = "gpu"
    #: :meth:`blocks` and :meth:`block_from_server` keep what they make only up to this many servers
    #: (a block's mask has one bit per server).
    MATERIALISE_MAX_SERVERS = 1024

    def __init__(self, num_comm_groups: int = 4, num_racks_per_group: int = 4,
                 num_servers_per_rack: int = 2, memory_capacity_bytes: float = 80e9,
                 total_node_bandwidth_Bps: float = 1.6e12, propagation_latency_s: float = 50e-9,
                 io_latency_s: float = 100e-9, max_degree: int = 16,
                 server_kinds: list[dict[str, Any]] | None = None) -> None:
        for name, value in (("num_comm_groups", num_comm_groups),
                            ("num_racks_per_group", num_racks_per_group),
                            ("num_servers_per_rack", num_servers_per_rack),
                            ("max_degree", max_degree)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"must be an integer >= 1, got {value!r} (impossible cluster shape)",
                                  field=f"cluster.{name}")
        for name, fvalue in (("memory_capacity_bytes", memory_capacity_bytes),
                             ("total_node_bandwidth_Bps", total_node_bandwidth_Bps)):
            if not (isinstance(fvalue, int | float) and math.isfinite(fvalue) and fvalue > 0):
                raise ConfigError(f"must be a finite number > 0, got {fvalue!r}", field=f"cluster.{name}")
        for name, fvalue in (("propagation_latency_s", propagation_latency_s),
                             ("io_latency_s", io_latency_s)):
            if not (isinstance(fvalue, int | float) and math.isfinite(fvalue) and fvalue >= 0):
                raise ConfigError(f"must be a finite number >= 0, got {fvalue!r}", field=f"cluster.{name}")
        self.num_comm_groups = num_comm_groups
        self.num_racks_per_group = num_racks_per_group
        self.num_servers_per_rack = num_servers_per_rack
        self.memory_capacity_bytes = float(memory_capacity_bytes)
        self.total_node_bandwidth_Bps = float(total_node_bandwidth_Bps)
        self.propagation_latency_s = float(propagation_latency_s)
        self.io_latency_s = float(io_latency_s)
        self.max_degree = max_degree
        self.coords: tuple[tuple[int, int, int], ...] = tuple(
            (c, r, s) for c in range(num_comm_groups) for r in range(num_racks_per_group)
            for s in range(num_servers_per_rack))
        self._index = {xyz: i for i, xyz in enumerate(self.coords)}
        self._set_server_kinds(server_kinds)
        self._blocks: dict[int, tuple[Block, ...]] = {}
        self._shapes: dict[int, tuple[Shape, ...]] = {}
        self._patterns: dict[Shape, tuple[tuple[int, ...], int]] = {}
        self._shape_arrays: dict[int, NDArray[np.int64]] = {}
        self._num_blocks: dict[int, int] = {}
        self._search: dict[int, tuple[Shape, ...]] = {}
        self._block_split_sizes: dict[int, tuple[int, ...]] = {}
        self._made: dict[tuple[Shape, int], Block] | None = {} if self.num_servers <= self.MATERIALISE_MAX_SERVERS else None

    def _set_server_kinds(self, server_kinds: Sequence[Mapping[str, Any]] | None) -> None:
        """Fill ``kinds``, ``kind_speed`` and the per-server arrays."""
        where = "cluster.server_kinds"
        R = self.num_racks_per_group
        if server_kinds is None:
            server_kinds = [{"kind": self.DEFAULT_KIND, "racks": list(range(R))}]
        if isinstance(server_kinds, Mapping | str) or not isinstance(server_kinds, Sequence) or not server_kinds:
            raise ConfigError(f"must be a non-empty list of {{kind, racks, speed, memory_capacity_bytes}}, "
                              f"got {server_kinds!r}", field=where)
        rack_kind: list[int | None] = [None] * R
        kinds: list[str] = []
        speed: list[float] = []
        memory: list[float] = []
        for i, entry in enumerate(server_kinds):
            at = f"{where}[{i}]"
            if not isinstance(entry, Mapping):
                raise ConfigError(f"must be a mapping, got {entry!r}", field=at)
            unknown = sorted(set(entry) - {"kind", "racks", "speed", "memory_capacity_bytes"})
            if unknown:
                raise ConfigError("unknown key (expected kind, racks, speed, memory_capacity_bytes)",
                                  field=f"{at}.{unknown[0]}")
            kind = entry.get("kind")
            if not isinstance(kind, str) or not kind or kind in kinds:
                raise ConfigError(f"must be a new kind name, got {kind!r}", field=f"{at}.kind")
            sp = entry.get("speed", 1.0)
            mem = entry.get("memory_capacity_bytes", self.memory_capacity_bytes)
            for key, value in (("speed", sp), ("memory_capacity_bytes", mem)):
                if isinstance(value, bool) or not isinstance(value, int | float) or not (
                        math.isfinite(value) and value > 0):
                    raise ConfigError(f"must be a finite number > 0, got {value!r}", field=f"{at}.{key}")
            racks = entry.get("racks")
            if isinstance(racks, str) or not isinstance(racks, Sequence) or not racks:
                raise ConfigError(f"must be a non-empty list of rack indices 0..{R - 1}, got {racks!r}",
                                  field=f"{at}.racks")
            for r in racks:
                if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < R:
                    raise ConfigError(f"rack index must be an integer in 0..{R - 1}, got {r!r}", field=f"{at}.racks")
                if rack_kind[r] is not None:
                    raise ConfigError(f"rack {r} already has kind {kinds[rack_kind[r]]!r}",  # type: ignore[index]
                                      field=f"{at}.racks")
                rack_kind[r] = len(kinds)
            kinds.append(kind)
            speed.append(float(sp))
            memory.append(float(mem))
        missing = [r for r, k in enumerate(rack_kind) if k is None]
        if missing:
            raise ConfigError(f"racks {missing} have no kind (every rack index 0..{R - 1} needs one)", field=where)
        self.kinds: tuple[str, ...] = tuple(kinds)  # server kinds, in config order
        self.kind_speed: dict[str, float] = dict(zip(kinds, speed, strict=True))
        """Compute speed of each kind relative to the profiled GPU (a sub-op takes ``time / speed``)."""
        index = np.array([rack_kind[r] for _, r, _ in self.coords], dtype=np.int64)
        index.setflags(write=False)
        self.server_kind_index: NDArray[np.int64] = index
        """Index into :attr:`kinds` of every server."""
        self.server_kind: tuple[str, ...] = tuple(kinds[k] for k in index.tolist())
        """Kind of every server."""
        self.server_speed: NDArray[np.float64] = np.array(speed, dtype=np.float64)[index]
        """Compute speed of every server."""
        self.server_memory_bytes: NDArray[np.float64] = np.array(memory, dtype=np.float64)[index]
        """GPU memory of every server."""
        self.server_speed.setflags(write=False)
        self.server_memory_bytes.setflags(write=False)
        self.heterogeneous: bool = len(kinds) > 1
        """Whether servers differ in kind (two GPU generations)."""

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(C, R, S)``."""
        return (self.num_comm_groups, self.num_racks_per_group, self.num_servers_per_rack)

    @property
    def num_servers(self) -> int:
        """Total servers (one GPU each)."""
        return len(self.coords)

    @property
    def channel_bandwidth_Bps(self) -> float:
        """Bandwidth of one transceiver: the node bandwidth split over the C groups (spec §3.1)."""
        return self.total_node_bandwidth_Bps / self.num_comm_groups

    @property
    def all_servers_mask(self) -> int:
        """Bitmask with every server set."""
        return (1 << self.num_servers) - 1

    def index(self, c: int, r: int, s: int) -> int:
        """Server index of coordinates ``(c, r, s)``."""
        return self._index[(c, r, s)]

    def server_name(self, server: int) -> str:
        """The original's server id string ``"c-r-s"``."""
        c, r, s = self.coords[server]
        return f"{c}-{r}-{s}"

    def block_shapes(self, n: int) -> tuple[Shape, ...]:
        """Symmetric block shapes for ``n`` servers, in first-fit order (spec §5.2; cached).

        For each divisor ``q <= S`` ascending, with ``p = n / q``: ``(sqrt p, sqrt p, q)`` when
        ``p`` is a square that fits, ``(p, 1, q)`` and ``(p, q, 1)`` when ``p <= C, R``; then, when
        ``n <= C, R``, ``(n, n, -1)`` and ``(n, 1, 1)``. Duplicates are dropped.
        """
        if n in self._shapes:
            return self._shapes[n]
        C, R, S = self.shape
        small = [i for i in range(1, math.isqrt(n) + 1) if n % i == 0]
        divisors = small + [n // i for i in reversed(small) if n // i != i]
        shapes: list[Shape] = []
        for q in divisors:
            if q > S:  # every later divisor is larger
                break
            p = n // q
            root = math.isqrt(p)
            if root * root == p and root <= C and root <= R:
                shapes.append((root, root, q))
            if p <= C and p <= R:
                shapes += [(p, 1, q), (p, q, 1)]
        if shapes and n <= C and n <= R:
            shapes += [(n, n, -1), (n, 1, 1)]
        found = self._shapes[n] = tuple(dict.fromkeys(shapes))
        return found

    def origin_ranges(self, shape: Shape) -> tuple[int, int, int]:
        """How many origins ``(i, j, k)`` a shape has along each axis (blocks never wrap around)."""
        C, R, S = self.shape
        x, y, z = shape
        return (max(C - x + 1, 0), max(R - y + 1, 0), S if z == -1 else max(S - z + 1, 0))

    def pattern(self, shape: Shape) -> tuple[tuple[int, ...], int]:
        """Server offsets of a block of ``shape`` from its origin server (its smallest), in
        placement order, and their bitmask (cached): blocks never wrap around, so every block of
        the shape is ``origin_server + offsets``."""
        found = self._patterns.get(shape)
        if found is None:
            _, R, S = self.shape
            x, y, z = shape
            if z == -1:  # diagonal: one server per (CG, rack) step
                offsets = tuple(t * (R * S + S) for t in range(x))
            else:
                offsets = tuple(a * R * S + b * S + c for a in range(x) for b in range(y) for c in range(z))
            mask = 0
            for s in offsets:
                mask |= 1 << s
            found = self._patterns[shape] = (offsets, mask)
        return found

    def block_at(self, shape: Shape, origin: tuple[int, int, int]) -> Block:
        """The block of ``shape`` at ``origin`` (no check that it fits: see :meth:`origin_ranges`)."""
        i, j, k = origin
        return self.block_from_server(shape, (i * self.num_racks_per_group + j) * self.num_servers_per_rack + k)

    def block_from_server(self, shape: Shape, origin_server: int) -> Block:
        """The block of ``shape`` whose origin is server ``origin_server`` (kept on a small cluster)."""
        made = self._made
        if made is not None:
            found = made.get((shape, origin_server))
            if found is not None:
                return found
        offsets, mask = self.pattern(shape)
        block = Block(shape, self.coords[origin_server], tuple(origin_server + s for s in offsets),
                      mask << origin_server)
        if made is not None:
            made[(shape, origin_server)] = block
        return block

    def search_shapes(self, n: int) -> tuple[Shape, ...]:
        """The shapes of :meth:`block_shapes` that give blocks no earlier shape gives (only the
        one-server diagonal repeats a box)."""
        found = self._search.get(n)
        if found is None:
            found = self._search[n] = tuple(s for s in self.block_shapes(n) if not (n == 1 and s[2] == -1))
        return found

    def shape_array(self, n: int) -> NDArray[np.int64]:
        """:meth:`search_shapes` as a read-only ``(num_shapes, 3)`` array (for compiled searches; cached)."""
        found = self._shape_arrays.get(n)
        if found is None:
            found = np.array(self.search_shapes(n), dtype=np.int64).reshape(-1, 3)
            found.setflags(write=False)
            self._shape_arrays[n] = found
        return found

    def iter_blocks(self, n: int) -> Iterator[Block]:
        """Every block of ``n`` servers in the original's first-fit scan order, made lazily:
        shapes in :meth:`block_shapes` order, then origins ``(i, j, k)`` ascending."""
        R, S = self.num_racks_per_group, self.num_servers_per_rack
        for shape in self.search_shapes(n):
            ni, nj, nk = self.origin_ranges(shape)
            for i in range(ni):
                for j in range(nj):
                    for k in range(nk):
                        yield self.block_from_server(shape, (i * R + j) * S + k)

    def num_blocks(self, n: int) -> int:
        """How many blocks of ``n`` servers there are (``len(blocks(n))``, by formula; cached)."""
        found = self._num_blocks.get(n)
        if found is None:
            found = self._num_blocks[n] = sum(math.prod(self.origin_ranges(shape)) for shape in self.search_shapes(n))
        return found

    def blocks(self, n: int) -> tuple[Block, ...]:
        """Every block of ``n`` servers, in first-fit scan order, all made (cached up to
        :attr:`MATERIALISE_MAX_SERVERS` servers): for tests and small clusters."""
        found = self._blocks.get(n)
        if found is None:
            found = tuple(self.iter_blocks(n))
            if self.num_servers <= self.MATERIALISE_MAX_SERVERS:
                self._blocks[n] = found
        return found

    def find_block(self, servers: Sequence[int]) -> Block | None:
        """The block whose servers are exactly ``servers`` in this order, or ``None``
        (e.g. to check a placement a policy chose, without enumerating blocks)."""
        n = len(servers)
        if not n or not all(isinstance(s, int | np.integer) and 0 <= s < self.num_servers for s in servers):
            return None
        wanted = tuple(int(s) for s in servers)
        c, r, k = self.coords[wanted[0]]
        for shape in self.search_shapes(n):
            ni, nj, nk = self.origin_ranges(shape)
            if c < ni and r < nj and k < nk:
                block = self.block_from_server(shape, wanted[0])
                if block.servers == wanted:
                    return block
        return None

    @cached_property
    def degrees(self) -> tuple[int, ...]:
        """Partition degrees offered to policies: 1 and every even ``n <= max_degree`` with a shape
        (as the original; the paper's 4x4x2 RAMP gives (1, 2, 4, 6, 8, 16))."""
        top = min(self.max_degree, self.num_servers)
        return (1, *(n for n in range(2, top + 1, 2) if self.block_shapes(n)))

    @cached_property
    def split_sizes(self) -> tuple[int, ...]:
        """Every sub-op count up to ``max_degree`` that has a symmetric block (odd ones included)."""
        top = min(self.max_degree, self.num_servers)
        return tuple(n for n in range(1, top + 1) if self.block_shapes(n))

    def block_split_sizes(self, degree: int) -> tuple[int, ...]:
        """Sub-op counts that have a symmetric block inside *every* block of ``degree`` servers
        (cached): under block placement a job's split ops must fit inside its own block, whichever
        shape it gets (docs/simulator.md, "Job allocation")."""
        found = self._block_split_sizes.get(degree)
        if found is None:
            shapes = self.search_shapes(degree)
            found = tuple(m for m in self.split_sizes if m <= degree and all(
                any(_fits(inner, outer) for inner in self.search_shapes(m)) for outer in shapes))
            self._block_split_sizes[degree] = found
        return found

    def __repr__(self) -> str:
        C, R, S = self.shape
        kinds = f", kinds {'/'.join(self.kinds)}" if self.heterogeneous else ""
        return f"RampTopology({C}x{R}x{S}={self.num_servers} servers{kinds})"
