"""The model-parallel cluster scenario (``sim.split_ops=false``, ``scenario=model_parallel``):
no op is split, a job at degree k holds a block of k servers and the op placer decides which
server runs each op."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.build import SimKnobs, build_feasibility
from simulator.errors import ConfigError
from simulator.partition import Partitioner
from simulator.topology import RampTopology
from tests.conftest import make_graph
from tests.simulator.allocation.test_op_placer import PHYSICAL, compose_sim, hetero, records_digest
from workloads.graph import TrainingGraph

MP = {**PHYSICAL, "split_ops": False}


def two_branch_graph() -> TrainingGraph:
    """Input -> two equal heavy branches (3 ops each) -> join -> loss; small activations, so
    running the branches on two servers nearly halves the step."""
    heavy = (2e-3, 4e-3, 1e5, 1e6)
    ops = [(1e-6, 1e-6, 1e5, 0.0), heavy, heavy, heavy, heavy, heavy, heavy,
           (1e-6, 1e-6, 1e5, 0.0), (1e-6, 1e-6, 1e3, 0.0)]
    edges = [(0, 1), (1, 2), (2, 3), (0, 4), (4, 5), (5, 6), (3, 7), (6, 7), (7, 8)]
    return TrainingGraph(make_graph("two_branch", ops, edges))


# The known answers of tests/simulator/allocation/test_op_placer.py (recorded before op placers existed):
# naming the default split rule explicitly changes nothing, bit for bit.
@pytest.mark.parametrize(("overrides", "seed", "expected"), [
    (["scenario=physical", "policy=min_feasible_4", "beta=C", "horizon_s=120", "sim.split_ops=true"], 3,
     (0.21487603305785125, "eb6a8e7a3714f643", 121)),
    (["scenario=paper", "policy=min_feasible", "beta=B", "horizon_s=2e5", "sim.split_ops=true"], 2,
     (0.3681592039800995, "cee00c56ed2fe3e8", 201)),
])
def test_split_ops_true_is_bit_identical_to_before(overrides: list[str], seed: int, expected: tuple) -> None:
    assert compose_sim(*overrides[:-1]).sim.split_ops is True  # and it is the default
    assert records_digest(overrides, seed) == expected


def test_no_split_gives_one_sub_op_per_op_at_every_degree() -> None:
    graph = two_branch_graph()
    split, whole = Partitioner(1e-5, "activation"), Partitioner(1e-5, "activation", split_ops=False)
    n = graph.num_forward_ops
    assert split.splits(graph, 8).max() > 1  # the SiP-ML rule does split this graph
    for degree in (1, 2, 8, 16):
        pg = whole.partition(graph, degree)
        assert pg.splits.tolist() == [1] * n
        assert pg.num_sub_ops == 2 * n and not pg.dep_is_sync.any() and pg.num_groups == 0
        assert np.array_equal(pg.sub_time_s, graph.compute_time_s)
    with pytest.raises(ValueError, match="split_ops must be true or false"):
        Partitioner(split_ops="no")  # type: ignore[arg-type]


def test_first_fit_chains_every_op_onto_the_blocks_first_server_and_the_job_holds_the_block() -> None:
    topo = RampTopology()
    feas = build_feasibility(topo, SimKnobs(**MP))
    graph = two_branch_graph()
    for degree, occupied in ((2, 0), (4, 0), (8, 0b1111)):
        block = feas.placer.first_fit_block(degree, occupied)
        p = feas.placer.place(graph, degree, occupied)
        assert p is not None and block is not None
        first = next(b.servers[0] for b in topo.blocks(1) if b.servers[0] in block.servers)
        assert first == min(block.servers)
        assert set(p.op_servers) == {(first,)}  # every op on the block's first server
        assert p.servers == tuple(sorted(block.servers)) and p.mask == block.mask  # holds k servers
    # So it times as on one server, at every degree: no communication, the sum of the compute.
    steps = {d: feas.step_model.step(graph, d, feas.placer.place(graph, d, 0)).step_time_s for d in (1, 2, 4, 8)}
    assert len(set(steps.values())) == 1
    assert steps[1] == pytest.approx(graph.compute_time_s.sum(), rel=1e-12)


def test_heft_spreads_parallel_branches_and_beats_first_fit() -> None:
    topo = RampTopology()
    first = build_feasibility(topo, SimKnobs(**MP))
    heft = build_feasibility(topo, SimKnobs(**MP, op_placer="heft"))
    graph = two_branch_graph()
    ff, p = first.placer.place(graph, 2, 0), heft.placer.place(graph, 2, 0)
    assert ff is not None and p is not None
    block = first.placer.first_fit_block(2, 0)
    used = {s for servers in p.op_servers for s in servers}
    assert used == set(block.servers)  # both servers of the block run ops
    assert all(len(s) == 1 for s in p.op_servers) and p.mask == block.mask
    # The two branches end up on different servers.
    assert p.op_servers[1] == p.op_servers[2] == p.op_servers[3] != p.op_servers[4] == p.op_servers[5]
    t_ff = first.step_model.step(graph, 2, ff).step_time_s
    t_heft = heft.step_model.step(graph, 2, p).step_time_s
    assert t_heft < 0.6 * t_ff
    assert heft.placer.op_placer.info()["op_placer_first_fit_fallbacks"] == 0


def test_memory_per_server_still_holds() -> None:
    """Three ops of 30 GB (an op and its backward mirror: 2 x 15 GB) on 80 GB servers: no single
    server holds them, two do; a 90 GB op fits nowhere, at any degree (ops are not split)."""
    topo = RampTopology(server_kinds=[{"kind": "gpu", "racks": [0, 1, 2, 3], "memory_capacity_bytes": 80e9}])
    big = TrainingGraph(make_graph("big", [(1e-3, 2e-3, 5e9, 10e9)] * 3, [(0, 1), (1, 2)]))
    for placer in ("first_fit", "heft"):
        feas = build_feasibility(topo, SimKnobs(**{**MP, "op_placer": placer}))
        assert feas.placer.place(big, 1, 0) is None  # infeasible at degree 1
        p = feas.placer.place(big, 2, 0)
        assert p is not None
        per_server: dict[int, float] = {}
        for (s,) in p.op_servers:
            per_server[s] = per_server.get(s, 0.0) + 2 * (5e9 + 10e9)
        assert max(per_server.values()) <= 80e9 and len(per_server) == 2
        table = feas.table(_job(big), 0)
        assert table.placement(1) is None and table.placement(2) is not None and table.jct_s(1) is None
    huge = TrainingGraph(make_graph("huge", [(1e-3, 2e-3, 20e9, 25e9)], []))
    feas = build_feasibility(topo, SimKnobs(**MP))
    assert all(feas.placer.place(huge, d, 0) is None for d in topo.degrees)


def _job(graph: TrainingGraph):
    from workloads.jobs import JobSpec

    return JobSpec(job_id=0, arrival_time_s=0.0, graph=graph, beta=1.0, num_training_steps=1)


@settings(max_examples=6, deadline=None)
@given(occupied=st.integers(0, (1 << 32) - 1).map(lambda m: m & 0x0F0F0F0F), degree=st.sampled_from([2, 4, 8]))
def test_heft_stays_in_the_free_block_for_any_occupancy(occupied: int, degree: int) -> None:
    feas = _shared()
    graph = two_branch_graph()
    p = feas.placer.place(graph, degree, occupied)
    block = feas.placer.first_fit_block(degree, occupied)
    if block is None:
        assert p is None
        return
    assert p is not None and p.mask == block.mask and not p.mask & occupied
    assert all(len(s) == 1 and s[0] in block.servers for s in p.op_servers)


_FEAS: dict[str, object] = {}


def _shared():
    if "heft" not in _FEAS:
        _FEAS["heft"] = build_feasibility(hetero(), SimKnobs(**MP, op_placer="heft"))
    return _FEAS["heft"]


def test_caches_are_keyed_by_the_split_rule() -> None:
    graph = two_branch_graph()
    topo = RampTopology()
    split, whole = build_feasibility(topo, SimKnobs(**PHYSICAL)), build_feasibility(topo, SimKnobs(**MP))
    t_split = split.step_model.step(graph, 4, split.placer.place(graph, 4, 0)).step_time_s
    t_whole = whole.step_model.step(graph, 4, whole.placer.place(graph, 4, 0)).step_time_s
    assert t_split != t_whole and t_split < t_whole  # splitting this graph 4 ways pays
    part = whole.step_model.partitioner
    assert part is whole.placer.partitioner and part.split_ops is False
    assert all(key[2] is False for key in part._graphs) and all(key[2] is False for key in part._splits)
    # A JCT table per degree: first fit times the same at every degree; heft does better at 2+.
    heft = build_feasibility(topo, SimKnobs(**MP, op_placer="heft"))
    t_ff = [whole.table(_job(graph), 0).jct_s(d) for d in (1, 2, 4)]
    t_heft = [heft.table(_job(graph), 0).jct_s(d) for d in (1, 2, 4)]
    assert t_ff[0] == t_ff[1] == t_ff[2] and t_heft[0] == t_ff[0] and t_heft[1] < t_ff[1] and t_heft[2] < t_ff[2]


def test_bad_values_are_one_config_error() -> None:
    with pytest.raises(ConfigError, match=r"sim.split_ops.*needs sim.placement=block"):
        build_feasibility(RampTopology(), SimKnobs(**{**MP, "placement": "op_first_fit"}))
    with pytest.raises(ConfigError, match=r"sim.split_ops.*true or false"):
        build_feasibility(RampTopology(), SimKnobs(**{**PHYSICAL, "split_ops": "no"}))  # type: ignore[arg-type]


@pytest.mark.parametrize(("argv", "expect"), [
    (["scenario=paper", "sim.split_ops=false"], "field 'sim.split_ops'"),
    (["scenario=physical", "sim.split_ops=maybe"], "sim.split_ops"),
])
def test_cli_bad_split_ops_is_one_line(argv: list[str], expect: str, capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.cli import preflight
    from simulator.run import COMMAND

    with pytest.raises(SystemExit) as stop:
        preflight(COMMAND, argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("pacml sim: error:") and expect in err


def test_model_parallel_scenario_runs_an_episode() -> None:
    cfg = compose_sim("scenario=model_parallel", "cluster=ramp32_hetero", "sim.op_placer=heft",
                      "policy=min_feasible_4", "beta=fixed", "beta.value=1.0", "horizon_s=30")
    assert cfg.sim.split_ops is False and cfg.sim.placement == "block" and cfg.workload.profile_time_unit_s == 1e-3
    from simulator.build import build_policy, build_simulation

    result = build_simulation(cfg, seed=100).run(build_policy(cfg))
    assert result.summary["num_jobs_arrived"] == 31
    accepted = [r for r in result.records if r.outcome == "completed"]
    assert accepted and all(r.num_servers == r.degree for r in accepted)  # each holds its whole block


def test_min_feasible_reads_the_placers_jct_per_degree() -> None:
    """A target of 0.6 x sequential: first fit (one server at every degree) never meets it, so
    the rule rejects; with heft, degree 2 (the branches on two servers) meets it and is chosen."""
    from simulator.cluster import ClusterState
    from simulator.policies.heuristics import MinFeasible

    topo = RampTopology()
    job = _job(two_branch_graph())
    job = type(job)(job_id=0, arrival_time_s=0.0, graph=job.graph, beta=0.6, num_training_steps=1)
    chosen = {}
    for placer in ("first_fit", "heft"):
        feas = build_feasibility(topo, SimKnobs(**{**MP, "op_placer": placer}))
        table = feas.table(job, 0)
        state = ClusterState(time_s=0.0, topology=topo, occupied_mask=0, num_running_jobs=0, feasibility=table)
        chosen[placer] = MinFeasible(min_degree=1).decide(job, state).degree
    assert chosen == {"first_fit": 0, "heft": 2}
