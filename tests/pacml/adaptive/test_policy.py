"""The adaptive agent (pacml/adaptive/policy.py): the selector's picks, shadow clusters, placement."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest

from pacml.adaptive.policy import PacMLPolicy, ShadowCluster
from pacml.adaptive.selector import (
    CONDITION_FEATURES,
    RULE_FEATURES,
    Rule,
    SelectorWeights,
    rule_candidates,
    rule_features,
    save_adaptive,
)
from pacml.agent.env import compose_sim_config
from simulator.build import build_policy, build_simulation, build_topology
from simulator.errors import ConfigError
from simulator.policies.heuristics import MinFeasible, ParaMax
from tests.pacml.adaptive.helpers import SHORT, _agent

#: An episode well past the selector's 64-arrival window (about 200 arrivals).
PAST_WINDOW = ["scenario=paper", "beta=B", "horizon_s=200000", "progress=false"]


class _Prefer:
    """Stand-in selector weights that score one rule's feature row 1 and every other 0."""

    def __init__(self, label: str, topology) -> None:
        rules = rule_candidates(topology)
        self.row = rule_features(rules[[r.label for r in rules].index(label)], topology)

    def scores(self, cond, rules, lookup=True):
        return np.all(rules == self.row, axis=1).astype(float)


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


def test_shadow_options_are_checked() -> None:
    for key, bad in (("shadow_rules", -1), ("shadow_rules", 1.5), ("shadow_warmup", -1), ("shadow_margin", -2),
                     ("shadow_z", float("nan")),
                     ("shadow_all_above_servers", 0), ("shadow_all_above_servers", 2.5),
                     ("shadow_novelty", -1.0),
                     ("shadow_novelty", float("inf")), ("shadow_familiar_z", float("nan")),
                     ("shadow_blocks", 1), ("shadow_blocks", "yes"), ("horizon_guard", 1), ("feasible_fallback", "no")):
        with pytest.raises(ConfigError, match=key):
            _agent(weights=SelectorWeights([]), **{key: bad})


def test_an_agent_run_with_another_placement_than_its_labels_says_so(tmp_path, caplog) -> None:
    weights = SelectorWeights([(np.zeros((2, CONDITION_FEATURES + RULE_FEATURES)), np.zeros(2)),
                               (np.zeros((1, 2)), np.zeros(1))])
    save_adaptive(tmp_path / "blocks.npz", weights, {"train_config": {"block_search": 64}})
    with caplog.at_level(logging.WARNING, logger="pacml.adaptive.policy"):
        _agent(tmp_path / "blocks.npz", block_search=64)
        assert not caplog.records
        _agent(tmp_path / "blocks.npz", block_search=0)
    assert len(caplog.records) == 1 and "trained on rules placed with block_search=64" in caplog.records[0].message


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
