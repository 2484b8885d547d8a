"""method=dp_mixed: the exact contiguous split on devices of several kinds, against brute force over
every assignment (every cut and every order of the devices) and against method=dp on alike devices."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from simulator.allocation.op_placer import method_node
from simulator.build import build_topology
from simulator.config import CONF_DIR, instantiate_checked
from simulator.errors import ConfigError
from simulator.place.devices import Device, DeviceSet, ramp_block_devices
from simulator.place.dp import DPPlacer, MixedDPPlacer, _iteration_lower_bound
from simulator.place.objectives import PipelineObjective, bind_objective
from simulator.place.pipeline_schedule import iteration_time_s, stage_costs
from workloads.compute_graph import ComputeGraph
from workloads.loaders import load_compute_graph


def _graph(rng: np.random.Generator, n: int) -> ComputeGraph:
    """A random forward DAG of ``n`` ops and its backward mirror; every node's outputs carry one size
    (so the DP's transfer prices are exact, not bounds)."""
    fwd = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.5]
    act, grad = rng.integers(0, 5, n) * 1e3, rng.integers(0, 5, n) * 1e3
    edges = fwd + [(n + j, n + i) for i, j in fwd]
    size = [act[i] for i, _ in fwd] + [grad[j] for _, j in fwd]
    times = np.concatenate([rng.integers(1, 20, n), rng.integers(1, 20, n)]) * 1e-3
    return ComputeGraph(name="random", node_names=tuple(f"n{i}" for i in range(2 * n)),
                        kind_time_s={"gpu": times}, reference_kind="gpu",
                        memory_bytes=np.concatenate([rng.integers(1, 10, n), np.zeros(n)]),
                        is_backward=np.arange(2 * n) >= n, group=np.concatenate([np.arange(n)] * 2),
                        edges=np.array(edges, dtype=np.int64).reshape(-1, 2), edge_bytes=np.array(size, float),
                        edge_cost_s=np.full(len(edges), np.nan))


def _devices(specs) -> DeviceSet:
    devices = [Device(f"d{i}", kind, speed, mem) for i, (kind, speed, mem) in enumerate(specs)]
    return DeviceSet.full_mesh("mixed", devices, bandwidth_Bps=1e6, latency_s=1e-4)


def _brute_force(objective: PipelineObjective, given_order: bool) -> float:
    """Least max load over every assignment of ops to devices whose stages are contiguous: the devices
    ordered along the forward edges form no cycle (``given_order``: every such edge goes to a
    higher device index, i.e. stage i on device i)."""
    g = objective.graph
    n, d = g.num_nodes // 2, objective.devices.num_devices
    fwd = [(int(a), int(b)) for a, b in g.edges.tolist() if a < n and b < n]
    best = math.inf
    for assign in itertools.product(range(d), repeat=n):
        cross = {(assign[a], assign[b]) for a, b in fwd if assign[a] != assign[b]}
        if given_order:
            if any(x > y for x, y in cross):
                continue
        else:  # acyclic: some order of the used devices puts every cross edge forward
            used = sorted(set(assign))
            if not any(all(p.index(x) < p.index(y) for x, y in cross) for p in itertools.permutations(used)):
                continue
        best = min(best, objective.value(np.array(list(assign) * 2, dtype=np.int64)))
    return best


def _block(cluster: str, servers: int, kinds: int = 1) -> DeviceSet:
    """A block of ``servers`` servers of ``kinds`` kinds."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        topology = build_topology(compose("sim", [f"cluster={cluster}"]))
    block = next(b for b in topology.blocks(servers) if len({topology.server_kind[s] for s in b.servers}) == kinds)
    return ramp_block_devices(topology, block.servers)


KINDS = [("gpu", 1.0, 30.0), ("gpu_old", 0.5, 12.0), ("gpu_new", 2.0, 8.0)]


@pytest.mark.parametrize("case", range(40))
def test_dp_mixed_equals_brute_force_over_cuts_and_orders(case: int) -> None:
    rng = np.random.default_rng(case)
    n, d = int(rng.integers(2, 6)), int(rng.integers(2, 5))
    specs = [KINDS[int(k)] for k in rng.integers(0, 2 + case % 2, d)]  # two or three kinds
    objective = PipelineObjective(_graph(rng, n), _devices(specs))
    for order in ("best", "given"):
        result = MixedDPPlacer(order=order).place(objective)
        expected = _brute_force(objective, given_order=order == "given")
        if math.isinf(expected):
            assert result.info["feasible"] is False
            continue
        assert result.info["optimal"] is True
        assert objective.value(result.placement) == pytest.approx(expected, rel=1e-12)
        assert result.info["dp_value_s"] == pytest.approx(expected, rel=1e-12)
        assert result.info["lower_bound_s"] <= expected * (1 + 1e-12)


def test_best_order_is_the_least_given_order_over_every_permutation() -> None:
    rng = np.random.default_rng(7)
    graph = _graph(rng, 6)
    specs = [KINDS[0], KINDS[1], KINDS[2], KINDS[1]]
    best = MixedDPPlacer().place(PipelineObjective(graph, _devices(specs))).info["dp_value_s"]
    given = [MixedDPPlacer(order="given").place(PipelineObjective(graph, _devices(p))).info["dp_value_s"]
             for p in set(itertools.permutations(specs))]
    assert len(given) == 12 and best == pytest.approx(min(given), rel=1e-12) and max(given) > best


@pytest.mark.parametrize(("graph", "servers"), [("resnet18", 4), ("gnmt", 8), ("vgg16", 8), ("alexnet", 3),
                                                ("squeezenet1_0", 16)])
def test_dp_mixed_equals_the_homogeneous_dp_on_alike_devices(graph: str, servers: int) -> None:
    devices = _block("ramp32", servers)
    objective = bind_objective("pipeline", load_compute_graph(graph), devices)
    dp, mixed = DPPlacer().place(objective), MixedDPPlacer().place(objective)
    assert mixed.info["dp_value_s"] == pytest.approx(dp.info["dp_value_s"], rel=1e-12)
    assert objective.value(mixed.placement) == pytest.approx(objective.value(dp.placement), rel=1e-12)


@pytest.mark.parametrize("graph", ["bert24_training", "bert24_inference"])
def test_dp_mixed_equals_the_dp_with_a_cpu(graph: str) -> None:
    # dnn-partitioning device sets: a CPU (no communication) and alike accelerators.
    g = load_compute_graph(graph)
    objective = bind_objective("pipeline", g, DeviceSet.for_dnn_partitioning(g.meta))
    dp, mixed = DPPlacer().place(objective), MixedDPPlacer().place(objective)
    assert mixed.info["dp_value_s"] == pytest.approx(dp.info["dp_value_s"], rel=1e-9)
    assert objective.value(mixed.placement) == pytest.approx(objective.value(dp.placement), rel=1e-9)


def test_mixed_devices_where_the_dp_refuses() -> None:
    devices = _block("ramp32_hetero", 8, kinds=2)
    objective = bind_objective("pipeline", load_compute_graph("vgg16"), devices)
    with pytest.raises(ConfigError, match="one kind"):
        DPPlacer().place(objective)
    result = MixedDPPlacer().place(objective)
    counts = [sum(d.kind == k for d in devices.devices) for k in ("gpu", "gpu_half")]
    assert counts == [4, 4] and result.info["dp_device_states"] == 25  # (4 + 1)^2 counts, not 70 orders
    assert objective.value(result.placement) < objective.value(np.zeros(objective.graph.num_nodes, np.int64))


def _iteration(objective: PipelineObjective, placement, schedule: str, m: int = 4) -> float:
    st = stage_costs(objective, np.asarray(placement, dtype=np.int64))
    return iteration_time_s(st.forward_s, st.backward_s, schedule, m)


@pytest.mark.parametrize("case", range(16))
def test_minimise_iteration_picks_the_shortest_iteration_among_the_tables_cuts(case: int) -> None:
    # Brute force over every contiguous assignment: each candidate (a count of devices used per
    # group) is the least max load over the cuts using at most that many; the chosen iteration is
    # the least of the candidates', never longer than the max-load cut's, and no shorter than the
    # best contiguous cut's (the choice is a heuristic over cuts: it need not reach it).
    rng = np.random.default_rng(100 + case)
    n, d = int(rng.integers(2, 6)), int(rng.integers(2, 5))
    schedule = ("1f1b", "gpipe")[case % 2]
    kinds = [int(k) for k in rng.integers(0, 2 + case % 3 // 2, d)]
    objective = PipelineObjective(_graph(rng, n), _devices([KINDS[k] for k in kinds]))
    placer = MixedDPPlacer(minimise="iteration", schedule=schedule, micro_batches=4)
    result = placer.place(objective)
    max_load = MixedDPPlacer().place(objective)
    if max_load.info.get("feasible") is False:
        assert result.info["feasible"] is False
        return
    group = {k: q for q, k in enumerate(dict.fromkeys(kinds))}  # _device_groups: by first device
    fwd = [(int(a), int(b)) for a, b in objective.graph.edges.tolist() if a < n and b < n]
    cuts = []  # (devices used per group, max load, iteration) of every contiguous assignment
    for assign in itertools.product(range(d), repeat=n):
        cross = {(assign[a], assign[b]) for a, b in fwd if assign[a] != assign[b]}
        used = sorted(set(assign))
        if not any(all(p.index(x) < p.index(y) for x, y in cross) for p in itertools.permutations(used)):
            continue
        placement = np.array(list(assign) * 2, dtype=np.int64)
        counts = tuple(sum(group[kinds[u]] == q for u in used) for q in range(len(group)))
        cuts.append((counts, objective.value(placement), _iteration(objective, placement, schedule)))
    candidates = placer.candidates(objective)
    for counts, value, _ in candidates:
        fits = [c[1] for c in cuts if all(a <= b for a, b in zip(c[0], counts, strict=True))]
        assert value == pytest.approx(min(fits), rel=1e-12)
    chosen = result.info["iteration_s"]
    assert chosen == _iteration(objective, result.placement, schedule)
    assert chosen == min(_iteration(objective, p, schedule) for _, _, p in candidates)
    assert chosen <= _iteration(objective, max_load.placement, schedule)
    assert chosen >= min(c[2] for c in cuts) * (1 - 1e-12)
    assert result.info["dp_value_s"] == pytest.approx(objective.value(result.placement), rel=1e-12)


@pytest.mark.parametrize("case", range(40))
def test_iteration_lower_bound_holds(case: int) -> None:
    # The pruning's bound: never above the iteration, never below M x the largest stage load.
    rng = np.random.default_rng(300 + case)
    k, m = int(rng.integers(1, 12)), int(rng.integers(1, 12))
    f, b = rng.random(k) * rng.integers(1, 4, k), rng.random(k) * 3
    for schedule in ("1f1b", "gpipe"):
        bound = _iteration_lower_bound(f, b, schedule, m)
        assert m * (f + b).max() * (1 - 1e-12) <= bound <= iteration_time_s(f, b, schedule, m) * (1 + 1e-12)


def _full_scan(placer: MixedDPPlacer, objective: PipelineObjective):
    """minimise=iteration without pruning (as in b611135): price every distinct cut, most devices first."""
    _, values, read, _, _ = placer._table(objective)
    seen, chosen = set(), None
    for s in range(len(values) - 1, -1, -1):
        if not math.isfinite(values[s]) or read(s).tobytes() in seen:
            continue
        seen.add(read(s).tobytes())
        t = _iteration(objective, read(s), placer.schedule, placer.micro_batches)
        if chosen is None or t < chosen[1]:
            chosen = (read(s), t)
    return chosen, len(seen)


@pytest.mark.parametrize("case", range(24))
def test_pruned_least_iteration_equals_the_full_scan(case: int) -> None:
    # Bigger device sets than the brute force above (more candidates to prune), with and without
    # one output size per node (odd cases: the table's value bounds the load from above).
    rng = np.random.default_rng(200 + case)
    graph = _graph(rng, int(rng.integers(3, 8)))
    if case % 2:
        graph = replace(graph, edge_bytes=rng.integers(0, 5, graph.num_edges) * 1e3)
    objective = PipelineObjective(graph, _devices([KINDS[int(x)] for x in rng.integers(0, 3, int(rng.integers(2, 8)))]))
    placer = MixedDPPlacer(minimise="iteration", schedule=("1f1b", "gpipe")[case // 2 % 2],
                           micro_batches=int(rng.integers(1, 9)))
    result = placer.place(objective)
    full = _full_scan(placer, objective)
    if full[0] is None:
        return
    assert np.array_equal(result.placement, full[0][0])
    assert (result.info["iteration_s"], result.info["dp_candidates"]) == (full[0][1], full[1])


def test_minimise_iteration_on_one_device_and_the_shipped_defaults() -> None:
    objective = PipelineObjective(_graph(np.random.default_rng(3), 5), _devices([("gpu", 1.0, 1e3)]))
    it, ml = MixedDPPlacer(minimise="iteration").place(objective), MixedDPPlacer().place(objective)
    assert np.array_equal(it.placement, ml.placement) and it.info["dp_candidates"] == 1
    # pacml place minimises the objective (the max load); the shipped keys are the code's defaults.
    placer = instantiate_checked(method_node("dp_mixed"), "method")
    assert (placer.minimise, placer.schedule, placer.micro_batches) == ("max_load", "1f1b", 8)


@pytest.mark.parametrize("kwargs", [{"order": "any"}, {"max_cells": 0}, {"max_cells": 1.5}, {"max_states": 0},
                                    {"minimise": "time"}, {"schedule": "zb"}, {"micro_batches": 0}])
def test_dp_mixed_rejects_bad_options(kwargs) -> None:
    with pytest.raises(ConfigError, match="method."):
        MixedDPPlacer(**kwargs)


def test_dp_mixed_past_its_cap_falls_back() -> None:
    objective = PipelineObjective(_graph(np.random.default_rng(1), 5), _devices([KINDS[0], KINDS[1]]))
    with pytest.raises(ConfigError, match="method.max_cells"):
        MixedDPPlacer(max_cells=3, fallback=None).place(objective)
    result = MixedDPPlacer(max_cells=3, fallback="pipedream").place(objective)
    assert result.info["optimal"] is False and result.info["fallback"] == "pipedream"
    with pytest.raises(ConfigError, match="pipeline objective only"):
        MixedDPPlacer().place(bind_objective("step", objective.graph, objective.devices))


def test_pacml_place_runs_dp_mixed_on_mixed_devices(tmp_path) -> None:
    from simulator.place.cli import run_place
    from tests.simulator.place.test_cli import checked
    groups = ("devices.groups=[{kind: gpu, count: 2, speed: 1.0, memory_bytes: 8.0e10}, "
              "{kind: gpu_old, count: 2, speed: 0.5, memory_bytes: 4.0e10}]")  # gpu4's RAMP links
    summary = run_place(checked("graph=vgg16", "objective=pipeline", "method=dp_mixed", "devices=gpu4", groups,
                                "gantt=false"), tmp_path, {})
    assert summary["method"] == "dp_mixed" and summary["feasible"]
    assert summary["value_s"] < summary["single_device_value_s"]
