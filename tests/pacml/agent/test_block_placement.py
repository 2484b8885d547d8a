"""Learned placement: the agent picks a (degree, free block) pair instead of a degree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pacml.agent.env import ClusterEnv, compose_sim_config
from pacml.agent.features import PLACEMENT_ACTION_FEATURES
from pacml.agent.policy import PacMLBetaPolicy
from pacml.agent.ppo import PPOConfig, Trainer
from simulator.build import build_simulation

SHORT = ["scenario=paper", "beta=C", "horizon_s=3e4"]


@pytest.fixture(scope="module")
def short_config():
    return compose_sim_config(SHORT)


def test_placement_env_passes_the_checker(short_config) -> None:
    env = ClusterEnv(short_config, placement_candidates=3)
    assert env.action_space.n == 1 + 6 * 3
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert obs["actions"].shape == (19, PLACEMENT_ACTION_FEATURES)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 50), per_degree=st.integers(1, 6), picks=st.lists(st.integers(0, 10_000), min_size=30,
                                                                             max_size=30))
def test_candidates_are_exactly_the_feasible_blocks(short_config, seed: int, per_degree: int, picks: list[int]) -> None:
    env = ClusterEnv(short_config, placement_candidates=per_degree)
    env.reset(seed=seed)
    done, step = False, 0
    while not done:
        state = env.current_state()
        table = state.feasibility
        raw = env.raw_observation
        cands, mask = raw["candidates"], raw["action_mask"]
        assert cands[0] == (0, None) and mask[0]
        for j, d in enumerate(table.degrees):
            slots = cands[1 + j * per_degree: 1 + (j + 1) * per_degree]
            blocks = [b for _, b in slots if b is not None]
            # Candidates: the first K free blocks of degree d in first-fit order, all free.
            assert blocks == list(table.free_blocks(d)[:per_degree])
            assert all(not b.mask & state.occupied_mask for b in blocks)
            for k, (dd, b) in enumerate(slots):
                assert dd == d
                assert mask[1 + j * per_degree + k] == (b is not None and table.feasible(d, b))
        valid = np.flatnonzero(mask)
        action = int(valid[picks[step % len(picks)] % len(valid)])
        degree, block = cands[action]
        job_id = env.current_job.job_id
        _, reward, done, _, info = env.step(action)
        assert info["accepted"] == (degree != 0) and reward == (1.0 if degree else -1.0)
        if degree:
            # The job runs inside the chosen block (still running, or already completed).
            held = env.sim.cluster.held.get(job_id)
            if held is not None:
                servers = {state.topology.server_name(s) for s in held.servers}
            else:
                servers = set(next(r for r in env.sim.records if r.job_id == job_id).servers.split())
            assert servers <= {state.topology.server_name(s) for s in block.servers}
        step += 1


def test_learned_placement_trains_and_runs_in_the_simulator(short_config, tmp_path: Path) -> None:
    cfg = PPOConfig(total_steps=64, num_envs=2, num_steps=16, num_minibatches=2, update_epochs=2, hidden_channels=16,
                    num_layers=2, eval_every=1, checkpoint_every=1, time_budget_s=None, eval_seeds=[7],
                    placement_candidates=4, warmstart="auto", warmstart_candidates=[1, 4], warmstart_episodes=1,
                    warmstart_epochs=5, learning_rate=3e-4, gamma=0.99, gae_lambda=0.95, clip_coef=0.2,
                    ent_coef=0.01, target_kl=None)
    Trainer(short_config, cfg, tmp_path).train(progress=False)
    policy = PacMLBetaPolicy(tmp_path / "policy.pt")
    assert policy.encoder.placement_candidates == 4
    sim = build_simulation(short_config, seed=3)
    policy.reset(3)
    placed = 0
    while (job := sim.next_job()) is not None:
        state = sim.state()
        decision = policy.decide(job, state)
        if decision.degree:
            assert decision.placement is not None
            assert any(b.servers == decision.placement for b in state.feasibility.free_blocks(decision.degree))
            placed += 1
        assert sim.apply(decision) is None or decision.degree == 0
    assert placed > 0
    sim.finalize()
