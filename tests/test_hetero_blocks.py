"""Feasibility on a cluster of two GPU generations sees every free block (up to
``sim.hetero_block_search``), for every degree rule, agent mask and rollout, and the job goes to
that block; on a cluster of one kind nothing changes.

Hand-built occupancies of ``ramp32_hetero`` (racks 0-1 of every communication group fast, racks
2-3 at half speed): servers 0-3 are group 0's fast ones, 4-7 its slow ones, 8-11 group 1's fast
ones, and so on. A target of 1 x the sequential JCT is met on a fast server only.
"""

from __future__ import annotations

import pytest

from pacml.adaptive.policy import start_rule
from pacml.adaptive.selector import Rule
from pacml.agent.features import action_mask, take_features
from simulator.build import SimKnobs, build_feasibility, build_policy, build_simulation
from simulator.cluster import ClusterState
from simulator.errors import ConfigError
from simulator.feasibility import DEFAULT_HETERO_BLOCK_SEARCH, Feasibility
from simulator.policies.heuristics import MinFeasible, ParaMin, min_feasible_degree
from simulator.policies.lookahead import RolloutCluster
from simulator.topology import RampTopology
from tests.block_reference import BlockAwareMinFeasible
from tests.simulator.allocation.test_op_placer import compose_sim, hetero
from tests.simulator.test_model_parallel import MP, two_branch_graph
from workloads.jobs import JobSpec

FAST_G0 = 0b1111              # servers 0-3: group 0's fast racks
FAST_G0_G1 = 0b1111 | 0b1111 << 8  # and group 1's (servers 8-11)
ALL_FAST = sum(0b1111 << (8 * c) for c in range(4))  # every fast server


def _feas(bound: int = DEFAULT_HETERO_BLOCK_SEARCH, topology: RampTopology | None = None,
          op_placer: str = "first_fit") -> Feasibility:
    return build_feasibility(hetero() if topology is None else topology,
                             SimKnobs(**MP, op_placer=op_placer, hetero_block_search=bound))


def _job(beta: float = 1.0) -> JobSpec:
    return JobSpec(job_id=0, arrival_time_s=0.0, graph=two_branch_graph(), beta=beta, num_training_steps=1)


def _state(feas: Feasibility, occupied: int, job: JobSpec | None = None) -> ClusterState:
    return ClusterState(time_s=0.0, topology=feas.topology, occupied_mask=occupied, num_running_jobs=1,
                        feasibility=feas.table(_job() if job is None else job, occupied))


@pytest.mark.parametrize("op_placer", ["first_fit", "heft"])
def test_a_slow_first_fit_server_does_not_hide_a_fast_free_block(op_placer: str) -> None:
    feas = _feas(op_placer=op_placer)
    table = feas.table(_job(), FAST_G0)
    assert feas.placer.first_fit_block(1, FAST_G0).servers == (4,)  # first fit: a slow server
    assert not table.feasible(1, feas.placer.first_fit_block(1, FAST_G0))
    assert table.feasible(1) and table.chosen_block(1).servers == (8,)  # the first fast one
    assert table.placement(1).servers == (8,) and table.jct_s(1) == table.jct_s(1, table.chosen_block(1))
    # Every degree rule takes degree 1 there, and the simulation would place it on server 8.
    state = _state(feas, FAST_G0)
    assert MinFeasible().decide(_job(), state).degree == 1
    assert min_feasible_degree(table, 4) == 4 and table.placement(4).servers[0] in (8, 16, 24)
    assert ParaMin().decide(_job(), state).degree == 1
    # First fit alone (the behaviour before): degree 1 is judged on server 4 and refused.
    before = _feas(0, op_placer=op_placer).table(_job(), FAST_G0)
    assert not before.feasible(1) and before.chosen_block(1) is None and before.placement(1).servers == (4,)


def test_op_first_fit_placement_keeps_first_fit_where_it_meets_the_target() -> None:
    """The paper scenario's placement (ops first fit across the cluster) on two kinds: first fit's
    own placement when it meets the target, else the job goes to the first fast free block."""
    feas = build_feasibility(hetero(), SimKnobs(min_op_time_s=0.01, edge_sizing="paper", placement="op_first_fit"))
    table = feas.table(_job(), FAST_G0)
    assert table.feasible(1) and table.placement(1).servers == (8,) and table.chosen_block(1).servers == (8,)
    table = feas.table(_job(), 0b1111 << 4)  # the slow servers of group 0 busy: first fit takes server 0
    assert table.feasible(1) and table.chosen_block(1) is None and table.placement(1).servers == (0,)


def test_the_agents_masks_features_rules_and_rollouts_see_the_same_block() -> None:
    feas = _feas()
    state = _state(feas, FAST_G0)
    assert action_mask(state, 16)[1]  # the per-beta agents' mask (pacml_beta)
    take = take_features(state, 16)
    assert take[1, 8] == 1.0 and take[1, :32].sum() == 1.0  # the servers degree 1 takes: server 8
    assert Rule("min_feasible", 1).degree_for(state.feasibility) == 1  # the adaptive agent's rules
    cluster = RolloutCluster(feas, FAST_G0)  # its shadows, and the lookahead's rollouts
    assert start_rule(cluster, cluster.table(_job()), Rule("min_feasible", 1))
    assert cluster.occupied_mask == FAST_G0 | 1 << 8
    fast_path = RolloutCluster(feas, FAST_G0)
    assert fast_path.start_min_feasible(_job(), 1) and fast_path.occupied_mask == FAST_G0 | 1 << 8
    assert feas.min_feasible_start(_job(), FAST_G0, 1) == (1, 1 << 8, feas.table(_job(), FAST_G0).jct_s(1))


@pytest.mark.parametrize("op_placer", ["first_fit", "heft"])
def test_the_rollouts_fast_path_gives_the_tables_answer(op_placer: str) -> None:
    """``Feasibility.min_feasible_start`` (the rollouts' and shadows' path, cached by occupancy)
    gives the degree, servers and JCT a table gives, on random occupancies and targets."""
    import numpy as np

    feas = _feas(op_placer=op_placer)
    rng = np.random.default_rng(43)
    searched = 0
    for i in range(60 if op_placer == "first_fit" else 12):
        def bits() -> int:
            return int(rng.integers(0, 1 << 32))
        occupied = (bits() & bits()) | (ALL_FAST & (bits() | bits()))  # fast servers mostly busy
        job = _job(beta=float(rng.choice([0.5, 1.0, 1.5, 2.5])))
        k = int(rng.choice([1, 2, 4]))
        table = feas.table(job, occupied)
        d = min_feasible_degree(table, k)
        want = None if d == 0 else (d, table.placement(d).mask, table.jct_s(d))
        searched += d > 0 and table.chosen_block(d) is not None
        assert feas.min_feasible_start(job, occupied, k) == want, i
        assert feas.min_feasible_start(job, occupied, k) == want, i  # and from its cache
    assert searched >= 4  # cases where first fit's placement missed and a searched block took the job


def test_no_feasible_block_is_rejected() -> None:
    feas = _feas()
    table = feas.table(_job(), ALL_FAST)  # only slow servers are free: no block meets the target
    assert not any(table.feasible(d) for d in table.degrees)
    assert all(table.chosen_block(d) is None for d in table.degrees)
    assert MinFeasible().decide(_job(), _state(feas, ALL_FAST)).degree == 0
    assert feas.min_feasible_start(_job(), ALL_FAST, 1) is None
    # A looser target is met on a slow server: first fit's own placement is kept.
    loose = feas.table(_job(beta=2.5), ALL_FAST)
    assert loose.feasible(1) and loose.chosen_block(1) is None and loose.placement(1).servers == (4,)


def test_the_bound_counts_free_blocks_in_first_fit_order() -> None:
    # Free servers 4-7 and 12-15 (slow) come before 16 (fast): server 16 is the 9th free block.
    assert [b.servers[0] for b in _feas().table(_job(), FAST_G0_G1).free_blocks(1)][:9] == [
        4, 5, 6, 7, 12, 13, 14, 15, 16]
    assert not _feas(8).table(_job(), FAST_G0_G1).feasible(1)
    table = _feas(9).table(_job(), FAST_G0_G1)
    assert table.feasible(1) and table.placement(1).servers == (16,)


def test_one_block_per_class_covers_every_block_and_a_hopeless_degree_lists_none(monkeypatch) -> None:
    feas = _feas()
    topo = feas.topology
    for d in topo.degrees:
        assert ({feas.block_class(b) for b in feas._class_blocks(d)}
                == {feas.block_class(b) for b in topo.blocks(d)}), d
    # Model parallel under first fit runs as on one server: half the sequential JCT is never met,
    # so no free block is listed to find that out (after each class's one lookahead).
    listed = []
    real = feas.placer.free_blocks
    monkeypatch.setattr(feas.placer, "free_blocks", lambda *a: listed.append(a) or real(*a))
    assert not any(feas.table(_job(beta=0.5), FAST_G0).feasible(d) for d in topo.degrees)
    assert feas.min_feasible_start(_job(beta=0.5), FAST_G0, 1) is None and not listed


def test_one_kind_is_untouched() -> None:
    feas = build_feasibility(RampTopology(), SimKnobs(**MP))
    assert feas.block_search_bound == 0
    table = feas.table(_job(beta=0.5), FAST_G0)  # a target nothing meets: no block is searched
    assert not table.feasible(1) and table.chosen_block(1) is None and not table._chosen
    assert table.placement(1).servers == (4,)


def test_min_feasible_blocks_no_more_than_the_block_aware_reference() -> None:
    """The newcomer's case of issue 43: every job fits one fast server, and must run as fast."""
    over = ["cluster=ramp32_hetero", "scenario=model_parallel", "beta=fixed", "beta.value=1.0", "progress=false"]
    cfg = compose_sim(*over, "policy=min_feasible")
    rates = {name: build_simulation(cfg, seed=0).run(policy).summary["blocking_rate"]
             for name, policy in (("min_feasible", build_policy(cfg)), ("reference", BlockAwareMinFeasible()))}
    first_fit = compose_sim(*over, "policy=min_feasible", "sim.hetero_block_search=0")
    rates["first_fit"] = build_simulation(first_fit, seed=0).run(build_policy(first_fit)).summary["blocking_rate"]
    assert rates["min_feasible"] <= rates["reference"] < 0.5
    assert rates["first_fit"] > rates["reference"] + 0.3  # first fit alone blocked 0.857 (issue 43)


@pytest.mark.parametrize("value", [-1, 1.5, True, "x"])
def test_a_bad_bound_is_one_config_error(value: object) -> None:
    with pytest.raises(ConfigError, match="sim.hetero_block_search"):
        build_feasibility(hetero(), SimKnobs(**{**MP, "hetero_block_search": value}))  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["-1", "1.5", "true", "many"])
def test_cli_bad_bound_is_one_line(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.cli import preflight
    from simulator.run import COMMAND

    with pytest.raises(SystemExit) as stop:
        preflight(COMMAND, ["cluster=ramp32_hetero", f"sim.hetero_block_search={value}"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("pacml sim: error:") and "sim.hetero_block_search" in err
