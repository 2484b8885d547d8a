"""Blocks by formula and the free-block search equal the original enumeration; shifted placements
equal first fit; the hopeless-degree shortcut is exact; a 65,536-server cluster works."""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.allocation.first_fit import block_region
from simulator.allocation.free_blocks import FreeBlockIndex
from simulator.build import SimKnobs, build_feasibility
from simulator.feasibility import Feasibility
from simulator.topology import Block, RampTopology
from workloads.graph import TrainingGraph
from workloads.jobs import JobSpec
from workloads.loaders import load_graph_set

HETERO_KINDS = [{"kind": "gpu", "racks": [0, 1], "speed": 1.0, "memory_capacity_bytes": 80e9},
                {"kind": "gpu_half", "racks": [2, 3], "speed": 0.5, "memory_capacity_bytes": 40e9}]
PHYSICAL = SimKnobs(min_op_time_s=1e-5, edge_sizing="activation", placement="block", comm_quirks=False)

TOPOLOGIES = {
    "ramp32": lambda: RampTopology(),
    "ramp64": lambda: RampTopology(num_servers_per_rack=4),
    "ramp32_hetero": lambda: RampTopology(server_kinds=HETERO_KINDS),
    "3x5x4": lambda: RampTopology(3, 5, 4, max_degree=60),
    "2x2x7": lambda: RampTopology(2, 2, 7, max_degree=28),
    "5x3x1": lambda: RampTopology(5, 3, 1, max_degree=15),
}


@cache
def topology(name: str) -> RampTopology:
    return TOPOLOGIES[name]()


def reference_blocks(topo: RampTopology, n: int) -> tuple[Block, ...]:
    """The original enumeration (every block materialised, with wrap-around arithmetic and
    duplicate removal), kept here as the reference the formulas must reproduce."""
    C, R, S = topo.shape
    out: dict[tuple[int, ...], Block] = {}
    for shape in topo.block_shapes(n):
        x, y, z = shape
        for i in range(C - x + 1):
            for j in range(R - y + 1):
                for k in range(S - z + 1):
                    if z == -1:
                        coords = [(i + t, j + t, k % S) for t in range(n)]
                    else:
                        coords = [((i + a) % C, (j + b) % R, (k + c) % S)
                                  for a in range(x) for b in range(y) for c in range(z)]
                    servers = tuple(topo.index(*xyz) for xyz in coords)
                    if len(set(servers)) != n or servers in out:
                        continue
                    mask = 0
                    for s in servers:
                        mask |= 1 << s
                    out[servers] = Block(shape, (i, j, k), servers, mask)
    return tuple(out.values())


def reference_block_shapes(topo: RampTopology, n: int) -> tuple:
    """The original O(n) shape rule."""
    import math
    C, R, S = topo.shape
    shapes: list = []
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


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_blocks_by_formula_equal_the_enumeration(name: str) -> None:
    topo = topology(name)
    for n in range(1, topo.num_servers + 1):
        assert topo.block_shapes(n) == reference_block_shapes(topo, n)
        ref = reference_blocks(topo, n)
        assert topo.blocks(n) == ref
        assert topo.num_blocks(n) == len(ref)
        for b in ref:
            assert topo.find_block(b.servers) == b
            assert topo.block_at(b.shape, b.origin) == b
    assert topo.find_block((0, topo.num_servers - 1)) is None or topo.num_servers == 2
    assert topo.find_block((1, 0)) is None  # not in placement order


def random_mask(topo: RampTopology, seed: int, busy_fraction: float) -> int:
    bits = np.random.default_rng(seed).random(topo.num_servers) < busy_fraction
    return sum(1 << int(s) for s in np.flatnonzero(bits))


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(TOPOLOGIES)), seed=st.integers(0, 10**6),
       busy=st.sampled_from([0.0, 0.1, 0.3, 0.6, 0.9]), data=st.data())
def test_free_block_search_equals_a_scan_of_every_block(name: str, seed: int, busy: float, data: st.DataObject) -> None:
    topo = topology(name)
    occupied = random_mask(topo, seed, busy)
    placer = build_feasibility(topo, PHYSICAL).placer
    for n in data.draw(st.sets(st.sampled_from(topo.split_sizes), min_size=1, max_size=4)):
        expected = tuple(b for b in reference_blocks(topo, n) if not b.mask & occupied)
        got = placer.free_blocks(n, occupied)
        assert len(got) == len(expected) and bool(got) == bool(expected)
        assert tuple(got) == expected and got[:3] == expected[:3]
        assert placer.first_fit_block(n, occupied) == (expected[0] if expected else None)
        # Restricted to a block's bounding box: the blocks inside the block, same order.
        for outer in expected[:2]:
            inside = tuple(b for b in reference_blocks(topo, data.draw(st.sampled_from(topo.split_sizes)))
                           if not b.mask & ~outer.mask)
            if inside:
                m = len(inside[0].servers)
                index = FreeBlockIndex(topo, outer.mask, block_region(outer))
                assert tuple(index.blocks(m)) == inside
                assert index.first(m) == inside[0]


@cache
def graphs() -> tuple[TrainingGraph, ...]:
    return tuple(TrainingGraph(g) for g in load_graph_set(["alexnet", "gnmt", "resnet18", "vgg16"], time_unit_s=1e-3))


@pytest.mark.parametrize("name", ["ramp32", "ramp64", "ramp32_hetero", "3x5x4"])
@pytest.mark.parametrize("split_ops", [True, False])
def test_shifted_placement_equals_first_fit_in_the_block(name: str, split_ops: bool) -> None:
    topo = topology(name)
    placer = build_feasibility(topo, dataclasses.replace(PHYSICAL, split_ops=split_ops)).placer
    reference = build_feasibility(topo, dataclasses.replace(PHYSICAL, split_ops=split_ops)).placer
    rng = np.random.default_rng(0)
    for trial in range(12):
        occupied = random_mask(topo, trial, float(rng.choice([0.0, 0.2, 0.5])))
        for graph in graphs():
            for degree in topo.degrees:
                got = placer.place(graph, degree, occupied)
                block = reference.first_fit_block(degree, occupied)
                if block is None:
                    assert got is None
                    continue
                expected = reference._place(graph, degree, block.mask)  # the per-op scan, uncached
                if expected is not None and not split_ops:
                    expected = reference._hold_block(expected, block)
                assert got == expected  # op_servers, servers, mask and signature
                # An explicit block (learned placement) takes the same path.
                assert placer.place(graph, degree, occupied, block) == expected


class NoShortcut(Feasibility):
    """The feasibility engine with the hopeless-degree shortcut switched off."""

    jct_depends_on_shape_only = False  # type: ignore[assignment]


def test_shortcut_refuses_only_hopeless_degrees() -> None:
    """meets_target with the per-shape shortcut equals the full lookahead, degree by degree."""
    topo = topology("ramp64")
    fast = build_feasibility(topo, PHYSICAL)
    other = build_feasibility(topo, PHYSICAL)
    slow = NoShortcut(topo, other.placer, other.step_model)
    assert fast.jct_depends_on_shape_only and not slow.jct_depends_on_shape_only
    skipped = 0
    for trial in range(6):
        occupied = random_mask(topo, trial, 0.3 * (trial % 3))
        for i, graph in enumerate(graphs()):
            for beta in (0.05, 0.2, 0.5, 1.0):
                job = JobSpec(job_id=i, arrival_time_s=0.0, graph=graph, beta=beta, num_training_steps=50)
                a, b = fast.table(job, occupied), slow.table(job, occupied)
                for d in topo.degrees:
                    assert a.meets_target(d) == b.meets_target(d)
                    skipped += (d, None) not in a._placements
    assert skipped  # the shortcut did skip searches


def test_heterogeneous_and_op_first_fit_clusters_do_not_use_the_shortcut() -> None:
    assert not build_feasibility(topology("ramp32_hetero"), PHYSICAL).jct_depends_on_shape_only
    assert not build_feasibility(topology("ramp32"), dataclasses.replace(PHYSICAL, placement="op_first_fit")
                                 ).jct_depends_on_shape_only


def test_65536_servers_first_fit_of_1024() -> None:
    """64 x 64 x 16: the topology builds, degrees up to 1,024 are offered, and first fit finds
    blocks of 1,024 servers without enumerating blocks (timings: see the report)."""
    topo = RampTopology(64, 64, 16, max_degree=1024)
    assert topo.num_servers == 65536
    assert topo.degrees[-1] == 1024 and 512 in topo.degrees and len(topo.degrees) > 300
    assert topo.block_shapes(1024) == ((32, 32, 1), (16, 16, 4), (8, 8, 16), (64, 1, 16), (64, 16, 1))
    assert topo.num_blocks(1024) == 33 * 33 * 16 + 49 * 49 * 13 + 57 * 57 + 1 * 64 * 1 + 49 * 16
    placer = build_feasibility(topo, PHYSICAL).placer
    first = placer.first_fit_block(1024, 0)
    assert first == topo.block_at((32, 32, 1), (0, 0, 0))
    # Hold the box c < 32, r < 32 (every k) and rack (0, 40): the first free (32, 32, 1) block
    # is then at (1, 32, 0); check every origin scanned before it is busy.
    box = sum(topo.block_at((32, 32, 1), (0, 0, k)).mask for k in range(16))
    occupied = box | sum(1 << topo.index(0, 40, s) for s in range(16))
    second = placer.first_fit_block(1024, occupied)
    assert second == topo.block_at((32, 32, 1), (1, 32, 0))
    for i in range(2):
        for j in range(33 if i == 0 else 32):
            for k in range(16):
                assert topo.block_at((32, 32, 1), (i, j, k)).mask & occupied
    # Degree 2 on a half-busy cluster: the first free block is the first free origin scanned.
    busy = random_mask(topo, 1, 0.5)
    block = placer.first_fit_block(2, busy)
    assert block is not None and not block.mask & busy and block.shape == (2, 1, 1)
    for s in range(block.servers[0]):  # no earlier (2, 1, 1) origin is free
        c, r, k = topo.coords[s]
        if c + 1 < 64:
            assert topo.block_at((2, 1, 1), (c, r, k)).mask & busy


def test_only_a_diagonal_is_free() -> None:
    """The diagonal is searched only after every box shape of the degree failed."""
    topo = topology("ramp32")
    diagonal = topo.block_at((4, 4, -1), (0, 0, 0))
    index = FreeBlockIndex(topo, diagonal.mask)
    assert index.first(4) == diagonal
    assert index.first(2) == topo.block_at((2, 2, -1), (0, 0, 0))
    assert tuple(index.blocks(2)) == tuple(topo.block_at((2, 2, -1), (t, t, 0)) for t in range(3))
    assert index.first(3) == topo.block_at((3, 3, -1), (0, 0, 0)) and index.first(8) is None


def test_free_blocks_is_a_lazy_sequence() -> None:
    topo = topology("3x5x4")
    placer = build_feasibility(topo, PHYSICAL).placer
    occupied = random_mask(topo, 3, 0.3)
    expected = tuple(b for b in reference_blocks(topo, 4) if not b.mask & occupied)
    got = FreeBlockIndex(topo, topo.all_servers_mask & ~occupied).blocks(4)
    assert len(got) == len(expected) > 2
    assert got[-1] == expected[-1] and got[1] == expected[1] and got[::2] == expected[::2]
    with pytest.raises(IndexError):
        got[len(expected)]
    assert list(placer.free_blocks(4, occupied)) == list(expected)
    assert not FreeBlockIndex(topo, 0).blocks(1) and FreeBlockIndex(topo, 0).first(1) is None
    assert topo.find_block(()) is None and topo.find_block((topo.num_servers,)) is None


@pytest.mark.parametrize("name", ["ramp32", "ramp64", "3x5x4", "2x2x7", "5x3x1"])
def test_block_split_sizes_are_the_sizes_with_a_block_inside_every_block_of_the_degree(name: str) -> None:
    topo = topology(name)
    for degree in topo.degrees:
        expected = []
        for m in topo.split_sizes:
            if m > degree:
                break
            # Brute force: every block of the degree contains some block of m servers.
            if all(any(inner.mask & ~outer.mask == 0 for inner in topo.blocks(m)) for outer in topo.blocks(degree)):
                expected.append(m)
        assert topo.block_split_sizes(degree) == tuple(expected), degree


@pytest.mark.parametrize("shape", [(8, 8, 8, 64), (16, 16, 16, 256)])
def test_block_placement_places_every_graph_at_every_degree_on_an_empty_cluster(shape: tuple[int, ...]) -> None:
    # With cluster-wide split sizes, 83 (graph, degree) pairs of the ten graphs could never be
    # placed on 8 x 8 x 8 (e.g. a 34-way op inside an 8 x 8 x 1 block of 64).
    topo = RampTopology(*shape[:3], max_degree=shape[3])
    feas = build_feasibility(topo, PHYSICAL)
    for graph in load_graph_set("all" if topo.num_servers <= 512 else "paper", time_unit_s=1e-3):
        tg = TrainingGraph(graph)
        for degree in topo.degrees:
            assert feas.placer.place(tg, degree, 0) is not None, (graph.name, degree)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["ramp64", "3x5x4", "2x2x7"]), seed=st.integers(0, 10**6),
       busy=st.sampled_from([0.2, 0.5, 0.7]), order=st.randoms(use_true_random=False))
def test_one_index_answers_many_degrees_in_any_order_like_the_scan(name: str, seed: int, busy: float,
                                                                   order) -> None:
    # One index prunes a shape that contains a shape it already found full; the answers must not
    # depend on which degrees were asked before.
    topo = topology(name)
    occupied = random_mask(topo, seed, busy)
    index = FreeBlockIndex(topo, topo.all_servers_mask & ~occupied)
    sizes = list(topo.split_sizes)
    order.shuffle(sizes)
    for n in sizes:
        expected = tuple(b for b in reference_blocks(topo, n) if not b.mask & occupied)
        ask = order.random()
        if ask < 0.35:
            assert index.first(n) == (expected[0] if expected else None), n
        elif ask < 0.7:
            assert index.count(n) == len(expected), n
        else:
            assert tuple(index.blocks(n)) == expected, n
