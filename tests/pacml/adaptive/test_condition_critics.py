"""Condition critics (pacml/adaptive/condition_critics.py): where they apply and what they change."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from pacml.adaptive.selector import ConditionTracker, load_adaptive
from pacml.agent.env import compose_sim_config
from simulator.build import build_policy, build_simulation, build_topology, build_workload
from simulator.errors import ConfigError
from tests.pacml.adaptive.helpers import _agent


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
