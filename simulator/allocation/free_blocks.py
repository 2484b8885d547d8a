"""Free symmetric blocks of one cluster occupancy, found without enumerating blocks.

A 3-D prefix sum of the busy servers (and one along the diagonals) tests whether a block at any
origin is free in O(1), so a search costs O(servers) once per occupancy plus O(free servers) per
shape, in the original's first-fit scan order (:meth:`RampTopology.iter_blocks`). A search may be
restricted to a *region* (a sub-box of the grid).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np
from numba import njit
from numpy.typing import NDArray

from simulator.topology import Block, RampTopology, Shape

Region = tuple[int, int, int, int, int, int]
"""``(c0, c1, r0, r1, s0, s1)``: the grid cells ``[c0, c1) x [r0, r1) x [s0, s1)``."""


@njit(cache=True)
def box_prefix(busy: NDArray[np.uint8]) -> NDArray[np.int32]:
    """``P[i, j, k]`` = busy servers in ``[0, i) x [0, j) x [0, k)``; shape ``(C+1, R+1, S+1)``."""
    C, R, S = busy.shape
    P = np.zeros((C + 1, R + 1, S + 1), dtype=np.int32)
    for i in range(C):  # plane i+1 = plane i + the 2-D prefix of busy[i] (one pass, no 8-term sums)
        for j in range(R):
            acc = 0
            for k in range(S):
                acc += busy[i, j, k]
                P[i + 1, j + 1, k + 1] = acc + P[i + 1, j, k + 1]
        for j in range(R + 1):
            for k in range(S + 1):
                P[i + 1, j, k] += P[i, j, k]
    return P


@njit(cache=True)
def diagonal_prefix(busy: NDArray[np.uint8]) -> NDArray[np.int32]:
    """``D[i, j, k]`` = busy servers among ``(i-t, j-t, k)``, ``1 <= t <= min(i, j)``; shape ``(C+1, R+1, S)``."""
    C, R, S = busy.shape
    D = np.zeros((C + 1, R + 1, S), dtype=np.int32)
    for i in range(C):
        for j in range(R):
            for k in range(S):
                D[i + 1, j + 1, k] = busy[i, j, k] + D[i, j, k]
    return D


@njit(cache=True, inline="always")
def _is_free(P: NDArray[np.int32], D: NDArray[np.int32], i: int, j: int, k: int, x: int, y: int, z: int) -> bool:
    """No busy server in the block of shape ``(x, y, z)`` at cell ``(i, j, k)`` (O(1) on the prefix sums)."""
    if z == -1:
        return D[i + x, j + x, k] == D[i, j, k]
    return (P[i + x, j + y, k + z] - P[i, j + y, k + z] - P[i + x, j, k + z] - P[i + x, j + y, k]
            + P[i, j, k + z] + P[i, j + y, k] + P[i + x, j, k] - P[i, j, k]) == 0


@njit(cache=True)
def free_origins(P: NDArray[np.int32], D: NDArray[np.int32], free_cells: NDArray[np.int64],
                 shapes: NDArray[np.int64], c0: int, r0: int, s0: int, R: int, S: int,
                 out_shape: NDArray[np.int64], out_origin: NDArray[np.int64], count_only: bool = False) -> int:
    """Free blocks of the region ``P`` (box prefix) and ``D`` (diagonal prefix) cover, in first-fit
    order (rows of ``shapes``, then origins ascending): each block's row and origin server written
    into ``out_shape`` / ``out_origin`` until full; returns how many (``count_only``: counts,
    writes nothing). Only the region's ``free_cells`` (flat, ascending) can be origins."""
    nc, nr, ns = P.shape[0] - 1, P.shape[1] - 1, P.shape[2] - 1
    limit = out_origin.shape[0]
    count = 0
    if limit == 0 and not count_only:
        return 0
    for q in range(shapes.shape[0]):
        x, y, z = shapes[q, 0], shapes[q, 1], shapes[q, 2]
        diagonal = z == -1
        last_i = nc - x
        last_j = nr - (x if diagonal else y)
        last_k = ns - 1 if diagonal else ns - z
        for f in free_cells:
            i = f // (nr * ns)
            if i > last_i:
                break  # cells ascend in i: no later cell can be an origin of this shape
            j = (f // ns) % nr
            k = f % ns
            if j > last_j or k > last_k:
                continue
            if _is_free(P, D, i, j, k, x, y, z):
                if count_only:
                    count += 1
                    continue
                out_shape[count] = q
                out_origin[count] = ((c0 + i) * R + r0 + j) * S + s0 + k
                count += 1
                if count == limit:
                    return count
    return count


@njit(cache=True)
def count_free_per_shape(P: NDArray[np.int32], D: NDArray[np.int32], free_cells: NDArray[np.int64],
                         shapes: NDArray[np.int64], c0: int, r0: int, s0: int, R: int, S: int,
                         out_counts: NDArray[np.int64]) -> None:
    """:func:`free_origins` counting each row of ``shapes`` on its own, into ``out_counts`` (one
    call for every shape of many sizes: a decision counts the free blocks of every degree)."""
    empty = np.empty(0, np.int64)
    for q in range(shapes.shape[0]):
        out_counts[q] = free_origins(P, D, free_cells, shapes[q:q + 1], c0, r0, s0, R, S, empty, empty, True)


class FreeBlockIndex:
    """The free blocks of one occupancy (a mask of allowed servers), searched per shape.

    Args:
        allowed_mask: Bitmask of the servers a block may use (free of other jobs).
        region: Restrict the search to this sub-box of the grid (``None``: the whole cluster).
    """

    def __init__(self, topology: RampTopology, allowed_mask: int, region: Region | None = None) -> None:
        self.topology = topology
        self.allowed_mask = allowed_mask
        C, R, S = topology.shape
        self.region: Region = (0, C, 0, R, 0, S) if region is None else region
        self._whole = self.region == (0, C, 0, R, 0, S)
        n = topology.num_servers
        bits = np.unpackbits(np.frombuffer(allowed_mask.to_bytes((n + 7) // 8, "little"), dtype=np.uint8),
                             count=n, bitorder="little")
        c0, c1, r0, r1, s0, s1 = self.region
        busy = (1 - bits).reshape(C, R, S)[c0:c1, r0:r1, s0:s1]
        self._busy = np.ascontiguousarray(busy)
        self._box = box_prefix(self._busy)
        self.num_free = self._busy.size - int(self._box[-1, -1, -1])  # free servers in the region
        # Candidate origins of every search (a block's origin is one of its free servers).
        self._free_cells = np.flatnonzero(self._busy.ravel() == 0).astype(np.int64)
        self._diagonal: NDArray[np.int32] | None = None
        self._blocks: dict[int, BlockList] = {}
        # Shapes with no free block here, kept minimal: a shape containing one of these has none
        # either, so most shapes of a big degree are skipped once a smaller one has failed.
        self._full_boxes: list[Shape] = []
        self._full_diagonal = 0  # the shortest diagonal with no free block (0: none known)
        self._first: dict[int, tuple[Shape, int] | None] = {}
        self._counts: dict[int, int] = {}

    def _known_full(self, shape: Shape) -> bool:
        """A shape containing one already known to have no free block here (so none itself)."""
        x, y, z = shape
        if z == -1:
            return 0 < self._full_diagonal <= x
        return any(a <= x and b <= y and c <= z for a, b, c in self._full_boxes)

    def _scan(self, shape: Shape, row: NDArray[np.int64], out_shape: NDArray[np.int64],
              out_origin: NDArray[np.int64]) -> int:
        """Free blocks of one shape (``row``: its row of the shape array) written into the outputs
        until they are full; a shape found full is remembered, one known full skipped."""
        if self._known_full(shape):
            return 0
        if shape[2] == -1 and self._diagonal is None:
            # Built only when a scan reaches a diagonal (first fit usually stops at a box before).
            self._diagonal = diagonal_prefix(self._busy)
        prefix = self._diagonal if shape[2] == -1 else self._box
        c0, _, r0, _, s0, _ = self.region
        _, R, S = self.topology.shape
        found = free_origins(self._box, prefix, self._free_cells, row, c0, r0, s0, R, S, out_shape, out_origin)
        if not found:
            self._mark_full(shape)
        return found

    def _mark_full(self, shape: Shape) -> None:
        x, y, z = shape
        if z == -1:
            self._full_diagonal = x if not self._full_diagonal else min(self._full_diagonal, x)
            return
        self._full_boxes = [s for s in self._full_boxes if not (x <= s[0] and y <= s[1] and z <= s[2])]
        self._full_boxes.append(shape)

    def _num_origins(self, shape: Shape) -> int:
        c0, c1, r0, r1, s0, s1 = self.region
        x, y, z = shape
        if z == -1:
            return max(c1 - c0 - x + 1, 0) * max(r1 - r0 - y + 1, 0) * (s1 - s0)
        return max(c1 - c0 - x + 1, 0) * max(r1 - r0 - y + 1, 0) * max(s1 - s0 - z + 1, 0)

    def _search(self, n: int, limit: int | None) -> tuple[tuple[Shape, ...], NDArray[np.int64], NDArray[np.int64]]:
        """Free blocks of ``n`` servers (the first ``limit``): shapes, each block's shape row and origin server."""
        topo = self.topology
        shapes = topo.search_shapes(n)
        size = topo.num_blocks(n) if self._whole else sum(self._num_origins(shape) for shape in shapes)
        if limit is not None:
            size = min(size, limit)
        if self.num_free < n:  # exact and O(1): too few free servers for any block
            size = 0
        out_shape = np.empty(size, dtype=np.int64)
        out_origin = np.empty(size, dtype=np.int64)
        if not size:
            return shapes, out_shape, out_origin
        rows = topo.shape_array(n)
        count = 0
        for q, shape in enumerate(shapes):
            found = self._scan(shape, rows[q:q + 1], out_shape[count:], out_origin[count:])
            out_shape[count:count + found] = q
            count += found
            if count == size:
                break
        if count < size:  # a copy: a view would keep the whole buffer (num_blocks entries) alive
            return shapes, out_shape[:count].copy(), out_origin[:count].copy()
        return shapes, out_shape, out_origin

    def first_origin(self, n: int) -> tuple[Shape, int] | None:
        """Shape and origin server of the first free block of ``n`` servers, or ``None`` (the
        block itself is not made: at 65,536 servers its mask alone is 8 KB)."""
        found = self._blocks.get(n)
        if found is not None:
            return found.origin(0) if found else None
        if n in self._first:
            return self._first[n]
        shapes, rows, origins = self._search(n, 1)
        first = self._first[n] = (shapes[int(rows[0])], int(origins[0])) if origins.shape[0] else None
        return first

    def count(self, n: int) -> int:
        """How many free blocks of ``n`` servers there are (none is listed; cached)."""
        return self.counts([n])[0]

    def counts(self, sizes: Sequence[int]) -> list[int]:
        """:meth:`count` of every size in ``sizes``, the uncounted ones in one compiled pass over
        their shapes (cached)."""
        todo = [n for n in dict.fromkeys(sizes) if n not in self._blocks and n not in self._counts]
        for n in todo:
            if self.num_free < n:  # too few free servers for any block
                self._counts[n] = 0
        todo = [n for n in todo if n not in self._counts]
        if todo:
            topo = self.topology
            rows, owner = [], []
            for n in todo:
                self._counts[n] = 0
                # A shape known to be full has no free block: it adds 0, so it is not scanned.
                for shape, row in zip(topo.search_shapes(n), topo.shape_array(n), strict=True):
                    if not self._known_full(shape):
                        rows.append(row)
                        owner.append(n)
            if rows:
                shapes = np.array(rows, dtype=np.int64).reshape(-1, 3)
                if self._diagonal is None and bool((shapes[:, 2] == -1).any()):
                    self._diagonal = diagonal_prefix(self._busy)
                found = np.zeros(len(rows), dtype=np.int64)
                c0, _, r0, _, s0, _ = self.region
                _, R, S = topo.shape
                count_free_per_shape(self._box, self._box if self._diagonal is None else self._diagonal,
                                     self._free_cells, shapes, c0, r0, s0, R, S, found)
                for n, row, k in zip(owner, rows, found.tolist(), strict=True):
                    self._counts[n] += k
                    if not k:
                        self._mark_full((int(row[0]), int(row[1]), int(row[2])))
        return [len(self._blocks[n]) if n in self._blocks else self._counts[n] for n in sizes]

    def first(self, n: int) -> Block | None:
        """The first free block of ``n`` servers in first-fit order, or ``None``."""
        found = self.first_origin(n)
        return None if found is None else self.topology.block_from_server(*found)

    def blocks(self, n: int) -> BlockList:
        """Every free block of ``n`` servers, in first-fit order (a lazy sequence; cached)."""
        found = self._blocks.get(n)
        if found is None:
            shapes, rows, origins = self._search(n, None)
            found = self._blocks[n] = BlockList(self.topology, shapes, rows, origins)
        return found


class BlockList(Sequence[Block]):
    """A first-fit-ordered sequence of blocks, given by their shapes and origin servers; a block is
    made (servers tuple, mask) only when read, and kept on a small cluster (per-op first-fit scans
    read the same lists from the start again and again; a big cluster's 8 KB masks are not kept).

    Indexing, slicing (a tuple), ``len``, iteration and truth work as on a tuple of blocks.
    """

    def __init__(self, topology: RampTopology, shapes: Sequence[Shape], rows: NDArray[np.int64],
                 origins: NDArray[np.int64]) -> None:
        self.topology = topology
        self._shapes = shapes
        self._rows = rows
        self._origins = origins
        self._made: list[Block] | None = [] if topology.num_servers <= topology.MATERIALISE_MAX_SERVERS else None

    def __len__(self) -> int:
        return self._origins.shape[0]

    def __bool__(self) -> bool:
        return self._origins.shape[0] > 0

    def origin(self, index: int) -> tuple[Shape, int]:
        """Shape and origin server of block ``index`` (without making the block)."""
        return self._shapes[int(self._rows[index])], int(self._origins[index])

    def _block(self, index: int) -> Block:
        made = self._made
        if made is None:
            return self.topology.block_from_server(*self.origin(index))
        while len(made) <= index:
            made.append(self.topology.block_from_server(*self.origin(len(made))))
        return made[index]

    @overload
    def __getitem__(self, index: int) -> Block: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Block, ...]: ...

    def __getitem__(self, index: int | slice) -> Block | tuple[Block, ...]:
        if isinstance(index, slice):
            return tuple(self._block(i) for i in range(*index.indices(len(self))))
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("block index out of range")
        return self._block(index)

    def __iter__(self) -> Iterator[Block]:
        for i in range(len(self)):
            yield self._block(i)

    def __repr__(self) -> str:
        return f"BlockList({len(self)} blocks)"
