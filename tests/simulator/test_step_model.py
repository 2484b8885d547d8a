"""The aggregate (op-level) step model equals the dependency-level reference bit for bit.

``StepModel.step`` runs on :class:`simulator.partition.AggregatePartition` (training edges as
barriers); ``StepModel.reference_step`` materialises every dependency and prices it with
``RampCommModel.dependency_times_s`` before list-scheduling it. Step times and compute times must be
equal exactly; ``comm_s`` (a sum taken in another order) to 1e-12 relative.
"""

from __future__ import annotations

import random
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.allocation.first_fit import Placement
from simulator.build import SimKnobs, build_feasibility
from simulator.feasibility import FeasibilityTable
from simulator.partition import Partitioner
from simulator.place.kernel import repeated_sums
from simulator.topology import RampTopology
from tests.conftest import make_graph
from workloads.graph import TrainingGraph
from workloads.loaders import load_graph_set

#: A quantum small enough that the paper graphs split up to the degree (16-way and more).
QUANTUM_S = 1e-5
SETTINGS = {
    "paper": SimKnobs(min_op_time_s=QUANTUM_S, edge_sizing="paper", comm_quirks=True),
    "physical": SimKnobs(min_op_time_s=QUANTUM_S, edge_sizing="activation", placement="block", comm_quirks=False),
    "mixed": SimKnobs(min_op_time_s=QUANTUM_S, edge_sizing="activation", comm_quirks=True),
}
HETERO_KINDS = [{"kind": "gpu", "racks": [0, 1], "speed": 1.0},
                {"kind": "gpu_half", "racks": [2, 3], "speed": 0.5}]


@cache
def graphs() -> dict[str, TrainingGraph]:
    return {g.name: TrainingGraph(g) for g in load_graph_set("all")}


@cache
def feasibility(setting: str, shape: tuple[int, int, int] = (4, 4, 2), hetero: bool = False) -> FeasibilityTable:
    topo = RampTopology(*shape, max_degree=shape[0] * shape[1] * shape[2],
                        server_kinds=HETERO_KINDS if hetero else None)
    return build_feasibility(topo, SETTINGS[setting])


def assert_same(feas: FeasibilityTable, graph: TrainingGraph, degree: int, placement: Placement) -> None:
    sm = feas.step_model
    got = sm.simulate(sm.partitioner.aggregate(graph, degree), placement)
    want = sm.reference_step(graph, degree, placement)
    where = f"{graph.name} at degree {degree}"
    assert got.step_time_s == want.step_time_s, where
    assert got.compute_s == want.compute_s, where
    assert got.comm_s == pytest.approx(want.comm_s, rel=1e-12, abs=0), where
    assert (got.num_sub_ops, got.num_deps) == (want.num_sub_ops, want.num_deps), where


def random_placement(feas: FeasibilityTable, graph: TrainingGraph, degree: int, rng: random.Random,
                     symmetric: bool) -> Placement:
    """Sub-ops on random servers: ``symmetric``: every op of one split count on one random set of
    servers, in a random order; otherwise servers drawn with repetition (sub-ops of an op may
    share a server)."""
    splits = feas.step_model.partitioner.splits(graph, degree)
    num_servers = feas.topology.num_servers
    pools: dict[int, list[int]] = {}
    op_servers = []
    for k in splits.tolist():
        if symmetric:
            pool = pools.setdefault(k, rng.sample(range(num_servers), k))
            op_servers.append(tuple(rng.sample(pool, k)))
        else:
            op_servers.append(tuple(rng.randrange(min(num_servers, 2 * k)) for _ in range(k)))
    return feas.placer.make_placement(tuple(op_servers))


@pytest.mark.parametrize("setting", ["paper", "physical"])
def test_first_fit_placements_of_every_graph(setting: str) -> None:
    feas = feasibility(setting)
    for graph in graphs().values():
        for degree in (1, 2, 4, 8, 16):
            placement = feas.placer.place(graph, degree, 0)
            if placement is not None:
                assert_same(feas, graph, degree, placement)


@pytest.mark.parametrize("setting", ["paper", "physical", "mixed"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_random_placements(setting: str, symmetric: bool) -> None:
    feas = feasibility(setting)
    rng = random.Random(f"{setting}-{symmetric}")
    for name in ("resnet18", "gnmt", "inception_v3", "alexnet"):
        for degree in (2, 4, 8, 16):
            assert_same(feas, graphs()[name], degree, random_placement(feas, graphs()[name], degree, rng, symmetric))


def test_two_generation_cluster() -> None:
    feas = feasibility("physical", hetero=True)
    rng = random.Random(3)
    for name in ("resnet18", "vgg16", "squeezenet1_0"):
        for degree in (4, 16):
            graph = graphs()[name]
            assert_same(feas, graph, degree, feas.placer.place(graph, degree, 0))
            assert_same(feas, graph, degree, random_placement(feas, graph, degree, rng, symmetric=False))


def first_block_placement(feas: FeasibilityTable, graph: TrainingGraph, degree: int) -> Placement:
    """Sub-op ``i`` of every op on server ``i`` of the first-fit ``degree``-server block."""
    block = feas.placer.first_fit_block(degree, 0)
    assert block is not None
    servers = sorted(block.servers)
    splits = feas.step_model.partitioner.splits(graph, degree)
    return feas.placer.make_placement(tuple(tuple(servers[:k]) for k in splits.tolist()))


@pytest.mark.parametrize("setting", ["paper", "physical"])
def test_degree_64_on_an_8x8x8_cluster(setting: str) -> None:
    feas = feasibility(setting, (8, 8, 8))
    rng = random.Random(64)
    for name in ("alexnet", "gnmt"):
        graph = graphs()[name]
        assert feas.step_model.partitioner.splits(graph, 64).max() == 64
        assert_same(feas, graph, 64, first_block_placement(feas, graph, 64))
        assert_same(feas, graph, 64, random_placement(feas, graph, 64, rng, symmetric=True))


def test_hand_graphs_with_zero_bytes_zero_times_and_no_edges() -> None:
    feas = feasibility("physical", (2, 2, 2))
    # Zero-time op (never split), zero-byte edges, a fan-out and a lone op.
    g = TrainingGraph(make_graph("h", [(2.0, 4.0, 2e9, 1e6), (0.0, 0.0, 0, 0), (1.0, 1.0, 0, 5e5), (3.0, 1.0, 1e3, 0)],
                                 [(0, 1), (0, 2), (2, 1)]))
    lone = TrainingGraph(make_graph("lone", [(1.0, 2.0, 1e3, 1e3)], []))
    rng = random.Random(0)
    for graph in (g, lone):
        for degree in (1, 2, 4):
            assert_same(feas, graph, degree, first_block_placement(feas, graph, degree))
            for symmetric in (True, False):
                assert_same(feas, graph, degree, random_placement(feas, graph, degree, rng, symmetric))


def test_step_uses_the_aggregate_and_caches() -> None:
    feas = feasibility("paper")
    sm = feas.step_model
    graph = graphs()["resnet18"]
    placement = feas.placer.place(graph, 8, 0)
    before = sm.num_lookaheads
    first = sm.step(graph, 8, placement)
    assert sm.step(graph, 8, placement) is first
    assert sm.num_lookaheads == before + 1
    assert first == sm.simulate(sm.partitioner.aggregate(graph, 8), placement)


@pytest.mark.parametrize("sizing", ["paper", "activation"])
def test_aggregate_partition_matches_the_dependency_graph(sizing: str) -> None:
    part = Partitioner(QUANTUM_S, sizing)
    for name in ("resnet18", "gnmt"):
        graph = graphs()[name]
        for degree in (1, 4, 16):
            ap, pg = part.aggregate(graph, degree), part.partition(graph, degree)
            for attr in ("offset", "sub_origin", "sub_time_s", "sub_memory_bytes"):
                assert np.array_equal(getattr(ap, attr), getattr(pg, attr)), attr
            assert ap.num_deps == pg.num_deps
            assert part.total_bytes(graph, degree) == pytest.approx(pg.total_bytes, rel=1e-12)
            # Group bytes: the dependency-level sum of every op-level group, bit for bit.
            real = ~pg.dep_is_sync & (pg.dep_group >= 0)
            want = np.bincount(pg.dep_group[real], weights=pg.dep_bytes[real])
            want = want[np.unique(pg.dep_group[real])]
            assert np.array_equal(ap.group_bytes, want)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 300),
                          st.floats(0, 1e9, allow_nan=False, allow_infinity=False)), min_size=1, max_size=12))
def test_repeated_sums_equal_bincount(edges: list[tuple[int, int, float]]) -> None:
    group = np.array([g for g, _, _ in edges], dtype=np.int64)
    count = np.array([c for _, c, _ in edges], dtype=np.int64)
    size = np.array([x for _, _, x in edges])
    order = np.argsort(group, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(group, minlength=4))]).astype(np.int64)
    want = np.bincount(np.repeat(group, count), weights=np.repeat(size, count), minlength=4)
    assert np.array_equal(repeated_sums(order.astype(np.int64), ptr, count, size), want)


@st.composite
def small_jobs(draw: st.DrawFn) -> tuple[TrainingGraph, int, str, int]:
    """A random small DAG (zero times and zero bytes included), a degree, a setting and a seed."""
    n = draw(st.integers(1, 6))
    value = st.sampled_from([0.0, 1e-5, 3e-5, 2.5e-4, 1e-3])
    size = st.sampled_from([0.0, 1.0, 3e3, 2e6, 7e8])
    ops = [(draw(value), draw(value), draw(size), draw(size)) for _ in range(n)]
    edges = [(i, j) for j in range(1, n) for i in draw(st.sets(st.integers(0, j - 1), max_size=2))]
    graph = TrainingGraph(make_graph("fuzz", ops, edges))
    return graph, draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from(sorted(SETTINGS))), draw(st.integers(0, 99))


@settings(max_examples=40, deadline=None)
@given(small_jobs())
def test_random_small_graphs(job: tuple[TrainingGraph, int, str, int]) -> None:
    graph, degree, setting, seed = job
    feas = feasibility(setting, (2, 2, 2))
    rng = random.Random(seed)
    assert_same(feas, graph, degree, random_placement(feas, graph, degree, rng, symmetric=bool(seed % 2)))


def test_wide_split_on_the_largest_ramp() -> None:
    """A 128-way split job on 64 x 64 x 16 = 65,536 servers, symmetric and not."""
    from simulator.allocation.first_fit import FirstFitAllocator
    from simulator.comm import RampCommModel
    from simulator.step_model import StepModel

    topo = RampTopology(64, 64, 16, max_degree=128)
    graph = TrainingGraph(make_graph("wide", [(1.0, 2.0, 1e9, 4e8), (3.0, 1.0, 2e8, 0), (0.0, 0.0, 0, 0)],
                                     [(0, 1), (1, 2)]))
    rng = random.Random(256)
    for quirks in (True, False):
        part = Partitioner(1e-3, "activation")
        sm = StepModel(part, RampCommModel(topo, double_bandwidth_division=quirks, rack_index_only=quirks))
        placer = FirstFitAllocator(topo, part)
        splits = part.splits(graph, 128).tolist()
        assert splits == [128, 128, 1]
        block = [(c * 64 + r) * 16 for c in range(16) for r in range(8)]  # a 16 x 8 x 1 block
        scattered = rng.sample(range(topo.num_servers), 128)
        for servers in (block, scattered):
            for ops in ((servers, rng.sample(servers, 128), servers[:1]),  # symmetric
                        (servers, scattered, [rng.randrange(65536)])):
                placement = placer.make_placement(tuple(tuple(s) for s in ops))
                got = sm.simulate(part.aggregate(graph, 128), placement)
                want = sm.simulate_dependencies(part.partition(graph, 128), placement)
                assert got.step_time_s == want.step_time_s
                assert got.comm_s == pytest.approx(want.comm_s, rel=1e-12)


def test_aggregate_partition_memory_is_linear_in_sub_ops() -> None:
    """At degree 1,024 resnet18 stands for ~10^7 dependencies; the aggregate keeps O(sub-ops + edges)."""
    ap = Partitioner(QUANTUM_S, "activation").aggregate(graphs()["resnet18"], 1024)
    assert ap.num_deps > 9_000_000
    retained = sum(v.nbytes for v in vars(ap).values() if isinstance(v, np.ndarray))
    assert retained < 64 * (ap.num_sub_ops + ap.num_edges + len(ap.op_splits))
