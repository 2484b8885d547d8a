"""The selector (pacml/adaptive/selector.py): rules, condition features, weights, the lookup, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

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
from pacml.agent.env import compose_sim_config
from simulator.build import build_simulation, build_topology
from simulator.errors import ConfigError
from simulator.policies.heuristics import MinFeasible, ParaMax
from simulator.policy import Decision
from tests.pacml.adaptive.helpers import SHORT, _agent, _mlp


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
