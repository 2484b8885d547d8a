"""The op placer's pre-training corpus: synthetic generators (deterministic, DAGs, groups and edge
bytes by the training-graph rule, stated magnitudes), the shipped torch.fx exports, the splits
(held-out graphs never in training, by name or content) and that every graph can be placed."""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from simulator.place.devices import DeviceSet, device_set_from_config
from simulator.place.heuristics import HeftPlacer
from simulator.place.objectives import bind_objective
from simulator.place.placer import SingleDevicePlacer
from workloads import placement_corpus as pc
from workloads import synthetic_compute as sc
from workloads.errors import WorkloadError
from workloads.loaders import shipped_placement_graphs

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ("gpu4", "hetero", "cpu_gpu")
EXAMPLES = ("layered_w4_d30_s7_train", "layered_w6_d10_cpu_s3_inf", "chain_n40_s1_train",
            "towers_c4_b5_cpu_s2_train", "nasnet_c3_b4_s9_inf", "transformer_l2_h4_cpu_s5_train",
            "transformer_l1_h2_s0_inf")


@cache
def _devices(preset: str) -> DeviceSet:
    return device_set_from_config(OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "devices" / f"{preset}.yaml")))


def _check_structure(g) -> None:
    """DAG; training form: node i's mirror is n+i in its group, edges as from_training_graph."""
    assert len(g.topological_order) == g.num_nodes  # raises on a cycle
    fwd = np.flatnonzero(~g.is_backward)
    t = g.kind_time_s["gpu"]
    assert (t[fwd] >= sc.MIN_OP_TIME_S).all() and (t[fwd] <= sc.MAX_OP_TIME_S).all()
    assert (g.edge_bytes >= sc.MIN_ACTIVATION_BYTES).all() and (g.edge_bytes <= sc.MAX_ACTIVATION_BYTES).all()
    assert np.isnan(g.edge_cost_s).all()
    edges = {(int(s), int(d)): b for (s, d), b in zip(g.edges.tolist(), g.edge_bytes.tolist(), strict=True)}
    # every forward edge out of one op carries that op's activation
    out_bytes: dict[int, float] = {}
    for (s, d), b in edges.items():
        if not g.is_backward[s] and not g.is_backward[d]:
            assert out_bytes.setdefault(s, b) == b
    assert (g.memory_bytes >= [out_bytes.get(i, 0.0) for i in range(g.num_nodes)]).all()  # params + activation
    if not g.is_backward.any():
        assert g.num_groups == g.num_nodes
        return
    n = g.num_nodes // 2
    assert g.is_backward.tolist() == [False] * n + [True] * n
    np.testing.assert_array_equal(g.group[:n], g.group[n:])
    assert g.num_groups == n
    np.testing.assert_allclose(t[n:], sc.BACKWARD_FACTOR * t[:n])
    np.testing.assert_array_equal(g.memory_bytes[:n], g.memory_bytes[n:])
    forward_edges = [(s, d) for s, d in edges if s < n and d < n]
    for s, d in forward_edges:  # the mirror carries the same bytes (the gradient of u's output)
        assert edges[(n + d, n + s)] == edges[(s, d)]
    joins = [(s, d) for s, d in edges if s < n <= d]
    assert len(joins) == 1 and joins[0][1] == joins[0][0] + n
    assert len(edges) == 2 * len(forward_edges) + 1


@pytest.mark.parametrize("name", EXAMPLES)
def test_generators_are_deterministic_dags_with_training_groups_and_edge_bytes(name):
    g = sc.graph_from_name(name)
    assert g.name == name
    assert sc.graph_from_name(name).fingerprint == g.fingerprint  # same name, same graph
    _check_structure(g)
    other = re.sub(r"_s(\d+)_", lambda m: f"_s{int(m[1]) + 1}_", name)
    assert sc.graph_from_name(other).fingerprint != g.fingerprint  # the seed matters


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_random_names_build_valid_graphs_of_the_stated_sizes(draw_seed):
    name = sc.random_name(np.random.default_rng(draw_seed), max_nodes=600)
    g = sc.graph_from_name(name)
    _check_structure(g)
    assert 10 <= g.num_nodes <= 900  # the name's size is an estimate: at most 1.5x the bound


def test_inference_form_is_the_training_forms_forward_nodes():
    train = sc.graph_from_name("towers_c3_b3_cpu_s4_train")
    inf = sc.graph_from_name("towers_c3_b3_cpu_s4_inf")
    fwd = train.forward_only()
    for kind in ("gpu", "cpu"):
        np.testing.assert_array_equal(inf.kind_time_s[kind], fwd.kind_time_s[kind])
    np.testing.assert_array_equal(inf.edges, fwd.edges)
    np.testing.assert_array_equal(inf.edge_bytes, fwd.edge_bytes)
    np.testing.assert_array_equal(inf.memory_bytes, fwd.memory_bytes)


def test_cpu_times_slower_some_unsupported_and_gpu_graph_unchanged():
    with_cpu = sc.graph_from_name("transformer_l2_h4_cpu_s5_train")
    without = sc.graph_from_name("transformer_l2_h4_s5_train")
    assert "cpu" not in without.kind_time_s
    np.testing.assert_array_equal(with_cpu.kind_time_s["gpu"], without.kind_time_s["gpu"])
    cpu, gpu = with_cpu.kind_time_s["cpu"], with_cpu.kind_time_s["gpu"]
    unsupported = np.isinf(cpu)
    n = with_cpu.num_nodes // 2
    assert unsupported.any() and not unsupported.all()
    np.testing.assert_array_equal(unsupported[:n], unsupported[n:])  # an op and its mirror alike
    scores = [i for i in range(n) if with_cpu.node_names[i].endswith("_scores")]
    assert scores and unsupported[scores].all()  # attention kernels: accelerator only
    ratio = cpu[~unsupported] / gpu[~unsupported]
    assert ratio.min() >= 4.0 * 0.999 and ratio.max() <= 60.0 * 1.001


def test_bad_names_and_parameters_raise_workload_errors():
    for bad in ("layered_w4_s7_train", "foo_n3_s1_inf", "chain_n050_s1_inf", "chain_n5_s1", "chain_n1_s1_inf"):
        with pytest.raises(WorkloadError):
            sc.graph_from_name(bad)
    with pytest.raises(WorkloadError, match="width"):
        sc.layered(0, 5)
    with pytest.raises(WorkloadError, match="skip"):
        sc.layered(3, 5, skip=1.5)
    with pytest.raises(WorkloadError, match="max_nodes"):
        sc.random_name(np.random.default_rng(0), max_nodes=10)
    with pytest.raises(WorkloadError, match="families"):
        sc.random_name(np.random.default_rng(0), families=("lstm",))


# ------------------------------------------------------------------ splits
def _seed_of(name: str) -> int | None:
    m = re.search(r"_s(\d+)_(?:train|inf)$", name)
    return int(m[1]) if m and not name.startswith("fx_") else None


def test_held_out_real_graphs_are_a_third_and_never_in_training():
    shipped = set(shipped_placement_graphs())
    assert set(pc.HELD_OUT_REAL) | set(pc.TRAIN_REAL) == shipped
    assert not set(pc.HELD_OUT_REAL) & set(pc.TRAIN_REAL)
    assert len(pc.HELD_OUT_REAL) * 3 >= len(shipped)
    heldout = pc.corpus("heldout")
    assert [name for name, _ in heldout] == list(pc.HELD_OUT_REAL)
    train = pc.corpus("train", synthetic=16)
    unseen = pc.corpus("unseen_synthetic", synthetic=16)
    train_names = {name for name, _ in train}
    assert not train_names & {name for name, _ in heldout}
    assert not train_names & {name for name, _ in unseen}
    # by content too: no held-out graph, nor its forward part, under another name
    forbidden = {pc.content_fingerprint(g) for _, g in heldout}
    forbidden |= {pc.content_fingerprint(g.forward_only()) for _, g in heldout}
    assert not forbidden & {pc.content_fingerprint(g) for _, g in train}
    unseen_keys = {pc.content_fingerprint(g) for _, g in unseen}
    assert not unseen_keys & {pc.content_fingerprint(g) for _, g in train}


def test_train_and_unseen_synthetic_draw_from_disjoint_seeds_and_families():
    train = [name for name, _ in pc.corpus("train", synthetic=24, seed=3)]
    unseen = [name for name, _ in pc.corpus("unseen_synthetic", synthetic=24, seed=3)]
    train_seeds = [s for s in map(_seed_of, train) if s is not None]
    unseen_seeds = [s for s in map(_seed_of, unseen) if s is not None]
    assert len(train_seeds) == len(unseen_seeds) == 24
    assert all(pc.TRAIN_SEEDS[0] <= s < pc.TRAIN_SEEDS[1] for s in train_seeds)
    assert all(pc.UNSEEN_SEEDS[0] <= s < pc.UNSEEN_SEEDS[1] for s in unseen_seeds)
    assert not any(name.startswith("nasnet_") for name in train)
    assert {"fx_branch_cnn_c4", "fx_gpt_l4_h8_inf", "alexnet_inf"} <= set(train)
    assert {"fx_resnet_b3", "fx_vit_l6_h6_inf"} <= set(unseen)


def test_corpus_is_deterministic_cached_and_bounded():
    a = pc.corpus("train", synthetic=8, seed=5)
    b = pc.corpus("train", synthetic=8, seed=5)
    assert [n for n, _ in a] == [n for n, _ in b]
    assert all(x is y for (_, x), (_, y) in zip(a, b, strict=True))  # loaded once per process
    assert [n for n, _ in pc.corpus("train", synthetic=8, seed=6)] != [n for n, _ in a]
    small = pc.corpus("train", synthetic=8, seed=5, max_nodes=200)
    assert all(g.num_nodes <= 200 for _, g in small)
    assert sum(_seed_of(n) is not None for n, _ in small) == 8  # synthetic ones redrawn, not dropped
    everything = pc.corpus("all", synthetic=4)
    parts = sum((pc.corpus(s, synthetic=4) for s in ("train", "heldout", "unseen_synthetic")), [])
    assert [n for n, _ in everything] == [n for n, _ in parts]
    assert len({n for n, _ in everything}) == len(everything)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"split": "test"}, "split"), ({"split": "train", "synthetic": -1}, "synthetic"),
    ({"split": "train", "synthetic": True}, "synthetic"), ({"split": "train", "synthetic": 2.0}, "synthetic"),
    ({"split": "train", "seed": -1}, "seed"), ({"split": "heldout", "max_nodes": 10}, "max_nodes"),
])
def test_bad_corpus_arguments_name_the_argument(kwargs, field):
    split = kwargs.pop("split")
    with pytest.raises(WorkloadError, match=f"field '{field}'"):
        pc.corpus(split, **kwargs)


def test_shipped_fx_exports_and_scale_graph():
    train = dict(pc.corpus("train", synthetic=0))
    for name in ("fx_branch_cnn_c4", "fx_mixer_l8", "fx_encoder_l6", "fx_gpt_l4_h8", "fx_seq2seq_l3"):
        g = train[name]
        assert g.is_backward.any() and len(g.topological_order) == g.num_nodes
        assert train[f"{name}_inf"].num_nodes == g.num_nodes // 2
    big = pc.scale_graph()
    assert big.num_nodes >= 10_000 and big.is_backward.any()
    assert pc.scale_graph() is big
    total = sum(p.stat().st_size for p in pc.CORPUS_DIR.rglob("*") if p.is_file())
    assert total < 4e6  # the shipped files stay small


# ------------------------------------------------------------------ every graph can be placed
@pytest.mark.parametrize("preset", PRESETS)
def test_every_corpus_graph_binds_and_heft_places_it_finitely(preset):
    # Graphs up to 1,000 nodes here (a few seconds); scripts/placement_corpus_stats.py --check
    # places the whole default corpus on the three presets.
    devices = _devices(preset)
    for name, g in pc.corpus("all", synthetic=4, seed=1, max_nodes=1000):
        objective = bind_objective("step", g, devices)
        value = objective.value(HeftPlacer().place(objective).placement)
        assert math.isfinite(value) and value > 0, name


def test_a_graph_too_big_for_one_40gb_accelerator_is_reported_infeasible_on_one_device():
    # 47 GB with some ops the CPU cannot run: one device cannot hold it on cpu_gpu, HEFT splits it.
    g = sc.graph_from_name("towers_c16_b5_cpu_s15743_train")
    objective = bind_objective("step", g, _devices("cpu_gpu"))
    single = SingleDevicePlacer().place(objective).placement
    evaluation = objective.evaluate(single)
    assert not evaluation.feasible and math.isinf(evaluation.value_s) and evaluation.reason
    assert math.isfinite(objective.value(HeftPlacer().place(objective).placement))


def test_placement_matters_on_branchy_synthetic_graphs():
    # HEFT beats everything-on-one-GPU clearly on branchy graphs, not on a chain (measured ratios
    # are in the corpus README).
    objective = bind_objective("step", sc.graph_from_name("towers_c6_b4_s2_train"), _devices("gpu4"))
    single = objective.value(SingleDevicePlacer().place(objective).placement)
    assert single / objective.value(HeftPlacer().place(objective).placement) > 1.5
    objective = bind_objective("step", sc.graph_from_name("chain_n50_s3_train"), _devices("gpu4"))
    single = objective.value(SingleDevicePlacer().place(objective).placement)
    assert single / objective.value(HeftPlacer().place(objective).placement) == pytest.approx(1.0, abs=0.01)


def test_export_script_reproduces_a_shipped_fx_file_byte_for_byte(tmp_path):
    # Roofline costs on the meta device: the shipped files come back identical on any machine.
    pytest.importorskip("torch")
    import importlib.util

    spec = importlib.util.spec_from_file_location("export_placement_corpus",
                                                  ROOT / "scripts" / "export_placement_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--only", "fx_branch_cnn_c4", "--out", str(tmp_path)]) == 0
    shipped = pc.CORPUS_DIR / "train" / "fx_branch_cnn_c4.json"
    assert (tmp_path / "train" / "fx_branch_cnn_c4.json").read_bytes() == shipped.read_bytes()
