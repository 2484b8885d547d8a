"""PPO with action masking and GAE, in one readable training loop (CleanRL style).

One update = collect ``num_steps`` decisions from each of ``num_envs`` environments (stepped in
lock-step, their policy evaluated in one batch), compute GAE advantages, then run
``update_epochs`` passes of clipped-surrogate minibatch updates. Graph embeddings are computed
once per distinct graph: during rollouts they are cached (parameters do not change), and each
minibatch embeds only the distinct graphs it holds.

Everything that decides the next update is checkpointed atomically: parameters, optimizer, the
torch and numpy RNG states, and each environment's episode seed, actions so far and RNG state
(the simulator is deterministic, so replaying those actions rebuilds the environment exactly).
Resuming from a checkpoint therefore gives the same next update as not stopping.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch.distributions import Categorical
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from pacml.env import ClusterEnv
from pacml.model import ActorCritic, graph_data
from pacml.policy import PacMLPolicy, save_policy
from pacml.rewards import JobAcceptance
from simulator.build import build_simulation
from simulator.policies.heuristics import MinFeasible
from workloads.io import atomic_write, atomic_write_text

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"


@dataclass
class PPOConfig:
    """PPO hyper-parameters and training-loop settings (one docstring per field)."""

    total_steps: int = 500_000
    """Decisions (environment steps, summed over environments) to train for."""
    time_budget_s: float | None = 3600.0
    """Stop after this much wall time (summed over resumed sessions); ``None``: no limit."""
    num_envs: int = 4
    """Environments stepped in lock-step."""
    num_steps: int = 256
    """Steps per environment per rollout (batch = num_envs x num_steps)."""
    learning_rate: float = 3e-4
    """Adam learning rate."""
    anneal_lr: bool = True
    """Linearly anneal the learning rate to 0 over ``total_steps``."""
    gamma: float = 0.99
    """Discount factor (one step = one job arrival)."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    num_minibatches: int = 4
    """Minibatches per epoch."""
    update_epochs: int = 4
    """Passes over each batch."""
    clip_coef: float = 0.2
    """Surrogate clipping coefficient."""
    clip_vloss: bool = True
    """Clip the value loss as PPO2 does."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Gradient clipping norm."""
    target_kl: float | None = None
    """Stop an update's epochs early when the approximate KL exceeds this."""
    hidden_channels: int = 64
    """Width of the GNN and MLPs."""
    num_layers: int = 3
    """GNN message-passing rounds."""
    mask: str = "feasible"
    """Action mask: feasible (placeable and meets target), placeable, or paper."""
    placement_candidates: int = 0
    """0: the agent picks degrees, first-fit places them; K > 0: learned placement over the first
    K free blocks of each degree."""
    warmstart: str | None = None
    """Behaviour-cloning warm start before PPO: ``auto`` imitates the best ``min_feasible``
    variant (smallest feasible degree >= k, k from ``warmstart_candidates``, chosen on the
    validation seeds); ``None`` trains from scratch."""
    warmstart_candidates: list[int] = field(default_factory=lambda: [1, 2, 4, 6, 8, 16])
    """``min_degree`` values of the teacher candidates."""
    warmstart_episodes: int = 4
    """Teacher episodes per environment collected for imitation (value targets need whole episodes)."""
    warmstart_epochs: int = 30
    """Supervised passes over the teacher data."""
    warmstart_lr: float = 1e-3
    """Adam learning rate of the imitation phase (PPO then uses ``learning_rate``)."""
    checkpoint_every: int = 5
    """Updates between checkpoints."""
    eval_every: int = 5
    """Updates between validation runs."""
    eval_seeds: list[int] = field(default_factory=lambda: [500_000, 500_001])
    """Simulation seeds of the validation episodes (greedy policy); best = lowest blocking."""
    seed: int = 0
    """Seed of parameters, sampling and environment episode seeds."""
    torch_threads: int = 1
    """torch intra-op threads (small models: 1 is fastest and deterministic)."""

    @property
    def batch_size(self) -> int:
        """Decisions per update."""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        """Decisions per minibatch."""
        return self.batch_size // self.num_minibatches


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, next_value: torch.Tensor,
                gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a ``(T, N)`` rollout.

    Args:
        rewards: Reward of step t.
        values: Value estimate of the observation at step t.
        dones: 1 if the episode terminated *at* step t (no bootstrap through it).
        next_value: Value of the observation after the last step ``(N,)``.
        gamma: Discount.
        gae_lambda: GAE lambda.

    Returns:
        ``(advantages, returns)``, each ``(T, N)``; returns = advantages + values.
    """
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(steps)):
        following = next_value if t == steps - 1 else values[t + 1]
        alive = 1.0 - dones[t]
        delta = rewards[t] + gamma * following * alive - values[t]
        last = delta + gamma * gae_lambda * alive * last
        advantages[t] = last
    return advantages, advantages + values


class Trainer:
    """Owns the environments, the model and the loop; see the module docstring.

    Args:
        sim_config: The simulator config the environments run (a composed ``conf/sim.yaml``).
        ppo: Hyper-parameters.
        out_dir: Where checkpoints, logs and policies go.
        reward: Reward function (default: +1 accepted / -1 blocked).
    """

    def __init__(self, sim_config: DictConfig, ppo: PPOConfig, out_dir: str | Path,
                 reward: Any = None) -> None:
        self.cfg = ppo
        self.sim_config = sim_config
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(ppo.torch_threads)
        torch.manual_seed(ppo.seed)
        self.rng = np.random.default_rng(ppo.seed)
        reward = reward if reward is not None else JobAcceptance()
        first = ClusterEnv(sim_config, mask=ppo.mask, reward=reward,  # type: ignore[arg-type]
                           placement_candidates=ppo.placement_candidates)
        self.envs = [first] + [ClusterEnv(sim_config, mask=ppo.mask, reward=reward, share_with=first,  # type: ignore[arg-type]
                                          placement_candidates=ppo.placement_candidates)
                               for _ in range(ppo.num_envs - 1)]
        self.model = ActorCritic(hidden_channels=ppo.hidden_channels, num_layers=ppo.num_layers,
                                 action_features=first.encoder.num_action_features)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=ppo.learning_rate, eps=1e-5)
        self.num_actions = self.envs[0].action_space.n
        # The critic predicts returns divided by the discount horizon 1/(1-gamma) (an average
        # reward per step, in [-1, 1] for +-1 rewards): losses stay O(1) whatever gamma is, so
        # the value loss does not swamp the policy gradient under gradient clipping.
        self.value_scale = min(1.0 / (1.0 - ppo.gamma), 1000.0) if ppo.gamma < 1 else 1000.0
        self.graph_ids: dict[str, int] = {}
        self.graph_list: list[Any] = []
        self.update = 0
        self.global_step = 0
        self.elapsed_s = 0.0
        self.best_val = math.inf
        self.warmstarted = False
        self.teacher_min_degree: int | None = None  # the warm-start rule's k (planners reuse it)
        self.history: list[dict[str, float]] = []
        self._writer: SummaryWriter | None = None
        self.episodes: list[dict[str, float]] = []
        for i, env in enumerate(self.envs):
            env.reset(seed=ppo.seed * 1000 + i)

    # ------------------------------------------------------------------ helpers
    def _graph_id(self, env: ClusterEnv) -> int:
        feats = env.raw_observation["graph"]
        gid = self.graph_ids.get(feats.key)
        if gid is None:
            gid = self.graph_ids[feats.key] = len(self.graph_list)
            self.graph_list.append(graph_data(feats))
        return gid

    def _embed_all(self) -> torch.Tensor:
        with torch.no_grad():
            return self.model.embed(self.graph_list)

    def _lr(self) -> float:
        if not self.cfg.anneal_lr:
            return self.cfg.learning_rate
        return self.cfg.learning_rate * max(0.0, 1.0 - self.global_step / self.cfg.total_steps)

    @property
    def writer(self) -> SummaryWriter:
        """TensorBoard writer (created lazily, in ``out/tb``)."""
        if self._writer is None:
            self._writer = SummaryWriter(str(self.out / "tb"))
        return self._writer

    # ------------------------------------------------------------------ one update
    def collect(self) -> dict[str, torch.Tensor]:
        """Roll out ``num_steps`` decisions in every environment."""
        T, N, A = self.cfg.num_steps, self.cfg.num_envs, self.num_actions
        feat_g = self.envs[0].raw_observation["globals"].shape[0]
        feat_a = self.envs[0].raw_observation["actions"].shape[1]
        buf = {
            "graph": torch.zeros(T, N, dtype=torch.long), "globals": torch.zeros(T, N, feat_g),
            "actions": torch.zeros(T, N, A, feat_a), "mask": torch.zeros(T, N, A, dtype=torch.bool),
            "action": torch.zeros(T, N, dtype=torch.long), "logprob": torch.zeros(T, N),
            "reward": torch.zeros(T, N), "done": torch.zeros(T, N), "value": torch.zeros(T, N),
        }
        ids = [self._graph_id(env) for env in self.envs]
        emb = self._embed_all()
        for t in range(T):
            raws = [env.raw_observation for env in self.envs]
            buf["graph"][t] = torch.tensor(ids)
            buf["globals"][t] = torch.from_numpy(np.stack([r["globals"] for r in raws]))
            buf["actions"][t] = torch.from_numpy(np.stack([r["actions"] for r in raws]))
            buf["mask"][t] = torch.from_numpy(np.stack([r["action_mask"] for r in raws]))
            with torch.no_grad():
                logits, value = self.model(emb[buf["graph"][t]], buf["globals"][t], buf["actions"][t], buf["mask"][t])
                value = value * self.value_scale
                dist = Categorical(logits=logits)
                action = dist.sample()
            buf["action"][t], buf["logprob"][t], buf["value"][t] = action, dist.log_prob(action), value
            for i, env in enumerate(self.envs):
                _, reward, terminated, _, info = env.step(int(action[i]))
                buf["reward"][t, i] = reward
                if terminated:
                    buf["done"][t, i] = 1.0
                    s = info["summary"]
                    self.episodes.append({"return": info["episode_return"], "blocking_rate": s["blocking_rate"],
                                          "throughput": s["demand_throughput_Bps"]})
                    env.reset()
                new_id = self._graph_id(env)
                if new_id >= emb.shape[0]:
                    emb = self._embed_all()
                ids[i] = new_id
            self.global_step += N
        raws = [env.raw_observation for env in self.envs]
        with torch.no_grad():
            _, next_value = self.model(emb[torch.tensor(ids)], torch.from_numpy(np.stack([r["globals"] for r in raws])),
                                       torch.from_numpy(np.stack([r["actions"] for r in raws])),
                                       torch.from_numpy(np.stack([r["action_mask"] for r in raws])))
        next_value = next_value * self.value_scale
        buf["advantage"], buf["return"] = compute_gae(buf["reward"], buf["value"], buf["done"], next_value,
                                                      self.cfg.gamma, self.cfg.gae_lambda)
        return buf

    def learn(self, buf: dict[str, torch.Tensor]) -> dict[str, float]:
        """Clipped-surrogate PPO epochs over one rollout; returns loss statistics."""
        cfg = self.cfg
        flat = {k: v.reshape(cfg.batch_size, *v.shape[2:]) for k, v in buf.items()}
        for group in self.optimizer.param_groups:
            group["lr"] = self._lr()
        stats: dict[str, list[float]] = {k: [] for k in ("policy_loss", "value_loss", "entropy", "approx_kl",
                                                          "clipfrac")}
        for _ in range(cfg.update_epochs):
            order = torch.from_numpy(self.rng.permutation(cfg.batch_size))
            kl_epoch = []
            for start in range(0, cfg.batch_size, cfg.minibatch_size):
                mb = order[start:start + cfg.minibatch_size]
                uniq, inverse = torch.unique(flat["graph"][mb], return_inverse=True)
                emb = self.model.embed([self.graph_list[i] for i in uniq.tolist()])[inverse]
                logits, value = self.model(emb, flat["globals"][mb], flat["actions"][mb], flat["mask"][mb])
                dist = Categorical(logits=logits)
                logprob = dist.log_prob(flat["action"][mb])
                entropy = dist.entropy().mean()
                log_ratio = logprob - flat["logprob"][mb]
                ratio = log_ratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - log_ratio).mean()
                    clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()
                adv = flat["advantage"][mb]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = torch.max(-adv * ratio,
                                        -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
                # Value loss in scaled units (see value_scale).
                ret = flat["return"][mb] / self.value_scale
                if cfg.clip_vloss:
                    old = flat["value"][mb] / self.value_scale
                    clipped = old + (value - old).clamp(-cfg.clip_coef, cfg.clip_coef)
                    value_loss = 0.5 * torch.max((value - ret) ** 2, (clipped - ret) ** 2).mean()
                else:
                    value_loss = 0.5 * ((value - ret) ** 2).mean()
                loss = policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss
                self.optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for k, v in (("policy_loss", policy_loss), ("value_loss", value_loss), ("entropy", entropy),
                             ("approx_kl", approx_kl), ("clipfrac", clipfrac)):
                    stats[k].append(float(v.detach()))
                kl_epoch.append(float(approx_kl))
            if cfg.target_kl is not None and np.mean(kl_epoch) > cfg.target_kl:
                break
        y, v = flat["return"], flat["value"]
        var = float(y.var())
        out = {k: float(np.mean(vals)) for k, vals in stats.items()}
        out["explained_variance"] = float("nan") if var == 0 else 1 - float((y - v).var()) / var
        out["learning_rate"] = self._lr()
        return out

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, seeds: list[int], policy: Any = None) -> dict[str, float]:
        """Blocking rate of a policy (default: this greedy agent) on fixed simulation seeds,
        through the simulator's policy interface."""
        if policy is None:
            policy = PacMLPolicy(model=self.model, encoder=self.envs[0].encoder)
        env = self.envs[0]
        rates, thr = [], []
        self.model.eval()
        for seed in seeds:
            sim = build_simulation(self.sim_config, seed=seed, feasibility=env.feasibility, workload=env.workload)
            s = sim.run(policy).summary
            rates.append(s["blocking_rate"])
            thr.append(s["demand_throughput_Bps"])
        self.model.train()
        return {"blocking_rate": float(np.mean(rates)), "throughput": float(np.mean(thr))}

    # ------------------------------------------------------------------ warm start
    def choose_teacher(self) -> tuple[MinFeasible, dict[int, float]]:
        """The ``min_feasible`` variant with the lowest validation blocking rate."""
        scores = {k: self.evaluate(self.cfg.eval_seeds, MinFeasible(k))["blocking_rate"]
                  for k in self.cfg.warmstart_candidates}
        best = min(scores, key=lambda k: (scores[k], k))
        log.info("warm-start teacher candidates (validation blocking): %s -> min_degree=%d", scores, best)
        return MinFeasible(best), scores

    @staticmethod
    def _teacher_action(raw: dict[str, Any], degree: int) -> int:
        """The action index of a teacher's degree: itself, or with learned placement the first
        valid block of that degree (reject if it has none)."""
        if "candidates" not in raw:
            return degree
        for i, (d, _) in enumerate(raw["candidates"]):
            if d == degree and raw["action_mask"][i]:
                return i
        return 0

    def warm_start(self, teacher: Any) -> dict[str, float]:
        """Imitate ``teacher`` (cross-entropy on its actions) and fit the critic to the discounted
        returns of its episodes, before PPO takes over."""
        cfg = self.cfg
        rows: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, int, float]] = []
        for env in self.envs:
            episode: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, int, float]] = []
            done_episodes = 0
            while done_episodes < cfg.warmstart_episodes:
                raw = env.raw_observation
                action = self._teacher_action(raw, teacher.decide(env.current_job, env.current_state()).degree)
                gid = self._graph_id(env)
                _, reward, terminated, _, _ = env.step(action)
                episode.append((gid, raw["globals"], raw["actions"], raw["action_mask"], action, reward))
                if terminated:
                    ret = 0.0
                    for gid_, g, a, m, act, r in reversed(episode):  # discounted return-to-go
                        ret = r + cfg.gamma * ret
                        rows.append((gid_, g, a, m, act, ret))
                    episode = []
                    done_episodes += 1
                    env.reset()
        data = {
            "graph": torch.tensor([r[0] for r in rows]), "globals": torch.from_numpy(np.stack([r[1] for r in rows])),
            "actions": torch.from_numpy(np.stack([r[2] for r in rows])),
            "mask": torch.from_numpy(np.stack([r[3] for r in rows])),
            "action": torch.tensor([r[4] for r in rows]), "return": torch.tensor([r[5] for r in rows]),
        }
        n = len(rows)
        batch = max(cfg.minibatch_size, 256)
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.warmstart_lr
        losses: list[tuple[float, float, float]] = []
        for _ in range(cfg.warmstart_epochs):
            order = torch.from_numpy(self.rng.permutation(n))
            for start in range(0, n, batch):
                mb = order[start:start + batch]
                uniq, inverse = torch.unique(data["graph"][mb], return_inverse=True)
                emb = self.model.embed([self.graph_list[i] for i in uniq.tolist()])[inverse]
                logits, value = self.model(emb, data["globals"][mb], data["actions"][mb], data["mask"][mb])
                ce = torch.nn.functional.cross_entropy(logits, data["action"][mb])
                vloss = 0.5 * ((value - data["return"][mb] / self.value_scale) ** 2).mean()
                loss = ce + cfg.vf_coef * vloss
                self.optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                with torch.no_grad():
                    acc = float((logits.argmax(1) == data["action"][mb]).float().mean())
                losses.append((float(ce.detach()), float(vloss.detach()), acc))
        last = losses[-max(1, len(losses) // cfg.warmstart_epochs):]
        return {"warmstart/decisions": float(n), "warmstart/cross_entropy": float(np.mean([x[0] for x in last])),
                "warmstart/value_loss": float(np.mean([x[1] for x in last])),
                "warmstart/accuracy": float(np.mean([x[2] for x in last]))}

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this trainer is."""
        return {"format": "pacml-train", "version": 1, "update": self.update, "global_step": self.global_step,
                "elapsed_s": self.elapsed_s, "best_val": self.best_val, "history": self.history,
                "warmstarted": self.warmstarted, "teacher_min_degree": self.teacher_min_degree,
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(), "np_rng": self.rng.bit_generator.state,
                "envs": [env.snapshot() for env in self.envs], "graph_keys": list(self.graph_ids),
                "ppo": asdict(self.cfg), "sim_config": OmegaConf.to_container(self.sim_config, resolve=True)}

    def save_checkpoint(self) -> Path:
        """Write ``checkpoint.pt`` atomically (and the latest policy as ``policy_last.pt``)."""
        buf = io.BytesIO()
        torch.save(self.state_dict(), buf)
        path = atomic_write(self.out / CHECKPOINT, lambda fh: fh.write(buf.getvalue()))
        save_policy(self.out / "policy_last.pt", self.model, self.envs[0].encoder, self._meta())
        return path

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore a :meth:`state_dict` written by :meth:`save_checkpoint`."""
        state = torch.load(path, map_location="cpu", weights_only=False)
        self.update, self.global_step = state["update"], state["global_step"]
        self.elapsed_s, self.best_val, self.history = state["elapsed_s"], state["best_val"], state["history"]
        self.warmstarted = state.get("warmstarted", False)
        self.teacher_min_degree = state.get("teacher_min_degree")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for env, snap in zip(self.envs, state["envs"], strict=True):
            env.restore(snap)
        # Graph ids must map to the same graphs as before (rollout buffers refer to them).
        self.graph_ids, self.graph_list = {}, []
        by_key = {g.fingerprint: g for g in self.envs[0].workload.training_graphs}
        for key in state["graph_keys"]:
            self.graph_ids[key] = len(self.graph_list)
            self.graph_list.append(graph_data(self.envs[0].encoder.graph(by_key[key])))
        torch.set_rng_state(state["torch_rng"])
        self.rng.bit_generator.state = state["np_rng"]

    def _meta(self) -> dict[str, Any]:
        return {"update": self.update, "global_step": self.global_step, "best_val_blocking_rate": self.best_val,
                "teacher_min_degree": self.teacher_min_degree, "ppo": asdict(self.cfg)}

    def _log(self, row: dict[str, float]) -> None:
        self.history.append(row)
        for key, value in row.items():
            if key not in ("update", "global_step", "wall_s") and value == value:
                self.writer.add_scalar(key, value, int(row["global_step"]))
        keys = sorted({k for r in self.history for k in r})
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=keys)
        writer.writeheader()
        writer.writerows(self.history)
        atomic_write_text(self.out / "metrics.csv", out.getvalue())

    # ------------------------------------------------------------------ the loop
    def train(self, progress: bool = True) -> dict[str, Any]:
        """Train until ``total_steps`` or the time budget; returns the final metrics."""
        cfg = self.cfg
        start = time.perf_counter() - self.elapsed_s
        if cfg.warmstart and self.update == 0 and not self.warmstarted:
            teacher, scores = self.choose_teacher()
            stats = self.warm_start(teacher)
            self.warmstarted = True
            self.teacher_min_degree = teacher.min_degree
            val = self.evaluate(cfg.eval_seeds)
            self.best_val = val["blocking_rate"]
            save_policy(self.out / "policy.pt", self.model, self.envs[0].encoder, self._meta())
            self.elapsed_s = time.perf_counter() - start
            self._log({"update": 0, "global_step": 0, "wall_s": self.elapsed_s, **stats,
                       "warmstart/teacher_min_degree": float(teacher.min_degree),
                       "warmstart/teacher_val_blocking_rate": scores[teacher.min_degree],
                       "eval/blocking_rate": val["blocking_rate"], "eval/throughput_Bps": val["throughput"]})
            log.info("warm start: %s; greedy validation blocking %.4f", stats, val["blocking_rate"])
        bar = tqdm(total=cfg.total_steps, initial=self.global_step, disable=not progress, unit="step",
                   desc="pacml-train", mininterval=1.0)
        while self.global_step < cfg.total_steps:
            if cfg.time_budget_s is not None and time.perf_counter() - start >= cfg.time_budget_s:
                log.info("time budget of %.0f s reached at step %d", cfg.time_budget_s, self.global_step)
                break
            t0, step0 = time.perf_counter(), self.global_step
            self.episodes = []
            buf = self.collect()
            stats = self.learn(buf)
            self.update += 1
            self.elapsed_s = time.perf_counter() - start
            row = {"update": self.update, "global_step": self.global_step, "wall_s": self.elapsed_s,
                   "charts/SPS": (self.global_step - step0) / (time.perf_counter() - t0),
                   **{f"losses/{k}": v for k, v in stats.items() if k != "learning_rate"},
                   "charts/learning_rate": stats["learning_rate"],
                   "charts/reward_per_step": float(buf["reward"].mean())}
            if self.episodes:
                row["charts/episodic_return"] = float(np.mean([e["return"] for e in self.episodes]))
                row["charts/blocking_rate"] = float(np.mean([e["blocking_rate"] for e in self.episodes]))
            if self.update % cfg.eval_every == 0:
                val = self.evaluate(cfg.eval_seeds)
                row["eval/blocking_rate"] = val["blocking_rate"]
                row["eval/throughput_Bps"] = val["throughput"]
                if val["blocking_rate"] < self.best_val:
                    self.best_val = val["blocking_rate"]
                    save_policy(self.out / "policy.pt", self.model, self.envs[0].encoder, self._meta())
            self._log(row)
            if self.update % cfg.checkpoint_every == 0:
                self.save_checkpoint()
            bar.update(self.global_step - bar.n)
            bar.set_postfix(block=f"{row.get('charts/blocking_rate', float('nan')):.3f}",
                            val=f"{self.best_val:.3f}", sps=f"{row['charts/SPS']:.0f}")
        bar.close()
        self.save_checkpoint()
        if not (self.out / "policy.pt").exists():
            save_policy(self.out / "policy.pt", self.model, self.envs[0].encoder, self._meta())
        if self._writer is not None:
            self._writer.close()
        summary = {"updates": self.update, "global_step": self.global_step, "wall_s": self.elapsed_s,
                   "best_val_blocking_rate": self.best_val}
        atomic_write_text(self.out / "train_summary.json", json.dumps(summary, indent=2) + "\n")
        return summary
