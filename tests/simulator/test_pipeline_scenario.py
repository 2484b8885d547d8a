"""scenario=pipeline: a job at degree k runs as a pipeline on its block of k servers, cut by the
stage placer (``sim.pipeline.stage_placer``) with the pipeline objective, timed by
``simulator.place.pipeline_schedule``; every degree's feasibility goes through the one table."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from simulator.allocation.op_placer import method_node
from simulator.allocation.pipeline import (
    STAGE_PLACERS,
    PipelineAllocator,
    input_ops,
    job_compute_graph,
    pipeline_cut,
    sequential_step_s,
)
from simulator.build import (
    SimKnobs,
    build_feasibility,
    build_policy,
    build_simulation,
    build_topology,
    build_workload,
)
from simulator.cli import preflight
from simulator.config import instantiate_checked, validate_config
from simulator.errors import ConfigError
from simulator.feasibility import Feasibility
from simulator.place.cli import COMMAND as PLACE_COMMAND
from simulator.place.cli import load_graph, prepare
from simulator.place.devices import ramp_block_devices
from simulator.place.dp import MixedDPPlacer
from simulator.place.objectives import PipelineObjective
from simulator.place.pipeline_schedule import (
    PipelineSettings,
    micro_batch_graph,
    pipeline_estimate,
    stage_costs,
    training_graph_bytes,
)
from simulator.policy import Decision
from simulator.topology import RampTopology
from tests.conftest import CONF_DIR
from workloads.compute_graph import GPU_KIND, ComputeGraph
from workloads.jobs import JobSpec

STEPS = 50
DEFAULT = PipelineSettings()


def compose_sim(*overrides: str):
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose("sim", list(overrides))


@pytest.fixture(scope="module")
def pipeline_cfg():
    return compose_sim("scenario=pipeline")


@pytest.fixture(scope="module")
def workload(pipeline_cfg):
    return build_workload(pipeline_cfg)


def _feas(cfg, **sim) -> Feasibility:
    node = {**dict(cfg.sim), **sim}
    node["pipeline"] = dict(node["pipeline"]) if node.get("pipeline") is not None else None
    return build_feasibility(build_topology(cfg), node)


def _job(graph, beta: float = 1.0) -> JobSpec:
    return JobSpec(job_id=0, arrival_time_s=0.0, graph=graph, beta=beta, num_training_steps=STEPS)


def _independent_iteration(graph, topology: RampTopology, servers, placer="pipedream",
                           settings: PipelineSettings = DEFAULT) -> tuple[float, object]:
    """The iteration time (seconds) of the placer's cut (a name or a placer) on ``servers``, rebuilt from the model."""
    m = settings.micro_batches
    g = ComputeGraph.from_training_graph(graph)
    if settings.input_loading == "prefetched":  # data loading on no stage
        on_gpu = np.array([not label.startswith("Input") for label in graph.forward.labels] * 2)
        g = replace(g, kind_time_s={g.reference_kind: g.kind_time_s[g.reference_kind] * on_gpu})
    g = micro_batch_graph(g, m)
    obj = PipelineObjective(g, ramp_block_devices(topology, servers))
    if isinstance(placer, str):
        placer = instantiate_checked(method_node(placer), "method")
    p = placer.place(obj, seed=0).placement
    params, acts = training_graph_bytes(graph)
    est = pipeline_estimate(obj, p, settings, parameter_bytes=params, activation_bytes=acts / m)
    return est.iteration_s, est


def test_the_scenario_builds_pipeline_jobs(pipeline_cfg) -> None:
    feas = _feas(pipeline_cfg)
    assert isinstance(feas.placer, PipelineAllocator)
    assert dict(pipeline_cfg.sim.pipeline) == {"schedule": "1f1b", "micro_batches": 8, "stage_placer": "pipedream",
                                               "state_factor": 4.0, "input_loading": "prefetched"}
    assert pipeline_cfg.workload.profile_time_unit_s == 1e-3 and pipeline_cfg.sim.placement == "block"


def test_degree_one_equals_the_sequential_jct(pipeline_cfg, workload) -> None:
    feas = _feas(pipeline_cfg)
    profiled = _feas(pipeline_cfg, pipeline={**dict(pipeline_cfg.sim.pipeline), "input_loading": "profiled"})
    physical = build_feasibility(build_topology(pipeline_cfg), compose_sim("scenario=physical").sim)
    for graph in workload.training_graphs:
        job = _job(graph)
        jct = feas.table(job, 0).jct_s(1)
        loading = sum(graph.forward.forward_time_s[i] for i in input_ops(graph))
        assert jct == pytest.approx(STEPS * (graph.step_time_s - loading), rel=1e-12)
        assert jct == STEPS * workload.sequential_steps[graph.name]  # the target's base
        assert feas.table(replace(job, sequential_step_s=workload.sequential_steps[graph.name]), 0).feasible(1)
        # Data loading on its stage, as profiled: the physical scenario's sequential JCT.
        jct = profiled.table(job, 0).jct_s(1)
        assert jct == pytest.approx(job.sequential_jct_s, rel=1e-12)
        assert jct == pytest.approx(physical.table(job, 0).jct_s(1), rel=1e-12)


def test_data_loading_is_on_no_stage_when_prefetched() -> None:
    cfg = compose_sim("scenario=pipeline", "workload=all")
    topo, graphs = build_topology(cfg), build_workload(cfg).training_graphs
    labels = {g.name: [g.forward.labels[i] for i in input_ops(g)] for g in graphs}
    assert labels["gnmt"] == ["Input0", "Input1", "Input2"]
    assert all(v == ["Input"] for k, v in labels.items() if k != "gnmt")
    placer = instantiate_checked(method_node("pipedream"), "method")
    servers = next(iter(_sweep_blocks(topo, 4).values()))
    shares = {}
    for graph in graphs:
        ops = input_ops(graph)
        loading = float(graph.forward.forward_time_s[ops].sum())
        shares[graph.name] = loading / graph.step_time_s
        for mode, on_stages in (("prefetched", graph.step_time_s - loading), ("profiled", graph.step_time_s)):
            settings = PipelineSettings(input_loading=mode)
            g = job_compute_graph(graph, settings, 4)
            assert (g.kind_time_s[g.reference_kind][ops] == 0).all() == (mode == "prefetched" or loading == 0)
            # The stages' compute over an iteration is the sequential step, with or without loading.
            est = pipeline_cut(graph, servers, topo, settings, placer).estimate
            assert 8 * est.stages.compute_s.sum() == pytest.approx(on_stages, rel=1e-12)
            # and degree 1 is exactly that step (the sequential JCT's base on the profiled GPU)
            assert sequential_step_s(graph, topo, settings) == pytest.approx(on_stages, rel=1e-12)
    assert shares["alexnet"] > 0.85 and shares["resnet18"] > 0.6 and shares["squeezenet1_0"] > 0.6
    with pytest.raises(ConfigError, match="input_loading.*prefetched or profiled"):
        PipelineSettings(input_loading="gpu")


@pytest.mark.parametrize("cluster", ["ramp32", "ramp32_hetero", "ramp32_3gen"])
def test_targets_are_on_the_fastest_single_server(cluster: str) -> None:
    # JCT target = beta x the sequential JCT on the cluster's fastest server kind: degree 1 on a
    # server of that kind (every other server busy) is exactly the sequential JCT.
    cfg = compose_sim("scenario=pipeline", f"cluster={cluster}")
    feas, workload = _feas(cfg), build_workload(cfg)
    topo = feas.topology
    fast = int(np.argmax(topo.server_speed))
    others = ((1 << topo.num_servers) - 1) & ~(1 << fast)
    jobs = list(itertools.islice(workload.jobs(0), 30))
    assert {j.model for j in jobs} == set(workload.by_name)
    for job in jobs:
        assert job.sequential_step_s == workload.sequential_steps[job.model]
        table = feas.table(replace(job, beta=1.0), others)
        assert table.placement(1).servers == (fast,)
        assert table.jct_s(1) == job.sequential_jct_s and table.feasible(1)
        speed = float(topo.server_speed.max())  # 2 on ramp32_3gen, else the profiled GPU's 1
        loading = job.graph.forward.forward_time_s[input_ops(job.graph)].sum()  # prefetched: on no stage
        assert job.sequential_jct_s == pytest.approx(STEPS * (job.graph.step_time_s - loading) / speed, rel=1e-12)
        assert job.max_jct_s == job.beta * job.sequential_jct_s


def test_the_fastest_server_is_one_that_holds_the_job() -> None:
    # The fast kind without the memory: the target is on the fastest kind that holds the job at
    # degree 1; if none does, on the fastest kind (the server a pipeline of it would beat).
    cfg = compose_sim("scenario=pipeline", "cluster=ramp32_3gen")
    graph = build_workload(compose_sim("scenario=pipeline")).by_name["vgg16"]
    settings = PipelineSettings(input_loading="profiled")
    steps = {}
    for new_gb, old_gb, mid_gb in ((80, 40, 80), (1, 40, 80), (1, 1, 1)):
        node = OmegaConf.to_container(cfg.cluster, resolve=True)
        for entry, gb in zip(node["server_kinds"], (new_gb, mid_gb, old_gb), strict=True):
            entry["memory_capacity_bytes"] = gb * 1e9
        steps[new_gb, old_gb, mid_gb] = sequential_step_s(graph, instantiate_checked(node, "cluster"), settings)
    one = graph.step_time_s
    assert steps[80, 40, 80] == pytest.approx(one / 2, rel=1e-12)
    assert steps[1, 40, 80] == pytest.approx(one, rel=1e-12)  # speed 2 lacks the memory: speed 1
    assert steps[1, 1, 1] == pytest.approx(one / 2, rel=1e-12)  # none holds it: the fastest


def test_other_scenarios_keep_the_profiled_target() -> None:
    workload = build_workload(compose_sim("scenario=physical", "cluster=ramp32_3gen"))
    assert workload.sequential_steps is None
    job = next(workload.jobs(0))
    assert job.sequential_step_s is None and job.sequential_jct_s == job.num_training_steps * job.graph.step_time_s


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_jct_is_steps_times_the_models_iteration_of_the_placers_cut(pipeline_cfg, workload, schedule) -> None:
    feas = _feas(pipeline_cfg, pipeline={**dict(pipeline_cfg.sim.pipeline), "schedule": schedule})
    topo = feas.topology
    occupied = 0b11  # servers 0 and 1 busy: blocks elsewhere
    seen_stages = set()
    for graph in workload.training_graphs:
        table = feas.table(_job(graph), occupied)
        for degree in (2, 4, 8):
            block = feas.placer.first_fit_block(degree, occupied)
            t_s, est = _independent_iteration(graph, topo, block.servers,
                                              settings=PipelineSettings(schedule, 8))
            assert est.feasible
            # The physical clock is 1 s per unit (profile_time_unit_s = 1e-3: PipeDream's ms).
            assert graph.forward.time_unit_s == 1.0
            assert table.jct_s(degree) == STEPS * t_s
            assert table.placement(degree).mask == block.mask  # the job holds its whole block
            seen_stages.add(est.stages.num_stages)
            # the servers the ops run on are the stages' servers
            ops = {s for servers in table.placement(degree).op_servers for s in servers}
            assert ops == {block.servers[d] for d in est.stages.devices}
    assert max(seen_stages) >= 4


def test_the_dp_placer_on_a_homogeneous_block(pipeline_cfg, workload) -> None:
    feas = _feas(pipeline_cfg, pipeline={**dict(pipeline_cfg.sim.pipeline), "stage_placer": "dp"})
    pipedream = _feas(pipeline_cfg)
    for graph in workload.training_graphs[:3]:
        block = feas.placer.first_fit_block(4, 0)
        t_s, _ = _independent_iteration(graph, feas.topology, block.servers, placer="dp")
        assert feas.table(_job(graph), 0).jct_s(4) == STEPS * t_s
        # the exact optimum of the max-load objective is no worse in its steady state
        dp_cut = feas.placer.jobs.cut(graph, block.servers).estimate
        pd_cut = pipedream.placer.jobs.cut(graph, block.servers).estimate
        assert dp_cut.max_load_s <= pd_cut.max_load_s * (1 + 1e-9)


def test_the_mixed_dp_on_a_mixed_block(workload) -> None:
    cfg = compose_sim("scenario=pipeline", "cluster=ramp32_hetero")
    feas = _feas(cfg, pipeline={**dict(cfg.sim.pipeline), "stage_placer": "dp_mixed"})
    pipedream = _feas(cfg)
    topo = feas.topology
    mixed = next(b for b in feas.placer.free_blocks(8, 0) if len({topo.server_kind[s] for s in b.servers}) == 2)
    # The scenario's dp_mixed returns the cut of the shortest iteration among its table's cuts
    # (minimise=iteration, the scenario's schedule and M), never longer than its max-load cut's.
    placer = feas.placer.jobs.placer
    assert (placer.minimise, placer.schedule, placer.micro_batches) == ("iteration", "1f1b", 8)
    shorter = 0
    for graph in workload.training_graphs:
        cut = feas.placer.jobs.cut(graph, mixed.servers)
        t_s, _ = _independent_iteration(graph, topo, mixed.servers, placer=MixedDPPlacer(minimise="iteration"))
        assert cut.feasible and feas.table(_job(graph), 0).jct_s(8, mixed) == STEPS * t_s
        max_load_s, est = _independent_iteration(graph, topo, mixed.servers, placer="dp_mixed")
        assert t_s <= max_load_s
        shorter += t_s < max_load_s
        pd_cut = pipedream.placer.jobs.cut(graph, mixed.servers).estimate
        assert est.max_load_s <= pd_cut.max_load_s * (1 + 1e-9)
    assert shorter


class _Recorder:
    """Min-feasible, recording what the feasibility table said of every degree it was shown."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[tuple[bool, ...], tuple[float | None, ...]]] = {}
        from simulator.policies.heuristics import MinFeasible
        self.rule = MinFeasible()

    def reset(self, seed: int) -> None:
        self.rule.reset(seed)

    def decide(self, job, state) -> Decision:
        t = state.feasibility
        self.seen[job.job_id] = (tuple(t.feasible(d) for d in t.degrees),
                                 tuple(t.jct_s(d) if t.feasible(d) else None for d in t.degrees))
        return self.rule.decide(job, state)


@pytest.mark.parametrize("cluster", ["ramp32", "ramp32_hetero", "ramp32_3gen"])
def test_the_feasibility_table_agrees_with_the_simulation(cluster) -> None:
    cfg = compose_sim("scenario=pipeline", f"cluster={cluster}", "beta=C", "horizon_s=300")
    policy = _Recorder()
    result = build_simulation(cfg, seed=1).run(policy)
    degrees = build_topology(cfg).degrees
    accepted = 0
    for r in result.records:
        feasible, jcts = policy.seen[r.job_id]
        if r.degree == 0:
            assert not any(feasible) and r.block_reason == "rejected"
            continue
        i = degrees.index(r.degree)
        assert feasible[i] and r.block_reason == "" and r.jct_s == jcts[i] <= r.max_jct_s * (1 + 1e-9)
        # min_feasible: the smallest feasible degree
        assert i == feasible.index(True)
        accepted += 1
    assert 0 < accepted < len(result.records)


def test_a_run_is_deterministic_per_seed() -> None:
    cfg = compose_sim("scenario=pipeline", "policy=random", "beta=B", "horizon_s=200")

    def rows(seed: int):
        res = build_simulation(cfg, seed=seed).run(build_policy(cfg))
        return [(r.job_id, r.degree, r.servers, r.outcome, r.block_reason, repr(r.jct_s)) for r in res.records]

    first = rows(3)
    assert rows(3) == first and rows(4) != first


def test_a_mixed_block_prices_each_stage_at_its_servers_speed(workload) -> None:
    cfg = compose_sim("scenario=pipeline", "cluster=ramp32_hetero")
    feas = _feas(cfg)
    topo = feas.topology
    # servers 0-3: group 0's fast racks; 4-7 its slow ones (speed 0.5)
    mixed = next(b for b in feas.placer.free_blocks(4, 0)
                 if {topo.server_kind[s] for s in b.servers} == {"gpu", "gpu_half"})
    fast = next(b for b in feas.placer.free_blocks(4, 0) if {topo.server_kind[s] for s in b.servers} == {"gpu"})
    graph = workload.by_name["vgg16"]
    cut = feas.placer.jobs.cut(graph, mixed.servers)
    st = cut.estimate.stages
    g = job_compute_graph(graph, DEFAULT, 4)
    ref = g.kind_time_s[g.reference_kind]
    for i, d in enumerate(st.devices):
        nodes = cut.node_device == d
        assert st.compute_s[i] == pytest.approx(ref[nodes].sum() / topo.server_speed[mixed.servers[d]], rel=1e-12)
    assert {topo.server_speed[mixed.servers[d]] for d in st.devices} == {1.0, 0.5}
    job = replace(_job(graph), sequential_step_s=workload.sequential_steps["vgg16"])  # fastest: speed 1
    table = feas.table(job, 0)
    t_mixed, _ = _independent_iteration(graph, topo, mixed.servers)
    t_fast, _ = _independent_iteration(graph, topo, fast.servers)
    assert table.jct_s(4, mixed) == STEPS * t_mixed and table.jct_s(4, fast) == STEPS * t_fast
    assert t_fast < t_mixed
    # One slow server: twice the sequential JCT; the table's degree 1 goes to a fast one.
    slow = next(b for b in feas.placer.free_blocks(1, 0) if topo.server_speed[b.servers[0]] == 0.5)
    assert table.jct_s(1, slow) == pytest.approx(2 * job.sequential_jct_s, rel=1e-12)
    assert table.feasible(1) and topo.server_speed[table.placement(1).servers[0]] == 1.0


def test_a_stage_over_its_servers_memory_blocks_the_degree(pipeline_cfg, workload) -> None:
    # A huge optimiser state: no stage fits, so no degree can be placed (blocked: no_placement).
    feas = _feas(pipeline_cfg, pipeline={**dict(pipeline_cfg.sim.pipeline), "state_factor": 1e6})
    job = _job(workload.by_name["vgg16"])
    table = feas.table(job, 0)
    assert all(table.placement(d) is None for d in table.degrees)
    cut = feas.placer.jobs.cut(job.graph, feas.placer.first_fit_block(4, 0).servers)
    assert not cut.feasible and "needs" in cut.reason and "bytes" in cut.reason
    cfg = compose_sim("scenario=pipeline", "policy=para_max", "horizon_s=20", "sim.pipeline.state_factor=1e6")
    res = build_simulation(cfg, seed=0).run(build_policy(cfg))
    reasons = {r.block_reason for r in res.records if r.model == "vgg16"}
    assert reasons == {"no_placement"}


def test_bad_settings_are_refused(pipeline_cfg) -> None:
    topo = build_topology(pipeline_cfg)
    sim = dict(pipeline_cfg.sim)
    with pytest.raises(ConfigError, match="sim.pipeline.stages"):
        build_feasibility(topo, {**sim, "pipeline": {"stages": 4}})
    with pytest.raises(ConfigError, match="sim.pipeline.schedule"):
        build_feasibility(topo, {**sim, "pipeline": {"schedule": "pipedream"}})
    for name in ("nope", "first_fit", "heft", "round_robin", "local_search", "m_etf"):
        # One line naming the allowed placers (whose cuts are always contiguous stages), not a list
        # of every conf/method/ name (first_fit is no stage placer).
        with pytest.raises(ConfigError, match=r"sim.pipeline.stage_placer.*must be one of pipedream, dp, dp_mixed, single "
                           rf"\(.*contiguous stages\), got '{name}'") as err:
            build_feasibility(topo, {**sim, "pipeline": {"stage_placer": name}})
        assert "\n" not in str(err.value) and "available" not in str(err.value)
    with pytest.raises(ConfigError, match="sim.split_ops"):
        build_feasibility(topo, {**sim, "split_ops": True, "pipeline": {}})
    # Without sim.pipeline, the physical scenario's model is untouched.
    assert not isinstance(build_feasibility(topo, SimKnobs(**{k: v for k, v in sim.items() if k != "pipeline"})).placer,
                          PipelineAllocator)


@pytest.mark.parametrize("name", ["alexnet", "resnet18", "gnmt"])
def test_stage_costs_are_the_place_commands_loads(pipeline_cfg, workload, name: str) -> None:
    # The scenario's per-stage loads are the pipeline objective's evaluation of the graph pacml
    # place prepares with the scenario's data-loading rule (input_loading=prefetched), cut into M
    # micro-batches. alexnet and resnet18 load data (their Input op takes time); gnmt's is 0 ms.
    feas = _feas(pipeline_cfg)
    graph = workload.by_name[name]
    block = feas.placer.first_fit_block(4, 0)
    cut = feas.placer.jobs.cut(graph, block.servers)
    devices = ramp_block_devices(feas.topology, block.servers)
    place_cfg = preflight(PLACE_COMMAND, [f"graph={name}", "objective=pipeline", "input_loading=prefetched"])
    placed = prepare(place_cfg).graph
    assert placed.kind_time_s.keys() == {GPU_KIND}
    # pacml place's graph is the scenario's before the loading rule (same profile, same clock).
    np.testing.assert_array_equal(load_graph(name).kind_time_s[GPU_KIND],
                                  ComputeGraph.from_training_graph(graph).kind_time_s[GPU_KIND])
    obj = PipelineObjective(micro_batch_graph(placed, 8), devices)
    ev = obj.evaluate(cut.node_device)
    st = stage_costs(obj, cut.node_device)
    assert ev.value_s == cut.estimate.max_load_s
    np.testing.assert_array_equal(st.load_s, [ev.compute_s[d] + ev.comm_s[d] for d in st.devices])
    # pacml place's default (profiled) charges the loading: the two disagree where it takes time.
    profiled = PipelineObjective(micro_batch_graph(load_graph(name), 8), devices).evaluate(cut.node_device)
    assert (profiled.value_s > ev.value_s) == (name != "gnmt")


def test_a_placer_that_refuses_a_block_names_the_stage_placer(workload) -> None:
    cfg = compose_sim("scenario=pipeline", "cluster=ramp32_hetero", "sim.pipeline.stage_placer=dp")
    feas = _feas(cfg)
    mixed = next(b for b in feas.placer.free_blocks(2, 0) if len({feas.topology.server_kind[s] for s in b.servers}) == 2)
    with pytest.raises(ConfigError, match=r"sim.pipeline.stage_placer.*'dp' on a block of gpu\+gpu_half"):
        feas.table(_job(workload.by_name["vgg16"]), 0).jct_s(2, mixed)


def _sweep_blocks(topo: RampTopology, degree: int) -> dict[tuple[int, ...], tuple[int, ...]]:
    """One block of ``degree`` servers per distinct order of server kinds (the cut's cache key)."""
    kinds = topo.server_kind_index.tolist()
    out: dict[tuple[int, ...], tuple[int, ...]] = {}
    for block in topo.blocks(degree):
        out.setdefault(tuple(kinds[s] for s in block.servers), block.servers)
    return out


@pytest.mark.parametrize("placer", ["pipedream", "single"])
def test_the_allowed_stage_placers_always_cut_a_pipeline(placer: str) -> None:
    # Every shipped graph at degrees 2, 4, 8 on ramp32: the allowed placers' cuts are contiguous
    # stages (a placement that is no pipeline would block the job silently). The full matrix
    # (dp too, ramp32_hetero): test_the_allowed_stage_placers_cut_a_pipeline_on_every_cluster.
    cfg = compose_sim("scenario=pipeline", "workload=all")
    topo, graphs = build_topology(cfg), build_workload(cfg).training_graphs
    jobs_placer = instantiate_checked(method_node(placer), "method")
    for k in (2, 4, 8):
        for servers in _sweep_blocks(topo, k).values():
            for graph in graphs:
                cut = pipeline_cut(graph, servers, topo, DEFAULT, jobs_placer)
                assert cut.estimate is not None, (graph.name, k, cut.reason)


@pytest.mark.slow
@pytest.mark.parametrize("cluster", ["ramp32", "ramp32_hetero", "ramp32_3gen"])
def test_the_allowed_stage_placers_cut_a_pipeline_on_every_cluster(cluster: str) -> None:
    cfg = compose_sim("scenario=pipeline", "workload=all", f"cluster={cluster}")
    topo, graphs = build_topology(cfg), build_workload(cfg).training_graphs
    for name in STAGE_PLACERS:
        placer = instantiate_checked(method_node(name), "method")
        for k in (2, 4, 8):
            for kinds, servers in _sweep_blocks(topo, k).items():
                if name == "dp" and len(set(kinds)) > 1:
                    continue  # the DP refuses a block of two kinds (test_a_placer_that_refuses_...)
                for graph in graphs:
                    if name == "dp_mixed" and graph.name in ("inception_v3", "nasnetamobile"):
                        continue  # past the state cap: pipedream's cut, checked above (saves a minute)
                    cut = pipeline_cut(graph, servers, topo, DEFAULT, placer)
                    assert cut.estimate is not None, (name, graph.name, k, cut.reason)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_the_placer_sees_the_pipelines_memory(schedule: str) -> None:
    # One memory model: the graph the stage placer sees carries state_factor x P + n x A / M per
    # forward op (n: stage 0's micro-batches in flight), so a cut the placer finds within memory is
    # never refused for memory, on every shipped graph at degrees 2, 4, 8 on ramp32, and at state
    # factors where some degrees fit and some do not.
    cfg = compose_sim("scenario=pipeline", "workload=all")
    topo, graphs = build_topology(cfg), build_workload(cfg).training_graphs
    placer = instantiate_checked(method_node("pipedream"), "method")
    outcomes = set()
    for factor in (4.0, 2_000.0, 20_000.0):
        settings = PipelineSettings(schedule=schedule, micro_batches=8, state_factor=factor)
        for k in (2, 4, 8):
            servers = next(iter(_sweep_blocks(topo, k).values()))
            for graph in graphs:
                g = job_compute_graph(graph, settings, k)
                params, acts = training_graph_bytes(graph)
                n = 8 if schedule == "gpipe" else min(k, 8)
                np.testing.assert_allclose(g.memory_bytes, factor * params + n * acts / 8, rtol=1e-12)
                cut = pipeline_cut(graph, servers, topo, settings, placer)
                placer_fits = PipelineObjective(g, ramp_block_devices(topo, servers)).feasible(cut.node_device)
                if placer_fits:
                    assert cut.feasible, (factor, graph.name, k, cut.reason)
                else:  # the placer found no cut within memory: refused, saying so
                    assert not cut.feasible and "needs" in cut.reason, (factor, graph.name, k, cut.reason)
                outcomes.add(placer_fits)
    assert outcomes == {True, False}  # not vacuous


@pytest.mark.parametrize(("override", "field", "message"), [
    ("sim.pipeline.stage_placer=heft", "sim.pipeline.stage_placer", "must be one of pipedream, dp, dp_mixed, single"),
    ("sim.pipeline.micro_batches=0", "sim.pipeline.micro_batches", "integer >= 1"),
    ("+sim.pipeline.stages=3", "sim.pipeline.stages", "unknown key"),
    ("sim.pipeline.schedule=x", "sim.pipeline.schedule", "unknown schedule"),
    ("sim.pipeline.state_factor=-1", "sim.pipeline.state_factor", ">= 0"),
])
def test_the_config_check_uses_the_settings_dataclass(override: str, field: str, message: str) -> None:
    # sim.pipeline's keys, defaults and checks live in PipelineJobSettings only; the config check
    # (before any work) asks it, so a bad stage placer is refused before the run starts.
    cfg = compose_sim("scenario=pipeline", override)
    with pytest.raises(ConfigError, match=rf"field '{field}': .*{message}"):
        validate_config(cfg)
    validate_config(compose_sim("scenario=pipeline"))
