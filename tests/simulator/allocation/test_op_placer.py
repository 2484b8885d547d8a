"""Op placers inside the cluster simulator (sim.op_placer) and a cluster of two GPU generations."""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.build import SimKnobs, build_feasibility, build_policy, build_simulation
from simulator.errors import ConfigError
from simulator.topology import RampTopology
from tests.conftest import CONF_DIR, make_graph
from workloads.graph import TrainingGraph

PHYSICAL = {"min_op_time_s": 1e-5, "edge_sizing": "activation", "placement": "block", "comm_quirks": False}
HETERO_KINDS = [{"kind": "gpu", "racks": [0, 1], "speed": 1.0, "memory_capacity_bytes": 80e9},
                {"kind": "gpu_half", "racks": [2, 3], "speed": 0.5, "memory_capacity_bytes": 40e9}]


def hetero() -> RampTopology:
    """ramp32_hetero: racks 0-1 of every communication group fast, racks 2-3 at half speed and memory."""
    return RampTopology(server_kinds=HETERO_KINDS)


def branchy_graph() -> TrainingGraph:
    """Two branches of large (split) ops joined by tiny (unsplit) ops: moving the tiny ones matters."""
    ops = [(1e-6, 1e-6, 4e6, 0.0),      # 0 input (unsplit)
           (2e-3, 4e-3, 8e6, 1e8),      # 1 big
           (3e-6, 3e-6, 6e7, 0.0),      # 2 tiny, large output
           (2e-3, 4e-3, 8e6, 1e8),      # 3 big
           (4e-6, 4e-6, 6e7, 0.0),      # 4 tiny, large output
           (1e-3, 2e-3, 8e6, 1e8),      # 5 big
           (2e-6, 2e-6, 1e6, 0.0)]      # 6 loss (unsplit)
    edges = [(0, 1), (1, 2), (2, 5), (0, 3), (3, 4), (4, 5), (5, 6)]
    return TrainingGraph(make_graph("branchy", ops, edges))


def compose_sim(*overrides: str):
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose("sim", list(overrides))


def records_digest(overrides: list[str], seed: int) -> tuple[float, str, int]:
    cfg = compose_sim(*overrides)
    result = build_simulation(cfg, seed=seed).run(build_policy(cfg))
    rows = [(r.job_id, r.degree, r.servers, r.outcome, r.block_reason, repr(r.jct_s)) for r in result.records]
    return result.summary["blocking_rate"], hashlib.sha256(repr(rows).encode()).hexdigest()[:16], len(rows)


# Recorded with the code before op placers and server kinds existed (commit 822d07d): every job's
# degree, servers, outcome and JCT (repr, so bit for bit).
@pytest.mark.parametrize(("overrides", "seed", "expected"), [
    (["scenario=physical", "policy=min_feasible_4", "beta=C", "horizon_s=120"], 3,
     (0.21487603305785125, "eb6a8e7a3714f643", 121)),
    (["scenario=paper", "policy=min_feasible", "beta=B", "horizon_s=2e5"], 2,
     (0.3681592039800995, "cee00c56ed2fe3e8", 201)),
])
def test_first_fit_default_is_bit_identical_to_before(overrides: list[str], seed: int, expected: tuple) -> None:
    assert records_digest(overrides, seed) == expected
    if "scenario=physical" in overrides:  # naming first_fit explicitly is the same run
        assert records_digest([*overrides, "sim.op_placer=first_fit"], seed) == expected


def test_op_placer_keeps_split_ops_symmetric_and_every_op_in_the_block() -> None:
    topo = hetero()
    graph = branchy_graph()
    first = build_feasibility(topo, SimKnobs(**PHYSICAL))
    placed = build_feasibility(topo, SimKnobs(**PHYSICAL, op_placer="m_etf"))
    degree = 16  # the two 16-server blocks mix both generations
    splits = placed.step_model.partitioner.splits(graph, degree)
    # Every op with compute is split (n >= 2, SiP-ML rule); the tiny ones only in two: narrower.
    assert splits.tolist() == [2, 16, 2, 16, 2, 16, 2]
    block = placed.placer.first_fit_block(degree, 0)
    ff, p = first.placer.place(graph, degree, 0), placed.placer.place(graph, degree, 0)
    assert ff is not None and p is not None
    for op, servers in enumerate(p.op_servers):
        assert len(servers) == splits[op] == len(set(servers))
        assert set(servers) <= set(block.servers)
        # A symmetric block of the job's block; full-width ones stay where first fit put them.
        assert frozenset(servers) in {frozenset(b.servers) for b in topo.blocks(int(splits[op]))}
        if splits[op] == degree:
            assert servers == ff.op_servers[op]
    assert p.op_servers != ff.op_servers  # the placer did move some unsplit op
    assert set(p.servers) <= set(block.servers) and p.mask == sum(1 << s for s in p.servers)
    info = placed.placer.op_placer.info()
    assert info["op_placer_calls"] == 1 and info["op_placer_first_fit_fallbacks"] == 0
    # Its own objective says the move helps; the simulator prices it with its step model.
    assert placed.step_model.step(graph, degree, p).step_time_s > 0


@settings(max_examples=6, deadline=None)
@given(occupied=st.integers(0, (1 << 32) - 1).map(lambda m: m & 0x0F0F0F0F), degree=st.sampled_from([2, 4, 8]))
def test_op_placer_stays_inside_the_free_block_for_any_occupancy(occupied: int, degree: int) -> None:
    feas = _shared_feasibility()
    graph = branchy_graph()
    p = feas.placer.place(graph, degree, occupied)
    block = feas.placer.first_fit_block(degree, occupied)
    if block is None:
        assert p is None
        return
    assert p is not None and not p.mask & occupied and not p.mask & ~block.mask
    splits = feas.step_model.partitioner.splits(graph, degree)
    for op, servers in enumerate(p.op_servers):
        assert len(set(servers)) == splits[op]
        assert frozenset(servers) in {frozenset(b.servers) for b in feas.topology.blocks(int(splits[op]))}


_FEAS: dict[str, object] = {}


def _shared_feasibility():
    if "heft" not in _FEAS:
        _FEAS["heft"] = build_feasibility(hetero(), SimKnobs(**PHYSICAL, op_placer="heft"))
    return _FEAS["heft"]


def test_slower_servers_give_longer_jcts_and_less_memory() -> None:
    topo = hetero()
    feas = build_feasibility(topo, SimKnobs(**PHYSICAL))
    graph = branchy_graph()
    blocks = topo.blocks(4)
    fast = next(b for b in blocks if all(topo.server_speed[s] == 1.0 for s in b.servers))
    slow = next(b for b in blocks if all(topo.server_speed[s] == 0.5 for s in b.servers))
    t_fast = feas.step_model.step(graph, 4, feas.placer.place(graph, 4, 0, fast)).step_time_s
    t_slow = feas.step_model.step(graph, 4, feas.placer.place(graph, 4, 0, slow)).step_time_s
    assert t_slow > 1.9 * t_fast
    # On the homogeneous cluster both blocks time the same (and as the fast one here).
    homo = build_feasibility(RampTopology(), SimKnobs(**PHYSICAL))
    t_homo = homo.step_model.step(graph, 4, homo.placer.place(graph, 4, 0, slow)).step_time_s
    assert t_homo == t_fast
    # Memory: 60 GB per server fits an 80 GB server, not a 40 GB one.
    big = TrainingGraph(make_graph("big", [(1e-6, 1e-6, 0.0, 30e9)], []))
    one = {b.servers[0]: b for b in topo.blocks(1)}
    assert feas.placer.place(big, 1, 0, one[fast.servers[0]]) is not None
    assert feas.placer.place(big, 1, 0, one[slow.servers[0]]) is None


def test_cache_keys_differ_by_server_kinds() -> None:
    graph = branchy_graph()
    for topo, expect_equal in ((RampTopology(), True), (hetero(), False)):
        feas = build_feasibility(topo, SimKnobs(**PHYSICAL, op_placer="m_etf"))
        fast = topo.blocks(2)[0]  # servers 0, 1: rack 0
        other = next(b for b in topo.blocks(2) if b.shape == fast.shape and topo.coords[b.servers[0]][1] == 2)
        p1, p2 = feas.placer.place(graph, 2, 0, fast), feas.placer.place(graph, 2, 0, other)
        assert (p1.signature == p2.signature) is expect_equal
        feas.step_model.step(graph, 2, p1)
        feas.step_model.step(graph, 2, p2)
        assert feas.step_model.num_lookaheads == (1 if expect_equal else 2)
        # The op placer's own cache: same kinds reuse, other kinds place again.
        assert feas.placer.op_placer.calls == (1 if expect_equal else 2)


def test_bad_server_kinds_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"cluster.server_kinds.*racks \[2, 3\] have no kind"):
        RampTopology(server_kinds=[{"kind": "gpu", "racks": [0, 1]}])
    with pytest.raises(ConfigError, match=r"server_kinds\[1\].speed.*> 0"):
        RampTopology(server_kinds=[{"kind": "a", "racks": [0, 1]}, {"kind": "b", "racks": [2, 3], "speed": 0}])
    with pytest.raises(ConfigError, match=r"sim.op_placer.*unknown op placer 'nope'"):
        build_feasibility(RampTopology(), SimKnobs(**{**PHYSICAL, "op_placer": "nope"}))


SIM = [sys.executable, "-c", "from simulator.run import main; main()"]


def test_cli_op_first_fit_rejects_an_op_placer_and_a_hetero_episode_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.cli import preflight
    from simulator.run import COMMAND

    with pytest.raises(SystemExit) as stop:  # pacml-sim's own check, before Hydra runs anything
        preflight(COMMAND, ["scenario=paper", "sim.placement=op_first_fit", "sim.op_placer=heft"])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert err.count("\n") == 1 and err.startswith("pacml sim: error: field 'sim.op_placer'")
    assert "needs sim.placement=block" in err and "Traceback" not in err
    out = tmp_path / "run"
    ok = subprocess.run([*SIM, "scenario=physical", "cluster=ramp32_hetero", "sim.op_placer=heft",
                         "policy=min_feasible_4", "beta=C", "seed=100", "horizon_s=15", "progress=false",
                         f"out_dir={out}"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["op_placer"] == "heft" and summary["op_placer_calls"] >= 1
    assert summary["num_jobs_arrived"] == 16
    rows = list(csv.DictReader((out / "jobs.csv").read_text().splitlines()))
    assert len(rows) == 16 and any(r["outcome"] == "completed" for r in rows)


def test_placement_objective_sees_every_sub_op_and_pins() -> None:
    topo = hetero()
    feas = build_feasibility(topo, SimKnobs(**PHYSICAL, op_placer="heft"))
    graph = branchy_graph()
    op = feas.placer.op_placer
    jg = op._job_graph(graph, 4)
    pg = feas.step_model.partitioner.partition(graph, 4)
    assert jg.graph.num_nodes == pg.num_sub_ops
    assert jg.graph.num_edges == int((~pg.dep_is_sync).sum())
    assert jg.graph.num_groups == int(pg.splits.sum())  # a sub-op and its backward twin
    assert np.isclose(jg.graph.group_memory_bytes.sum(), pg.sub_memory_bytes.sum())
