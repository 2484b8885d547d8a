"""The condition grid (pacml/adaptive/conditions.py) and its benchmark (benchmarks/adaptive/bench_conditions.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from pacml.adaptive.conditions import (
    EVAL_SEEDS,
    GRID,
    Condition,
    agent_overrides,
    cache_key,
    get_condition,
    paired_difference,
    rule_candidates,
    sample_condition,
    summarise_condition,
    validation_seeds,
)
from pacml.agent.env import TRAIN_SEED_LOW, compose_sim_config
from simulator.build import build_feasibility, build_policy, build_topology, build_workload
from simulator.policies.heuristics import MinFeasible, ParaMax

ROOT = Path(__file__).resolve().parents[3]


def _load_bench():
    """Import benchmarks/adaptive/bench_conditions.py by path (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("_bench_conditions", ROOT / "benchmarks" / "adaptive" / "bench_conditions.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


def test_grid_names_are_unique_and_cover_the_issue() -> None:
    names = [c.name for c in GRID]
    assert len(names) == len(set(names)) >= 12
    assert {f"paper_{b}_{t}" for b in "ABCD" for t in (500, 1000, 1500)} <= set(names)
    assert {"unseen_graphs_A", "poisson_B", "poisson_D", "ramp64_A_500", "ramp512_C_62.5", "physical_D",
            "trace_C"} <= set(names)
    assert len(EVAL_SEEDS) == 10 and max(EVAL_SEEDS) < TRAIN_SEED_LOW and min(EVAL_SEEDS) > 500_010


@pytest.mark.parametrize("cond", GRID, ids=lambda c: c.name)
def test_every_condition_composes_and_builds(cond: Condition) -> None:
    cfg = compose_sim_config(list(cond.overrides))
    topology = build_topology(cfg)
    build_feasibility(topology, cfg.sim)
    workload = build_workload(cfg)
    assert workload.by_name
    assert topology.num_servers <= bench.MAX_SERVERS
    assert cfg.beta.name == cond.beta


def test_conditions_set_what_their_names_say() -> None:
    def cfg(name: str):
        return compose_sim_config(list(get_condition(name).overrides))

    assert cfg("paper_C_1500").mean_interarrival_s == 1500
    assert "Poisson" in cfg("poisson_D").arrivals._target_
    assert "TraceReplay" in cfg("trace_C").arrivals._target_
    assert list(cfg("unseen_graphs_A").workload.graphs) == ["densenet121", "inception_v3", "resnet50", "resnext50"]
    big = cfg("ramp512_C_62.5")
    assert build_topology(big).num_servers == 512 and max(build_topology(big).degrees) == 64
    assert get_condition("physical_D").scenario == "physical" and get_condition("paper_A_500").scenario == "paper"
    with pytest.raises(KeyError, match="paper_A_500"):
        get_condition("nope")


def test_rule_candidates_on_the_paper_cluster() -> None:
    topology = build_topology(compose_sim_config(["cluster=ramp32"]))
    rules = dict(rule_candidates(topology))
    assert list(rules) == ["para_max", "min_feasible", *(f"min_feasible_{k}" for k in (2, 4, 6, 8, 16))]
    policy = build_policy(compose_sim_config(["scenario=paper", *rules["min_feasible_6"]]))
    assert isinstance(policy, MinFeasible) and policy.min_degree == 6


def test_rule_candidates_on_512_servers_offer_every_degree() -> None:
    topology = build_topology(compose_sim_config(["cluster=ramp512"]))
    rules = dict(rule_candidates(topology))
    assert len(rules) == 2 + len(topology.degrees)  # para_max twice, then one min_feasible per degree
    assert {f"min_feasible_{k}" for k in topology.degrees if k > 1} <= set(rules)
    wide = build_policy(compose_sim_config(["cluster=ramp512", *rules["para_max_64"]]))
    assert isinstance(wide, ParaMax) and wide.max_degree == 64
    paper = build_policy(compose_sim_config(["cluster=ramp512", *rules["para_max"]]))
    assert paper.max_degree == 16


def test_paired_difference_on_hand_made_numbers() -> None:
    d = paired_difference([0.1, 0.3, 0.5], [0.2, 0.3, 0.4])  # differences -0.1, 0, +0.1
    assert d["mean"] == pytest.approx(0.0)
    assert d["se"] == pytest.approx(0.1 / math.sqrt(3))  # sample std 0.1
    assert (d["better"], d["worse"], d["tied"], d["n"]) == (1, 1, 1, 3)
    assert paired_difference([0.2], [0.1])["se"] is None
    with pytest.raises(ValueError, match="equally many"):
        paired_difference([0.1], [0.1, 0.2])


def test_summary_picks_the_oracle_on_the_same_seeds() -> None:
    rules = {"para_max": [0.30, 0.40], "min_feasible": [0.20, 0.30], "min_feasible_4": [0.10, 0.35]}
    s = summarise_condition(rules, {"agent": [0.10, 0.30]})
    assert s["oracle"] == {"rule": "min_feasible_4", "mean": pytest.approx(0.225)}
    vs = s["compared"]["agent"]["vs_oracle"]
    assert vs["mean"] == pytest.approx(-0.025) and vs["se"] == pytest.approx(0.025)
    assert (vs["better"], vs["worse"], vs["tied"]) == (1, 0, 1)
    assert s["compared"]["agent"]["vs_para_max"]["mean"] == pytest.approx(-0.15)
    assert s["compared"]["para_max"]["vs_oracle"]["mean"] == pytest.approx(0.125)
    # A tie goes to the first rule listed (para_max before min_feasible_k).
    assert summarise_condition({"para_max": [0.1], "min_feasible": [0.1]}, {})["oracle"]["rule"] == "para_max"


def test_cache_key_changes_with_every_input() -> None:
    base = ("paper_A_500", ("scenario=paper", "beta=A"), "shipped", ("policy=pacml",), 800_000)
    key = cache_key(*base)
    for i, changed in enumerate([("x",), (("scenario=paper", "beta=B"),), ("other",),
                                 (("policy=pacml", "policy.checkpoint=x"),), (800_001,)]):
        args = list(base)
        args[i] = changed[0]
        assert cache_key(*args) != key


def test_agent_overrides_fill_in_the_condition() -> None:
    spec = ("policy=pacml_beta", "policy.checkpoint={scenario}_beta{beta}")
    assert agent_overrides(spec, get_condition("physical_D"))[1] == "policy.checkpoint=physical_betaD"
    assert agent_overrides(spec, get_condition("paper_B_500"))[1] == "policy.checkpoint=paper_betaB"


def _run(tmp_path: Path, *extra: str) -> dict:
    bench.main(["--conditions", "paper_A_1000", "--seeds", "2", "--workers", "1", "--override", "horizon_s=5000",
                "--agent", "fixed4=policy=fixed policy.degree=4",
                "--agent", "ghost=policy=pacml_beta policy.checkpoint=nowhere_beta{beta}",
                "--out", str(tmp_path / "r.json"), *extra])
    return json.loads((tmp_path / "r.json").read_text())


def test_cli_end_to_end_and_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _run(tmp_path)
    rules = len(rule_candidates(build_topology(compose_sim_config(["cluster=ramp32"]))))
    assert first["summary"]["episodes_run"] == 2 * (rules + 2)
    cond = first["summary"]["conditions"]["paper_A_1000"]
    assert cond["overrides"][-1] == "horizon_s=5000"
    assert set(cond["rules"]) == {lab for lab, _ in rule_candidates(build_topology(compose_sim_config([])))}
    assert cond["oracle"]["mean"] == min(cond["rules"].values())
    assert cond["mean_jobs_arrived"] > 0
    assert set(cond["compared"]) == {"fixed4", "para_max", "min_feasible"}
    assert "nowhere_betaA" in cond["unavailable"]["ghost"]
    assert "fixed4" in first["summary"]["grid_average"]
    assert "paper_A_1000" in capsys.readouterr().out

    second = _run(tmp_path)
    assert second["summary"]["episodes_run"] == 0
    assert second["episodes"] == first["episodes"]
    assert second["summary"]["conditions"] == first["summary"]["conditions"]

    # A changed condition definition is a cache miss, not a stale hit (planned, not run: composing
    # every policy's config again is what makes a run cost seconds).
    argv = ["--conditions", "paper_A_1000", "--seeds", "2", "--agent", "fixed4=policy=fixed policy.degree=4"]
    same = bench.make_plan(bench.build_parser().parse_args([*argv, "--override", "horizon_s=5000"]))
    changed = bench.make_plan(bench.build_parser().parse_args([*argv, "--override", "horizon_s=4000"]))
    assert all(ep.key in second["episodes"] for ep in same.episodes())
    assert not any(ep.key in second["episodes"] for ep in changed.episodes())


@pytest.mark.parametrize("argv, field", [
    (["--conditions", "nope*"], "--conditions"),
    (["--agent", "para_max_x=policy=para_max"], "--agent"),
    (["--agent", "noequals"], "--agent"),
    (["--seeds", "11"], "--seeds"),
    (["--conditions", "paper_A_500", "--override", "cluster=ramp4096"], "memory guard"),
    (["--conditions", "paper_A_500", "--override", "no_such_key=1"], "condition paper_A_500"),
])
def test_cli_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                   field: str) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main([*argv, "--out", str(tmp_path / "r.json")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err
    assert not (tmp_path / "r.json").exists()


def test_validation_seeds_are_a_range_below_the_grids() -> None:
    assert validation_seeds("500100-500103") == (500100, 500101, 500102, 500103)
    assert validation_seeds("500100-500100") == (500100,)
    for bad in ("x", "500100", "500105-500100", "800000-800009", "1-5", "500100-500101-500102"):
        with pytest.raises(ValueError):
            validation_seeds(bad)


def test_sampled_conditions_build_and_are_reproducible() -> None:
    draws = [sample_condition(np.random.default_rng([0, i])) for i in range(12)]
    assert draws == [sample_condition(np.random.default_rng([0, i])) for i in range(12)]
    for over in draws:
        topo = build_topology(compose_sim_config(over))
        assert 32 <= topo.num_servers <= 512
        assert not any(g in o for o in over for g in ("densenet121", "inception_v3", "resnet50", "resnext50"))


def test_core_conditions_are_dense_on_the_paper_ramp_and_core_frac_zero_keeps_old_draws() -> None:
    # Runs trained before core_frac existed (the first paper_adaptive) drew their conditions so: they must still
    # be drawn exactly (this one was printed by that version of sample_condition).
    assert sample_condition(np.random.default_rng([0, 3])) == [
        "scenario=paper", "beta=B", "cluster.num_comm_groups=8", "cluster.num_racks_per_group=8",
        "cluster.num_servers_per_rack=8", "cluster.max_degree=64", "arrivals=poisson",
        "mean_interarrival_s=169.771", "horizon_s=84885.3",
        "workload.graphs=[alexnet,gnmt,resnet18,squeezenet1_0,vgg16]"]
    core = [sample_condition(np.random.default_rng([1, i]), 500, core_frac=1.0) for i in range(400)]
    for over in core:
        assert "cluster.num_servers_per_rack=2" in over and "cluster.num_comm_groups=4" in over
        gap = float(next(o for o in over if o.startswith("mean_interarrival_s=")).split("=")[1])
        assert 400 * 0.999 <= gap <= 2500 * 1.001
    assert 0.5 * 400 < sum("arrivals=fixed" in o for o in core) < 0.7 * 400  # 60 % fixed
    mixed = [sample_condition(np.random.default_rng([1, i]), 500, core_frac=0.5) for i in range(200)]
    on_paper = sum("cluster.num_servers_per_rack=2" in o and "cluster.num_comm_groups=4" in o for o in mixed)
    assert 0.55 * 200 < on_paper < 0.80 * 200  # half core, plus the broad draw's 35 % of the rest
