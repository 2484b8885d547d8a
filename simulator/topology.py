"""The RAMP optical cluster: servers indexed (communication group, rack, server), symmetric blocks.

RAMP (Ottino et al., arXiv 2211.15226) is an all-optical, single-hop, full-bisection network:
every server reaches every other server over a direct link, so a flow never shares a hop with
another job while the RAMP rules hold (one job per server; collectives on symmetric blocks).
See spec §3 and §5.2 for the rules reproduced here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError


def mask_words(mask: int, num_words: int) -> NDArray[np.uint64]:
    """A server bitmask as little-endian 64-bit words."""
    return np.frombuffer(mask.to_bytes(8 * num_words, "little"), dtype=np.uint64)


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
        server_kinds: GPU generations, by rack index within a communication group: a list of
            ``{kind, racks, speed, memory_capacity_bytes}`` (``racks``: the rack indices
            ``0..R-1`` holding that kind; ``speed``: compute speed relative to the profiled GPU,
            default 1; memory defaults to ``memory_capacity_bytes``). Every rack index belongs to
            exactly one kind. ``None``: one kind, ``gpu``, speed 1, ``memory_capacity_bytes``.

    Raises:
        ConfigError: For an impossible shape (a dimension < 1), non-positive capacities or a
            rack index with no kind (or two).
    """

    #: Kind of every server of a homogeneous cluster (the profiled GPU).
    DEFAULT_KIND = "gpu"

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
        self._block_words: dict[int, NDArray[np.uint64]] = {}

    def _set_server_kinds(self, server_kinds: Sequence[Mapping[str, Any]] | None) -> None:
        """Fill ``kinds``, ``kind_speed``, ``kind_memory_bytes`` and the per-server arrays."""
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
        self.kinds: tuple[str, ...] = tuple(kinds)
        """Server kinds, in config order."""
        self.kind_speed: dict[str, float] = dict(zip(kinds, speed, strict=True))
        """Compute speed of each kind relative to the profiled GPU (a sub-op takes ``time / speed``)."""
        self.kind_memory_bytes: dict[str, float] = dict(zip(kinds, memory, strict=True))
        """GPU memory of each kind."""
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
        """Symmetric block shapes for ``n`` servers, in first-fit order (spec §5.2).

        Factor pairs ``(n/i, i)`` for divisors ``i`` ascending give ``(sqrt p, sqrt p, q)`` when
        ``p`` is a square that fits, and ``(p, 1, q)``, ``(p, q, 1)`` when ``p <= C, R`` and
        ``q <= S``; when ``n <= C, R`` the diagonal ``(n, n, -1)`` and ``(n, 1, 1)`` follow.
        Duplicates are dropped (they cannot change a first-fit result).
        """
        C, R, S = self.shape
        shapes: list[Shape] = []
        for i in range(1, n + 1):
            if n % i:
                continue
            p, q = n // i, i
            root = math.isqrt(p)
            if root * root == p and root <= C and root <= R and q <= S:
                shapes.append((root, root, q))
            if p <= C and p <= R and q <= S:
                shapes += [(p, 1, q), (p, q, 1)]
        if shapes and n <= C and n <= R:
            shapes += [(n, n, -1), (n, 1, 1)]
        return tuple(dict.fromkeys(shapes))

    def blocks(self, n: int) -> tuple[Block, ...]:
        """Every block of ``n`` servers, in the original's first-fit scan order (cached)."""
        if n not in self._blocks:
            self._blocks[n] = self._enumerate_blocks(n)
        return self._blocks[n]

    def block_words(self, n: int) -> NDArray[np.uint64]:
        """Masks of :meth:`blocks` as a ``(num_blocks, words)`` uint64 array (vectorised tests)."""
        if n not in self._block_words:
            self._block_words[n] = np.array([mask_words(b.mask, self.num_words) for b in self.blocks(n)],
                                            dtype=np.uint64).reshape(-1, self.num_words)
        return self._block_words[n]

    @property
    def num_words(self) -> int:
        """64-bit words needed to hold one server bitmask."""
        return (self.num_servers + 63) // 64

    def _enumerate_blocks(self, n: int) -> tuple[Block, ...]:
        C, R, S = self.shape
        out: dict[tuple[int, ...], Block] = {}
        for shape in self.block_shapes(n):
            x, y, z = shape
            for i in range(C - x + 1):
                for j in range(R - y + 1):
                    for k in range(S - z + 1):
                        if z == -1:  # diagonal: one server per (CG, rack) step
                            coords = [(i + t, j + t, k % S) for t in range(n)]
                        else:
                            coords = [((i + a) % C, (j + b) % R, (k + c) % S)
                                      for a in range(x) for b in range(y) for c in range(z)]
                        servers = tuple(self._index[xyz] for xyz in coords)
                        if len(set(servers)) != n or servers in out:
                            continue
                        mask = 0
                        for s in servers:
                            mask |= 1 << s
                        out[servers] = Block(shape, (i, j, k), servers, mask)
        return tuple(out.values())

    @cached_property
    def degrees(self) -> tuple[int, ...]:
        """Partition degrees offered to policies: 1 and every even ``n <= max_degree`` with a shape.

        Odd degrees above 1 are excluded as in the original (the SiP-ML split rule produces even
        split counts); on the paper's 4x4x2 RAMP this gives (1, 2, 4, 6, 8, 16).
        """
        top = min(self.max_degree, self.num_servers)
        return (1, *(n for n in range(2, top + 1, 2) if self.block_shapes(n)))

    @cached_property
    def split_sizes(self) -> tuple[int, ...]:
        """Every sub-op count up to ``max_degree`` that has a symmetric block (odd ones included)."""
        top = min(self.max_degree, self.num_servers)
        return tuple(n for n in range(1, top + 1) if self.block_shapes(n))

    def __repr__(self) -> str:
        C, R, S = self.shape
        kinds = f", kinds {'/'.join(self.kinds)}" if self.heterogeneous else ""
        return f"RampTopology({C}x{R}x{S}={self.num_servers} servers{kinds})"
