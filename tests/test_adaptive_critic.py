"""The adaptive agent's deviation critic (pacml/adaptive_critic.py): planner targets, collection,
the override at decision time, and the training command."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from pacml.adaptive import AdaptivePolicy, Rule
from pacml.adaptive_critic import (
    CollectSettings,
    CriticTrainConfig,
    collect_episode,
    episode_overrides,
    train,
)
from pacml.critic import DeviationCritic, load_critic, save_critic
from pacml.env import compose_sim_config
from simulator.build import build_simulation, build_workload
from simulator.errors import ConfigError
from simulator.policies.lookahead import RolloutLookahead
from simulator.policy import Decision

PAPER_C = ["scenario=paper", "beta=C", "horizon_s=120000", "progress=false"]


def _states(overrides: list[str], seed: int = 3, every: int = 7):
    """Yield (job, state, workload) every ``every``-th arrival of an episode decided by min_feasible(4)."""
    cfg = compose_sim_config(overrides)
    workload = build_workload(cfg)
    sim = build_simulation(cfg, seed=seed, workload=workload)
    rule = Rule("min_feasible", 4)
    i = 0
    while (job := sim.next_job()) is not None:
        state = sim.state()
        if i % every == every - 1:
            yield job, state, workload
        i += 1
        sim.apply(Decision(rule.degree(state)))


def test_planner_scores_under_a_rule_equal_the_base_rules_own() -> None:
    """Rollouts decided by ``Rule('min_feasible', k).degree_for`` are the planner's own base rule:
    the same expected blocked jobs for every candidate, on the same futures."""
    planner = RolloutLookahead(None, rollout_min_degree=4, window_jobs=30, num_futures=4, seed=1)
    rule = Rule("min_feasible", 4)
    checked = changed = 0
    for _job, state, workload in _states(PAPER_C):
        planner.bind(workload)
        table = state.feasibility
        candidates = [0, *(d for d in table.degrees if table.feasible(d))]
        futures = planner.sample_futures()
        own = planner.scores(state, candidates, futures)
        assert planner.scores(state, candidates, futures, rule.degree_for) == own
        # Another rule is another rollout policy: the scores follow it.
        other = planner.scores(state, candidates, futures, Rule("min_feasible", 1).degree_for)
        changed += other != own
        checked += 1
    assert checked >= 10 and changed > 0


def test_collected_episode_scores_exactly_the_feasible_degrees(tmp_path) -> None:
    cfg = CollectSettings(episodes=1, jobs_per_episode=60, plan_frac=0.5, window_jobs=20, num_futures=2,
                          core_frac=1.0)
    over = episode_overrides(cfg, 0)
    assert over == episode_overrides(cfg, 0) and over != episode_overrides(cfg, 1)
    assert "cluster.num_servers_per_rack=2" in over  # the paper's 32 servers (4 x 4 x 2)
    stats = collect_episode(cfg, 0, tmp_path / "0000.npz")
    with np.load(tmp_path / "0000.npz") as data:
        meta = json.loads(bytes(data["meta"]).decode())
        assert meta["overrides"] == over and meta["scored"] == stats["scored"] > 0
        scores, actions, agent = data["scores"], data["actions"], data["agent_action"]
        n = len(scores)
        assert data["globals"].shape[0] == data["servers"].shape[0] == data["take"].shape[0] == n
        assert actions.shape == (n, 17, 12) and data["servers"].shape == (n, 32, 2)
        # Scored where a degree is feasible (the take rows say so) and for reject, nowhere else.
        feasible = data["take"][:, :, -1] > 0
        feasible[:, 0] = True
        assert np.array_equal(~np.isnan(scores), feasible)
        # The agent's action is flagged, scored, and at least one other option was scored.
        assert np.all(actions[np.arange(n), agent, -1] == 1.0) and np.all(actions[:, :, -1].sum(1) == 1)
        assert np.all(~np.isnan(scores[np.arange(n), agent])) and np.all(feasible.sum(1) > 1)
        # Rejecting blocks the arriving job: never scored below 1.
        assert np.all(scores[:, 0] >= 1.0)


def _critic_file(tmp_path, keen: bool | None, servers: int = 32, margin: float = 0.1):
    """A critic scoring ``-5 x degree`` when ``keen`` (the largest feasible degree looks best by
    at least 5 jobs a step), ``+5 x degree`` when ``keen is None`` (rejecting looks best), else 0
    for every action."""
    critic = DeviationCritic(33 + 32 * 2, 12 + 33, hidden=8)
    with torch.no_grad():
        for p in critic.parameters():
            p.zero_()
        if keen is not False:  # action column 1 is degree / max degree (16): relu(d / 16) * -80 = -5 d
            critic.head[0].weight[0, 8 + 1] = 1.0
            critic.head[2].weight[0, 0] = -80.0 if keen else 80.0
    path = tmp_path / f"critic_{keen}_{servers}.pt"
    save_critic(path, critic, {"kind": "adaptive", "num_servers": servers, "margin_jobs": margin,
                               "agent_checkpoint": "paper_adaptive"})
    return path


def _episode(policy: AdaptivePolicy, overrides: list[str], seed: int = 11) -> tuple[list[int], list[int]]:
    """The degrees ``policy`` gave, and the largest feasible degree at each decision (0: none)."""
    sim = build_simulation(compose_sim_config(overrides), seed=seed)
    policy.reset(seed)
    out, largest = [], []
    while (job := sim.next_job()) is not None:
        state = sim.state()
        table = state.feasibility
        largest.append(max((d for d in table.degrees if table.feasible(d)), default=0))
        d = policy.decide(job, state)
        out.append(d.degree)
        sim.apply(d)
    return out, largest


def test_critic_overrides_with_feasible_degrees_only_and_only_on_its_cluster_size(tmp_path) -> None:
    alone = _episode(AdaptivePolicy("paper_adaptive"), PAPER_C)[0]
    # A critic that rates every degree alike never changes a decision.
    flat = AdaptivePolicy("paper_adaptive", critic=_critic_file(tmp_path, False))
    assert _episode(flat, PAPER_C)[0] == alone and flat.critic_changed == 0
    # One that rates larger degrees better takes the largest feasible degree, never an infeasible one.
    keen = AdaptivePolicy("paper_adaptive", critic=_critic_file(tmp_path, True))
    assert keen.critic_margin == 0.1  # the critic's recorded margin
    got, largest = _episode(keen, PAPER_C)
    assert keen.critic_changed > 0 and got != alone
    assert got == largest
    # With a margin above anything it predicts it never overrides.
    shy = AdaptivePolicy("paper_adaptive", critic=_critic_file(tmp_path, True), critic_margin=1000.0)
    assert _episode(shy, PAPER_C)[0] == alone and shy.critic_changed == 0
    # One that rates rejecting best (and small degrees better than large) never rejects a job
    # some degree can take: it takes small degrees instead.
    rejecter = AdaptivePolicy("paper_adaptive", critic=_critic_file(tmp_path, None))
    got, largest = _episode(rejecter, PAPER_C)
    assert rejecter.critic_changed > 0
    assert all(g > 0 for g, top in zip(got, largest, strict=True) if top > 0)
    # Trained on another cluster size: ignored here.
    other = AdaptivePolicy("paper_adaptive", critic=_critic_file(tmp_path, True, servers=64))
    assert _episode(other, PAPER_C)[0] == alone and other.critic_changed == 0


def test_critic_options_are_checked(tmp_path) -> None:
    with pytest.raises(ConfigError, match="policy.critic_margin"):
        AdaptivePolicy("paper_adaptive", critic_margin=-0.5)
    with pytest.raises(ConfigError, match="per-beta critic"):
        AdaptivePolicy("paper_adaptive", critic="paper_betaD_critic")
    with pytest.raises(ConfigError, match="policy.critic"):
        AdaptivePolicy("paper_adaptive", critic=tmp_path / "missing.pt")


def test_train_end_to_end_resumes_and_picks_a_margin(tmp_path) -> None:
    cfg = CriticTrainConfig(episodes=2, jobs_per_episode=60, plan_frac=0.5, window_jobs=20, num_futures=2,
                            core_frac=1.0, workers=1, time_budget_s=600, epochs=3, hidden=16, margins=[0.1, 1.0],
                            val_conditions=2)
    summary = train(cfg, tmp_path, progress=False)
    assert summary["episodes"] == 2 and summary["decisions"] > 0
    assert set(summary["validation_blocking"]) == {"agent", "0.1", "1"}
    critic, meta = load_critic(tmp_path)
    assert meta["kind"] == "adaptive" and meta["num_servers"] == 32
    assert meta["margin_jobs"] in (0.1, 1.0)
    stamp = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "episodes").iterdir()}
    again = train(cfg, tmp_path, progress=False)  # resumed: nothing collected again
    assert again["decisions"] == summary["decisions"]
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "episodes").iterdir()} == stamp


@pytest.mark.parametrize(("override", "message"), [
    ("critic.plan_frac=2", "field 'critic.plan_frac'"),
    ("critic.margins=[]", "field 'critic.margins'"),
    ("+critic.nope=1", "field 'critic.nope': unknown key"),
])
def test_console_command_bad_input_is_one_line(tmp_path, override: str, message: str) -> None:
    proc = subprocess.run([sys.executable, "-c", "from pacml.adaptive_critic import main; main()", override,
                           f"hydra.run.dir={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"pacml-train-adaptive-critic: error: {message}"), proc.stderr
    assert proc.stderr.count("\n") == 1
