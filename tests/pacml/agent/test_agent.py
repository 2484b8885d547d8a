"""The PAC-ML agent: environment contract, GNN, PPO maths, training, resume and the policy plug-in."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import pacml
from pacml.agent.env import ClusterEnv, compose_sim_config
from pacml.agent.features import ACTION_FEATURES, GLOBAL_FEATURES, GraphFeatures, graph_features
from pacml.agent.model import ActorCritic, GraphEncoder, graph_data
from pacml.agent.policy import PacMLBetaPolicy, load_policy
from pacml.agent.ppo import PPOConfig, Trainer, compute_gae
from simulator.build import build_simulation
from simulator.policy import Decision
from tests.conftest import make_graph
from workloads.graph import TrainingGraph

SHORT = ["scenario=paper", "beta=C", "horizon_s=3e4"]  # 31 arrivals per episode


@pytest.fixture(scope="module")
def short_config():
    return compose_sim_config(SHORT)


# ---------------------------------------------------------------- environment
def test_env_passes_the_gymnasium_checker(short_config) -> None:
    check_env(ClusterEnv(short_config), skip_render_check=True)


def test_env_is_registered() -> None:
    import gymnasium as gym

    env = gym.make(pacml.ENV_ID, overrides=SHORT)
    obs, info = env.reset(seed=3)
    assert env.unwrapped.action_masks().shape == (17,)
    assert obs["globals"].shape == (GLOBAL_FEATURES,)
    assert obs["actions"].shape == (17, ACTION_FEATURES)
    assert info["model"] in {"alexnet", "gnmt", "resnet18", "squeezenet1_0", "vgg16"}


def test_mask_comes_from_the_feasibility_function_and_unmasked_actions_are_accepted(short_config) -> None:
    env = ClusterEnv(short_config)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    done = False
    while not done:
        mask = env.action_masks()
        table = env.sim.state().feasibility
        assert mask[0]
        for d in range(1, 17):
            assert mask[d] == (d in table.degrees and table.feasible(d))
        action = int(rng.choice(np.flatnonzero(mask[1:]) + 1)) if mask[1:].any() else 0
        _, reward, done, truncated, info = env.step(action)
        assert not truncated
        assert info["accepted"] == (action != 0)
        assert reward == (1.0 if action else -1.0)


def test_masked_action_is_applied_as_reject(short_config) -> None:
    env = ClusterEnv(short_config)
    env.reset(seed=1)
    bad = int(np.flatnonzero(~env.action_masks())[0])
    _, reward, _, _, info = env.step(bad)
    assert info["invalid_action"] and reward == -1.0


def test_env_is_deterministic_per_seed(short_config) -> None:
    def rollout() -> list:
        env = ClusterEnv(short_config)
        obs, _ = env.reset(seed=42)
        trace, done = [], False
        while not done:
            action = int(np.flatnonzero(env.action_masks())[-1])
            obs, reward, done, _, _ = env.step(action)
            trace.append((action, reward, obs["globals"].tobytes()))
        return trace

    assert rollout() == rollout()


# ---------------------------------------------------------------- model
def _tiny_graph() -> GraphFeatures:
    g = make_graph("t", [(1.0, 2.0, 5, 1), (3.0, 1.0, 2, 2), (0.5, 0.5, 1, 0), (2.0, 2.0, 4, 4)],
                   [(0, 1), (0, 2), (1, 3), (2, 3)])
    return graph_features(TrainingGraph(g))


def test_model_output_shapes() -> None:
    torch.manual_seed(0)
    model = ActorCritic(hidden_channels=16, num_layers=2)
    emb = model.embed([graph_data(_tiny_graph()), graph_data(_tiny_graph())])
    assert emb.shape == (2, 32)
    logits, value = model(emb, torch.randn(2, GLOBAL_FEATURES), torch.randn(2, 17, ACTION_FEATURES),
                          torch.ones(2, 17, dtype=torch.bool))
    assert logits.shape == (2, 17) and value.shape == (2,)


def test_graph_embedding_is_invariant_to_node_order() -> None:
    torch.manual_seed(0)
    enc = GraphEncoder(hidden_channels=16, num_layers=3)
    data = graph_data(_tiny_graph())
    perm = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(1))
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(len(perm))
    x2 = data.x[perm]
    ei2 = inverse[data.edge_index]
    batch = torch.zeros(data.num_nodes, dtype=torch.long)
    out1 = enc(data.x, data.edge_index, data.edge_attr, batch)
    out2 = enc(x2, ei2, data.edge_attr, batch)
    assert torch.allclose(out1, out2, atol=1e-5)


def test_masked_actions_get_zero_probability() -> None:
    torch.manual_seed(0)
    model = ActorCritic(hidden_channels=16, num_layers=2)
    emb = model.embed([graph_data(_tiny_graph())]).expand(64, -1)
    mask = torch.zeros(64, 17, dtype=torch.bool)
    mask[:, [0, 4, 16]] = True
    logits, _ = model(emb, torch.randn(64, GLOBAL_FEATURES) * 5, torch.randn(64, 17, ACTION_FEATURES) * 5, mask)
    probs = torch.softmax(logits, dim=1)
    assert torch.all(probs[~mask] == 0)
    dist = torch.distributions.Categorical(logits=logits)
    samples = dist.sample((200,))
    assert mask.gather(1, samples.T).all()
    assert torch.isfinite(dist.entropy()).all()


# ---------------------------------------------------------------- PPO maths
def test_gae_matches_a_hand_computed_example() -> None:
    """T=3: rewards 1, 0, 2; values .5, .4, .3; the episode ends at t=1; V(next)=.6.

    t=2: delta = 2 + .9*.6 - .3 = 2.24                     -> A2 = 2.24
    t=1: terminal: delta = 0 - .4 = -.4                      -> A1 = -.4
    t=0: delta = 1 + .9*.4 - .5 = .86; A0 = .86 + .9*.8*(-.4) = .572
    """
    adv, ret = compute_gae(torch.tensor([[1.0], [0.0], [2.0]]), torch.tensor([[0.5], [0.4], [0.3]]),
                           torch.tensor([[0.0], [1.0], [0.0]]), torch.tensor([0.6]), gamma=0.9, gae_lambda=0.8)
    assert torch.allclose(adv.squeeze(), torch.tensor([0.572, -0.4, 2.24]))
    assert torch.allclose(ret.squeeze(), torch.tensor([1.072, 0.0, 2.54]))


def test_gae_with_lambda_one_is_the_discounted_return_minus_value() -> None:
    rewards = torch.tensor([[1.0], [1.0], [1.0]])
    values = torch.zeros(3, 1)
    adv, _ = compute_gae(rewards, values, torch.zeros(3, 1), torch.tensor([10.0]), gamma=0.5, gae_lambda=1.0)
    assert torch.allclose(adv.squeeze(), torch.tensor([1 + 0.5 + 0.25 + 1.25, 1 + 0.5 + 2.5, 1 + 5.0]))


# ---------------------------------------------------------------- training
def _tiny_ppo(**kw) -> PPOConfig:
    base = {"total_steps": 2 * 2 * 16, "num_envs": 2, "num_steps": 16, "num_minibatches": 2, "update_epochs": 2,
                "hidden_channels": 16, "num_layers": 2, "eval_every": 1000, "checkpoint_every": 1, "time_budget_s": None,
                "eval_seeds": [7], "seed": 3,
                # the first agent's PPO settings (the code defaults before they became conf/train.yaml's)
                "learning_rate": 3e-4, "gamma": 0.99, "gae_lambda": 0.95, "clip_coef": 0.2, "ent_coef": 0.01,
                "target_kl": None, "warmstart": None}
    base.update(kw)
    return PPOConfig(**base)


def test_two_update_smoke_training_run(short_config, tmp_path: Path) -> None:
    trainer = Trainer(short_config, _tiny_ppo(eval_every=1), tmp_path)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    summary = trainer.train(progress=False)
    assert summary["updates"] == 2 and summary["global_step"] == 64
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))
    for name in ("checkpoint.pt", "policy.pt", "policy_last.pt", "metrics.csv", "train_summary.json"):
        assert (tmp_path / name).is_file(), name
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0]
    for key in ("losses/policy_loss", "losses/entropy", "losses/approx_kl", "eval/blocking_rate"):
        assert key in header
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_resuming_gives_the_same_next_update_as_not_stopping(short_config, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    straight = Trainer(short_config, _tiny_ppo(total_steps=32), tmp_path / "a")
    straight.train(progress=False)  # update 1, then checkpoint
    shutil.copy(tmp_path / "a" / "checkpoint.pt", tmp_path / "after_one.pt")
    straight.cfg.total_steps = 64
    straight.train(progress=False)  # update 2 without stopping

    resumed = Trainer(short_config, _tiny_ppo(total_steps=64), tmp_path / "b")
    resumed.load_checkpoint(tmp_path / "after_one.pt")
    assert resumed.update == 1
    resumed.train(progress=False)  # update 2 after a restart
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert straight.history[-1]["losses/policy_loss"] == resumed.history[-1]["losses/policy_loss"]


def test_trained_policy_runs_in_the_simulator(short_config, tmp_path: Path) -> None:
    Trainer(short_config, _tiny_ppo(), tmp_path).train(progress=False)
    policy = PacMLBetaPolicy(tmp_path / "policy.pt")
    sim = build_simulation(short_config, seed=11)
    result = sim.run(policy)
    assert result.summary["num_jobs_arrived"] == 31
    model, encoder, meta = load_policy(tmp_path / "policy.pt")
    assert encoder.max_degree == 16 and meta["global_step"] > 0


def test_policy_never_chooses_an_infeasible_degree(short_config, tmp_path: Path) -> None:
    Trainer(short_config, _tiny_ppo(), tmp_path).train(progress=False)
    policy = PacMLBetaPolicy(tmp_path / "policy.pt", deterministic=False)
    sim = build_simulation(short_config, seed=5)
    policy.reset(5)
    while (job := sim.next_job()) is not None:
        state = sim.state()
        decision = policy.decide(job, state)
        assert decision.degree == 0 or state.feasibility.feasible(decision.degree)
        assert sim.apply(decision) is None or decision.degree == 0
    sim.finalize()
    assert Decision(0).degree == 0


def test_warm_start_imitates_the_best_heuristic_candidate(short_config, tmp_path: Path) -> None:
    cfg = _tiny_ppo(total_steps=32, warmstart="auto", warmstart_candidates=[1, 16], warmstart_episodes=1,
                    warmstart_epochs=20, eval_seeds=[7, 8])
    trainer = Trainer(short_config, cfg, tmp_path)
    teacher, scores = trainer.choose_teacher()
    assert set(scores) == {1, 16} and scores[teacher.min_degree] == min(scores.values())
    trainer.train(progress=False)
    first = trainer.history[0]
    assert first["update"] == 0 and first["warmstart/decisions"] == 2 * 30  # 31 arrivals, the last unresolved
    assert first["warmstart/teacher_min_degree"] == teacher.min_degree
    assert first["warmstart/accuracy"] > 0.9
    # The imitation is good enough that the greedy agent blocks like its teacher on validation.
    assert first["eval/blocking_rate"] == pytest.approx(first["warmstart/teacher_val_blocking_rate"], abs=0.07)


def test_time_budget_covers_the_warm_start_and_leaves_time_for_ppo(
        short_config, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Uncapped, this warm start (200 teacher episodes per env, 10,000 epochs) alone would run for
    minutes; with a 4 s budget every phase fits and PPO still gets updates (on a machine so
    loaded that a phase cannot fit, the log must say which and why)."""
    import logging
    import time

    budget_s, tolerance_s = 4.0, 1.0
    cfg = _tiny_ppo(total_steps=10**9, time_budget_s=budget_s, warmstart="auto", warmstart_candidates=[1, 2, 16],
                    warmstart_episodes=200, warmstart_epochs=10_000, eval_every=2, checkpoint_every=3)
    t0 = time.perf_counter()
    trainer = Trainer(short_config, cfg, tmp_path)
    with caplog.at_level(logging.INFO, logger="pacml.agent.ppo"):
        summary = trainer.train(progress=False)
    wall_s = time.perf_counter() - t0
    assert wall_s <= budget_s + tolerance_s, summary
    assert summary["wall_s"] <= budget_s + tolerance_s and summary["stopped_by"] == "time_budget"
    phases = summary["phases_s"]
    warm_s = phases["warmstart_teacher"] + phases.get("warmstart_imitation", 0.0)
    assert warm_s <= cfg.warmstart_budget_frac * budget_s + tolerance_s, phases
    messages = " | ".join(r.getMessage() for r in caplog.records)
    if summary["warmstarted"]:
        assert trainer.history[0]["warmstart/epochs"] < 10_000  # imitation was cut, not skipped
    else:
        assert "warm start skipped: not even one teacher" in messages
    if summary["updates"] > 0:
        assert phases["ppo_rollout"] + phases["ppo_update"] > 0
    else:
        assert "time budget of 4 s:" in messages
    assert summary["warmstarted"] or summary["updates"] > 0, messages  # fails only on a stalled machine
    resumed = Trainer(short_config, cfg, tmp_path)  # the run ends with a valid checkpoint
    assert resumed.resume(tmp_path).name == "checkpoint.pt" and resumed.update == summary["updates"]
    assert resumed.remaining_work() is not None and "time_budget_s=4" in resumed.remaining_work()


def test_a_run_worse_than_its_warm_start_says_so_in_its_log_and_summary(
        short_config, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An imitation too short to learn its teacher (one epoch at lr 1e-9: the agent is its random start)
    validates far above the rule's 0.274 on the same episodes; the run says so, and so does loading it."""
    import json
    import logging

    cfg = _tiny_ppo(eval_every=1, warmstart="auto", warmstart_candidates=[1, 16], warmstart_episodes=1,
                    warmstart_epochs=1, warmstart_lr=1e-9, eval_seeds=[7, 8])
    with caplog.at_level(logging.INFO, logger="pacml.agent.ppo"):
        summary = Trainer(short_config, cfg, tmp_path).train(progress=False)
    saved = json.loads((tmp_path / "train_summary.json").read_text())
    assert saved["teacher_min_degree"] == 16 and saved["teacher_val_blocking_rate"] == pytest.approx(17 / 62)
    assert saved["best_val_blocking_rate"] > saved["teacher_val_blocking_rate"] + 0.1, saved
    assert saved["worse_than_teacher"] is True and summary["worse_than_teacher"] is True
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("worse than its warm-start rule min_feasible(16) at 0.2742" in w
               and "policy=min_feasible +policy.min_degree=16" in w for w in warnings), warnings
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pacml.agent.policy"):
        PacMLBetaPolicy(str(tmp_path / "policy.pt"))
    assert "worse than its warm-start rule min_feasible(16)" in caplog.text
    # Without a warm start there is nothing to compare with: null, not false.
    plain = Trainer(short_config, _tiny_ppo(eval_every=1), tmp_path / "plain").train(progress=False)
    assert plain["worse_than_teacher"] is None and plain["teacher_val_blocking_rate"] is None


def test_the_progress_bar_counts_to_the_budget_the_run_will_use(
        short_config, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A 5 s budget with total_steps=10**9 ends near 10**2-10**4 steps: the bar must not count to 10**9,
    it must end full, and it shows no validation value before any validation ran."""
    cfg = _tiny_ppo(total_steps=10**9, time_budget_s=5.0, eval_every=10**6)
    summary = Trainer(short_config, cfg, tmp_path).train(progress=True)
    bar = capsys.readouterr().err
    assert summary["stopped_by"] == "time_budget" and summary["updates"] > 0
    assert "1000000000" not in bar and "1.00e+9" not in bar and "val=inf" not in bar, bar
    steps = summary["global_step"]
    assert f"{steps}/{steps} [" in bar.replace("\r", "\n").strip().splitlines()[-1], bar
    assert "val=-" in bar


@pytest.mark.parametrize("frac", [0, -0.5, 1.5, float("nan"), True, "half"])
def test_a_bad_warm_start_share_is_refused(short_config, tmp_path: Path, frac) -> None:
    from simulator.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^field 'ppo.warmstart_budget_frac': must be a number in \(0, 1\]"):
        Trainer(short_config, _tiny_ppo(warmstart_budget_frac=frac), tmp_path)


def test_a_budget_too_small_for_any_update_says_so_and_still_checkpoints(
        short_config, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    trainer = Trainer(short_config, _tiny_ppo(total_steps=10**9, time_budget_s=0.01), tmp_path)
    with caplog.at_level(logging.INFO, logger="pacml.agent.ppo"):
        summary = trainer.train(progress=False)
    assert summary["updates"] == 0 and summary["stopped_by"] == "time_budget"
    assert any("time budget" in r.getMessage() and "stopping at step 0" in r.getMessage() for r in caplog.records)
    assert (tmp_path / "checkpoint.pt").is_file() and (tmp_path / "policy.pt").is_file()


def test_a_damaged_checkpoint_falls_back_to_the_previous_one(
        short_config, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from simulator.errors import ConfigError

    Trainer(short_config, _tiny_ppo(total_steps=64), tmp_path).train(progress=False)  # saves at updates 1, 2
    ckpt, prev = tmp_path / "checkpoint.pt", tmp_path / "checkpoint.prev.pt"
    assert torch.load(prev, weights_only=False)["update"] == 1
    ckpt.write_bytes(ckpt.read_bytes()[:1000])  # truncated
    resumed = Trainer(short_config, _tiny_ppo(total_steps=64), tmp_path)
    caplog.clear()  # the first run's own warning (it never validated) is not the resume's
    with caplog.at_level(logging.WARNING, logger="pacml.agent.ppo"):
        assert resumed.resume(tmp_path) == prev
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "checkpoint.prev.pt (update 1" in warnings[0] and "checkpoint.pt" in warnings[0]
    assert "\n" not in warnings[0] and resumed.update == 1
    resumed.train(progress=False)  # the damaged file is replaced; the good previous one is not
    assert torch.load(ckpt, weights_only=False)["update"] == 2
    assert torch.load(prev, weights_only=False)["update"] == 1

    ckpt.write_bytes(b"garbage")
    prev.write_bytes(b"\x00" * 10)
    with pytest.raises(ConfigError, match=r"^field 'resume': no usable checkpoint: cannot read training checkpoint "
                                         r".*checkpoint.pt: not a torch.save archive"):
        Trainer(short_config, _tiny_ppo(), tmp_path).resume(tmp_path)


@pytest.mark.parametrize(("config_text", "problem"), [
    (None, "No such file"), ("ppo: [1, 2\n  bad: {\n", "while parsing a flow sequence"),
    ("[1]\n", "not a pacml train config"), ("beta: C\n", "not a pacml train config")])
def test_resume_with_a_damaged_run_config_is_one_line(tmp_path: Path, config_text: str | None, problem: str) -> None:
    from hydra import compose, initialize_config_dir

    from pacml.agent.train import train_from_config
    from simulator.errors import ConfigError
    from tests.conftest import CONF_DIR

    (tmp_path / "checkpoint.pt").write_bytes(b"not read: the config is checked first")
    if config_text is not None:
        (tmp_path / "train_config.yaml").write_text(config_text)
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(config_name="train", overrides=[f"resume={tmp_path}"])
    with pytest.raises(ConfigError) as info:
        train_from_config(cfg, tmp_path / "unused", [])
    message = str(info.value)
    assert message.startswith("field 'resume': cannot read ") and problem in message and "\n" not in message


SHIPPED = [("paper_betaA", "paper", "A"), ("paper_betaB", "paper", "B"), ("paper_betaC", "paper", "C"),
           ("paper_betaD", "paper", "D"), ("paper_betaA_block", "paper", "A"),
           ("paper_betaB_block", "paper", "B"), ("paper_betaC_block", "paper", "C"),
           ("paper_betaD_block", "paper", "D"), ("physical_betaD", "physical", "D")]


@pytest.mark.parametrize(("name", "scenario", "beta"), SHIPPED)
def test_shipped_checkpoints_load_and_act(name: str, scenario: str, beta: str) -> None:
    """Each shipped agent loads (with the config that trained it) and decides a short episode."""
    from pacml.shipped import SHIPPED_DIR

    folder = SHIPPED_DIR / name
    for file in ("policy.pt", "train_config.yaml", "metrics.csv", "training_curve.png"):
        assert (folder / file).is_file(), file
    policy = PacMLBetaPolicy(name)
    assert policy.meta["ppo"]["mask"] == "feasible"
    assert policy.teacher_min_degree in (1, 2, 4, 6, 8, 16)
    assert (policy.encoder.placement_candidates > 0) == name.endswith("_block")
    horizon_s = 5e4 if scenario == "paper" else 50.0
    cfg = compose_sim_config([f"scenario={scenario}", f"beta={beta}", f"horizon_s={horizon_s}"])
    result = build_simulation(cfg, seed=0).run(policy)
    degrees = {r.degree for r in result.records if r.started}
    assert result.summary["num_jobs_arrived"] >= 50 and degrees <= {1, 2, 4, 6, 8, 16}
    assert result.summary["blocking_rate"] < 0.5


def test_every_shipped_checkpoint_is_tested() -> None:
    from pacml.shipped import SHIPPED_DIR

    # placers/: the learned op placers, tested in tests/pacml/placer/test_learned_placer.py.
    assert sorted(p.name for p in SHIPPED_DIR.iterdir() if p.is_dir() and p.name != "placers") == sorted(
        [n for n, _, _ in SHIPPED] + SHIPPED_CRITICS + ["paper_conditions_scratch"]
        + ["paper_adaptive", "paper_adaptive_knn", "physical_adaptive_knn"])  # tests/pacml/adaptive/test_policy.py


def test_shipped_ppo_from_scratch_over_conditions_loads_and_acts() -> None:
    """The item-5 ablation's agent (PPO from scratch over random conditions, BENCHMARKS.md §10)
    holds its record and decides a short episode of another beta and load."""
    from pacml.shipped import SHIPPED_DIR

    folder = SHIPPED_DIR / "paper_conditions_scratch"
    for file in ("policy.pt", "train_config.yaml", "metrics.csv", "train_summary.json", "training_curve.png"):
        assert (folder / file).is_file(), file
    policy = PacMLBetaPolicy("paper_conditions_scratch")
    assert policy.meta["ppo"]["random_conditions"] and policy.meta["ppo"]["warmstart"] is None
    assert policy.teacher_min_degree is None
    cfg = compose_sim_config(["scenario=paper", "beta=B", "mean_interarrival_s=700", "horizon_s=5e4"])
    result = build_simulation(cfg, seed=0).run(policy)
    assert result.summary["num_jobs_arrived"] >= 50 and {r.degree for r in result.records if r.started} <= {
        1, 2, 4, 6, 8, 16}


SHIPPED_CRITICS = ["paper_betaB_critic", "paper_betaD_critic"]


@pytest.mark.parametrize(("beta", "margin"), [("B", 0.25), ("D", 0.1)])
def test_shipped_critic_loads_and_acts(beta: str, margin: float) -> None:
    """The shipped deviation critic names its agent and margin, and overrides some decisions of
    a short episode with feasible ones."""
    from pacml.critic.policy import PacMLCriticPolicy
    from pacml.shipped import SHIPPED_DIR
    from simulator.build import build_policy

    folder = SHIPPED_DIR / f"paper_beta{beta}_critic"
    for file in ("critic.pt", "distill_config.yaml", "critic_metrics.csv", "distill_summary.json"):
        assert (folder / file).is_file(), file
    cfg = compose_sim_config(["scenario=paper", f"beta={beta}", "horizon_s=2e5", "policy=pacml_critic"])
    policy = build_policy(cfg)
    assert isinstance(policy, PacMLCriticPolicy)
    assert policy.margin_jobs == margin and policy.meta["agent_checkpoint"] == f"paper_beta{beta}"
    result = build_simulation(cfg, seed=0).run(policy)
    assert policy.stats["changed"] > 0
    assert result.summary["num_jobs_arrived"] >= 150 and result.summary["blocking_rate"] < 0.5


def test_pacml_beta_policy_config_picks_the_checkpoint_for_the_beta() -> None:
    from simulator.build import build_policy

    cfg = compose_sim_config(["policy=pacml_beta", "beta=D"])
    assert cfg.policy.checkpoint == "paper_betaD"
    assert isinstance(build_policy(cfg), PacMLBetaPolicy)
    physical = compose_sim_config(["policy=pacml_beta", "scenario=physical", "beta=D"])
    assert physical.policy.checkpoint == "physical_betaD"



def test_old_target_paths_still_build_their_classes() -> None:
    """Configs written before pacml/agent/ name old _target_s (simulator.config.OLD_TARGETS): an old
    run's policy._target_=pacml.policy.PacMLPolicy is the per-beta agent, and every shipped
    train_config.yaml's reward (pacml.rewards.*) builds."""
    from omegaconf import OmegaConf

    from pacml.agent.rewards import JobAcceptance
    from pacml.shipped import SHIPPED_DIR
    from simulator.build import build_policy, check_buildable
    from simulator.config import OLD_TARGETS, import_target, instantiate_checked

    old = compose_sim_config(["policy=pacml_beta", "beta=C"])
    old.policy._target_ = "pacml.policy.PacMLPolicy"
    check_buildable(old)
    assert type(build_policy(old)) is PacMLBetaPolicy
    assert old.policy._target_ == "pacml.policy.PacMLPolicy"  # the caller's config is left as written
    saved = sorted(SHIPPED_DIR.glob("*/train_config.yaml"))
    rewards = [OmegaConf.load(p).get("reward") for p in saved]
    assert any(r is not None and r._target_ == "pacml.rewards.JobAcceptance" for r in rewards)
    for reward in rewards:
        if reward is not None:
            assert isinstance(instantiate_checked(reward, "reward"), JobAcceptance)
    for old_path, new_path in OLD_TARGETS.items():
        assert import_target(old_path, "x") is import_target(new_path, "x")
    # An old run of policy=pacml names the adaptive agent by its module path before pacml/adaptive/.
    from pacml.adaptive.policy import PacMLPolicy

    adaptive = compose_sim_config(["policy=pacml", "beta=C"])
    adaptive.policy._target_ = "pacml.adaptive.AdaptivePolicy"
    check_buildable(adaptive)
    assert type(build_policy(adaptive)) is PacMLPolicy

@pytest.mark.parametrize(("config", "overrides", "name", "field"), [
    ("pacml_beta", ["beta=uniform"], "paper_betaunnamed", "checkpoint"),
    ("pacml_beta", ["beta=fixed"], "paper_betaunnamed", "checkpoint"),
    ("pacml_beta", ["scenario=physical", "beta=A"], "physical_betaA", "checkpoint"),
    ("pacml_beta", ["beta=pmf"], "paper_betapmf", "checkpoint"),
    ("pacml_critic", ["scenario=physical", "beta=D"], "physical_betaD_critic", "critic"),
    ("pacml_critic", ["beta=uniform"], "paper_betaunnamed_critic", "critic"),
])
def test_a_per_beta_agent_without_a_checkpoint_for_the_condition_is_refused(
        config: str, overrides: list[str], name: str, field: str) -> None:
    """No silent fallback to paper_betaA: the default names the run's own condition, and a condition
    without a shipped agent is one line naming those that exist and how to pick one."""
    from simulator.build import build_policy, check_buildable
    from simulator.errors import ConfigError

    cfg = compose_sim_config([f"policy={config}", *overrides])
    assert cfg.policy[field] == name
    with pytest.raises(ConfigError, match=rf"^field 'policy\.{field}': no \w+ checkpoint for ") as err:
        if config == "pacml_beta":
            check_buildable(cfg)  # preflight: refused before any run of a sweep starts
        build_policy(cfg)
    text = str(err.value)
    family, beta = ("physical" if "scenario=physical" in overrides else "paper"), name.split("_beta")[1]
    assert "\n" not in text and "_betaunnamed" not in text and f"policy.{field}=NAME" in text
    assert f" in the {family} scenario family; shipped: " in text
    assert ("paper_betaA, " in text and "physical_betaD" in text) if field == "checkpoint" else "paper_betaD_critic" in text
    if "unnamed" in name:
        assert "for a beta with no name (beta=uniform or beta=fixed) in" in text
    else:
        assert f"for beta {beta.removesuffix('_critic')!r} in" in text
    lookahead = compose_sim_config(["policy=pacml_lookahead", *overrides])
    assert lookahead.policy.default.checkpoint == name.removesuffix("_critic")


def test_policy_pacml_is_the_adaptive_agent_and_each_config_names_the_other_for_its_checkpoints() -> None:
    """``policy=pacml`` is one agent for every beta (the adaptive one); a per-beta checkpoint given to
    it, or an adaptive one given to ``policy=pacml_beta``, is one line naming the config that runs it."""
    from pacml.adaptive.policy import PacMLPolicy
    from pacml.shipped import SHIPPED_DIR
    from simulator.build import build_policy
    from simulator.errors import ConfigError

    for beta in "AD":
        cfg = compose_sim_config(["policy=pacml", f"beta={beta}"])
        assert cfg.policy.checkpoint == "paper_adaptive_knn"
        assert isinstance(build_policy(cfg), PacMLPolicy)
    assert compose_sim_config(["policy=pacml", "scenario=physical"]).policy.checkpoint == "physical_adaptive_knn"
    per_beta = SHIPPED_DIR / "paper_betaC"
    for config, checkpoint, hint in (("pacml", "paper_betaC", "policy=pacml_beta policy.checkpoint=paper_betaC"),
                                     ("pacml", per_beta, f"policy=pacml_beta policy.checkpoint={per_beta}"),
                                     ("pacml", per_beta / "policy.pt", "policy=pacml_beta"),
                                     ("pacml_beta", "paper_adaptive_knn", "policy=pacml policy.checkpoint=")):
        cfg = compose_sim_config([f"policy={config}", f"policy.checkpoint={checkpoint}"])
        with pytest.raises(ConfigError, match=re.escape(hint)) as err:
            build_policy(cfg)
        assert err.value.field == "policy.checkpoint"
    # A policy file saved under a name of its own still loads.
    assert isinstance(PacMLBetaPolicy(str(per_beta / "policy.pt")), PacMLBetaPolicy)


def test_a_json_graph_runs_under_a_trained_agent(tmp_path: Path) -> None:
    """Bring-your-own-graph: a graph in the pacml JSON format (here an fx import of a small
    PyTorch model, rescaled to the paper's job sizes, beside a converted PipeDream graph) runs
    under a shipped agent that never saw it."""
    from pacml.placer.fx.importer import graph_from_module
    from workloads.json_format import write_json_graph
    from workloads.loaders import load_graph_set

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, padding=1),
                              torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))
    fx_graph = graph_from_module(net, torch.randn(8, 3, 32, 32), name="tinynet")
    # One step of ~0.5 ms per op, like the paper's profiles (0.5 units on the paper scenario's clock,
    # which converts the file's seconds).
    scaled = fx_graph.scaled(0.5e-3 * fx_graph.num_ops / float(fx_graph.forward_time_s.sum() + fx_graph.backward_time_s.sum()))
    write_json_graph(scaled, tmp_path / "tinynet.json")
    (alexnet,) = load_graph_set("alexnet", time_unit_s=1.0)
    write_json_graph(alexnet, tmp_path / "alexnet.json")
    cfg = compose_sim_config(["scenario=paper", "beta=C", "horizon_s=1e5", f"workload.graphs={tmp_path}"])
    result = build_simulation(cfg, seed=1).run(PacMLBetaPolicy("paper_betaC"))
    models = {r.model for r in result.records}
    assert models == {"tinynet", "alexnet"}
    assert result.summary["num_jobs_completed"] > 0


def test_pacml_train_command_trains_and_resumes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import json
    import logging
    import subprocess
    import sys

    from hydra import compose, initialize_config_dir

    from pacml.agent.train import train_from_config
    from tests.conftest import CONF_DIR

    run = tmp_path / "run"
    base = [sys.executable, "-c", "from pacml.agent.train import main; main()", "progress=false"]
    tiny = ["beta=C", "horizon_s=3e4", "ppo.num_envs=2", "ppo.num_steps=32", "ppo.warmstart=null",
            "ppo.hidden_channels=16", "ppo.eval_every=2", "ppo.checkpoint_every=1"]

    def train(*args: str) -> subprocess.CompletedProcess:
        # cwd=tmp_path: a resume that made Hydra create a new output folder would show up there
        return subprocess.run([*base, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)

    first = train(*tiny, "ppo.total_steps=128", f"hydra.run.dir={run}")
    assert first.returncode == 0, first.stderr
    assert json.loads((run / "train_summary.json").read_text())["global_step"] == 128
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(config_name="train", overrides=[f"resume={run}"])
    with caplog.at_level(logging.INFO, logger="pacml.agent.train"):
        plain = train_from_config(cfg, tmp_path / "unused", [f"resume={run}"])
    assert plain["global_step"] == 128 and not (tmp_path / "unused").exists()
    assert "nothing to do: run already reached total_steps=128 (step 128); pass ppo.total_steps=N" in caplog.text
    (run / "checkpoint.pt").write_bytes((run / "checkpoint.pt").read_bytes()[:500])  # truncated
    more = train(f"resume={run}", "ppo.total_steps=256")
    assert more.returncode == 0, more.stderr
    assert "resuming from the previous good checkpoint" in more.stdout and "checkpoint.prev.pt" in more.stdout
    assert "with ppo.total_steps=256: training until step 256" in more.stdout
    assert json.loads((run / "train_summary.json").read_text())["global_step"] == 256
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no stray output folder
    assert len(list((run / ".hydra").glob("resume-*"))) >= 1 and (run / ".hydra" / "config.yaml").is_file()
    bad = train(f"resume={tmp_path / 'nowhere'}", f"hydra.run.dir={tmp_path / 'r3'}")
    assert bad.returncode == 2 and bad.stderr.strip().startswith("pacml train: error: field 'resume'")
    assert len(bad.stderr.strip().splitlines()) == 1


# ------------------------------------------------ registration and fail-fast (issue 14, item 11)
def _fresh_python(code: str) -> str:
    """Run ``code`` in a new interpreter (nothing imported yet) and return its stdout."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_gym_make_works_without_importing_pacml_env() -> None:
    out = _fresh_python(
        "import sys, gymnasium as gym\n"
        f"env = gym.make('pacml:' + {pacml.ENV_ID!r}, overrides={SHORT!r})\n"
        "obs, info = env.reset(seed=3)\n"
        "print(type(env.unwrapped).__name__, env.unwrapped.action_masks().shape)\n"
    )
    assert out.split() == ["ClusterEnv", "(17,)"]
    # `import pacml` alone registers the id, without the environment module or torch.
    out = _fresh_python(
        "import sys, gymnasium as gym, pacml\n"
        "print(pacml.ENV_ID in gym.registry, 'pacml.agent.env' in sys.modules, 'torch' in sys.modules)\n"
    )
    assert out.split() == ["True", "False", "False"]


def test_a_missing_checkpoint_fails_before_torch_is_imported() -> None:
    """torch + torch_geometric take ~3 s to import: a typo in policy.checkpoint must not wait."""
    out = _fresh_python(
        "import sys\n"
        "from pacml.agent.policy import PacMLBetaPolicy\n"
        "from simulator.errors import ConfigError\n"
        "try:\n"
        "    PacMLBetaPolicy('no_such_checkpoint')\n"
        "except ConfigError as exc:\n"
        "    print(exc.field, 'torch' in sys.modules, 'paper_betaC' in str(exc))\n"
    )
    assert out.split() == ["policy.checkpoint", "False", "True"]


@pytest.mark.parametrize(("command", "args"), [
    ("simulator.run", ["policy=pacml", "policy.block_search=-1"]),
    ("simulator.run", ["policy=pacml", "policy.condition_critics=[nope]"]),
    ("simulator.run", ["policy=pacml_beta", "beta=uniform"]),
    ("pacml.agent.train", ["ppo.total_steps=0"]),
    ("pacml.agent.train", ["nokey=1"]),
    ("pacml.agent.train", ["policy.block_search=-1"]),  # pacml-sim's: training would ignore it
    ("pacml.critic.distill", ["distill.episodes=0"]),
    ("pacml.adaptive.train", ["nokey=1"]),
    ("pacml.placer.cli", ["net.hidden=0"]),
])
def test_a_config_error_is_reported_before_torch_is_imported(command: str, args: list[str]) -> None:
    """torch takes seconds to import: a bad value must be one line (exit 2) before it."""
    out = _fresh_python(
        "import sys\n"
        f"sys.argv = ['prog', *{args!r}]\n"
        f"from {command} import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    print(exc.code, 'torch' in sys.modules)\n"
    )
    assert out.split() == ["2", "False"]


def test_decisions_run_on_one_torch_thread_and_restore_the_count() -> None:
    """Tiny per-decision tensors: a second intra-op thread only waits (3-4x slower on a busy host)."""
    cfg = compose_sim_config([*SHORT, "policy=pacml_beta"])
    assert cfg.policy.num_threads == 1
    seen: list[int] = []
    policy = PacMLBetaPolicy("paper_betaC")
    decide = policy.probabilities

    def spy(job, obs):
        seen.append(torch.get_num_threads())
        return decide(job, obs)

    policy.probabilities = spy  # type: ignore[method-assign]
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        one = build_simulation(cfg, seed=0).run(policy).summary
        assert seen and set(seen) == {1} and torch.get_num_threads() == 2
        free = PacMLBetaPolicy("paper_betaC", num_threads=None)
        assert build_simulation(cfg, seed=0).run(free).summary["blocking_rate"] == one["blocking_rate"]
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------- PPO over random conditions
def test_cluster_conditions_stay_on_the_run_cluster() -> None:
    from pacml.adaptive.conditions import ClusterConditions
    from simulator.errors import ConfigError

    cluster = compose_sim_config(SHORT).cluster
    sampler = ClusterConditions(cluster, jobs_per_episode=40)
    draws = [sampler(np.random.default_rng([1, i])) for i in range(12)]
    assert draws == [sampler(np.random.default_rng([1, i])) for i in range(12)]  # a function of the RNG
    for over in draws:
        assert {"cluster.num_comm_groups=4", "cluster.num_racks_per_group=4", "cluster.num_servers_per_rack=2",
                "cluster.max_degree=16"} <= set(over)
    assert len({tuple(d) for d in draws}) == 12  # loads, targets and mixes differ
    other = compose_sim_config([*SHORT, "cluster.num_servers_per_rack=3"]).cluster
    with pytest.raises(ConfigError, match="training clusters"):
        ClusterConditions(other)


def test_env_draws_each_episode_condition_and_replays_it(short_config) -> None:
    from pacml.adaptive.conditions import ClusterConditions

    sampler = ClusterConditions(short_config.cluster, jobs_per_episode=25)

    def start(seed: int) -> ClusterEnv:
        env = ClusterEnv(short_config, condition_sampler=sampler)
        env.reset(seed=seed)
        return env

    a, b = start(11), start(11)
    assert a.episode_condition is not None and a.episode_condition == b.episode_condition
    # The episode is the condition's: its horizon (25 arrivals at its gap) and its graph mix.
    over = dict(o.split("=", 1) for o in a.episode_condition)
    assert a.sim.horizon_s == pytest.approx(float(over["horizon_s"])) and a.sim.horizon_s != short_config.horizon_s
    mix = set(over["workload.graphs"].strip("[]").split(","))
    assert {g.name for g in a.sim.workload.training_graphs} == mix
    for _ in range(5):
        a.step(int(np.flatnonzero(a.action_masks())[-1]))
    snap = a.snapshot()
    c = ClusterEnv(short_config, condition_sampler=sampler)
    c.restore(snap)
    assert c.episode_condition == a.episode_condition and c.current_job.job_id == a.current_job.job_id
    np.testing.assert_array_equal(c.raw_observation["globals"], a.raw_observation["globals"])
    # A later episode draws another condition; an evaluation reset (a fixed seed) runs the run's own config.
    first = a.episode_condition
    a.reset()
    assert a.episode_condition != first
    a.reset(options={"sim_seed": 7})
    assert a.episode_condition is None and a.sim.horizon_s == short_config.horizon_s
    # A snapshot of a run from before random conditions (no "condition" key) replays the run's config.
    old = ClusterEnv(short_config)
    old.reset(seed=4)
    old.step(int(np.flatnonzero(old.action_masks())[-1]))
    snap = old.snapshot()
    del snap["condition"]
    d = ClusterEnv(short_config, condition_sampler=sampler)
    d.restore(snap)
    assert d.episode_condition is None and d.current_job.job_id == old.current_job.job_id
    assert [ClusterConditions(short_config.cluster, 25, scenario="physical")(np.random.default_rng(i))[0]
            for i in range(3)] == ["scenario=physical"] * 3


def test_ppo_over_random_conditions_validates_on_fixed_draws_and_resumes_exactly(short_config, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    kw = {"random_conditions": True, "condition_jobs": 6, "val_conditions": 2}
    straight = Trainer(short_config, _tiny_ppo(total_steps=32, **kw), tmp_path / "a")
    assert len(straight.val_conditions) == 2 and all(c is not None for c in straight.val_conditions)
    straight.train(progress=False)
    shutil.copy(tmp_path / "a" / "checkpoint.pt", tmp_path / "after_one.pt")
    straight.cfg.total_steps = 64
    straight.train(progress=False)
    resumed = Trainer(short_config, _tiny_ppo(total_steps=64, **kw), tmp_path / "b")
    assert resumed.val_conditions == straight.val_conditions  # drawn from the run's seed
    resumed.load_checkpoint(tmp_path / "after_one.pt")
    resumed.train(progress=False)
    for (name, x), y in zip(straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    # Episodes of about 6 arrivals end inside each 16-step rollout: conditions were drawn and replayed.
    assert len(straight.episodes) >= 2 and all(env.episode_condition is not None for env in straight.envs)
    assert straight.history[-1]["losses/policy_loss"] == resumed.history[-1]["losses/policy_loss"]
    import pacml.agent.ppo

    horizons = []
    real = pacml.agent.ppo.build_simulation

    def counting(cfg, **kw):
        horizons.append(cfg.horizon_s)
        return real(cfg, **kw)

    pacml.agent.ppo.build_simulation = counting
    try:
        val = straight.evaluate([7, 8])
    finally:
        pacml.agent.ppo.build_simulation = real
    assert val is not None and 0.0 <= val["blocking_rate"] <= 1.0
    want = [float(dict(o.split("=", 1) for o in c)["horizon_s"]) for c in straight.val_conditions]
    assert horizons == pytest.approx([h for h in want for _ in (7, 8)])  # each condition x each seed


def test_random_conditions_need_a_training_cluster(short_config, tmp_path: Path) -> None:
    from simulator.errors import ConfigError

    hetero = compose_sim_config([*SHORT, "cluster=ramp32_hetero"])
    with pytest.raises(ConfigError, match="cluster"):
        Trainer(hetero, _tiny_ppo(random_conditions=True, condition_jobs=12), tmp_path)


def test_compose_condition_is_hydras_composition() -> None:
    """The cached composition random conditions use gives Hydra's config for every draw (both
    scenario families, resized graphs, fixed targets), and leaves the cache untouched."""
    from omegaconf import OmegaConf

    from pacml.adaptive.conditions import sample_condition
    from pacml.agent.env import compose_condition

    for i in range(16):
        over = sample_condition(np.random.default_rng([9, i]), 300, 0.5, "physical" if i % 4 == 0 else "paper")
        if i % 2:  # a resized mix
            count = len(next(o for o in over if o.startswith("workload.graphs=")).split(","))
            over.append(f"workload.time_scales=[{','.join(f'{0.5 + 0.1 * k:.3f}' for k in range(count))}]")
        fast = compose_condition(over)
        fast.mean_interarrival_s = -1.0  # a caller's edit must not reach the cached groups
        fast = OmegaConf.to_container(compose_condition(over), resolve=True)
        assert fast == OmegaConf.to_container(compose_sim_config([*over, "progress=false"]), resolve=True), over
    with_plus = ["scenario=paper", "+policy.min_degree=4", "policy=min_feasible"]
    assert compose_condition(with_plus).policy.min_degree == 4  # not a plain change: Hydra composes it


# ------------------------------------------------ damaged checkpoints: file and cause, never "unpickle it"
class _Foreign:
    """An object no checkpoint of this project holds (a pickle of it would need the class)."""


def _damaged(kind: str, good: Path, dest: Path) -> Path:
    data = good.read_bytes()
    if kind == "truncated":
        dest.write_bytes(data[: len(data) * 3 // 5])
    elif kind == "random":
        dest.write_bytes(np.random.default_rng(0).bytes(5000))
    elif kind == "empty":
        dest.write_bytes(b"")
    elif kind == "pickle":  # a plain pickle of a foreign object: loading it would run its class's code
        import pickle

        dest.write_bytes(pickle.dumps({"format": "x", "obj": _Foreign()}))
    elif kind == "foreign_torch":  # a valid torch.save archive holding a foreign object
        torch.save({"format": "pacml-policy", "obj": _Foreign()}, dest)
    return dest


def _loaders():
    from pacml.adaptive.policy import PacMLPolicy
    from pacml.critic.model import load_critic
    from pacml.placer.checkpoint import load_placer
    from pacml.shipped import SHIPPED_DIR

    return {
        "adaptive.npz": (SHIPPED_DIR / "paper_adaptive_knn" / "adaptive.npz",
                         lambda p: PacMLPolicy(str(p)), "policy.checkpoint"),
        "policy.pt": (SHIPPED_DIR / "paper_betaA" / "policy.pt", lambda p: PacMLBetaPolicy(str(p)), "policy.checkpoint"),
        "critic.pt": (SHIPPED_DIR / "paper_betaD_critic" / "critic.pt", lambda p: load_critic(str(p)), "policy.critic"),
        "placer.pt": (SHIPPED_DIR / "placers" / "placer_step" / "placer.pt", load_placer, "method.checkpoint"),
    }


@pytest.mark.parametrize("damage", ["truncated", "random", "empty", "pickle", "foreign_torch"])
@pytest.mark.parametrize("name", ["adaptive.npz", "policy.pt", "critic.pt", "placer.pt"])
def test_a_damaged_checkpoint_is_one_line_naming_the_file_and_the_cause(tmp_path: Path, name: str, damage: str) -> None:
    """Every checkpoint loader: a ConfigError on its field naming the file and what is wrong with it, and
    nothing that advises loading it unsafely (allow_pickle, weights_only=False, pickle.load)."""
    from simulator.errors import ConfigError

    good, load, field = _loaders()[name]
    bad = _damaged(damage, good, tmp_path / name)
    with pytest.raises(ConfigError) as err:
        load(bad)
    text = str(err.value)
    assert err.value.field == field and "\n" not in text and str(bad) in text, text
    for advice in ("allow_pickle", "weights_only", "pickle.load", "unsafe", "trust"):
        assert advice not in text, text
    if damage in ("truncated", "random", "pickle"):
        assert "truncated, damaged or another kind of file" in text, text
    elif damage == "empty":
        assert text.endswith(": empty file"), text
    elif name.endswith(".pt"):
        assert "objects other than tensors and plain data" in text, text


def test_a_damaged_training_checkpoint_names_the_file_and_the_cause(short_config, tmp_path: Path) -> None:
    from pacml.agent.ppo import CheckpointError

    trainer = Trainer(short_config, _tiny_ppo(total_steps=32), tmp_path)
    trainer.train(progress=False)
    assert trainer.load_checkpoint(tmp_path / "checkpoint.pt") is None  # weights-only loading reads a real one
    bad = _damaged("random", tmp_path / "checkpoint.pt", tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=rf"^cannot read training checkpoint {re.escape(str(bad))}: not a "
                                              r"torch.save archive \(truncated"):
        trainer.load_checkpoint(bad)


def test_a_resumed_run_refuses_a_setting_it_would_ignore(tmp_path: Path) -> None:
    """Only ppo.total_steps, ppo.time_budget_s and progress change on resume; anything else that differs
    from the run's own train_config.yaml is one line naming the key, not silently ignored."""
    from hydra import compose, initialize_config_dir

    from pacml.agent.train import train_from_config
    from simulator.errors import ConfigError
    from tests.conftest import CONF_DIR

    tiny = ["beta=C", "horizon_s=3e4", "ppo.num_envs=2", "ppo.num_steps=16", "ppo.warmstart=null", "progress=false",
            "ppo.hidden_channels=16", "ppo.num_layers=2", "ppo.eval_every=1000", "ppo.total_steps=32"]
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        train_from_config(compose(config_name="train", overrides=tiny), tmp_path / "run")
        for change, key in (("ppo.gamma=0.5", "ppo.gamma"), ("beta=D", "beta")):
            overrides = [f"resume={tmp_path / 'run'}", *tiny, change, "ppo.total_steps=64"]
            with pytest.raises(ConfigError, match=rf"^field '{key}': {key} differs from the resumed run's"):
                train_from_config(compose(config_name="train", overrides=overrides), tmp_path / "unused", overrides)
        same = [f"resume={tmp_path / 'run'}", *tiny, "ppo.total_steps=64"]  # the run's own values: fine
        assert train_from_config(compose(config_name="train", overrides=same), tmp_path / "unused",
                                 same)["global_step"] == 64


def test_the_training_progress_bar_shows_a_dash_until_a_rate_exists() -> None:
    """A rollout that finishes no episode has no blocking rate: the bar shows '-', not nan."""
    from pacml.agent.ppo import postfix_value

    assert postfix_value(float("nan")) == "-" and postfix_value(float("inf")) == "-"
    assert postfix_value(0.12345) == "0.123" and postfix_value(0.0) == "0.000"
