"""The faster decision paths (issue 13 item 4) give exactly what the old ones gave.

Each rewritten function is compared with the code it replaced, kept here as the reference:
op first-fit placement (memory test, kept free blocks), placement signatures, free-block counts
of many sizes in one pass, the compiled collective formula, the global features' release
horizons; and the shipped agents must still take the same decisions.
"""

from __future__ import annotations

import hashlib
import random
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.allocation.first_fit import (
    FirstFitAllocator,
    Placement,
    placement_signature,
)
from simulator.allocation.free_blocks import FreeBlockIndex
from simulator.build import SimKnobs, build_feasibility
from simulator.comm import BYTES_PER_ELEMENT, MEM_FREQ_BPS, PEAK_FLOPS, RampCommModel
from simulator.topology import RampTopology
from workloads.graph import TrainingGraph
from workloads.loaders import load_graph_set

PAPER_KNOBS = SimKnobs(min_op_time_s=0.01, edge_sizing="paper", placement="op_first_fit", comm_quirks=True)
HETERO_KINDS = [{"kind": "gpu", "racks": [0, 1], "speed": 1.0, "memory_capacity_bytes": 80e9},
                {"kind": "gpu_half", "racks": [2, 3], "speed": 0.5, "memory_capacity_bytes": 40e9}]


def reference_signature(op_servers: tuple[tuple[int, ...], ...], coords: tuple[tuple[int, int, int], ...],
                        kinds: np.ndarray | None = None) -> tuple:
    """``placement_signature`` as it was before it renamed each distinct server tuple once."""
    local: dict[int, int] = {}
    for servers in op_servers:
        for s in servers:
            if s not in local:
                local[s] = len(local)
    renames: tuple[dict, dict, dict, dict] = ({}, {}, {}, {})
    shape = []
    for s in local:
        c, r, k = coords[s]
        renamed = tuple(m.setdefault(key, len(m)) for m, key in zip(renames, (c, (c, r), r, k), strict=True))
        shape.append(renamed if kinds is None else (*renamed, int(kinds[s])))
    return tuple(tuple(local[s] for s in servers) for servers in op_servers), tuple(shape)


def reference_place(placer: FirstFitAllocator, graph: TrainingGraph, degree: int, occupied: int) -> Placement | None:
    """Op first fit as it was: every free block listed by scanning every block, memory in a dict
    with a default per read, ``all(...)`` per block."""
    topo = placer.topology
    order, parents = placer._graph_structure(graph)
    splits = placer.partitioner.splits(graph, degree).tolist()
    free = {n: [b for b in topo.iter_blocks(n) if not b.mask & occupied] for n in set(splits)}
    if any(not blocks for blocks in free.values()):
        return None
    fwd = graph.forward
    pair_mem = (2 * (fwd.activation_bytes + fwd.parameter_bytes)).tolist()
    capacity = topo.server_memory_bytes.tolist()
    free_mem: dict[int, float] = {}
    op_servers: list[tuple[int, ...] | None] = [None] * fwd.num_ops
    for op in order:
        n = splits[op]
        need = pair_mem[op] / n
        chosen = None
        for parent in parents[op]:
            ps = op_servers[parent]
            if ps is not None and len(ps) == n and all(free_mem.get(s, capacity[s]) >= need for s in ps):
                chosen = ps
                break
        if chosen is None:
            for blk in free[n]:
                if all(free_mem.get(s, capacity[s]) >= need for s in blk.servers):
                    chosen = blk.servers
                    break
        if chosen is None:
            return None
        for s in chosen:
            free_mem[s] = free_mem.get(s, capacity[s]) - need
        op_servers[op] = chosen
    held = sorted({s for servers in op_servers for s in servers})
    mask = 0
    for s in held:
        mask |= 1 << s
    kinds = topo.server_kind_index if topo.heterogeneous else None
    return Placement(tuple(op_servers), tuple(held), mask, reference_signature(tuple(op_servers), topo.coords, kinds))


GRAPHS = tuple(TrainingGraph(g) for g in load_graph_set(["alexnet", "gnmt", "resnet18", "squeezenet1_0", "vgg16"],
                                                        time_unit_s=1.0))
# Memory tight enough that ops stop stacking on one server (the memory test and the block scan past
# the first block matter), and the default (everything fits).
TOPOLOGIES = {
    "ramp32": lambda: RampTopology(),
    "ramp32_tight": lambda: RampTopology(memory_capacity_bytes=2.5e9),
    "ramp32_hetero": lambda: RampTopology(server_kinds=HETERO_KINDS),
    "4x4x4_tight": lambda: RampTopology(4, 4, 4, memory_capacity_bytes=1.5e9, max_degree=32),
    "3x5x4": lambda: RampTopology(3, 5, 4, max_degree=60),
}
_PLACERS: dict[str, FirstFitAllocator] = {}


def _placer(name: str) -> FirstFitAllocator:
    if name not in _PLACERS:
        _PLACERS[name] = build_feasibility(TOPOLOGIES[name](), PAPER_KNOBS).placer
    return _PLACERS[name]


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(TOPOLOGIES)), seed=st.integers(0, 10**6),
       busy=st.sampled_from([0.0, 0.2, 0.5, 0.8]), graph=st.sampled_from(range(len(GRAPHS))))
def test_op_first_fit_equals_the_old_placement(name: str, seed: int, busy: float, graph: int) -> None:
    placer = _placer(name)
    topo = placer.topology
    rng = random.Random(seed)
    occupied = sum(1 << s for s in range(topo.num_servers) if rng.random() < busy)
    g = GRAPHS[graph]
    for degree in topo.degrees:
        got = placer.place(g, degree, occupied)
        want = reference_place(placer, g, degree, occupied)
        assert got == want, (name, degree)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), hetero=st.booleans())
def test_placement_signature_equals_the_old_one(seed: int, hetero: bool) -> None:
    topo = TOPOLOGIES["ramp32_hetero" if hetero else "3x5x4"]()
    rng = random.Random(seed)
    op_servers: list[tuple[int, ...]] = []
    for _ in range(rng.randint(1, 12)):
        if op_servers and rng.random() < 0.4:  # chained: the very tuple of an earlier op
            op_servers.append(rng.choice(op_servers))
        else:
            op_servers.append(tuple(rng.sample(range(topo.num_servers), rng.randint(1, 8))))
    kinds = topo.server_kind_index if topo.heterogeneous else None
    ops = tuple(op_servers)
    assert placement_signature(ops, topo.coords, kinds) == reference_signature(ops, topo.coords, kinds)


def test_kept_blocks_read_as_the_full_list() -> None:
    topo = RampTopology(4, 4, 4, max_degree=32)
    rng = random.Random(3)
    allowed = topo.all_servers_mask & ~sum(1 << s for s in range(topo.num_servers) if rng.random() < 0.3)
    for n in (1, 2, 4, 8):
        full = tuple(FreeBlockIndex(topo, allowed).blocks(n))
        kept = FreeBlockIndex(topo, allowed).blocks(n)  # keeps the blocks it makes (a small cluster)
        assert bool(kept) == bool(full) and len(kept) == len(full)
        if full:
            assert kept[0] == full[0] and kept[-1] == full[-1]
        assert kept[1:4] == full[1:4] and kept[::3] == full[::3] and kept[5:2] == ()
        partly = iter(kept)
        assert [next(partly) for _ in range(min(2, len(full)))] == list(full[:2])
        assert tuple(kept) == full and list(kept) == list(full)  # read again, once all are kept
        with pytest.raises(IndexError):
            kept[len(full)]


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(TOPOLOGIES)), seed=st.integers(0, 10**6),
       busy=st.sampled_from([0.0, 0.1, 0.4, 0.7, 0.95]), data=st.data())
def test_free_block_counts_in_one_pass_equal_one_count_per_size(name: str, seed: int, busy: float,
                                                                 data: st.DataObject) -> None:
    topo = TOPOLOGIES[name]()
    rng = random.Random(seed)
    allowed = topo.all_servers_mask & ~sum(1 << s for s in range(topo.num_servers) if rng.random() < busy)
    sizes = data.draw(st.lists(st.sampled_from(topo.split_sizes), min_size=1, max_size=12))
    index = FreeBlockIndex(topo, allowed)
    if data.draw(st.booleans()):  # some sizes already searched or counted: the pass must skip them
        index.blocks(sizes[0])
        index.count(sizes[-1])
    got = index.counts(sizes)
    want = [len([b for b in topo.iter_blocks(n) if not b.mask & ~allowed]) for n in sizes]
    assert got == want
    assert [FreeBlockIndex(topo, allowed).count(n) for n in sizes] == want
    # Shapes found full in the pass prune later searches, which must still be right.
    assert [len(index.blocks(n)) for n in topo.split_sizes] == [
        len([b for b in topo.iter_blocks(n) if not b.mask & ~allowed]) for n in topo.split_sizes]


def reference_reduce_time_s(data_bytes: np.ndarray, devices: np.ndarray) -> np.ndarray:
    """Compute cost of reducing ``data_bytes`` over ``devices`` (the original's ``add_time``)."""
    d = np.maximum(devices, 2)
    n_op = np.ceil(np.log2(d))
    rate = np.minimum(MEM_FREQ_BPS * n_op / ((d + 1) * BYTES_PER_ELEMENT), PEAK_FLOPS)
    return n_op * (data_bytes / d) / BYTES_PER_ELEMENT / rate


def reference_collective_s(model: RampCommModel, group_bytes: np.ndarray, num_cgs: np.ndarray,
                           num_racks: np.ndarray, num_nodes: np.ndarray) -> np.ndarray:
    """``RampCommModel.collective_s`` as it was: the vectorised numpy formula."""
    x = model.topology.num_comm_groups
    data_rate = model.topology.channel_bandwidth_Bps
    per_tx = data_rate / x if model.double_bandwidth_division else data_rate
    subgroups = [num_cgs, np.minimum(num_cgs, num_nodes), num_racks, np.ceil(num_nodes / x).astype(np.int64)]
    comm = np.zeros(len(group_bytes))
    comp = np.zeros(len(group_bytes))
    msg = np.ceil(group_bytes / np.maximum(subgroups[0], 1))
    for level, d in enumerate(subgroups):
        d = np.maximum(d, 1)
        if level > 0:
            msg = np.ceil(msg / d)
        active = d > 1
        eff_trx = np.maximum(1, np.minimum(x, x // np.maximum(d - 1, 1)))
        comm += np.where(active, model.fixed_latency_s + msg / (eff_trx * per_tx), 0.0)
        comp += np.where(active, reference_reduce_time_s(msg * d, d), 0.0)
    return 2 * comm + comp


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), quirks=st.booleans(), shape=st.sampled_from([(4, 4, 2), (8, 8, 8), (3, 5, 4)]))
def test_compiled_collective_equals_the_numpy_formula(seed: int, quirks: bool, shape: tuple[int, int, int]) -> None:
    topo = RampTopology(*shape, max_degree=2)
    model = RampCommModel(topo, double_bandwidth_division=quirks, rack_index_only=quirks)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 200))
    group_bytes = np.where(rng.random(n) < 0.1, 0.0, rng.random(n) * 10 ** rng.uniform(0, 12, n))
    counts = [rng.integers(0, 2 * m + 2, n) for m in (shape[0], shape[1], topo.num_servers)]
    got = model.collective_s(group_bytes, *counts)
    want = reference_collective_s(model, group_bytes, *counts)
    assert got.shape == want.shape and np.array_equal(got, want)  # bit for bit


def reference_back(state: SimpleNamespace, gap: float) -> list[float]:
    """The release horizons of ``global_features`` as they were (a Python sum per horizon)."""
    return [sum(servers for end, servers in state.releases if end <= state.time_s + k * gap) / state.num_servers
            for k in (1, 2, 4, 8)]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), running=st.integers(0, 300), gap=st.sampled_from([1.0, 62.5, 1000.0, 0.3]))
def test_global_features_equal_the_old_loop(seed: int, running: int, gap: float) -> None:
    from pacml.agent.features import global_features

    rng = random.Random(seed)
    now = rng.uniform(0, 1e6)
    releases = tuple(sorted((now + rng.expovariate(1 / (3 * gap)), rng.choice([1, 2, 4, 8, 16, 64]))
                            for _ in range(running)))
    if releases and rng.random() < 0.3:  # a release exactly on a horizon
        releases = tuple(sorted(releases + ((now + 2 * gap, 4),)))
    num_servers = 512
    state = SimpleNamespace(num_servers=num_servers, mean_interarrival_s=gap, time_s=now, releases=releases,
                            horizon_s=1e6, occupancy=0.5, num_running_jobs=running)
    job = SimpleNamespace(beta=0.5, sequential_jct_s=1e4, graph=SimpleNamespace(num_ops=100), num_training_steps=50)
    got = global_features(job, state)  # type: ignore[arg-type]
    assert got[3:7].tolist() == np.array(reference_back(state, gap), dtype=np.float32).tolist()


# Decisions of the shipped agents on the first 300 jobs of a paper episode (seed 0), recorded with
# the code before the latency work (commit 4146ebe): sha256 of the degree sequence.
SHIPPED_DECISIONS = {"A": "960995e8e0879a55", "B": "6b88a0ae0bb8721f", "C": "169715722778a2f2", "D": "f40e4046fc8d59b2"}


@pytest.mark.parametrize("beta", sorted(SHIPPED_DECISIONS))
def test_shipped_agents_take_the_same_decisions(beta: str) -> None:
    from pacml.agent.env import compose_sim_config
    from pacml.agent.policy import PacMLBetaPolicy
    from simulator.build import build_simulation

    sim = build_simulation(compose_sim_config(["scenario=paper", f"beta={beta}", "horizon_s=300000"]), seed=0)
    policy = PacMLBetaPolicy(f"paper_beta{beta}")
    degrees = []
    while (job := sim.next_job()) is not None:
        decision = policy.decide(job, sim.state())
        degrees.append(decision.degree)
        sim.apply(decision)
    assert len(degrees) == 300
    assert hashlib.sha256(bytes(degrees)).hexdigest()[:16] == SHIPPED_DECISIONS[beta]


def test_frozen_heap_freezes_only_inside_and_thaws_on_error() -> None:
    import gc

    from simulator.run import frozen_heap

    assert gc.get_freeze_count() == 0
    with frozen_heap():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    with pytest.raises(KeyError), frozen_heap():
        raise KeyError("a failing run")
    assert gc.get_freeze_count() == 0


def test_occupancy_caches_shrink_while_not_reused_and_grow_back() -> None:
    placer = build_feasibility(RampTopology(), PAPER_KNOBS).placer
    placer.REUSE_WINDOW = 16  # an instance attribute: a short window for the test
    g = GRAPHS[0]
    rng = random.Random(5)
    for _ in range(40):  # a new occupancy every time: nothing is reused
        occupied = sum(1 << s for s in range(32) if rng.random() < 0.3)
        assert placer.place(g, 4, occupied) == reference_place(placer, g, 4, occupied)
    assert placer._occupancy_entries == 16
    assert len(placer._cache) <= 16 and len(placer._allowed_cache) <= 16
    for _ in range(40):  # one occupancy over and over: reused
        assert placer.place(g, 4, 0b1011) == reference_place(placer, g, 4, 0b1011)
    assert placer._occupancy_entries == placer.MAX_CACHE_ENTRIES
