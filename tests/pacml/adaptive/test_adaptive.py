"""The adaptive agent (pacml/adaptive/): rules, condition features, the selector, training."""

from __future__ import annotations

import itertools
import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pacml.adaptive.conditions import sample_condition
from pacml.adaptive.policy import PacMLPolicy, ShadowCluster
from pacml.adaptive.selector import (
    CONDITION_FEATURES,
    RULE_FEATURES,
    ConditionTracker,
    NeighbourTable,
    Rule,
    SelectorWeights,
    load_adaptive,
    rule_candidates,
    rule_features,
    save_adaptive,
)
from pacml.adaptive.train import (
    AdaptiveTrainConfig,
    baseline_regrets,
    fit,
    neighbour_table,
    selector_regret,
    teacher_search,
    teacher_search_full,
    train,
)
from pacml.agent.env import compose_sim_config
from simulator.build import build_policy, build_simulation, build_topology, build_workload
from simulator.errors import ConfigError
from simulator.policies.heuristics import MinFeasible, ParaMax
from simulator.policy import Decision

SHORT = ["scenario=paper", "beta=B", "horizon_s=60000", "progress=false"]
#: An episode well past the selector's 64-arrival window (about 200 arrivals).
PAST_WINDOW = ["scenario=paper", "beta=B", "horizon_s=200000", "progress=false"]


class _Prefer:
    """Stand-in selector weights that score one rule's feature row 1 and every other 0."""

    def __init__(self, label: str, topology) -> None:
        rules = rule_candidates(topology)
        self.row = rule_features(rules[[r.label for r in rules].index(label)], topology)

    def scores(self, cond, rules, lookup=True):
        return np.all(rules == self.row, axis=1).astype(float)



#: The settings of the first adaptive agent (the selector alone, first fit, no guard): most tests
#: change one setting from these, so that the behaviour they check is that setting's alone.
FIRST_AGENT = {"shadow_rules": 0, "shadow_margin": 3, "shadow_all_above_servers": None, "selector_margin": 0.0,
               "shadow_novelty": None, "shadow_familiar_z": None, "shadow_novel_margin": None,
               "shadow_warmup_scales": False, "lookup_after_window": False, "hold_until_window": False,
               "hold_from_job": 1, "block_search": 0, "shadow_blocks": False, "horizon_guard": False,
               "condition_critics": None, "feasible_fallback": False}


def _agent(*args, **settings) -> PacMLPolicy:
    """:class:`PacMLPolicy` with :data:`FIRST_AGENT`'s settings, then ``settings``."""
    return PacMLPolicy(*args, **{**FIRST_AGENT, **settings})

def test_rule_candidates_cover_every_offered_degree() -> None:
    small = build_topology(compose_sim_config(["scenario=paper"]))
    assert [r.label for r in rule_candidates(small)] == [
        "para_max(16)", *(f"min_feasible({k})" for k in small.degrees)]
    big = build_topology(compose_sim_config(["scenario=paper", "cluster=ramp512"]))
    labels = [r.label for r in rule_candidates(big)]
    assert labels[:2] == ["para_max(16)", "para_max(64)"] and len(labels) == 2 + len(big.degrees)
    # Size-independent: the same rule has the same log-degree feature on both clusters.
    assert rule_features(Rule("min_feasible", 4), small)[1] == rule_features(Rule("min_feasible", 4), big)[1]


def test_rules_decide_as_the_heuristics_they_name() -> None:
    cfg = compose_sim_config(SHORT)
    sim = build_simulation(cfg, seed=3)
    heuristics = {Rule("min_feasible", 4): MinFeasible(4), Rule("min_feasible", 1): MinFeasible(1),
                  Rule("para_max", 16): ParaMax(16)}
    n = 0
    while (job := sim.next_job()) is not None:
        state = sim.state()
        for rule, heuristic in heuristics.items():
            assert rule.degree(state) == heuristic.decide(job, state).degree
        sim.apply(Decision(Rule("min_feasible", 6).degree(state)))
        n += 1
    assert n > 30


def test_condition_features_know_the_load_and_ignore_decisions() -> None:
    cfg = compose_sim_config([*SHORT, "mean_interarrival_s=500", "horizon_s=40000"])
    topo = build_topology(cfg)
    feats = []
    for degree_rule in (Rule("min_feasible", 1), Rule("para_max", 16)):
        sim = build_simulation(cfg, seed=5)
        tracker = ConditionTracker()
        seqs = []
        while (job := sim.next_job()) is not None:
            tracker.observe(job)
            seqs.append(job.sequential_jct_s)
            sim.apply(Decision(degree_rule.degree(sim.state())))
        feats.append(tracker.features(topo))
    assert np.array_equal(feats[0], feats[1])  # the policy's decisions do not enter
    f = feats[0]
    assert f.shape == (CONDITION_FEATURES,)
    # Fixed arrivals: no burstiness; load = mean sequential JCT / gap / servers (last 64 jobs).
    assert f[6] == pytest.approx(0.0, abs=1e-9)
    load = np.mean(seqs[-64:]) / 500.0 / topo.num_servers
    assert f[5] == pytest.approx(np.log10(load) / 2.0, rel=1e-5)


def test_selector_picks_its_rule_and_then_behaves_exactly_like_it() -> None:
    cfg = compose_sim_config(SHORT)
    topo = build_topology(cfg)
    for label, heuristic in (("min_feasible(6)", MinFeasible(6)), ("para_max(16)", ParaMax(16))):
        policy = _agent(weights=_Prefer(label, topo))
        blocking = []
        for pol in (policy, heuristic):
            sim = build_simulation(cfg, seed=11)
            pol.reset(11)
            while (job := sim.next_job()) is not None:
                sim.apply(pol.decide(job, sim.state()))
            blocking.append(sim.finalize().summary["blocking_rate"])
        assert blocking[0] == blocking[1]
        assert set(policy.chosen) == {label}


class _Noisy:
    """Stand-in selector weights whose scores are random per call (a noisy condition estimate)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.calls: list[np.ndarray] = []

    def scores(self, cond, rules, lookup=True):
        self.calls.append(self.rng.normal(size=len(rules)) + np.arange(len(rules)) * 1.0)
        return self.calls[-1]


@pytest.mark.parametrize("margin", [0.0, 0.5, 1.5, 100.0])
def test_selector_margin_keeps_the_rule_until_another_scores_more_than_it_better(margin: float) -> None:
    weights = _Noisy(1)
    policy, rules = _episode(weights, selector_margin=margin)
    window = policy.tracker.window
    kept = None
    for n, raw in enumerate(weights.calls):  # the reference: switch only on a lead above the margin,
        best = int(np.argmax(raw))  # once the condition comes from a whole window (before: argmax)
        if n + 1 < window or margin == 0.0:
            pick, kept = best, None
        else:
            if kept is None or raw[best] - raw[kept] > margin:
                kept = best
            pick = kept
        assert policy.chosen[n] == rules[pick]
    late = policy.chosen[window - 1:]
    switches = sum(a != b for a, b in zip(late, late[1:], strict=False))
    assert (switches == 0) == (margin == 100.0) and len(late) > 100
    with pytest.raises(ConfigError, match="selector_margin"):
        _agent(weights=weights, selector_margin=-0.1)


def test_hold_until_window_keeps_the_first_pick_over_the_partial_window() -> None:
    weights = _Noisy(2)
    policy, rules = _episode(weights, hold_until_window=True)
    window = policy.tracker.window
    first = rules[int(np.argmax(weights.calls[0]))]
    raw = [rules[int(np.argmax(c))] for c in weights.calls]
    assert len(raw) > window + 50 and len(set(raw[:window - 1])) > 2  # the noise flips the raw pick
    assert policy.chosen == [first] * (window - 1) + raw[window - 1:]
    # With a margin the held rule is the one to beat; a margin nothing beats keeps it all episode.
    held, _ = _episode(_Noisy(2), hold_until_window=True, selector_margin=100.0)
    assert held.chosen == [first] * len(policy.chosen)
    with pytest.raises(ConfigError, match="hold_until_window"):
        _agent(weights=weights, hold_until_window=1)
    # Held from a later job (one whose pick differs from the first's): the jobs before it take their
    # own picks, then its pick is held.
    k = next(i for i in range(5, window - 1) if raw[i] != first)
    late, _ = _episode(_Noisy(2), hold_until_window=True, hold_from_job=k + 1)
    assert late.chosen == raw[:k] + [raw[k]] * (window - 1 - k) + raw[window - 1:]
    for bad in (0, 2.0, True, None):
        with pytest.raises(ConfigError, match="hold_from_job"):
            _agent(weights=weights, hold_from_job=bad)


class _TwoMinds:
    """Stand-in weights whose MLP prefers one rule and whose lookup prefers another."""

    def __init__(self, mlp: str, lookup: str, topology) -> None:
        self.mlp, self.lookup = _Prefer(mlp, topology), _Prefer(lookup, topology)
        self.asked: list[bool] = []

    def scores(self, cond, rules, lookup=True):
        self.asked.append(lookup)
        return (self.lookup if lookup else self.mlp).scores(cond, rules)


@pytest.mark.parametrize("after_window", [False, True])
def test_lookup_after_window_leaves_the_partial_window_jobs_to_the_mlp(after_window: bool) -> None:
    weights = _TwoMinds("min_feasible(4)", "min_feasible(6)", build_topology(compose_sim_config(PAST_WINDOW)))
    policy, _ = _episode(weights, lookup_after_window=after_window)
    window = policy.tracker.window
    assert len(policy.chosen) > window + 20
    assert weights.asked == [not after_window or n >= window for n in range(1, len(policy.chosen) + 1)]
    first = "min_feasible(4)" if after_window else "min_feasible(6)"
    assert policy.chosen == [first] * (window - 1) + ["min_feasible(6)"] * (len(policy.chosen) - window + 1)
    with pytest.raises(ConfigError, match="lookup_after_window"):
        _agent(weights=weights, lookup_after_window="yes")


def test_checkpoint_roundtrip_and_bad_files(tmp_path) -> None:
    rng = np.random.default_rng(0)
    width = CONDITION_FEATURES + RULE_FEATURES
    w = SelectorWeights([(rng.normal(size=(8, width)), rng.normal(size=8)), (rng.normal(size=(1, 8)), rng.normal(size=1))])
    path = save_adaptive(tmp_path / "a.npz", w, {"x": 1})
    back, meta = load_adaptive(path)
    cond = rng.normal(size=CONDITION_FEATURES).astype(np.float32)
    rules = rng.normal(size=(5, RULE_FEATURES)).astype(np.float32)
    assert np.array_equal(back.scores(cond, rules), w.scores(cond, rules)) and meta["x"] == 1
    old = save_adaptive(tmp_path / "old.npz", SelectorWeights([(np.zeros((1, width - 2)), np.zeros(1))]), {})
    with pytest.raises(ConfigError, match="retrain it"):
        load_adaptive(old)
    (tmp_path / "bad.npz").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="cannot read adaptive checkpoint"):
        load_adaptive(tmp_path / "bad.npz")
    with pytest.raises(ConfigError, match="no adaptive checkpoint"):
        _agent("no/such/run")


def test_sampled_conditions_build_and_are_reproducible() -> None:
    draws = [sample_condition(np.random.default_rng([0, i])) for i in range(12)]
    assert draws == [sample_condition(np.random.default_rng([0, i])) for i in range(12)]
    for over in draws:
        topo = build_topology(compose_sim_config(over))
        assert 32 <= topo.num_servers <= 512
        assert not any(g in o for o in over for g in ("densenet121", "inception_v3", "resnet50", "resnext50"))


PAPER_D = ["scenario=paper", "beta=D", "horizon_s=300000", "progress=false"]  # 300 jobs at the paper's load


@pytest.mark.parametrize("overrides, rule, heuristic, block_search", [
    (PAPER_D, Rule("min_feasible", 4), MinFeasible(4), 0),
    (PAPER_D, Rule("para_max", 16), ParaMax(16), 0),  # degrees that miss the target are blocked too
    (["scenario=paper", "cluster=ramp512", "beta=C", "mean_interarrival_s=62.5", "horizon_s=100000",
      "progress=false"], Rule("min_feasible", 8), MinFeasible(8), 0),
    # Placed in blocks, as the agent with policy.block_search places them.
    (PAPER_D, Rule("min_feasible", 4), MinFeasible(4, block_search=64), 64),
    (PAPER_D, Rule("para_max", 16), ParaMax(16, block_search=8), 8),
])
def test_a_shadow_cluster_blocks_exactly_what_its_rule_blocks_on_the_real_cluster(overrides, rule, heuristic,
                                                                                  block_search) -> None:
    cfg = compose_sim_config(overrides)
    sim = build_simulation(cfg, seed=5)
    shadow, decided, blocked_now = None, 0, 0
    while (job := sim.next_job()) is not None:
        state = sim.state()
        shadow = shadow or ShadowCluster(rule, state, block_search)
        shadow.step(job)
        decided += 1
        blocked_now += sim.apply(heuristic.decide(job, state)) is not None
    assert blocked_now > 20  # the load is high enough for the count to mean something
    assert (shadow.decided, shadow.blocked) == (decided, blocked_now), rule.label


def _run(policy: PacMLPolicy, cfg, seed: int = 5) -> tuple[float, list[int]]:
    sim = build_simulation(cfg, seed=seed)
    policy.reset(seed)
    degrees = []
    while (job := sim.next_job()) is not None:
        decision = policy.decide(job, sim.state())
        degrees.append(decision.degree)
        sim.apply(decision)
    return sim.finalize().summary["blocking_rate"], degrees


def _episode(weights, **options) -> tuple[PacMLPolicy, list[str]]:
    """One :data:`PAST_WINDOW` episode of an agent with stand-in ``weights``; the rules' labels."""
    cfg = compose_sim_config(PAST_WINDOW)
    policy = _agent(weights=weights, **options)
    _run(policy, cfg)
    return policy, [r.label for r in rule_candidates(build_topology(cfg))]


def test_shadows_overrule_a_wrong_selector_and_leave_a_right_one_alone() -> None:
    cfg = compose_sim_config(PAPER_D)
    topo = build_topology(cfg)
    # A selector that always says para_max(16), the worst rule for beta D at this load.
    wrong = _agent(weights=_Prefer("para_max(16)", topo))
    para_max, para_max_degrees = _run(wrong, cfg)
    assert set(wrong.chosen) == {"para_max(16)"}
    corrected = _agent(weights=_Prefer("para_max(16)", topo), shadow_rules=8)
    blocking, degrees = _run(corrected, cfg)
    assert len(corrected.shadows) == len(rule_candidates(topo))  # 7 rules, all shadowed
    switched = corrected.chosen.index(next(c for c in corrected.chosen if c != "para_max(16)"))
    assert corrected.shadow.shadow_warmup <= switched < 250 and corrected.chosen[-1].startswith("min_feasible")
    assert degrees[:switched] == para_max_degrees[:switched]  # the selector alone for the first 64 jobs, at least
    assert blocking < para_max - 0.03
    assert (blocking, degrees) == _run(_agent(weights=_Prefer("para_max(16)", topo), shadow_rules=8), cfg)
    # A selector already on the shadows' leader is never overruled.
    leader = min(corrected.shadows, key=lambda s: s.blocked).rule.label
    right = _agent(weights=_Prefer(leader, topo), shadow_rules=8)
    _run(right, cfg)
    assert set(right.chosen) == {leader}
    # Shadows for the selector's best 2 rules only: an unshadowed pick cannot be overruled.
    two = _agent(weights=_Prefer("para_max(16)", topo), shadow_rules=2)
    _run(two, cfg)
    assert len(two.shadows) == 2 and two.shadows[0].rule.label == "para_max(16)"


def test_big_clusters_shadow_every_rule_with_a_warmup_that_grows_with_the_cluster() -> None:
    cfg = compose_sim_config(PAPER_D)
    topo = build_topology(cfg)
    rules = rule_candidates(topo)
    everything = _agent(weights=_Prefer("para_max(16)", topo), shadow_rules=len(rules))
    expected = _run(everything, cfg)
    # Above the threshold two shadow rules become every rule; on 32 servers the warm-up is unchanged.
    big = _agent(weights=_Prefer("para_max(16)", topo), shadow_rules=2,
                         shadow_all_above_servers=topo.num_servers - 1)
    assert _run(big, cfg) == expected and len(big.shadows) == len(rules)
    at = _agent(weights=_Prefer("para_max(16)", topo), shadow_rules=2, shadow_all_above_servers=topo.num_servers)
    _run(at, cfg)
    assert len(at.shadows) == 2  # not above it: the selector's best two
    # 64 servers take twice the arrivals to fill: the shadows may overrule after 128 jobs, not 64.
    cfg64 = compose_sim_config(["scenario=paper", "beta=D", "cluster=ramp64", "mean_interarrival_s=500",
                                "horizon_s=150000", "progress=false"])
    topo64 = build_topology(cfg64)
    switched = []
    for threshold in (None, 32):
        policy = _agent(weights=_Prefer("para_max(16)", topo64), shadow_rules=8, shadow_warmup=64,
                                shadow_all_above_servers=threshold)
        _run(policy, cfg64)
        switched.append(next(i for i, c in enumerate(policy.chosen) if c != "para_max(16)"))
        assert policy.warmup_jobs == (64 if threshold is None else 128)
    assert switched[0] < 128 <= switched[1] < 250


def test_the_warm_up_may_grow_with_every_cluster() -> None:
    """``policy.shadow_warmup_scales``: clusters of more than 32 servers get ``shadow_warmup x
    servers / 32`` jobs of warm-up with the selector's best shadows (not every rule); 32 servers decide
    as without it."""
    cfg = compose_sim_config(PAPER_D)
    topo = build_topology(cfg)
    plain = _run(_agent(weights=_Prefer("para_max(16)", topo), shadow_rules=8), cfg)
    scaled = _agent(weights=_Prefer("para_max(16)", topo), shadow_rules=8, shadow_warmup_scales=True)
    assert _run(scaled, cfg) == plain and scaled.warmup_jobs == 64
    cfg64 = compose_sim_config(["scenario=paper", "beta=D", "cluster=ramp64", "mean_interarrival_s=500",
                                "horizon_s=150000", "progress=false"])
    topo64 = build_topology(cfg64)
    switched = []
    for scales in (False, True):
        policy = _agent(weights=_Prefer("para_max(16)", topo64), shadow_rules=8, shadow_warmup=64,
                                shadow_warmup_scales=scales)
        _run(policy, cfg64)
        assert len(policy.shadows) == 8 and policy.warmup_jobs == (128 if scales else 64)
        switched.append(next(i for i, c in enumerate(policy.chosen) if c != "para_max(16)"))
    assert switched[0] < 128 <= switched[1] < 250
    for bad in (1, "true", None):
        with pytest.raises(ConfigError, match="shadow_warmup_scales"):
            _agent(weights=_Prefer("para_max(16)", topo), shadow_warmup_scales=bad)


class _PreferAt(_Prefer):
    """A :class:`_Prefer` selector whose every condition lies ``novelty`` from its training data."""

    def __init__(self, label: str, topology, novelty: float) -> None:
        super().__init__(label, topology)
        self.reference, self.value = np.zeros((1, CONDITION_FEATURES), dtype=np.float32), novelty

    def novelty(self, cond) -> float:
        return self.value


def test_shadows_keep_off_familiar_conditions_unless_the_evidence_is_stronger() -> None:
    cfg = compose_sim_config(PAPER_D)
    topo = build_topology(cfg)
    alone = _run(_agent(weights=_Prefer("para_max(16)", topo)), cfg)
    shadowed = _run(_agent(weights=_Prefer("para_max(16)", topo), shadow_rules=8), cfg)
    assert shadowed != alone  # the shadows overrule this wrong selector (previous test)
    # Familiar (0.1 <= 0.4) and no familiar_z: the selector alone, decision for decision.
    familiar = _agent(weights=_PreferAt("para_max(16)", topo, 0.1), shadow_rules=8, shadow_novelty=0.4)
    assert _run(familiar, cfg) == alone and familiar.novelty == pytest.approx(0.1)
    # Novel (0.9 > 0.4): the shadows as without the option.
    novel = _agent(weights=_PreferAt("para_max(16)", topo, 0.9), shadow_rules=8, shadow_novelty=0.4)
    assert _run(novel, cfg) == shadowed
    # Familiar, with the same z as the shadows' own: as without the option; with a huge z: alone.
    for z, expected in ((1.0, shadowed), (1e6, alone)):
        policy = _agent(weights=_PreferAt("para_max(16)", topo, 0.1), shadow_rules=8, shadow_novelty=0.4,
                                shadow_familiar_z=z)
        assert _run(policy, cfg) == expected


def test_a_novel_condition_may_take_its_own_shadow_margin() -> None:
    """``policy.shadow_novel_margin``: the margin on conditions that are not familiar; familiar ones
    keep ``shadow_margin`` (with ``shadow_familiar_z`` the shadows' own z, exactly as without the option)."""
    cfg = compose_sim_config(PAPER_D)
    topo = build_topology(cfg)

    def first_switch(novelty: float, **options) -> tuple[int, tuple[float, list[int]]]:
        policy = _agent(weights=_PreferAt("para_max(16)", topo, novelty), shadow_rules=8, shadow_margin=30,
                                shadow_novelty=0.4, shadow_familiar_z=1.0, **options)
        result = _run(policy, cfg)
        return next((i for i, c in enumerate(policy.chosen) if c != "para_max(16)"), len(policy.chosen)), result

    base_at, base = first_switch(0.9)  # novel, no novel margin: shadow_margin
    assert first_switch(0.9, shadow_novel_margin=30) == (base_at, base)
    assert first_switch(0.1, shadow_novel_margin=0) == (base_at, base)  # familiar: shadow_margin stands
    sooner_at, sooner = first_switch(0.9, shadow_novel_margin=10)
    later_at, _ = first_switch(0.9, shadow_novel_margin=60)
    assert 64 <= sooner_at < base_at < later_at and sooner != base  # after the warm-up (64 jobs)
    for bad in (-1, 2.5, True):
        with pytest.raises(ConfigError, match="shadow_novel_margin"):
            _agent(weights=_PreferAt("para_max(16)", topo, 0.9), shadow_novelty=0.4, shadow_novel_margin=bad)
    # Without shadow_novelty no condition is novel: shadow_margin everywhere.
    plain = _agent(weights=_PreferAt("para_max(16)", topo, 0.9), shadow_rules=8, shadow_margin=30,
                           shadow_novel_margin=10)
    assert _run(plain, cfg) == base


def test_novelty_is_the_scaled_distance_to_the_nearest_training_condition(tmp_path) -> None:
    rng = np.random.default_rng(3)
    ref = rng.normal(size=(50, CONDITION_FEATURES)).astype(np.float32)
    ref[:, 0] = 2.0  # constant in training: left out
    ref[:, 1] *= 100.0  # a feature with a wide spread counts in units of it
    weights = SelectorWeights([(np.zeros((1, CONDITION_FEATURES + RULE_FEATURES)), np.zeros(1))], ref)
    assert weights.novelty(ref[7]) == pytest.approx(0.0, abs=1e-6)
    moved = ref[7].copy()
    moved[0] += 1e3
    assert weights.novelty(moved) == pytest.approx(0.0, abs=1e-6)
    far = np.full(CONDITION_FEATURES, 50.0, dtype=np.float32)
    assert weights.novelty(far) > weights.novelty(ref.mean(axis=0)) > 0
    save_adaptive(tmp_path / "a.npz", weights, {})
    np.testing.assert_array_equal(load_adaptive(tmp_path / "a.npz")[0].reference, ref)
    weights.reference = None  # a checkpoint saved before references: the option cannot be used
    save_adaptive(tmp_path / "old.npz", weights, {})
    with pytest.raises(ConfigError, match="shadow_novelty.*no reference conditions"):
        _agent(tmp_path / "old.npz", shadow_rules=8, shadow_novelty=0.4)


def test_shadow_options_are_checked() -> None:
    for key, bad in (("shadow_rules", -1), ("shadow_rules", 1.5), ("shadow_warmup", -1), ("shadow_margin", -2),
                     ("shadow_z", float("nan")),
                     ("shadow_all_above_servers", 0), ("shadow_all_above_servers", 2.5),
                     ("shadow_novelty", -1.0),
                     ("shadow_novelty", float("inf")), ("shadow_familiar_z", float("nan")),
                     ("shadow_blocks", 1), ("shadow_blocks", "yes"), ("horizon_guard", 1), ("feasible_fallback", "no")):
        with pytest.raises(ConfigError, match=key):
            _agent(weights=SelectorWeights([]), **{key: bad})


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


def test_time_scales_resize_a_training_mix() -> None:
    """``workload.time_scales`` (a resized copy of each graph of a mix): the graphs' step times are
    the factors times the originals'."""
    from pacml.adaptive.train import AdaptiveTrainConfig, condition_overrides

    over = condition_overrides(AdaptiveTrainConfig(core_frac=0.5), 0)
    graphs = next(o for o in over if o.startswith("workload.graphs=")).split("=", 1)[1].strip("[]").split(",")
    extra = f"workload.time_scales=[{','.join(f'{0.5 + 0.3 * k:.2f}' for k in range(len(graphs)))}]"
    over = [*over, extra]
    cfg = compose_sim_config([*over, "progress=false"])
    plain = compose_sim_config([*[o for o in over if o != extra], "progress=false"])
    scales = [float(x) for x in extra.split("=", 1)[1].strip("[]").split(",")]
    from simulator.build import build_workload

    got = build_workload(cfg).training_graphs
    want = build_workload(plain).training_graphs
    assert [g.step_time_s for g in got] == pytest.approx([f * g.step_time_s for f, g in zip(scales, want, strict=True)], rel=1e-12)
    assert len({g.fingerprint for g in got} | {g.fingerprint for g in want}) == 2 * len(want)


@pytest.mark.parametrize("block_search", [0, 64])
def test_teacher_search_matches_the_heuristic_runs(block_search) -> None:
    over = [*SHORT, "horizon_s=30000"]
    res = teacher_search(over, [7, 8], samples_per_episode=5, block_search=block_search)
    assert res["blocking"].shape == (len(res["rules"]), 2) and res["conditions"].shape == (10, CONDITION_FEATURES)
    cfg = compose_sim_config(over)
    for label, pol in (("min_feasible(4)", MinFeasible(4, block_search=block_search)),
                       ("para_max(16)", ParaMax(16, block_search=block_search))):
        i = res["rules"].index(label)
        for j, seed in enumerate((7, 8)):
            sim = build_simulation(cfg, seed=seed)
            while (job := sim.next_job()) is not None:
                sim.apply(pol.decide(job, sim.state()))
            assert res["blocking"][i, j] == sim.finalize().summary["blocking_rate"], (label, seed)


def test_oracle_rule_is_the_teacher_searchs_best_rule() -> None:
    from pacml.adaptive.train import oracle_rule

    over = [*SHORT, "horizon_s=30000"]
    for block_search in (0, 64):
        res = teacher_search(over, [7, 8], samples_per_episode=1, block_search=block_search)
        got = oracle_rule(over, [7, 8], block_search)
        best = int(np.argmin(res["blocking"].mean(axis=1)))
        assert got["rule"] == res["rules"][best] and got["per_seed"] == res["blocking"][best].tolist()
        assert got["rules"][got["rule"]] == min(got["rules"].values()) and set(got["rules"]) == set(res["rules"])


def test_block_placed_rules_rank_differently_in_the_teacher_search() -> None:
    """Placement is part of a rule: on beta B at the paper's load min_feasible(8) in blocks blocks
    fewer jobs than with first fit, and there it beats para_max (BENCHMARKS §10)."""
    over = ["scenario=paper", "beta=B", "horizon_s=300000", "progress=false"]  # 300 jobs
    # Seeds 1-8 in pairs: first fit 0.28-0.34, in blocks 0.22-0.24, para_max 0.25-0.27.
    plain, blocks = (teacher_search(over, [1, 2], samples_per_episode=2, block_search=b) for b in (0, 64))
    assert plain["rules"] == blocks["rules"]
    np.testing.assert_array_equal(plain["conditions"], blocks["conditions"])  # arrivals only
    mean = {b: dict(zip(r["rules"], r["blocking"].mean(axis=1), strict=True))
            for b, r in ((0, plain), (64, blocks))}
    assert mean[64]["min_feasible(8)"] < mean[0]["min_feasible(8)"] - 0.02
    assert mean[64]["min_feasible(8)"] < mean[64]["para_max(16)"] - 0.01


def test_window_changes_the_features_not_the_blocking_and_travels_with_the_checkpoint(tmp_path) -> None:
    over = [*SHORT, "horizon_s=30000"]
    short, long = (teacher_search(over, [7], samples_per_episode=10, window=w) for w in (4, 64))
    assert np.array_equal(short["blocking"], long["blocking"])
    assert not np.allclose(short["conditions"], long["conditions"])  # same samples, other estimates
    weights = SelectorWeights([(np.zeros((2, CONDITION_FEATURES + RULE_FEATURES)), np.zeros(2)),
                               (np.zeros((1, 2)), np.zeros(1))])
    save_adaptive(tmp_path / "adaptive.npz", weights, {"train_config": {"window": 4}})
    assert _agent(tmp_path / "adaptive.npz").tracker.window == 4
    save_adaptive(tmp_path / "adaptive.npz", weights, {"train_config": {}})  # trained before the option
    assert _agent(tmp_path / "adaptive.npz").tracker.window == 64


def test_an_agent_run_with_another_placement_than_its_labels_says_so(tmp_path, caplog) -> None:
    weights = SelectorWeights([(np.zeros((2, CONDITION_FEATURES + RULE_FEATURES)), np.zeros(2)),
                               (np.zeros((1, 2)), np.zeros(1))])
    save_adaptive(tmp_path / "blocks.npz", weights, {"train_config": {"block_search": 64}})
    with caplog.at_level(logging.WARNING, logger="pacml.adaptive.policy"):
        _agent(tmp_path / "blocks.npz", block_search=64)
        assert not caplog.records
        _agent(tmp_path / "blocks.npz", block_search=0)
    assert len(caplog.records) == 1 and "trained on rules placed with block_search=64" in caplog.records[0].message


@pytest.mark.parametrize("over", [
    [*SHORT, "beta=D", "horizon_s=40000"],  # paper accounting: jobs running at the horizon are blocked
    [*SHORT, "beta=A", "arrivals=poisson", "mean_interarrival_s=600", "horizon_s=40000"],
    ["scenario=physical", "beta=D", "horizon_s=200", "progress=false"],  # drain accounting, block placement
])
def test_teacher_search_equals_one_simulation_per_rule(over) -> None:
    fast, full = teacher_search(over, [5, 6], samples_per_episode=4), teacher_search_full(over, [5, 6], samples_per_episode=4)
    if over[0] == "scenario=paper":  # placed in blocks, too (physical already places in blocks)
        np.testing.assert_array_equal(teacher_search(over, [5, 6], samples_per_episode=4, block_search=64)["blocking"],
                                      teacher_search_full(over, [5, 6], samples_per_episode=4, block_search=64)["blocking"])
    assert fast["rules"] == full["rules"]
    np.testing.assert_array_equal(fast["blocking"], full["blocking"])
    np.testing.assert_array_equal(fast["conditions"], full["conditions"])
    assert len(set(np.round(fast["blocking"][:, 0], 6))) > 1  # the rules differ here, so equality means something
    # The share blocked for running at the horizon (paper accounting only) agrees too, and is part of the blocking.
    np.testing.assert_allclose(fast["end_blocking"], full["end_blocking"], rtol=0, atol=1e-12)
    horizon = [float(o.split("=")[1]) for o in over if o.startswith("horizon_s=")][-1]
    assert fast["horizon_s"] == full["horizon_s"] == horizon
    assert np.all(fast["end_blocking"] <= fast["blocking"])
    assert (fast["end_blocking"].max() > 0) == ("scenario=paper" in over)


def _synthetic_results(n: int, rng: np.random.Generator) -> list[dict]:
    """Conditions whose best rule is rule 0 when condition feature 5 is high, else rule 2."""
    out = []
    rule_feats = np.random.default_rng(99).normal(size=(4, RULE_FEATURES)).astype(np.float32)  # same rules everywhere
    for _ in range(n):
        high = rng.random() < 0.5
        blocking = np.array([0.1, 0.2, 0.3, 0.25])[:, None] if high else np.array([0.3, 0.2, 0.1, 0.25])[:, None]
        conds = rng.normal(scale=0.1, size=(6, CONDITION_FEATURES)).astype(np.float32)
        conds[:, 5] += 1.0 if high else -1.0
        out.append({"blocking": blocking.repeat(2, axis=1), "rule_features": rule_feats, "conditions": conds,
                    "rules": ["a", "b", "c", "d"]})
    return out


def _mlp(value: float = 0.0) -> list:
    """A one-layer 'MLP' scoring every rule ``value`` (a fallback that can be told apart)."""
    return [(np.zeros((1, CONDITION_FEATURES + RULE_FEATURES)), np.full(1, value))]


def test_neighbour_table_votes_with_the_regrets_of_the_nearest_conditions(tmp_path) -> None:
    rules_a = np.eye(3, RULE_FEATURES, dtype=np.float32)  # one cluster's three rules
    rules_b = np.eye(2, RULE_FEATURES, k=1, dtype=np.float32)  # another cluster's two
    row = np.zeros((1, CONDITION_FEATURES), dtype=np.float32)

    def at(x: float, y: float = 0.0) -> np.ndarray:
        out = row.copy()
        out[0, 6], out[0, 7] = x, y
        return out

    table = NeighbourTable.build([
        (at(0.0), rules_a, np.array([0.1, 0.3, 0.2])),  # regrets 0, .2, .1
        (at(1.0), rules_a, np.array([0.5, 0.1, 0.2])),  # .4, 0, .1
        (at(5.0), rules_a, np.array([0.2, 0.2, 0.0])),  # .2, .2, 0
        (at(0.1), rules_b, np.array([0.0, 0.9])),  # another rule set: never votes for rules_a
    ], k=2)
    # The 2 nearest rows of the query's own rule set vote: rows at 0 and 1, then at 5 and 1.
    np.testing.assert_allclose(table.regrets(at(0.2)[0], rules_a), [0.2, 0.1, 0.1], atol=1e-6)
    np.testing.assert_allclose(table.regrets(at(4.0)[0], rules_a), [0.3, 0.1, 0.05], atol=1e-6)
    np.testing.assert_allclose(table.regrets(at(3.0)[0], rules_b), [0.0, 0.9], atol=1e-6)  # k > its 1 row
    assert table.regrets(at(0.0)[0], np.eye(4, RULE_FEATURES, dtype=np.float32)) is None  # rules never seen
    weights = SelectorWeights(_mlp(7.0), None, table)
    np.testing.assert_allclose(weights.scores(at(0.2)[0], rules_a), [-0.2, -0.1, -0.1], atol=1e-6)
    assert np.all(weights.scores(at(0.2)[0], np.eye(4, RULE_FEATURES, dtype=np.float32)) == 7.0)  # the MLP's
    # The checkpoint holds the table; its answers are the same after loading.
    back, _ = load_adaptive(save_adaptive(tmp_path / "a.npz", weights, {}))
    assert back.neighbours is not None and back.neighbours.k == 2
    for x in (0.2, 0.7, 4.0, 9.0):
        np.testing.assert_array_equal(back.scores(at(x)[0], rules_a), weights.scores(at(x)[0], rules_a))
    # A batch of conditions gets each one's own answer.
    batch = np.concatenate([at(x) for x in (0.2, 0.7, 4.0, 9.0)])
    np.testing.assert_array_equal(table.regrets(batch, rules_a),
                                  np.stack([table.regrets(row, rules_a) for row in batch]))
    # A table whose arrays do not fit together is refused with one line.
    data = dict(np.load(tmp_path / "a.npz"))
    data["nn_condition"] = np.array([0, 1, 2, 9], np.int32)
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(ConfigError, match="nearest-neighbour table is inconsistent"):
        load_adaptive(tmp_path / "bad.npz")
    for bad in (np.full(CONDITION_FEATURES, -1.0), np.zeros(CONDITION_FEATURES), np.ones(3)):
        data = dict(np.load(tmp_path / "a.npz"))
        data["nn_weights"] = bad.astype(np.float32)
        np.savez(tmp_path / "bad.npz", **data)
        with pytest.raises(ConfigError, match="nearest-neighbour table is inconsistent"):
            load_adaptive(tmp_path / "bad.npz")


def test_neighbour_weights_decide_which_rows_are_nearest(tmp_path) -> None:
    from dataclasses import replace

    rules = np.eye(2, RULE_FEATURES, dtype=np.float32)

    def at(x: float, y: float) -> np.ndarray:
        out = np.zeros((1, CONDITION_FEATURES), dtype=np.float32)
        out[0, 5], out[0, 7] = x, y
        return out

    # Row A is near the query in feature 7, row B in feature 5 (both features have the same spread).
    table = NeighbourTable.build([(at(0.0, 0.1), rules, np.array([0.0, 0.5])),   # A: rule 0 best
                                  (at(0.1, 1.0), rules, np.array([0.5, 0.0])),   # B: rule 1 best
                                  (at(1.0, 0.0), rules, np.array([0.5, 0.5])),
                                  (at(1.0, 1.0), rules, np.array([0.5, 0.5]))], k=1)
    query = at(0.1, 0.1)[0]
    np.testing.assert_allclose(table.regrets(query, rules), [0.0, 0.5])  # equal weights: A (0.1 away)
    weights = np.ones(CONDITION_FEATURES, np.float32)
    weights[7] = 0.05  # feature 7 barely counts: B (0.045 away) beats A (0.1)
    heavy = replace(table, weights=weights)
    np.testing.assert_allclose(heavy.regrets(query, rules), [0.5, 0.0])
    weights = np.ones(CONDITION_FEATURES, np.float32)
    weights[5] = 0.0  # feature 5 left out: A again, exactly where it is in feature 7
    np.testing.assert_allclose(replace(table, weights=weights).regrets(query, rules), [0.0, 0.5])
    # The weights are saved with the checkpoint and used after loading.
    back, _ = load_adaptive(save_adaptive(tmp_path / "w.npz", SelectorWeights(_mlp(), None, heavy), {}))
    assert back.neighbours is not None
    np.testing.assert_array_equal(back.neighbours.weights, heavy.weights)
    np.testing.assert_allclose(back.neighbours.regrets(query, rules), [0.5, 0.0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_neighbour_selector_learns_which_rule_a_condition_needs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    train_set, val_set = _synthetic_results(40, rng), _synthetic_results(20, rng)
    cfg = AdaptiveTrainConfig(neighbours=10)
    weights = SelectorWeights(_mlp(), None, neighbour_table(train_set, cfg))
    # The best single rule ("b") has regret 0.1 on every condition; the lookup must find the switch.
    # Fifteen of the 16 features are noise and dilute the distance: over seeds 0-59 its regret was
    # 0.007 on average and 0.032 at worst.
    assert baseline_regrets(val_set)["b"] == pytest.approx(0.1)
    assert selector_regret(weights, val_set, cfg) < 0.045
    assert selector_regret(SelectorWeights(_mlp()), val_set, cfg) > 0.05  # a constant score: 0.06-0.16


@pytest.mark.parametrize(("seed", "batch_rows"), [(0, 20000), (1, 20000), (2, 20000), (0, 60), (1, 60)])
def test_fit_learns_which_rule_a_condition_needs(tmp_path, seed: int, batch_rows: int) -> None:
    rng = np.random.default_rng(seed)
    train_set, val_set = _synthetic_results(40, rng), _synthetic_results(20, rng)  # 240 training rows
    cfg = AdaptiveTrainConfig(seed=seed, epochs=150, hidden=16, batch_rows=batch_rows)
    weights, stats = fit(cfg, train_set, val_set, tmp_path, deadline=float("inf"))
    # The best single rule ("b") has regret 0.1 on every condition; the fit must find the switch.
    assert baseline_regrets(val_set)["b"] == pytest.approx(0.1)
    assert stats["val_regret"] < 0.02
    r = val_set[0]
    pick = int(np.argmax(weights.scores(r["conditions"][0], r["rule_features"])))
    assert r["blocking"][pick, 0] == r["blocking"][:, 0].min()


def test_train_end_to_end_and_resume(tmp_path) -> None:
    cfg = AdaptiveTrainConfig(num_conditions=3, seeds_per_condition=1, jobs_per_episode=25, workers=1, epochs=10,
                              hidden=8, val_every=3)
    summary = train(cfg, tmp_path, progress=False)
    assert summary["conditions"] == 3 and (tmp_path / "adaptive.npz").is_file()
    assert load_adaptive(tmp_path / "adaptive.npz")[0].neighbours is None and "val_regret_mlp" not in summary
    reference = load_adaptive(tmp_path / "adaptive.npz")[0].reference  # for policy.shadow_novelty
    assert reference is not None and reference.shape[1] == CONDITION_FEATURES and len(reference) > 0
    stamp = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "conditions").iterdir()}
    again = train(cfg, tmp_path, progress=False)  # resume: nothing new to simulate
    assert again["conditions"] == 3
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "conditions").iterdir()} == stamp


def test_refit_fits_on_another_runs_search_with_new_fit_settings(tmp_path) -> None:
    from omegaconf import OmegaConf

    from pacml.adaptive.selector import load_adaptive
    from pacml.adaptive.train import train_from_config

    source, refit = tmp_path / "source", tmp_path / "refit"
    base = OmegaConf.load(Path(__file__).parents[3] / "conf" / "train_adaptive.yaml")
    base.pop("hydra")
    base.progress = False
    base.adaptive.update({"num_conditions": 3, "seeds_per_condition": 1, "jobs_per_episode": 25, "workers": 1,
                          "epochs": 10, "hidden": 8, "val_every": 3})
    train_from_config(base, source)
    stamp = {p.name: p.stat().st_mtime_ns for p in (source / "conditions").iterdir()}
    again = OmegaConf.load(Path(__file__).parents[3] / "conf" / "train_adaptive.yaml")  # the defaults, as composed
    again.pop("hydra")
    again.progress = False
    again.refit = str(source)
    again.adaptive.update({"hidden": 4, "epochs": 12, "neighbours": 5})
    summary = train_from_config(again, refit, ["refit=x", "adaptive.hidden=4", "adaptive.epochs=12",
                                               "adaptive.neighbours=5"])
    assert summary["conditions"] == 3 and summary["refit_of"] == str(source)
    table = load_adaptive(refit / "adaptive.npz")[0].neighbours  # the lookup, fitted on the source's search
    assert table is not None and table.k == 5 and len(table.regret) == 2  # the 2 training conditions
    assert summary["val_regret"] >= 0.0 and summary["val_regret_mlp"] >= 0.0
    assert not (refit / "conditions").exists()  # nothing simulated
    assert {p.name: p.stat().st_mtime_ns for p in (source / "conditions").iterdir()} == stamp
    saved = OmegaConf.load(refit / "train_config.yaml")
    assert saved.refit == str(source)
    # The source's settings (search and fit), then the fit settings given on the command line.
    assert (saved.adaptive.num_conditions, saved.adaptive.val_every) == (3, 3)
    assert (saved.adaptive.hidden, saved.adaptive.epochs) == (4, 12)
    # Resuming the refit keeps its own fit settings (not the source's).
    resume = OmegaConf.load(Path(__file__).parents[3] / "conf" / "train_adaptive.yaml")
    resume.pop("hydra")
    resume.resume = str(refit)
    train_from_config(resume, refit, [f"resume={refit}"])
    saved = OmegaConf.load(refit / "train_config.yaml")
    assert (saved.adaptive.hidden, saved.adaptive.epochs, saved.refit) == (4, 12, str(source))
    # A run saved with a retired setting resumes without it at the value that turned it off, and not
    # at any other (pacml/checkpoints/physical_adaptive_knn/train_config.yaml holds them, off).
    for key, off, on in (("tune_neighbours", False, True), ("label_horizon_s", None, 1.0e6),
                           ("jobs_per_server", 0, 4.0), ("minibatch_rows", None, 2000), ("size_spread_frac", 0.0, 1.0)):
        saved.adaptive[key] = off
        OmegaConf.save(saved, refit / "train_config.yaml")
        train_from_config(resume, refit, [f"resume={refit}"])
        saved.adaptive[key] = on
        OmegaConf.save(saved, refit / "train_config.yaml")
        with pytest.raises(ConfigError, match=f"adaptive.{key}.*retired"):
            train_from_config(resume, refit, [f"resume={refit}"])
        saved.adaptive.pop(key)
    assert load_adaptive(refit / "adaptive.npz")[0].layers[0][0].shape[0] == 4
    weights, _ = load_adaptive(refit / "adaptive.npz")
    assert weights.layers[0][0].shape[0] == 4  # the refit's own network


@pytest.mark.parametrize(("override", "message"), [
    ("adaptive.workers=0", "field 'adaptive.workers'"),
    ("+adaptive.nope=1", "field 'adaptive.nope': unknown key"),
    ("resume=/no/such/run", "field 'resume': no pacml train-adaptive run"),
    ("refit=/no/such/run", "field 'refit': no pacml train-adaptive teacher search"),
    ("adaptive.minibatch_rows=2000", "field 'adaptive.minibatch_rows': was retired"),
    ("adaptive.neighbours=0", "field 'adaptive.neighbours'"),
    ("refit=SOURCE adaptive.seed=3", "field 'adaptive.seed': a refit reuses"),
    ("adaptive.block_search=-1", "field 'adaptive.block_search'"),
    ("refit=SOURCE adaptive.block_search=64", "field 'adaptive.block_search': a refit reuses"),
])
def test_console_command_bad_input_is_one_line(tmp_path, override: str, message: str) -> None:
    source = tmp_path / "source"
    (source / "conditions").mkdir(parents=True)
    (source / "train_config.yaml").write_text("adaptive: {}\n")
    (source / "conditions" / "0000.npz").write_bytes(b"")
    args = override.replace("SOURCE", str(source)).split()
    proc = subprocess.run([sys.executable, "-c", "from pacml.adaptive.train import main; main()", *args,
                           f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"pacml train-adaptive: error: {message}") and proc.stderr.count("\n") == 1


#: The first adaptive checkpoint, with the settings it was measured with (BENCHMARKS §10); the
#: default (``conf/policy/pacml_adaptive.yaml``) is ``paper_adaptive_knn`` with its own (in the
#: physical scenario's family, ``physical_adaptive_knn``).
MLP_SETTINGS = ["policy.checkpoint=paper_adaptive", "policy.hold_until_window=false",
                "policy.lookup_after_window=false", "policy.selector_margin=0.0", "policy.shadow_margin=3",
                "policy.block_search=0", "policy.condition_critics=null", "policy.shadow_novelty=null"]


@pytest.mark.parametrize(("name", "cluster"), [("paper_adaptive", "ramp32"), ("paper_adaptive", "ramp512"),
                                               ("paper_adaptive_knn", "ramp32"), ("paper_adaptive_knn", "ramp512"),
                                               ("physical_adaptive_knn", "ramp32"),
                                               ("physical_adaptive_knn", "ramp512")])
def test_shipped_adaptive_agent_loads_and_acts(name: str, cluster: str) -> None:
    """The shipped agents hold their training record and decide a short episode on any cluster with
    rules that cluster offers; ``policy=pacml`` (since 2026-12-07 the adaptive agent, as
    ``policy=pacml_adaptive``) takes its scenario family's agent."""
    from pacml.shipped import SHIPPED_DIR

    for file in ("adaptive.npz", "train_config.yaml", "metrics.csv", "train_summary.json"):
        assert (SHIPPED_DIR / name / file).is_file(), file
    family = name.split("_")[0]
    gap = (1000.0 if cluster == "ramp32" else 62.5) / (1000.0 if family == "physical" else 1.0)
    knn = name.endswith("_knn")
    cfg = compose_sim_config([f"scenario={family}", "beta=C", f"cluster={cluster}", f"mean_interarrival_s={gap}",
                              f"horizon_s={150 * gap}", "progress=false", "policy=pacml",
                              *([] if knn else MLP_SETTINGS)])
    assert cfg.policy.checkpoint == (name if knn else "paper_adaptive")  # the family's agent by default
    policy = build_policy(cfg)  # as pacml-sim builds it: the default checkpoint, 8 shadow clusters
    assert isinstance(policy, PacMLPolicy) and policy.meta["conditions"] > 100 and policy.shadow.shadow_rules == 8
    assert (policy.weights.neighbours is not None) == knn and policy.selector.hold_until_window == knn
    assert (policy.selector.lookup_after_window, policy.selector.selector_margin, policy.shadow.shadow_margin, policy.decision.block_search,
            policy.shadow.shadow_blocks, policy.decision.horizon_guard, policy.decision.feasible_fallback) == (
                (True, 0.01, 10, 64, True, True, True) if knn else (False, 0.0, 3, 0, True, True, True))
    # Novel conditions (mean novelty above 0.45) take shadow margin 3; familiar ones keep the shadows' z.
    assert (policy.shadow.shadow_novelty, policy.shadow.shadow_familiar_z, policy.shadow.shadow_novel_margin) == (
        (0.45, policy.shadow.shadow_z, 3) if knn else (None, policy.shadow.shadow_z, 3))  # paper_adaptive holds no reference
    result = build_simulation(cfg, seed=0).run(policy)
    topo = build_topology(cfg)
    # A short episode's start is noisy (the condition estimate has few arrivals): only a sanity bound.
    assert result.summary["num_jobs_arrived"] >= 140 and result.summary["blocking_rate"] < 0.75
    assert set(policy.chosen) <= {r.label for r in rule_candidates(topo)}
    # The selector's best 8 rules shadowed on the paper cluster; every rule above
    # policy.shadow.shadow_all_above_servers (256); the warm-up scaled by servers / 32 on every cluster.
    big = topo.num_servers > policy.shadow.shadow_all_above_servers
    assert big == (cluster != "ramp32") and policy.shadow.shadow_warmup_scales
    assert len(policy.shadows) == (len(rule_candidates(topo)) if big else min(8, len(rule_candidates(topo))))
    assert policy.warmup_jobs == policy.shadow.shadow_warmup * topo.num_servers // 32
    assert all(s.decided == len(policy.chosen) for s in policy.shadows)
    assert all(s.block_search == policy.decision.block_search for s in policy.shadows)  # placed as the agent places


def _load_switch_bench():
    """Import benchmarks/adaptive/bench_rule_switch.py by path (benchmarks/ is not a package)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "adaptive" / "bench_rule_switch.py"
    spec = importlib.util.spec_from_file_location("_bench_rule_switch", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_switched_episode_follows_one_rule_then_the_other() -> None:
    bench = _load_switch_bench()
    cfg = compose_sim_config(["scenario=paper", "beta=D", "horizon_s=60000", "progress=false"])
    rules = {r.label: r for r in rule_candidates(build_topology(cfg))}
    a, b = rules["min_feasible(4)"], rules["min_feasible(6)"]
    alone = {}
    for label, heuristic in (("a", MinFeasible(min_degree=4)), ("b", MinFeasible(min_degree=6))):
        alone[label] = build_simulation(cfg, seed=3).run(heuristic).summary["blocking_rate"]
    assert _run(bench.Switched(a, b, bench.NEVER), cfg, seed=3)[0] == alone["a"]
    assert _run(bench.Switched(a, b, 0), cfg, seed=3)[0] == alone["b"]
    # Switched after 20 jobs: the first 20 decisions are rule a's on the shared prefix, then b's.
    policy = bench.Switched(a, b, 20)
    sim = build_simulation(cfg, seed=3)
    policy.reset(3)
    n = differ = 0
    while (job := sim.next_job()) is not None:
        state = sim.state()
        decision = policy.decide(job, state)
        n += 1
        assert decision.degree == (a if n <= 20 else b).degree(state)
        differ += a.degree(state) != b.degree(state)
        sim.apply(decision)
    assert n > 40 and differ > 10  # the two rules do decide differently here


def test_block_search_places_the_rules_degree_in_the_first_feasible_block() -> None:
    from simulator.policies.heuristics import first_feasible_block

    cfg = compose_sim_config(PAPER_D)
    topo = build_topology(cfg)
    plain = _agent(weights=_Prefer("min_feasible(4)", topo))
    blocks = _agent(weights=_Prefer("min_feasible(4)", topo), block_search=64)
    sim = build_simulation(cfg, seed=5)
    placed = 0
    while (job := sim.next_job()) is not None:
        state = sim.state()
        decision = blocks.decide(job, state)
        same = plain.decide(job, state)
        assert decision.degree == same.degree and same.placement is None  # the rule's degree either way
        block = first_feasible_block(state.feasibility, decision.degree, 64)
        assert decision.placement == (block.servers if block is not None else None)
        placed += decision.placement is not None
        sim.apply(decision)
    assert placed > 0
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="block_search"):
            _agent(weights=_Prefer("min_feasible(4)", topo), block_search=bad)


def test_condition_critic_applies_only_on_its_training_condition() -> None:
    """``policy.condition_critics``: the per-beta D critic is the paper's D at its load; the gate takes
    every whole window of that condition (validation seeds) and none of D at 1500, B at 1000 or the
    physical scenario (the same unit-free condition in milliseconds, drained)."""
    from pacml.adaptive.condition_critics import ConditionCritic
    from pacml.shipped import resolve_checkpoint

    weights, _ = load_adaptive(resolve_checkpoint("paper_adaptive_knn", "adaptive.npz", "adaptive", "policy.checkpoint"))
    assert weights.reference is not None
    critic = ConditionCritic("paper_betaD_critic", weights.reference.std(axis=0), radius=0.4)
    for overrides, expected in ((["scenario=paper", "beta=D"], True),
                                (["scenario=paper", "beta=D", "mean_interarrival_s=1500"], False),
                                (["scenario=paper", "beta=B"], False),
                                (["scenario=physical", "beta=D"], False)):
        cfg = compose_sim_config([*overrides, "progress=false"])
        topology, workload = build_topology(cfg), build_workload(cfg)
        state = SimpleNamespace(topology=topology, horizon_accounting=cfg.horizon_accounting)
        seen = []
        for seed in (500100, 500101):
            tracker = ConditionTracker()
            for job in itertools.islice(workload.jobs(seed), 200):
                tracker.observe(job)
                if tracker.full:
                    seen.append(critic.applies(tracker.features(topology), tracker.log_mean_sequential_s(), state))
        assert len(seen) == 2 * 137 and set(seen) == {expected}, overrides
    with pytest.raises(ConfigError, match="condition_critics"):
        _agent(weights=weights, condition_critics="paper_betaD_critic")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="condition_critic_radius"):
        _agent(weights=weights, condition_critic_radius=-1.0)
    with pytest.raises(ConfigError, match="not a critic one"):
        ConditionCritic("paper_adaptive_knn", weights.reference.std(axis=0), 0.4)


def test_condition_critic_changes_decisions_only_where_it_applies() -> None:
    """On the paper's D the agent with the D critic deviates from its rule on some jobs; on B the
    critic never applies, so every decision is the agent's own."""
    for beta, applies in (("D", True), ("B", False)):
        cfg = compose_sim_config(["scenario=paper", f"beta={beta}", "horizon_s=2e5", "progress=false", "policy=pacml"])
        plain = build_policy(cfg)
        with_critic = _agent(**{**{k: v for k, v in cfg.policy.items() if k != "_target_"},
                                        "condition_critics": ["paper_betaD_critic"]})
        runs = [build_simulation(cfg, seed=500100).run(p) for p in (plain, with_critic)]
        assert (with_critic.condition_critic_seen > 100) == applies and (with_critic.condition_critic_changed > 0) == applies
        if not applies:
            assert runs[0].summary["blocking_rate"] == runs[1].summary["blocking_rate"]
            assert plain.chosen == with_critic.chosen


def test_feasible_fallback_changes_only_degrees_the_job_could_not_take() -> None:
    """``policy.feasible_fallback``: where para_max's paper mask gives a degree the job cannot be
    placed at (or misses its target at), the largest placeable degree below it; otherwise the same."""
    cfg = compose_sim_config(["scenario=paper", "beta=C", "mean_interarrival_s=1500", "horizon_s=3e5",
                              "progress=false", "policy=pacml", "policy.condition_critics=null"])
    changed = 0
    for seed in (500100, 500102):
        plain = build_policy(cfg)
        plain.decision = replace(plain.decision, feasible_fallback=False)
        fallback = build_policy(cfg)
        assert fallback.decision.feasible_fallback
        inner = fallback.decide

        def spy(job, state, inner=inner, plain=plain, placeable=fallback._placeable):
            nonlocal changed
            mine, theirs = inner(job, state), plain.decide(job, state)
            if mine.degree != theirs.degree:
                changed += 1
                assert not placeable(state.feasibility, theirs.degree)
                assert mine.degree < theirs.degree and (mine.degree == 0 or placeable(state.feasibility, mine.degree))
            return mine

        fallback.decide = spy  # type: ignore[method-assign]
        plain.reset(seed)
        build_simulation(cfg, seed=seed).run(fallback)
    assert changed > 0
