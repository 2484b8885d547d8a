"""Coarsening (simulator/place/coarsen.py) and big graphs (simulator/place/large.py): groups are never
split, cluster counts and budgets hold, refinement never worsens, builders give the promised sizes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cli import preflight
from simulator.errors import ConfigError
from simulator.place.cli import COMMAND, prepare, run_place
from simulator.place.coarsen import CoarsenedPlacer, coarsen, quotient_acyclic
from simulator.place.devices import device_set_from_config
from simulator.place.heuristics import HeftPlacer
from simulator.place.large import (
    big_graph,
    is_big_graph_name,
    partitioned_graph,
    transformer_graph,
)
from simulator.place.objectives import bind_objective
from workloads.compute_graph import ComputeGraph
from workloads.errors import WorkloadError
from workloads.loaders import load_compute_graph

GPU4 = {"name": "gpu4", "groups": [{"kind": "gpu", "count": 4, "speed": 1.0, "memory_bytes": 80.0e9}],
        "links": {"type": "full_mesh", "bandwidth_Bps": 4.0e11, "latency_s": 2.5e-7}}


@pytest.fixture(scope="module")
def resnet18() -> ComputeGraph:
    return load_compute_graph("resnet18")


@pytest.fixture(scope="module")
def small_partitioned() -> ComputeGraph:
    return partitioned_graph("squeezenet1_0", 4)


def _groups_whole(graph: ComputeGraph, cluster_of_node: np.ndarray) -> bool:
    return all(len(np.unique(cluster_of_node[m])) == 1 for m in graph.group_members)


@settings(max_examples=12, deadline=None)
@given(max_groups=st.integers(1, 120), method=st.sampled_from(["chain", "metis"]), seed=st.integers(0, 3),
       name=st.sampled_from(["resnet18", "small_partitioned", "bert24_training", "inception_v3", "bert_l-3_training"]),
       width=st.sampled_from([1, 4]))
def test_coarsening_never_splits_a_group_and_respects_the_count(max_groups, method, seed, name, width) -> None:
    g = partitioned_graph("squeezenet1_0", 4) if name == "small_partitioned" else load_compute_graph(name)
    c = coarsen(g, max_groups, method=method, seed=seed, width=width)
    assert 1 <= c.num_clusters <= max_groups
    assert _groups_whole(g, c.graph.group)
    assert np.array_equal(c.graph.group, c.cluster_of_group[g.group])
    # Same nodes, edges and times: only the groups change.
    assert c.graph.num_nodes == g.num_nodes and np.array_equal(c.graph.edges, g.edges)
    assert c.acyclic == quotient_acyclic(g, c.graph.group)
    if method == "chain" and name != "bert_l-3_training":
        assert c.acyclic  # guaranteed where the backward pass mirrors the forward pass


def test_identity_when_there_are_enough_clusters(resnet18: ComputeGraph) -> None:
    c = coarsen(resnet18, resnet18.num_groups, method="chain")
    assert np.array_equal(c.cluster_of_group, np.arange(resnet18.num_groups))
    assert np.array_equal(c.graph.group, resnet18.group)
    obj = bind_objective("step", resnet18, device_set_from_config(GPU4))
    heft = HeftPlacer().place(bind_objective("step", resnet18, device_set_from_config(GPU4))).placement
    r = CoarsenedPlacer("heft", max_groups=10_000, refine_evaluations=0).place(obj)
    assert r.info["clusters"] == resnet18.num_groups and r.info["view"] == "full"
    assert np.array_equal(r.placement, heft)


@pytest.mark.parametrize("contract", [True, False])
@pytest.mark.parametrize("inner", ["heft", "m_etf", "round_robin"])
def test_coarse_placement_is_valid_and_refinement_never_worsens(small_partitioned, inner, contract) -> None:
    g = small_partitioned
    obj = bind_objective("step", g, device_set_from_config(GPU4))
    r = CoarsenedPlacer(inner, max_groups=16, refine_evaluations=40, contract=contract).place(obj, seed=1)
    p = obj.check(r.placement)
    assert _groups_whole(g, p)
    assert r.info["refined_value_s"] <= r.info["coarse_value_s"]
    assert r.info["refine_evaluations"] <= 40
    assert obj.value(p) == pytest.approx(r.info["refined_value_s"], rel=1e-12)
    assert r.info["view"] == ("contracted" if contract else "full")
    assert r.evaluations == r.info["inner_evaluations"] + r.info["refine_evaluations"]


def test_a_cyclic_clustering_falls_back_to_the_full_coarse_graph() -> None:
    g = load_compute_graph("bert_l-3_training")  # backward colour classes do not mirror the forward pass
    obj = bind_objective("step", g, device_set_from_config(GPU4))
    r = CoarsenedPlacer("heft", max_groups=32, refine_evaluations=10).place(obj)
    assert not r.info["acyclic"] and r.info["view"] == "full" and r.info["clusters"] == 32
    assert np.isfinite(r.info["refined_value_s"])


def test_contracted_graph_sums_times_and_memory(small_partitioned) -> None:
    c = coarsen(small_partitioned, 12)
    small, node = c.contracted()
    assert small.num_nodes == node.max() + 1 <= 2 * c.num_clusters
    assert small.kind_time_s["gpu"].sum() == pytest.approx(small_partitioned.kind_time_s["gpu"].sum())
    assert small.memory_bytes.sum() == pytest.approx(small_partitioned.memory_bytes.sum())
    small.topological_order  # acyclic: raises on a cycle  # noqa: B018
    assert small.num_groups == c.num_clusters


def test_big_graph_builders_give_the_promised_sizes_and_dags() -> None:
    t = transformer_graph(2)
    assert t.num_nodes == 2 * (2 * 72 + 2) and t.num_groups == t.num_nodes // 2
    assert big_graph("transformer350").num_nodes >= 50_000  # built in well under a second
    p = partitioned_graph("squeezenet1_0", 4)
    assert p.num_groups * 2 == p.num_nodes and p.num_nodes > 2 * 39
    s = big_graph("gnmt_stack3")
    assert s.num_nodes == 3 * load_compute_graph("gnmt").num_nodes
    for g in (t, p, s):
        assert len(g.topological_order) == g.num_nodes  # a DAG
        assert _groups_whole(g, g.group)
    assert is_big_graph_name("resnet50_x16") and is_big_graph_name("gnmt_stack8")
    assert not is_big_graph_name("resnet50") and not is_big_graph_name("nosuchmodel_x4")
    with pytest.raises(WorkloadError, match="degree"):
        big_graph("resnet50_x100000")


def test_pacml_place_method_coarse_end_to_end(tmp_path: Path) -> None:
    cfg = preflight(COMMAND, ["graph=squeezenet1_0_x4", "devices=hetero", "method=coarse", "method.inner=m_etf",
                              "method.max_groups=8", "method.refine_evaluations=20", "gantt=false"])
    assert cfg is not None
    s = run_place(cfg, tmp_path, {"method": "coarse"})
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["num_ops"] == s["num_ops"] > 300
    assert summary["info"]["clusters"] <= 8 and summary["info"]["inner"] == "m_etf"
    assert summary["value_s"] == pytest.approx(summary["info"]["refined_value_s"])


@pytest.mark.parametrize(("args", "expected"), [
    (["method.max_groups=0"], "method.max_groups"),
    (["method.max_groups=abc"], "method.max_groups"),
    (["method.method=spectral"], "method.method"),
    (["method.refine_evaluations=-1"], "method.refine_evaluations"),
    (["method.inner=nosuch"], "method.inner"),
    (["method.inner=coarse"], "method.inner"),
    (["method.contract=maybe"], "method.contract"),
    (["method.width=0"], "method.width"),
    (["+method.inner_args.insertion=3"], "method.inner_args.insertion"),
])
def test_bad_parameters_give_one_line(capsys: pytest.CaptureFixture[str], args: list[str], expected: str) -> None:
    with pytest.raises(SystemExit) as exc:
        preflight(COMMAND, ["graph=resnet18", "method=coarse", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pacml place: error: ") and expected in err, err


def test_inner_args_reach_the_inner_placer() -> None:
    cfg = preflight(COMMAND, ["graph=resnet18", "method=coarse", "+method.inner_args.insertion=false"])
    assert cfg is not None
    assert prepare(cfg).method.inner.insertion is False


def test_coarsen_refuses_bad_arguments(resnet18: ComputeGraph) -> None:
    with pytest.raises(ConfigError, match="method.max_groups"):
        coarsen(resnet18, 0)
    with pytest.raises(ConfigError, match="method.method"):
        coarsen(resnet18, 4, method="nope")
    with pytest.raises(ConfigError, match="method.inner_args.insertion"):
        CoarsenedPlacer("heft", inner_args={"insertion": 3})
    assert CoarsenedPlacer("heft", inner_args={"insertion": False}).inner.insertion is False
