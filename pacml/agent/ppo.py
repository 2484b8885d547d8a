"""PPO with action masking and GAE, in one readable training loop (CleanRL style).

One update collects ``num_steps`` decisions from each of ``num_envs`` lock-stepped environments,
computes GAE advantages and runs ``update_epochs`` passes of clipped-surrogate minibatch updates;
each distinct graph is embedded once per rollout or minibatch. Checkpoints hold everything the
next update depends on, so a resumed run makes the same next update; the time budget covers every
phase, the warm start included (docs/policies.md, "The per-beta agents").
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch.distributions import Categorical
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from pacml.adaptive.conditions import TRAIN_GRAPHS, ClusterConditions
from pacml.agent.env import ClusterEnv, compose_condition
from pacml.agent.model import ActorCritic, graph_data
from pacml.agent.policy import PacMLBetaPolicy, save_policy
from pacml.agent.ppo_config import PPOConfig
from pacml.agent.rewards import JobAcceptance
from pacml.runfiles import (
    CHECKPOINT,
    PREVIOUS_CHECKPOINT,
    load_torch_file,
    write_checkpoint,
    write_metrics_csv,
)
from simulator.build import build_simulation, build_workload
from simulator.errors import ConfigError
from simulator.policies.heuristics import MinFeasible
from workloads.io import atomic_write_text

log = logging.getLogger(__name__)

#: Seconds always kept free for the final checkpoint and the summary (twice the last save if longer).
DEFAULT_SAVE_RESERVE_S = 1.0

#: Cumulative shares of the warm start's time: teacher choice, teacher episodes, imitation, validation.
WARMSTART_PHASE_ENDS = (("teacher", 0.25), ("collect", 0.55), ("fit", 0.8), ("validate", 1.0))


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable or does not fit this run."""


def _first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of an exception, for one-line reports."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def postfix_value(value: float) -> str:
    """A rate in the progress bar's postfix: three decimals, or ``-`` while there is none (NaN)."""
    return f"{value:.3f}" if math.isfinite(value) else "-"


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, next_value: torch.Tensor,
                gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a ``(T, N)`` rollout: ``(advantages, returns)``.

    ``dones[t]`` is 1 if the episode terminated at step t (no bootstrap through it);
    ``next_value`` ``(N,)`` values the observation after the last step.
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

    ``sim_config`` is a composed ``conf/sim.yaml``; ``reward`` defaults to +1 accepted / -1
    blocked; ``started_at`` is the ``perf_counter()`` value the session's budget counts from
    (default: now).
    """

    def __init__(self, sim_config: DictConfig, ppo: PPOConfig, out_dir: str | Path,
                 reward: Any = None, started_at: float | None = None) -> None:
        # The budget clock starts here at the latest: building environments is part of the run's time.
        self._session_start = time.perf_counter() if started_at is None else started_at
        self._origin = self._session_start  # perf_counter() value at elapsed time 0 (all sessions)
        frac = ppo.warmstart_budget_frac
        if isinstance(frac, bool) or not isinstance(frac, int | float) or not 0 < frac <= 1:
            raise ConfigError(f"must be a number in (0, 1], got {frac!r}", field="ppo.warmstart_budget_frac")
        self.cfg = ppo
        self.sim_config = sim_config
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(ppo.torch_threads)
        torch.manual_seed(ppo.seed)
        self.rng = np.random.default_rng(ppo.seed)
        reward = reward if reward is not None else JobAcceptance()
        sampler = None
        #: Validation conditions (overrides; ``[None]``: the run's own config).
        self.val_conditions: list[list[str] | None] = [None]
        if ppo.random_conditions:
            sampler = ClusterConditions(sim_config.cluster, ppo.condition_jobs,
                                        scenario=str(sim_config.get("scenario_family", "paper")))
            if isinstance(ppo.val_conditions, bool) or not (isinstance(ppo.val_conditions, int)
                                                            and ppo.val_conditions >= 1):
                raise ConfigError(f"must be an integer >= 1, got {ppo.val_conditions!r}", field="ppo.val_conditions")
            val_rng = np.random.default_rng([ppo.seed, 7919])
            self.val_conditions = [sampler(val_rng) for _ in range(ppo.val_conditions)]
            drawn = compose_condition(self.val_conditions[0])
            want = OmegaConf.to_container(drawn.cluster, resolve=True)
            have = OmegaConf.to_container(sim_config.cluster, resolve=True)
            if want != have:
                # The envs share one feasibility engine: every condition must run on the run's cluster.
                assert isinstance(want, dict) and isinstance(have, dict)
                keys = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
                raise ConfigError("random conditions run on the scenario's plain RAMP clusters (e.g. cluster=ramp32, "
                                  f"ramp64, ramp512); this cluster differs from that RAMP in {', '.join(keys)}",
                                  field="cluster")
            log.info("random conditions on this cluster: each episode draws its beta, arrival process, load, "
                     "graph mix and horizon (%d arrivals), replacing the run's own; validation: %s x seeds %s",
                     ppo.condition_jobs, "; ".join(" ".join(o for o in c if not o.startswith("cluster."))
                                                   for c in self.val_conditions), list(ppo.eval_seeds))
        self._condition_scenario = sampler.scenario if sampler is not None else None
        self._val_setups: list[tuple[Any, Any]] | None = None
        env_args = {"mask": ppo.mask, "reward": reward, "placement_candidates": ppo.placement_candidates,
                    "condition_sampler": sampler}
        first = ClusterEnv(sim_config, **env_args)  # type: ignore[arg-type]
        self.envs = [first] + [ClusterEnv(sim_config, share_with=first, **env_args)  # type: ignore[arg-type]
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
        #: The warm-start rule's validation blocking rate (same episodes as the agent's validations).
        self.teacher_val: float | None = None
        self.history: list[dict[str, float]] = []
        self.phase_s: dict[str, float] = {}  # wall time per phase, summed over sessions
        self.timing: dict[str, float] = {}  # last measured update_s, eval_s, save_s (budget planning)
        self._checkpoint_good = False  # out/checkpoint.pt is one this run wrote or read successfully
        self._setup_counted = False
        self._saved_update: int | None = None  # update of the last checkpoint written this session
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

    def elapsed(self) -> float:
        """Wall time of the run so far (every session, from each trainer's creation)."""
        return time.perf_counter() - self._origin

    @contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        """Add the wall time of the ``with`` body to phase ``name``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phase_s[name] = self.phase_s.get(name, 0.0) + time.perf_counter() - t0

    def _final_deadline(self) -> float:
        """The ``perf_counter()`` value by which work must stop so the final checkpoint still fits
        in the time budget (``inf`` without a budget)."""
        if self.cfg.time_budget_s is None:
            return math.inf
        reserve_s = max(DEFAULT_SAVE_RESERVE_S, 2 * self.timing.get("save_s", 0.0))
        return self._origin + self.cfg.time_budget_s - reserve_s

    @property
    def writer(self) -> SummaryWriter:
        """TensorBoard writer (created lazily, in ``out/tb``)."""
        if self._writer is None:
            self._writer = SummaryWriter(str(self.out / "tb"))
        return self._writer

    # ------------------------------------------------------------------ one update
    def collect(self, deadline: float = math.inf) -> dict[str, torch.Tensor] | None:
        """Roll out ``num_steps`` decisions in every environment.

        Returns ``None`` (and leaves ``global_step`` as it was) if ``deadline`` (a
        ``perf_counter()`` value) passes first: the environments then stand where the rollout
        stopped, which a checkpoint records exactly.
        """
        T, N, A = self.cfg.num_steps, self.cfg.num_envs, self.num_actions
        step0 = self.global_step
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
            if time.perf_counter() > deadline:
                self.global_step = step0
                return None
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

    def learn(self, buf: dict[str, torch.Tensor], deadline: float = math.inf) -> dict[str, float]:
        """Clipped-surrogate PPO epochs over one rollout; returns loss statistics.

        Past ``deadline`` (a ``perf_counter()`` value) the remaining minibatches are skipped, as
        ``target_kl`` skips epochs (at least one minibatch always runs)."""
        cfg = self.cfg
        flat = {k: v.reshape(cfg.batch_size, *v.shape[2:]) for k, v in buf.items()}
        for group in self.optimizer.param_groups:
            group["lr"] = self._lr()
        stats: dict[str, list[float]] = {k: [] for k in ("policy_loss", "value_loss", "entropy", "approx_kl",
                                                          "clipfrac")}
        out_of_time = False
        for _ in range(cfg.update_epochs):
            order = torch.from_numpy(self.rng.permutation(cfg.batch_size))
            kl_epoch = []
            for start in range(0, cfg.batch_size, cfg.minibatch_size):
                if stats["policy_loss"] and time.perf_counter() > deadline:
                    out_of_time = True
                    break
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
            if out_of_time or (cfg.target_kl is not None and np.mean(kl_epoch) > cfg.target_kl):
                break
        y, v = flat["return"], flat["value"]
        var = float(y.var())
        out = {k: float(np.mean(vals)) for k, vals in stats.items()}
        out["explained_variance"] = float("nan") if var == 0 else 1 - float((y - v).var()) / var
        out["learning_rate"] = self._lr()
        return out

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, seeds: list[int], policy: Any = None,
                 deadline: float = math.inf) -> dict[str, float] | None:
        """Blocking rate of a policy (default: this greedy agent) on fixed simulation seeds,
        through the simulator's policy interface.

        Returns ``None`` if ``deadline`` (a ``perf_counter()`` value) passes before every seed's
        episode is done (a partial average would not compare with other validations).
        """
        if policy is None:
            policy = PacMLBetaPolicy(model=self.model, encoder=self.envs[0].encoder)
        env = self.envs[0]
        rates, thr = [], []
        if self._val_setups is None:  # built once: every validation runs the same conditions
            self._val_setups = []
            for condition in self.val_conditions:
                if condition is None:
                    self._val_setups.append((self.sim_config, env.workload))
                else:
                    cfg = compose_condition(condition)
                    self._val_setups.append((cfg, build_workload(cfg)))
        setups = self._val_setups
        self.model.eval()
        try:
            for sim_config, workload, seed in [(c, w, seed) for c, w in setups for seed in seeds]:
                sim = build_simulation(sim_config, seed=seed, feasibility=env.feasibility, workload=workload)
                bind = getattr(policy, "bind", None)
                if callable(bind):
                    bind(sim.workload)
                policy.reset(seed)
                while (job := sim.next_job()) is not None:
                    if time.perf_counter() > deadline:
                        return None
                    sim.apply(policy.decide(job, sim.state()))
                s = sim.finalize().summary
                rates.append(s["blocking_rate"])
                thr.append(s["demand_throughput_Bps"])
        finally:
            self.model.train()
        return {"blocking_rate": float(np.mean(rates)), "throughput": float(np.mean(thr))}

    # ------------------------------------------------------------------ warm start
    def choose_teacher(self, deadline: float = math.inf,
                       hard_deadline: float | None = None) -> tuple[MinFeasible | None, dict[int, float]]:
        """The ``min_feasible`` variant with the lowest validation blocking rate.

        Candidates are compared in order while the next one (timed like the last) fits before
        ``deadline``; the first may run until ``hard_deadline`` (default ``deadline``). Returns
        ``(None, {})`` if not even the first candidate's validation fitted.
        """
        hard = deadline if hard_deadline is None else hard_deadline
        scores: dict[int, float] = {}
        last_s = 0.0
        for k in self.cfg.warmstart_candidates:
            t0 = time.perf_counter()
            if scores and t0 + last_s > deadline:
                break
            result = self.evaluate(self.cfg.eval_seeds, MinFeasible(k), deadline=deadline if scores else hard)
            if result is None:
                break
            scores[k] = result["blocking_rate"]
            last_s = time.perf_counter() - t0
        if not scores:
            return None, scores
        best = min(scores, key=lambda k: (scores[k], k))
        cut = len(scores) < len(self.cfg.warmstart_candidates)
        log.info("warm-start teacher candidates (validation blocking): %s -> min_degree=%d%s", scores, best,
                 f" (time budget: {len(scores)} of {len(self.cfg.warmstart_candidates)} candidates compared)"
                 if cut else "")
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

    def warm_start(self, teacher: Any, collect_deadline: float = math.inf,
                   fit_deadline: float = math.inf) -> dict[str, float] | None:
        """Imitate ``teacher`` (cross-entropy on its actions) and fit the critic to the discounted
        returns of its episodes, before PPO takes over.

        Teacher episodes stop at ``collect_deadline`` (only whole episodes are kept: value targets
        need them) and imitation epochs at ``fit_deadline`` (``perf_counter()`` values). Returns
        ``None`` if no whole teacher episode fitted.
        """
        cfg = self.cfg
        rows: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, int, float]] = []
        out_of_time = False
        for env in self.envs:
            if out_of_time:
                break
            episode: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, int, float]] = []
            done_episodes = 0
            while done_episodes < cfg.warmstart_episodes:
                if time.perf_counter() > collect_deadline:
                    out_of_time = True
                    break
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
        if not rows:
            return None
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
        epochs = 0
        for _ in range(cfg.warmstart_epochs):
            if losses and time.perf_counter() > fit_deadline:
                break
            epochs += 1
            order = torch.from_numpy(self.rng.permutation(n))
            for start in range(0, n, batch):
                if losses and time.perf_counter() > fit_deadline:
                    break
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
        last = losses[-max(1, len(losses) // epochs):]
        if out_of_time or epochs < cfg.warmstart_epochs:
            log.info("warm start cut by the time budget: %d decisions, %d of %d imitation epochs",
                     n, epochs, cfg.warmstart_epochs)
        return {"warmstart/decisions": float(n), "warmstart/epochs": float(epochs),
                "warmstart/cross_entropy": float(np.mean([x[0] for x in last])),
                "warmstart/value_loss": float(np.mean([x[1] for x in last])),
                "warmstart/accuracy": float(np.mean([x[2] for x in last]))}

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this trainer is."""
        return {"format": "pacml-train", "version": 1, "update": self.update, "global_step": self.global_step,
                "elapsed_s": self.elapsed_s, "best_val": self.best_val, "history": self.history,
                "phase_s": self.phase_s, "timing": self.timing,
                "warmstarted": self.warmstarted, "teacher_min_degree": self.teacher_min_degree,
                "teacher_val": self.teacher_val,
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(), "np_rng": self.rng.bit_generator.state,
                "envs": [env.snapshot() for env in self.envs], "graph_keys": list(self.graph_ids),
                "ppo": asdict(self.cfg), "sim_config": OmegaConf.to_container(self.sim_config, resolve=True)}

    def save_checkpoint(self) -> Path:
        """Write ``checkpoint.pt`` (:func:`pacml.runfiles.write_checkpoint`, keeping one this run
        wrote or read as ``checkpoint.prev.pt``) and the latest policy as ``policy_last.pt``."""
        t0 = time.perf_counter()
        self.elapsed_s = self.elapsed()
        path = write_checkpoint(self.out, self.state_dict(), keep_previous=self._checkpoint_good)
        self._checkpoint_good = True
        self._saved_update = self.update
        save_policy(self.out / "policy_last.pt", self.model, self.envs[0].encoder, self._meta())
        self.timing["save_s"] = time.perf_counter() - t0
        return path

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore a :meth:`state_dict` written by :meth:`save_checkpoint`.

        Raises:
            CheckpointError: The file is missing, truncated or garbled, or was written by a run
                with another model or workload.
        """
        path = Path(path)
        if not path.is_file():
            raise CheckpointError(f"{path}: no such file")
        try:
            state = load_torch_file(path, "training checkpoint")
        except ValueError as exc:
            raise CheckpointError(str(exc)) from None
        missing = [k for k in ("update", "global_step", "elapsed_s", "best_val", "history", "model", "optimizer",
                               "torch_rng", "np_rng", "envs", "graph_keys")
                   if not isinstance(state, dict) or k not in state]
        if not isinstance(state, dict) or state.get("format") != "pacml-train" or missing:
            raise CheckpointError(f"{path}: not a pacml train checkpoint"
                                  + (f" (missing {', '.join(missing)})" if missing else ""))
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            for env, snap in zip(self.envs, state["envs"], strict=True):
                env.restore(snap)
            # Graph ids must map to the same graphs as before (rollout buffers refer to them).
            graph_ids, graph_list = {}, []
            by_key = {g.fingerprint: g for g in self.envs[0].workload.training_graphs}
            if self._condition_scenario is not None:  # episodes drew mixes of every training graph
                every = build_workload(compose_condition([f"scenario={self._condition_scenario}",
                                                          f"workload.graphs=[{','.join(TRAIN_GRAPHS)}]"]))
                by_key |= {g.fingerprint: g for g in every.training_graphs}
            for key in state["graph_keys"]:
                graph_ids[key] = len(graph_list)
                graph_list.append(graph_data(self.envs[0].encoder.graph(by_key[key])))
            torch.set_rng_state(state["torch_rng"])
            self.rng.bit_generator.state = state["np_rng"]
        except Exception as exc:  # shape, key and replay errors all mean "not this run's state"
            raise CheckpointError(f"{path}: does not fit this run ({_first_line(exc)})") from exc
        self.graph_ids, self.graph_list = graph_ids, graph_list
        self.update, self.global_step = state["update"], state["global_step"]
        self.elapsed_s, self.best_val, self.history = state["elapsed_s"], state["best_val"], state["history"]
        self.phase_s = dict(state.get("phase_s", {}))
        self.timing = dict(state.get("timing", {}))
        self.warmstarted = state.get("warmstarted", False)
        self.teacher_min_degree = state.get("teacher_min_degree")
        self.teacher_val = state.get("teacher_val")
        # This session's time counts on top of the earlier sessions'.
        self._origin = self._session_start - self.elapsed_s
        self._checkpoint_good = path.resolve() == (self.out / CHECKPOINT).resolve()

    def resume(self, target: str | Path) -> Path:
        """Restore from a run directory's ``checkpoint.pt`` (or a checkpoint file), falling back to
        ``checkpoint.prev.pt`` beside it if that one is damaged; returns the file used (a
        ConfigError on ``resume`` if neither is usable)."""
        target = Path(target)
        first = target / CHECKPOINT if target.is_dir() else target
        candidates = [first]
        if first.name != PREVIOUS_CHECKPOINT:
            candidates.append(first.parent / PREVIOUS_CHECKPOINT)
        problems: list[str] = []
        for path in candidates:
            if not path.is_file() and path != first:
                continue
            try:
                self.load_checkpoint(path)
            except CheckpointError as exc:
                problems.append(str(exc))
                continue
            if problems:
                log.warning("resuming from the previous good checkpoint %s (update %d, step %d): %s",
                            path, self.update, self.global_step, "; ".join(problems))
            return path
        raise ConfigError(f"no usable checkpoint: {'; '.join(problems)}", field="resume")

    def _meta(self) -> dict[str, Any]:
        return {"update": self.update, "global_step": self.global_step, "best_val_blocking_rate": self.best_val,
                "teacher_min_degree": self.teacher_min_degree, "teacher_val_blocking_rate": self.teacher_val,
                "ppo": asdict(self.cfg)}

    def _log(self, row: dict[str, float]) -> None:
        self.history.append(row)
        for key, value in row.items():
            if key not in ("update", "global_step", "wall_s") and value == value:
                self.writer.add_scalar(key, value, int(row["global_step"]))
        write_metrics_csv(self.out / "metrics.csv", self.history, sort_columns=True)

    # ------------------------------------------------------------------ the loop
    def remaining_work(self) -> str | None:
        """Why this run has nothing left to do (``total_steps`` reached, or no update fits in the
        time budget), or ``None`` if it can train further."""
        cfg = self.cfg
        if self.global_step >= cfg.total_steps:
            return f"run already reached total_steps={cfg.total_steps} (step {self.global_step})"
        if cfg.time_budget_s is not None:
            left_s = self._final_deadline() - time.perf_counter()
            need_s = self.timing.get("update_s", 0.0)
            if left_s <= need_s:
                return (f"run already used {self.elapsed_s:.0f} s of time_budget_s={cfg.time_budget_s:g} "
                        f"(step {self.global_step}; an update takes ~{need_s:.1f} s)")
        return None

    def _warm_start_phase(self, deadline: float) -> None:
        """Teacher choice, imitation and its validation, within ``warmstart_budget_frac`` of the
        time left before ``deadline`` (each sub-phase stops at its cumulative share)."""
        cfg = self.cfg
        t0 = time.perf_counter()
        share_s = cfg.warmstart_budget_frac * (deadline - t0)
        ends = {name: t0 + frac * share_s for name, frac in WARMSTART_PHASE_ENDS}
        with self._phase("warmstart_teacher"):
            teacher, scores = self.choose_teacher(ends["teacher"], hard_deadline=ends["validate"])
        stats = None
        if teacher is not None:
            with self._phase("warmstart_imitation"):
                stats = self.warm_start(teacher, ends["collect"], ends["fit"])
        if teacher is None or stats is None:
            log.info("warm start skipped: not even one %s fitted in its %.1f s share of the time budget",
                     "teacher validation" if teacher is None else "teacher episode", share_s)
            return
        self.warmstarted = True
        self.teacher_min_degree = teacher.min_degree
        self.teacher_val = scores[teacher.min_degree]
        row = {"update": 0, "global_step": 0, **stats,
               "warmstart/teacher_min_degree": float(teacher.min_degree),
               "warmstart/teacher_val_blocking_rate": scores[teacher.min_degree]}
        t_eval = time.perf_counter()
        with self._phase("validation"):
            val = self.evaluate(cfg.eval_seeds, deadline=ends["validate"])
        if val is None:
            log.info("warm start: no time left in its share to validate it")
        else:
            self.timing["eval_s"] = time.perf_counter() - t_eval
            self.best_val = val["blocking_rate"]
            row.update({"eval/blocking_rate": val["blocking_rate"], "eval/throughput_Bps": val["throughput"]})
        save_policy(self.out / "policy.pt", self.model, self.envs[0].encoder, self._meta())
        self.elapsed_s = self.elapsed()
        self._log({**row, "wall_s": self.elapsed_s})
        log.info("warm start: %s; greedy validation blocking %s", stats,
                 "skipped" if val is None else f"{val['blocking_rate']:.4f}")

    def train(self, progress: bool = True) -> dict[str, Any]:
        """Train until ``total_steps`` or the time budget; returns the final metrics.

        Every phase counts against ``time_budget_s`` (see the module docstring); the run always
        ends with a checkpoint, whose writing the budget reserves time for.
        """
        cfg = self.cfg
        if not self._setup_counted:  # environments built (and a checkpoint replayed) this session
            self._setup_counted = True
            self.phase_s["setup"] = self.phase_s.get("setup", 0.0) + time.perf_counter() - self._session_start
        deadline = self._final_deadline()
        if cfg.warmstart and self.update == 0 and not self.warmstarted:
            self._warm_start_phase(deadline)
        bar = tqdm(total=self._planned_steps(), initial=self.global_step, disable=not progress, unit="step",
                   desc="pacml-train", mininterval=1.0)
        stopped_by = "total_steps"
        block = float("nan")  # the latest finished episodes' blocking rate; a rollout may finish none
        while self.global_step < cfg.total_steps:
            deadline = self._final_deadline()
            left_s, need_s = deadline - time.perf_counter(), self.timing.get("update_s", 0.0)
            if left_s <= need_s:
                stopped_by = "time_budget"
                log.info("time budget of %g s: stopping at step %d (%.1f s left, an update takes ~%.1f s)",
                         cfg.time_budget_s, self.global_step, max(left_s, 0.0), need_s)
                break
            t0, step0 = time.perf_counter(), self.global_step
            self.episodes = []
            with self._phase("ppo_rollout"):
                buf = self.collect(deadline)
            if buf is None:
                stopped_by = "time_budget"
                log.info("time budget of %g s: a rollout of %d steps did not fit in the %.1f s left; "
                         "stopping at step %d", cfg.time_budget_s, cfg.batch_size, left_s, self.global_step)
                break
            with self._phase("ppo_update"):
                stats = self.learn(buf, deadline)
            self.update += 1
            self.timing["update_s"] = time.perf_counter() - t0
            self.elapsed_s = self.elapsed()
            row = {"update": self.update, "global_step": self.global_step, "wall_s": self.elapsed_s,
                   "charts/SPS": (self.global_step - step0) / (time.perf_counter() - t0),
                   **{f"losses/{k}": v for k, v in stats.items() if k != "learning_rate"},
                   "charts/learning_rate": stats["learning_rate"],
                   "charts/reward_per_step": float(buf["reward"].mean())}
            if self.episodes:
                row["charts/episodic_return"] = float(np.mean([e["return"] for e in self.episodes]))
                row["charts/blocking_rate"] = float(np.mean([e["blocking_rate"] for e in self.episodes]))
            if self.update % cfg.eval_every == 0:
                self._validate(row, self._final_deadline())
            self._log(row)
            if self.update % cfg.checkpoint_every == 0:
                with self._phase("checkpoints"):
                    self.save_checkpoint()
            bar.total = self._planned_steps()
            bar.update(self.global_step - bar.n)
            block = row.get("charts/blocking_rate", block)
            bar.set_postfix(block=postfix_value(block), val=postfix_value(self.best_val),
                            sps=f"{row['charts/SPS']:.0f}")
        bar.total = bar.n  # where the run ended is its whole budget
        bar.close()
        with self._phase("checkpoints"):
            if self._saved_update != self.update:  # else the last one is current, and kept as prev
                self.save_checkpoint()
            if not (self.out / "policy.pt").exists():
                save_policy(self.out / "policy.pt", self.model, self.envs[0].encoder, self._meta())
        if self._writer is not None:
            self._writer.close()
        self.elapsed_s = self.elapsed()
        phases = {k: round(v, 3) for k, v in self.phase_s.items()}
        # Worse than the rule it was warm-started from, on the same validation episodes (None: no teacher
        # or no validation to compare).
        worse = (None if self.teacher_val is None or not math.isfinite(self.best_val)
                 else self.best_val > self.teacher_val)
        summary = {"updates": self.update, "global_step": self.global_step, "wall_s": self.elapsed_s,
                   "best_val_blocking_rate": self.best_val, "time_budget_s": cfg.time_budget_s,
                   "stopped_by": stopped_by, "warmstarted": self.warmstarted, "phases_s": phases,
                   "teacher_min_degree": self.teacher_min_degree, "teacher_val_blocking_rate": self.teacher_val,
                   "worse_than_teacher": worse}
        # Strict JSON: no validation ran (a budget too short for one) is null, not Infinity.
        finite = math.isfinite(self.best_val)
        atomic_write_text(self.out / "train_summary.json",
                          json.dumps({**summary, "best_val_blocking_rate": self.best_val if finite else None},
                                     indent=2) + "\n")
        if not finite:
            log.warning("no validation ran within the budget: policy.pt is the last policy, not a validated one")
        if worse:
            log.warning("policy.pt validates at %.4f blocking, worse than its warm-start rule min_feasible(%d) at "
                        "%.4f on the same episodes: it is no better than that rule (train longer with "
                        "ppo.time_budget_s, or run the rule: pacml sim policy=min_feasible +policy.min_degree=%d)",
                        self.best_val, self.teacher_min_degree, self.teacher_val, self.teacher_min_degree)
        log.info("stopped by %s after %.1f s (budget %s); phases (s): %s", stopped_by, self.elapsed_s,
                 "none" if cfg.time_budget_s is None else f"{cfg.time_budget_s:g} s",
                 ", ".join(f"{k} {v:.1f}" for k, v in phases.items()))
        return summary

    def _planned_steps(self) -> int | None:
        """The step the run will stop at: ``total_steps``, or fewer where the time budget ends first
        (projected from the last update's, validation's and save's durations); ``None`` (no total
        shown) while no update has been timed under a budget."""
        cfg = self.cfg
        if cfg.time_budget_s is None:
            return cfg.total_steps
        update_s = self.timing.get("update_s")
        if not update_s:
            return None
        per_update_s = (update_s + self.timing.get("eval_s", 0.0) / cfg.eval_every
                        + self.timing.get("save_s", 0.0) / cfg.checkpoint_every)
        updates = max(0, math.floor((self._final_deadline() - time.perf_counter()) / per_update_s))
        return min(cfg.total_steps, self.global_step + updates * cfg.batch_size)

    def _validate(self, row: dict[str, float], deadline: float) -> None:
        """Run the scheduled validation into ``row`` if it fits before ``deadline``; keep the best
        policy as ``policy.pt``."""
        need_s = self.timing.get("eval_s", 0.0)
        if time.perf_counter() + need_s > deadline:
            log.info("time budget: skipping the validation at update %d (takes ~%.1f s)", self.update, need_s)
            return
        t0 = time.perf_counter()
        with self._phase("validation"):
            val = self.evaluate(self.cfg.eval_seeds, deadline=deadline)
        if val is None:
            log.info("time budget: the validation at update %d did not finish; skipped", self.update)
            return
        self.timing["eval_s"] = time.perf_counter() - t0
        row["eval/blocking_rate"] = val["blocking_rate"]
        row["eval/throughput_Bps"] = val["throughput"]
        if val["blocking_rate"] < self.best_val:
            self.best_val = val["blocking_rate"]
            save_policy(self.out / "policy.pt", self.model, self.envs[0].encoder, self._meta())
