"""The pipeline-parallel iteration-time model (simulator/place/pipeline_schedule.py): hand-computed
2- and 3-stage cases, the closed forms against an event-level simulation of the micro-batch
schedules, degree 1 = the sequential time, and the stage costs = ``pacml place objective=pipeline``'s
per-device loads on a RAMP block."""

from __future__ import annotations

import heapq
import json
from pathlib import Path

import numpy as np
import pytest

from simulator.cli import preflight
from simulator.errors import ConfigError
from simulator.place.cli import COMMAND, build_devices, load_graph, run_place
from simulator.place.devices import Device, DeviceSet
from simulator.place.objectives import PlacementError, bind_objective
from simulator.place.pipeline_schedule import (
    PipelineSettings,
    in_flight,
    iteration_time_s,
    micro_batch_graph,
    pipeline_estimate,
    schedule_time_s,
    stage_costs,
    stage_tasks,
    training_graph_bytes,
)
from workloads.compute_graph import ComputeGraph
from workloads.graph import OpGraph, TrainingGraph

REL = 1e-9


# ---------------------------------------------------------------------- the event-level simulation
def event_simulation(f, b, schedule: str, micro_batches: int, link_fwd=None, link_bwd=None) -> float:
    """Discrete-event simulation of one iteration: each stage is a machine running its tasks in the
    schedule's order (``stage_tasks``), starting a task as soon as the machine is idle and the task's
    input has arrived. With ``link_fwd`` / ``link_bwd`` (per boundary ``j``, stage ``j`` <-> ``j+1``)
    each direction of each boundary is a machine of its own (a full-duplex link, FIFO), so transfers
    overlap compute; without, a transfer is already inside the stages' times (the model's assumption).
    Returns the time the last task ends."""
    k, m = len(f), micro_batches
    lf = np.zeros(max(k - 1, 0)) if link_fwd is None else np.asarray(link_fwd, float)
    lb = np.zeros(max(k - 1, 0)) if link_bwd is None else np.asarray(link_bwd, float)
    queue = [list(stage_tasks(schedule, k, m, i)) for i in range(k)]
    arrived: set[tuple[str, int, int]] = set()   # inputs on hand: (pass, stage, micro-batch)
    busy = [False] * k
    link_free = {}
    events: list[tuple[float, int, str, tuple]] = []
    seq = 0
    now = end = 0.0

    def push(t, kind, data):
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, data))
        seq += 1

    def send(t, direction, j, mb, to_stage):
        """A transfer over boundary j; arrives at ``to_stage``."""
        c = (lf if direction == "F" else lb)[j]
        start = max(t, link_free.get((direction, j), 0.0))
        link_free[(direction, j)] = start + c
        push(start + c, "arrive", (direction, to_stage, mb))

    for j in range(m):
        arrived.add(("F", 0, j))

    def try_start(i, t):
        if busy[i] or not queue[i]:
            return
        kind, j = queue[i][0]
        need = ("F", i, j) if kind == "F" else (("B", i, j) if i < k - 1 else ("Bself", i, j))
        if need not in arrived:
            return
        queue[i].pop(0)
        busy[i] = True
        push(t + (f[i] if kind == "F" else b[i]), "done", (kind, i, j))

    for i in range(k):
        try_start(i, 0.0)
    while events:
        now, _, kind, data = heapq.heappop(events)
        if kind == "done":
            pas, i, j = data
            busy[i] = False
            end = max(end, now)
            if pas == "F":
                if i < k - 1:
                    send(now, "F", i, j, i + 1)
                else:
                    arrived.add(("Bself", i, j))
            elif i > 0:
                send(now, "B", i - 1, j, i - 1)
            try_start(i, now)
        else:
            pas, i, j = data
            arrived.add((pas, i, j))
            try_start(i, now)
    assert not any(queue), "the simulation left tasks unrun"
    return end


def gpipe_flow_shop(f, b, cf, cb, m: int) -> float:
    """GPipe with links as machines of their own (the flow shop with each boundary's link a machine):
    forward = sum f + sum c + (M-1) max(f, c), the same backward."""
    fw, bw = np.concatenate([f, cf]), np.concatenate([b, cb])
    return float(fw.sum() + (m - 1) * fw.max() + bw.sum() + (m - 1) * bw.max())


# ---------------------------------------------------------------------- small graphs
def chain_graph(fwd, bwd, act, params=None) -> tuple[TrainingGraph, ComputeGraph]:
    n = len(fwd)
    op = OpGraph(name="chain", op_ids=tuple(f"op{i}" for i in range(n)), labels=tuple(f"op{i}" for i in range(n)),
                 forward_time_s=np.asarray(fwd, float), backward_time_s=np.asarray(bwd, float),
                 activation_bytes=np.asarray(act, float),
                 parameter_bytes=np.asarray(params if params is not None else np.zeros(n), float),
                 edges=np.array([[i, i + 1] for i in range(n - 1)], dtype=np.int64).reshape(-1, 2),
                 loss_index=n - 1)
    tg = TrainingGraph(op)
    return tg, ComputeGraph.from_training_graph(tg)


def mesh(k: int, *, bandwidth=1e9, latency=0.5, memory=np.inf) -> DeviceSet:
    return DeviceSet.full_mesh("mesh", [Device(f"d{i}", "gpu", 1.0, memory) for i in range(k)],
                               bandwidth_Bps=bandwidth, latency_s=latency)


def placement_of(op_stage, n) -> np.ndarray:
    s = np.asarray(op_stage, dtype=np.int64)
    assert len(s) == n
    return np.concatenate([s, s])


# ---------------------------------------------------------------------- hand-computed cases
def test_two_stages_by_hand() -> None:
    # Ops f = (1, 2, 3, 1) s, b = (2, 4, 6, 2) s; ops 0-1 on d0, 2-3 on d1. The one cut edge carries
    # op 1's 1e9-byte activation forward and its gradient back: 0.5 s + 1e9 B / 1e9 B/s = 1.5 s,
    # paid by the sender and the receiver (the max-load model).
    tg, g = chain_graph([1, 2, 3, 1], [2, 4, 6, 2], [0, 1e9, 0, 0], params=[10, 20, 30, 40])
    # 3e9-byte devices: the objective's own memory check (node memory: 2 x (1e9 + 30) on d0) passes.
    obj = bind_objective("pipeline", g, mesh(2, memory=3e9))
    p = placement_of([0, 0, 1, 1], 4)
    st = stage_costs(obj, p, parameter_bytes=training_graph_bytes(tg)[0])
    # f0 = 1 + 2 + 1.5 = 4.5, b0 = 2 + 4 + 1.5 = 7.5; f1 = 3 + 1 + 1.5 = 5.5, b1 = 6 + 2 + 1.5 = 9.5.
    np.testing.assert_allclose(st.forward_s, [4.5, 5.5], rtol=1e-15)
    np.testing.assert_allclose(st.backward_s, [7.5, 9.5], rtol=1e-15)
    np.testing.assert_allclose(st.load_s, [12.0, 15.0], rtol=1e-15)
    assert obj.value(p) == 15.0
    # GPipe, M = 4: (4.5 + 5.5) + 3 x 5.5 + (7.5 + 9.5) + 3 x 9.5 = 10 + 16.5 + 17 + 28.5 = 72
    # (not (M + k - 1) x max load = 5 x 15 = 75: the stages are unbalanced).
    assert iteration_time_s(st.forward_s, st.backward_s, "gpipe", 4) == pytest.approx(72.0, rel=REL)
    # 1F1B, M = 4: d0 runs F0 | F1 B0 | F2 B1 | F3 B2 | B3, d1 runs F0 B0 F1 B1 F2 B2 F3 B3:
    # d0 F0 [0, 4.5]  d1 F0 [4.5, 10] B0 [10, 19.5]   d0 F1 [4.5, 9] B0 [19.5, 27]
    # d1 F1 [19.5, 25] B1 [25, 34.5]                   d0 F2 [27, 31.5] B1 [34.5, 42]
    # d1 F2 [34.5, 40] B2 [40, 49.5]                   d0 F3 [42, 46.5] B2 [49.5, 57]
    # d1 F3 [49.5, 55] B3 [55, 64.5]                   d0 B3 [64.5, 72]  => 72 = 4.5 + 4 x 15 + 7.5
    assert iteration_time_s(st.forward_s, st.backward_s, "1f1b", 4) == pytest.approx(72.0, rel=REL)
    for schedule in ("gpipe", "1f1b"):
        assert event_simulation(st.forward_s, st.backward_s, schedule, 4) == pytest.approx(72.0, rel=REL)
    # Memory, state factor 4: d0 4 x (10 + 20) = 120 + in flight x op 0-1 activations (1e9 B):
    # GPipe 4 x 1e9; 1F1B min(2 - 0, 4) = 2 on d0, min(2 - 1, 4) = 1 on d1 (activations 0);
    # d1: 4 x (30 + 40) = 280. 1F1B fits the 3e9-byte devices, GPipe does not.
    params, act = training_graph_bytes(tg)
    est = pipeline_estimate(obj, p, PipelineSettings("1f1b", 4), parameter_bytes=params, activation_bytes=act)
    np.testing.assert_allclose(est.memory_bytes, [120 + 2e9, 280])
    assert est.feasible and est.reason == ""
    gp = pipeline_estimate(obj, p, PipelineSettings("gpipe", 4), parameter_bytes=params, activation_bytes=act)
    np.testing.assert_allclose(gp.memory_bytes, [120 + 4e9, 280])
    assert not gp.feasible and "stage 0 on device 'd0' needs 4,000,000,120 bytes" in gp.reason


def test_three_balanced_stages_by_hand() -> None:
    # One op per stage, f = (2, 1, 2), b = (4, 3, 4); each cut edge costs t = 0.5 + 5e8 / 1e9 = 1 s
    # each way. Stage 1 has two cuts: f1 = 1 + 1 (receive) + 1 (send) = 3, b1 = 3 + 2 = 5;
    # stages 0 and 2 have one: f = 2 + 1 = 3, b = 4 + 1 = 5. Balanced: L = 8 on every stage.
    tg, g = chain_graph([2, 1, 2], [4, 3, 4], [5e8, 5e8, 0])
    obj = bind_objective("pipeline", g, mesh(3))
    p = placement_of([0, 1, 2], 3)
    st = stage_costs(obj, p)
    np.testing.assert_allclose(st.forward_s, [3, 3, 3], rtol=1e-15)
    np.testing.assert_allclose(st.backward_s, [5, 5, 5], rtol=1e-15)
    # M = 3: (M + k - 1) x (f + b) = 5 x 8 = 40 for both schedules (the same bubble).
    for schedule in ("gpipe", "1f1b"):
        t = iteration_time_s(st.forward_s, st.backward_s, schedule, 3)
        assert t == pytest.approx(40.0, rel=REL) == (3 + 3 - 1) * obj.value(p)
        assert event_simulation(st.forward_s, st.backward_s, schedule, 3) == pytest.approx(40.0, rel=REL)
    est = pipeline_estimate(obj, p, PipelineSettings("gpipe", 3))
    # Bubble: 1 - M sum L / (k T) = 1 - 3 x 24 / (3 x 40) = 0.4 = (k - 1) / (M + k - 1) = 2 / 5.
    assert est.bubble_fraction == pytest.approx(0.4, rel=REL)
    # One device: M x (compute sum) = 3 x (5 + 11) = 48, no communication.
    one = stage_costs(obj, np.zeros(g.num_nodes, dtype=np.int64))
    for schedule in ("gpipe", "1f1b"):
        assert iteration_time_s(one.forward_s, one.backward_s, schedule, 3) == pytest.approx(48.0, rel=REL)


def test_three_unbalanced_stages_gpipe_by_hand() -> None:
    # No bytes on the cuts (transfers cost 0): f = (1, 3, 2), b = (2, 2, 5), M = 2.
    # GPipe: (1 + 3 + 2) + 1 x 3 + (2 + 2 + 5) + 1 x 5 = 6 + 3 + 9 + 5 = 23.
    tg, g = chain_graph([1, 3, 2], [2, 2, 5], [0, 0, 0])
    obj = bind_objective("pipeline", g, mesh(3))
    st = stage_costs(obj, placement_of([0, 1, 2], 3))
    assert iteration_time_s(st.forward_s, st.backward_s, "gpipe", 2) == pytest.approx(23.0, rel=REL)
    assert event_simulation(st.forward_s, st.backward_s, "gpipe", 2) == pytest.approx(23.0, rel=REL)
    # 1F1B: d0 F0 F1 | B0 B1 (warm-up 2 = M), d1 F0 | F1 B0 | B1, d2 F0 B0 F1 B1:
    # d0 F0 [0, 1] F1 [1, 2]; d1 F0 [1, 4]; d2 F0 [4, 6] B0 [6, 11]; d1 F1 [4, 7] B0 [11, 13];
    # d2 F1 [11, 13] B1 [13, 18]; d1 B1 [18, 20]; d0 B0 [13, 15] B1 [20, 22] => 22.
    assert iteration_time_s(st.forward_s, st.backward_s, "1f1b", 2) == pytest.approx(22.0, rel=REL)
    assert event_simulation(st.forward_s, st.backward_s, "1f1b", 2) == pytest.approx(22.0, rel=REL)


# ---------------------------------------------------------------------- closed form vs events
def random_chain(rng, n):
    fwd, bwd = rng.uniform(0.1, 2.0, n), rng.uniform(0.1, 4.0, n)
    act = rng.uniform(0, 2e8, n) * (rng.random(n) < 0.8)
    return chain_graph(fwd, bwd, act, params=rng.uniform(0, 1e6, n))


def random_split(rng, n, k):
    cuts = np.sort(rng.choice(np.arange(1, n), size=k - 1, replace=False))
    return np.searchsorted(cuts, np.arange(n), side="right")


@pytest.mark.parametrize("case", range(24))
def test_model_equals_the_event_simulation_on_random_graphs(case: int) -> None:
    rng = np.random.default_rng(1000 + case)
    n = int(rng.integers(4, 10))
    k = int(rng.integers(1, min(n, 5) + 1))
    m = int(rng.integers(1, 9))
    _, g = random_chain(rng, n)
    obj = bind_objective("pipeline", g, mesh(k, bandwidth=rng.uniform(1e8, 1e10), latency=rng.uniform(0, 0.05)))
    p = placement_of(random_split(rng, n, k) if k > 1 else np.zeros(n, np.int64), n)
    st = stage_costs(obj, p)
    assert st.devices == tuple(range(k))
    np.testing.assert_allclose(st.forward_s + st.backward_s, st.load_s, rtol=1e-12)
    assert st.load_s.max() == obj.value(p)
    for schedule in ("gpipe", "1f1b"):
        t = iteration_time_s(st.forward_s, st.backward_s, schedule, m)
        assert t == pytest.approx(event_simulation(st.forward_s, st.backward_s, schedule, m), rel=REL)
        assert t == pytest.approx(schedule_time_s(st.forward_s, st.backward_s, schedule, m), rel=REL)
        # The objective bounds the iteration: M max L <= T <= (M + k - 1) max(f) + ... (1F1B: max L).
        assert m * st.load_s.max() * (1 - 1e-12) <= t
        bound = (m + k - 1) * (st.load_s.max() if schedule == "1f1b" else st.forward_s.max() + st.backward_s.max())
        assert t <= bound * (1 + 1e-12)


@pytest.mark.parametrize("case", range(24))
def test_balanced_stages_give_m_plus_k_minus_1_times_the_objective(case: int) -> None:
    rng = np.random.default_rng(2000 + case)
    k, m = int(rng.integers(1, 7)), int(rng.integers(1, 12))
    f, b = np.full(k, rng.uniform(0.1, 3)), np.full(k, rng.uniform(0.1, 3))
    for schedule in ("gpipe", "1f1b"):
        want = (m + k - 1) * (f[0] + b[0])
        assert iteration_time_s(f, b, schedule, m) == pytest.approx(want, rel=REL)
        assert event_simulation(f, b, schedule, m) == pytest.approx(want, rel=REL)


def test_unbalanced_1f1b_has_no_closed_form_in_load_alone() -> None:
    # The Alpa/AMP/Metis form sum L + (M - 1) max L overstates here: stage 0 waits for the round trip.
    # f = (0.6, 0.1), b = (0.8, 0.8), M = 2: d0 F0 [0, .6] F1 [.6, 1.2]; d1 F0 [.6, .7] B0 [.7, 1.5]
    # F1 [1.5, 1.6] B1 [1.6, 2.4]; d0 B0 [1.5, 2.3] B1 [2.4, 3.2] => 3.2; the form: (1.4 + 0.9) + 1 x 1.4 = 3.7.
    f, b = np.array([0.6, 0.1]), np.array([0.8, 0.8])
    t = iteration_time_s(f, b, "1f1b", 2)
    assert t == pytest.approx(3.2, rel=REL) == event_simulation(f, b, "1f1b", 2)
    alpa = (f + b).sum() + (2 - 1) * (f + b).max()
    assert alpa == pytest.approx(3.7) and t < alpa


# ---------------------------------------------------------------------- where a finer model differs
def test_links_as_machines_differ_from_the_folded_model() -> None:
    # Folded (the model): a 1.5 s transfer is part of both stages' loads; links as machines of their
    # own (overlapping compute): the GPipe flow shop with links as machines, which the event simulation
    # reproduces exactly. Compute f = (3, 4), b = (6, 8), one boundary c = 1.5 each way, M = 4:
    # folded: f = (4.5, 5.5), b = (7.5, 9.5) -> 72 (test_two_stages_by_hand);
    # links: fwd (3 + 1.5 + 4) + 3 x 4 = 20.5, bwd (6 + 1.5 + 8) + 3 x 8 = 39.5 -> 60.
    f, b, c = np.array([3.0, 4.0]), np.array([6.0, 8.0]), np.array([1.5])
    assert gpipe_flow_shop(f, b, c, c, 4) == pytest.approx(60.0, rel=REL)
    assert event_simulation(f, b, "gpipe", 4, c, c) == pytest.approx(60.0, rel=REL)
    assert iteration_time_s(f + [1.5, 1.5], b + [1.5, 1.5], "gpipe", 4) == pytest.approx(72.0, rel=REL)
    rng = np.random.default_rng(7)
    for _ in range(20):
        k, m = int(rng.integers(2, 6)), int(rng.integers(1, 9))
        f, b = rng.uniform(0.1, 2, k), rng.uniform(0.1, 4, k)
        cf, cb = rng.uniform(0, 1.5, k - 1), rng.uniform(0, 1.5, k - 1)
        assert event_simulation(f, b, "gpipe", m, cf, cb) == pytest.approx(gpipe_flow_shop(f, b, cf, cb, m), rel=REL)


# ---------------------------------------------------------------------- degree 1 = sequential
@pytest.mark.parametrize("m", [1, 4, 7])
def test_degree_one_is_the_sequential_time(m: int) -> None:
    rng = np.random.default_rng(m)
    tg, g = random_chain(rng, 6)
    obj = bind_objective("pipeline", g, mesh(3))
    one = np.zeros(g.num_nodes, dtype=np.int64)
    for schedule in ("gpipe", "1f1b"):
        est = pipeline_estimate(obj, one, PipelineSettings(schedule, m))
        assert est.stages.num_stages == 1
        assert est.iteration_s == pytest.approx(m * obj.value(one), rel=1e-12)
        assert est.iteration_s == pytest.approx(m * tg.step_time_s, rel=1e-12)
        # The job's mini-batch cut into M micro-batches: one device takes exactly the step time,
        # i.e. num_training_steps x the iteration = JobSpec.sequential_jct_s.
        small = bind_objective("pipeline", micro_batch_graph(g, m), mesh(3))
        t = pipeline_estimate(small, one, PipelineSettings(schedule, m)).iteration_s
        assert t == pytest.approx(tg.step_time_s, rel=1e-12)


# ---------------------------------------------------------------------- the place command's loads
def test_pacml_place_pipeline_on_a_ramp_block_gives_the_stage_costs(tmp_path: Path) -> None:
    args = ["graph=resnet18", "devices=ramp_block", "devices.servers=4", "objective=pipeline",
            "method=pipedream", "gantt=false"]
    cfg = preflight(COMMAND, args)
    summary = run_place(cfg, tmp_path, {})
    placed = json.loads((tmp_path / "placement.json").read_text())
    g = load_graph("resnet18")
    devices = build_devices(cfg.devices, g)
    names = list(devices.names)
    p = np.array([names.index(placed["placement"][op]) for op in g.node_names], dtype=np.int64)
    obj = bind_objective("pipeline", g, devices)
    st = stage_costs(obj, p)
    assert st.num_stages >= 2
    for i, d in enumerate(st.devices):
        row = summary["per_device"][names[d]]
        assert st.load_s[i] == row["compute_s"] + row["comm_s"]
        assert st.compute_s[i] == row["compute_s"] and st.comm_s[i] == row["comm_s"]
    assert st.load_s.max() == summary["value_s"]
    est = pipeline_estimate(obj, p, PipelineSettings("1f1b", 8))
    assert est.max_load_s == summary["value_s"]
    assert est.iteration_s == pytest.approx(event_simulation(st.forward_s, st.backward_s, "1f1b", 8), rel=REL)


# ---------------------------------------------------------------------- settings and refusals
def test_settings_are_checked() -> None:
    assert PipelineSettings.from_config({"schedule": "gpipe", "micro_batches": 16}) == PipelineSettings("gpipe", 16)
    with pytest.raises(ConfigError, match="pipeline.schedule"):
        PipelineSettings("pipedream")
    with pytest.raises(ConfigError, match="pipeline.micro_batches"):
        PipelineSettings("1f1b", 0)
    with pytest.raises(ConfigError, match="pipeline.stages"):
        PipelineSettings.from_config({"stages": 4})
    np.testing.assert_array_equal(in_flight("1f1b", 4, 3), [3, 3, 2, 1])
    np.testing.assert_array_equal(in_flight("gpipe", 4, 3), [3, 3, 3, 3])


def test_a_split_that_is_not_contiguous_is_refused() -> None:
    _, g = chain_graph([1, 1, 1], [1, 1, 1], [1, 1, 0])
    obj = bind_objective("pipeline", g, mesh(2))
    with pytest.raises(PlacementError, match="not a pipeline"):
        stage_costs(obj, placement_of([0, 1, 0], 3))
    backward_only = placement_of([0, 0, 0], 3)
    backward_only[4] = 1
    with pytest.raises(PlacementError, match="backward nodes only"):
        stage_costs(obj, backward_only)
    # An unused device is no stage; stages follow the forward edges, not device indices.
    st = stage_costs(bind_objective("pipeline", g, mesh(3)), placement_of([2, 2, 0], 3))
    assert st.devices == (2, 0)


def test_a_mixed_generation_block_prices_each_stage_on_its_own_kind() -> None:
    # ramp32_hetero's 4-server block of 2 gpu (speed 1) + 2 gpu_half (speed 0.5), the placer
    # pacml place runs for method=pipedream; the stage costs are the objective's evaluation.
    from simulator.place.cli import cluster_block_device_sets
    from simulator.place.heuristics import PipeDreamPlacer

    devices = dict(cluster_block_device_sets("ramp32_hetero"))["ramp32_hetero/4:gpux2+gpu_halfx2"]
    g = load_graph("resnet18")
    obj = bind_objective("pipeline", g, devices)
    pipedream = PipeDreamPlacer(use_cpu=False).place(obj, seed=0).placement
    # and four equal runs of forward ops in topological order, one per server
    fwd = [v for v in g.topological_order if not g.is_backward[v]]
    rank = np.empty(g.num_groups, dtype=np.int64)
    rank[g.group[fwd]] = np.arange(len(fwd))
    equal = (rank * 4 // len(fwd))[g.group]
    for p in (pipedream, equal):
        ev = obj.evaluate(p)
        st = stage_costs(obj, p)
        for i, d in enumerate(st.devices):
            assert st.load_s[i] == ev.compute_s[d] + ev.comm_s[d]
            ref = g.kind_time_s[g.reference_kind][p == d].sum()
            assert st.compute_s[i] == pytest.approx(ref / devices.devices[d].speed, rel=1e-12)
    assert st.devices == (0, 1, 2, 3) and {dev.kind for dev in devices.devices} == {"gpu", "gpu_half"}
    # One slow server: M x the graph's time at half speed.
    slow = next(d for d, dev in enumerate(devices.devices) if dev.speed == 0.5)
    one = np.full(g.num_nodes, slow, dtype=np.int64)
    t = pipeline_estimate(obj, one, PipelineSettings("1f1b", 4)).iteration_s
    assert t == pytest.approx(4 * g.kind_time_s[g.reference_kind].sum() / 0.5, rel=1e-12)


def test_a_dnn_partitioning_file_with_its_own_devices() -> None:
    # bert24_training (Tarnawski et al.'s input): its backward edges run forward like its forward
    # edges; the stages follow the forward edges. PipeDream's split on the file's accelerators.
    from omegaconf import OmegaConf

    from simulator.place.heuristics import PipeDreamPlacer

    g = load_graph("bert24_training")
    obj = bind_objective("pipeline", g, build_devices(OmegaConf.create({"source": "auto"}), g))
    p = PipeDreamPlacer(use_cpu=False).place(obj, seed=0).placement
    st = stage_costs(obj, p)
    assert st.devices == (1, 2, 3, 4, 5, 6)
    ev = obj.evaluate(p)
    np.testing.assert_array_equal(st.load_s, (ev.compute_s + ev.comm_s)[list(st.devices)])
    np.testing.assert_allclose(st.forward_s + st.backward_s, st.load_s, rtol=1e-12)
    for schedule in ("gpipe", "1f1b"):
        t = iteration_time_s(st.forward_s, st.backward_s, schedule, 12)
        assert t == pytest.approx(event_simulation(st.forward_s, st.backward_s, schedule, 12), rel=REL)
