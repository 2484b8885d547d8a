"""Topology, partitioning, placement and the step model: rules and hand-computed answers."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.allocation.first_fit import FirstFitAllocator, block_region
from simulator.build import SimKnobs, build_feasibility
from simulator.comm import RampCommModel
from simulator.errors import ConfigError
from simulator.partition import Partitioner, split_counts
from simulator.step_model import StepModel
from simulator.topology import RampTopology
from tests.conftest import PAPER_KNOBS, make_graph
from workloads.graph import TrainingGraph
from workloads.loaders import load_graph_set

PHYSICAL = {"edge_sizing": "activation", "placement": "block", "comm_quirks": False}


def jct_of(graph: TrainingGraph, degree: int, topology: RampTopology, knobs: SimKnobs, steps: int = 1) -> float:
    feas = build_feasibility(topology, knobs)
    placement = feas.placer.place(graph, degree, 0)
    assert placement is not None
    return feas.step_model.step(graph, degree, placement).step_time_s * steps


# ---------------------------------------------------------------- topology (spec §5.2)
def test_paper_ramp_block_shapes(paper_topology: RampTopology) -> None:
    t = paper_topology
    assert t.num_servers == 32
    assert t.block_shapes(2) == ((2, 1, 1), (1, 1, 2), (1, 2, 1), (2, 2, -1))
    assert t.block_shapes(4) == ((2, 2, 1), (4, 1, 1), (2, 1, 2), (4, 4, -1))
    assert t.block_shapes(6) == ((3, 1, 2), (3, 2, 1))
    assert t.block_shapes(8) == ((2, 2, 2), (4, 1, 2), (4, 2, 1))
    assert t.block_shapes(16) == ((4, 4, 1),)
    assert t.block_shapes(10) == t.block_shapes(12) == t.block_shapes(14) == ()
    assert t.degrees == (1, 2, 4, 6, 8, 16)
    # Only two 16-server blocks: the s=0 half and the s=1 half.
    assert [{t.coords[s][2] for s in b.servers} for b in t.blocks(16)] == [{0}, {1}]


@pytest.mark.parametrize(("degree", "expected"), [
    (2, ["0-0-0", "1-0-0"]),
    (4, ["0-0-0", "0-1-0", "1-0-0", "1-1-0"]),
    (6, ["0-0-0", "0-0-1", "1-0-0", "1-0-1", "2-0-0", "2-0-1"]),
    (8, ["0-0-0", "0-0-1", "0-1-0", "0-1-1", "1-0-0", "1-0-1", "1-1-0", "1-1-1"]),
])
def test_first_fit_footprints_on_an_empty_cluster(paper_topology: RampTopology, degree: int, expected: list[str]) -> None:
    block = paper_topology.blocks(degree)[0]
    assert [paper_topology.server_name(s) for s in block.servers] == expected


@pytest.mark.parametrize("bad", [{"num_comm_groups": 0}, {"num_racks_per_group": -2},
                                 {"num_servers_per_rack": 1.5}, {"memory_capacity_bytes": 0}])
def test_impossible_cluster_shape(bad: dict) -> None:
    with pytest.raises(ConfigError, match=f"cluster.{next(iter(bad))}"):
        RampTopology(**bad)


def test_larger_ramp_offers_larger_degrees() -> None:
    t = RampTopology(8, 8, 8, max_degree=64)
    assert t.num_servers == 512
    assert {1, 2, 4, 8, 16, 32, 64} <= set(t.degrees)
    for d in t.degrees:
        for b in t.blocks(d)[:5]:
            assert len(set(b.servers)) == d


# ---------------------------------------------------------------- split rule (spec §4.1)
def test_split_counts_follow_the_quantum_rule() -> None:
    g = TrainingGraph(make_graph("q", [(0.0, 1, 0, 0), (0.015, 1, 0, 0), (0.05, 1, 0, 0), (5.0, 1, 0, 0)],
                                 [(0, 1), (1, 2), (2, 3)]))
    assert split_counts(g, 16, 0.01).tolist() == [1, 2, 6, 16]
    assert split_counts(g, 4, 0.01).tolist() == [1, 2, 4, 4]
    assert split_counts(g, 1, 0.01).tolist() == [1, 1, 1, 1]


def test_gnmt_split_histogram_matches_spec() -> None:
    (gnmt,) = load_graph_set("gnmt", time_unit_s=1.0)
    s16 = split_counts(TrainingGraph(gnmt), 16, 0.01)
    s8 = split_counts(TrainingGraph(gnmt), 8, 0.01)
    assert (s16 == 1).sum() == 31
    assert {k: int((s16 == k).sum()) for k in (6, 8, 16)} == {6: 3, 8: 5, 16: 9}
    assert {k: int((s8 == k).sum()) for k in (6, 8)} == {6: 3, 8: 14}


def test_partitioned_graph_counts_and_conservation(chain_graph: TrainingGraph) -> None:
    pg = Partitioner(0.5).partition(chain_graph, 2)
    assert pg.num_sub_ops == 8
    # 2x2 forward + 2x2 backward + 2x2 join + 2 sync pairs x 2 directions
    assert pg.num_deps == 4 + 4 + 4 + 4
    assert pg.sub_time_s.sum() == pytest.approx(chain_graph.step_time_s)
    assert int(pg.dep_is_sync.sum()) == 4


# ---------------------------------------------------------------- hand-computed JCTs
def test_unsplit_chain_runs_sequentially(chain_graph: TrainingGraph, paper_topology: RampTopology) -> None:
    # a(1) -> b(2) -> b'(4) -> a'(3) on one server: 10 s per step.
    assert jct_of(chain_graph, 1, paper_topology, PAPER_KNOBS, steps=50) == pytest.approx(500.0)


def test_split_chain_without_bytes_halves_every_op(chain_graph: TrainingGraph, paper_topology: RampTopology) -> None:
    knobs = SimKnobs(min_op_time_s=0.5, **PHYSICAL)
    # Both ops split in 2 (1/0.5 = 2, 2/0.5 = 4 -> capped at 2); per server 0.5 + 1 + 2 + 1.5.
    assert jct_of(chain_graph, 2, paper_topology, knobs) == pytest.approx(5.0)


def test_point_to_point_transfers_delay_the_consumer() -> None:
    """a (2 s fwd, 4 s bwd, 2 GB out) split over 2 servers feeds an unsplit zero-time loss op b.

    b lands on server 0; a's half on server 1 sends 1 GB at 1 GB/s (1 s): b starts at 2.
    Backward: b' sends 1 GB to a'_1 on server 1 (1 s): a'_0 runs 2-4, a'_1 runs 3-5. Step = 5 s.
    """
    topo = RampTopology(1, 1, 2, total_node_bandwidth_Bps=1e9, propagation_latency_s=0, io_latency_s=0)
    g = TrainingGraph(make_graph("p2p", [(2.0, 4.0, 2e9, 0), (0.0, 0.0, 0, 0)], [(0, 1)]))
    knobs = SimKnobs(min_op_time_s=0.5, **PHYSICAL)
    feas = build_feasibility(topo, knobs)
    placement = feas.placer.place(g, 2, 0)
    assert placement.op_servers == ((0, 1), (0,))
    assert feas.step_model.step(g, 2, placement).step_time_s == pytest.approx(5.0)
    assert g.step_time_s == 6.0


def test_symmetric_groups_run_as_collectives() -> None:
    """a -> b, both split over the same 2 servers: the 1 GB all-to-all is one all-reduce.

    On a 1x1x2 RAMP at 1 GB/s without latency, the collective model gives
    T = 2 * (0.5 GB / 1 GB/s) + reduction (0.5 GB / 2 B / (2e12/6 B/s)) = 1.00075 s, so the step is
    a(0.5) + T + b(0.5) + b'(0.5) + T + a'(0.5) = 4.0015 s.
    """
    topo = RampTopology(1, 1, 2, total_node_bandwidth_Bps=1e9, propagation_latency_s=0, io_latency_s=0)
    g = TrainingGraph(make_graph("coll", [(1.0, 1.0, 1e9, 0), (1.0, 1.0, 0, 0)], [(0, 1)]))
    assert jct_of(g, 2, topo, SimKnobs(min_op_time_s=0.5, **PHYSICAL)) == pytest.approx(4.0015)


def test_collective_formula_reproduces_the_original_quirk() -> None:
    topo = RampTopology()
    quirky = RampCommModel(topo, double_bandwidth_division=True)
    fixed = RampCommModel(topo, double_bandwidth_division=False)
    args = (np.array([1e9]), np.array([2]), np.array([1]), np.array([1]))
    # Two CGs: one level, d=2 -> comm = 2*(lat + 5e8/(4*bw)); quirk divides bw by 4 again.
    t_q, t_f = quirky.collective_s(*args)[0], fixed.collective_s(*args)[0]
    lat = 50e-9 + 2 * 100e-9
    reduce_s = 5e8 / 2 / (2e12 / 6)
    assert t_f == pytest.approx(2 * (lat + 5e8 / (4 * 4e11)) + reduce_s)
    assert t_q == pytest.approx(2 * (lat + 5e8 / (4 * 1e11)) + reduce_s)


def test_step_time_respects_lower_bounds(paper_topology: RampTopology) -> None:
    feas = build_feasibility(paper_topology, PAPER_KNOBS)
    for graph in load_graph_set("paper", time_unit_s=1.0):
        tg = TrainingGraph(graph)
        for d in paper_topology.degrees:
            placement = feas.placer.place(tg, d, 0)
            step = feas.step_model.step(tg, d, placement).step_time_s
            pg = feas.step_model.partitioner.partition(tg, d)
            assert step >= tg.step_time_s / placement.num_servers * (1 - 1e-9)
            assert step >= _partitioned_critical_path(pg) * (1 - 1e-9)
            assert step <= tg.step_time_s * 1.01  # splitting never makes a paper job slower here


def _partitioned_critical_path(pg) -> float:
    n = pg.num_sub_ops
    longest = pg.sub_time_s.astype(float).copy()
    real = ~pg.dep_is_sync
    preds: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(pg.dep_src[real].tolist(), pg.dep_dst[real].tolist(), strict=True):
        preds[d].append(s)
    from workloads.graph import topological_order

    edges = np.stack([pg.dep_src[real], pg.dep_dst[real]], axis=1)
    for op in topological_order(n, edges):
        if preds[op]:
            longest[op] += max(longest[p] for p in preds[op])
    return float(longest.max())


def test_lookahead_cache_shares_renamed_placements(paper_feasibility) -> None:
    (graph,) = load_graph_set("resnet18", time_unit_s=1.0)
    tg = TrainingGraph(graph)
    sm = paper_feasibility.step_model
    a = paper_feasibility.placer.place(tg, 16, 0)
    b = paper_feasibility.placer.place(tg, 16, a.mask)  # the other half of the cluster
    assert set(a.servers).isdisjoint(b.servers)
    assert a.signature == b.signature
    sm.step(tg, 16, a)
    sm.step(tg, 16, b)
    assert sm.num_lookaheads == 1 and sm.num_cache_hits == 1


# ---------------------------------------------------------------- placement
def test_op_first_fit_spills_unsplit_ops_onto_the_first_free_server(paper_topology: RampTopology) -> None:
    """Spec §15.1: in a busy cluster a narrow job's zero-time ops land outside its block."""
    feas = build_feasibility(paper_topology, PAPER_KNOBS)
    (graph,) = load_graph_set("resnet18", time_unit_s=1.0)
    tg = TrainingGraph(graph)
    # Occupy CG 0 except server 0-0-1, and 1-0-1, so no 2-way block contains 0-0-1.
    busy = 1 << paper_topology.index(1, 0, 1)
    for s in range(paper_topology.num_servers):
        c, r, k = paper_topology.coords[s]
        if c == 0 and (r, k) != (0, 1):
            busy |= 1 << s
    spill = feas.placer.place(tg, 2, busy)
    assert spill.num_servers == 3
    assert paper_topology.index(0, 0, 1) in spill.servers
    block_feas = build_feasibility(paper_topology, SimKnobs(min_op_time_s=0.01, placement="block"))
    assert block_feas.placer.place(tg, 2, busy).num_servers == 2


def test_placement_never_uses_busy_servers_or_exceeds_memory() -> None:
    topo = RampTopology(memory_capacity_bytes=4e9)  # VGG-16 needs more than one server's memory
    feas = build_feasibility(topo, PAPER_KNOBS)
    (vgg,) = load_graph_set("vgg16", time_unit_s=1.0)
    tg = TrainingGraph(vgg)
    # Op-level first fit spreads an unsplit job over as many servers as its memory needs ...
    assert feas.placer.place(tg, 1, 0).num_servers > 1
    # ... while block placement keeps a degree-1 job on one server, where it does not fit.
    block = build_feasibility(topo, SimKnobs(min_op_time_s=0.01, placement="block"))
    assert block.placer.place(tg, 1, 0) is None
    rng = np.random.default_rng(0)
    for _ in range(50):
        busy = int(sum(1 << int(s) for s in rng.choice(32, size=rng.integers(0, 20), replace=False)))
        for d in topo.degrees:
            p = feas.placer.place(tg, d, busy)
            if p is None:
                continue
            assert not p.mask & busy
            mem: dict[int, float] = {}
            pair = 2 * (vgg.activation_bytes + vgg.parameter_bytes)
            for op, servers in enumerate(p.op_servers):
                for s in servers:
                    mem[s] = mem.get(s, 0.0) + pair[op] / len(servers)
            assert max(mem.values()) <= topo.memory_capacity_bytes * (1 + 1e-12)


def test_step_model_cache_is_keyed_by_degree(paper_feasibility) -> None:
    (graph,) = load_graph_set("alexnet", time_unit_s=1.0)
    tg = TrainingGraph(graph)
    sm: StepModel = paper_feasibility.step_model
    placer: FirstFitAllocator = paper_feasibility.placer
    t2 = sm.step(tg, 2, placer.place(tg, 2, 0)).step_time_s
    t4 = sm.step(tg, 4, placer.place(tg, 4, 0)).step_time_s
    assert t4 < t2


@pytest.mark.parametrize("shape", [(4, 4, 2), (8, 8, 8)])
def test_placement_by_first_blocks_equals_the_op_by_op_scan(shape: tuple[int, int, int]) -> None:
    """Where memory cannot bind, the placement is made from each split size's first free block
    (and cached by them); it must equal first fit op by op, on the paper cluster and on 512 servers,
    inside a job's block too. With small servers memory binds and the op-by-op scan is used."""
    c, r, s = shape
    topo = RampTopology(num_comm_groups=c, num_racks_per_group=r, num_servers_per_rack=s,
                        max_degree=max(16, c * r * s // 8))
    feas = build_feasibility(topo, PAPER_KNOBS)
    placer = feas.placer
    graphs = [TrainingGraph(g) for g in load_graph_set("paper", time_unit_s=1.0)]
    rng = np.random.default_rng(1)
    fast = 0
    for _ in range(120):
        busy = int(sum(1 << int(x) for x in rng.choice(topo.num_servers, size=rng.integers(0, topo.num_servers * 3 // 4),
                                                        replace=False)))
        allowed = topo.all_servers_mask & ~busy
        tg = graphs[int(rng.integers(len(graphs)))]
        for d in topo.degrees:
            assert placer._memory_never_binds(tg, d) is not None
            fast += 1
            assert placer._place(tg, d, allowed) == placer._place_by_op(tg, d, allowed)
            block = placer.free_index(allowed).first(d)
            if block is not None:
                region = block_region(block)
                assert (placer._place(tg, d, block.mask, region)
                        == placer._place_by_op(tg, d, block.mask, region))
    assert fast > 500
    small = build_feasibility(RampTopology(memory_capacity_bytes=4e9), PAPER_KNOBS).placer
    (vgg,) = load_graph_set("vgg16", time_unit_s=1.0)
    assert small._memory_never_binds(TrainingGraph(vgg), 1) is None
