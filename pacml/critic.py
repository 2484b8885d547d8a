"""A deviation critic distilled from the rollout planner: the planner's quality at the agent's cost.

The rollout planner (:class:`simulator.policies.lookahead.RolloutLookahead`) estimates, for every
feasible degree, how many jobs will be blocked over the next arrivals. Imitating its *choices*
fails: they are rare (3-8 % of decisions), marginal and noisy, and the agent's features only
summarise the cluster. This module instead regresses the planner's *estimates*:

    delta(s, d) = expected blocked jobs after choosing d - after the agent's action,

from features that say which servers are busy until when and which servers each degree would
take (:func:`pacml.agent.features.server_features`, :func:`pacml.agent.features.take_features`). At decision
time :class:`PacMLCriticPolicy` keeps the agent's action unless the critic predicts that another
feasible action blocks at least ``margin_jobs`` fewer jobs. Costs one small MLP forward pass.

Training data come from ``pacml distill`` (:mod:`pacml.distill`).
"""

from __future__ import annotations

import functools
import io
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pacml.agent.features import server_features, take_features
from pacml.agent.policy import PacMLBetaPolicy, load_payload
from simulator.cluster import ClusterState
from simulator.errors import ConfigError
from simulator.policy import Decision
from workloads.io import atomic_write
from workloads.jobs import JobSpec

CRITIC_FORMAT = "pacml-critic-v1"


class DeviationCritic(nn.Module):
    """Predicts expected blocked jobs per action, up to a per-state constant.

    A state trunk (globals + per-server state) and one head shared by all actions over (trunk,
    action features + the servers the action takes). Both inputs are standardised with
    statistics of the training data (:func:`standardiser`): the actions of one state often differ
    in a single small feature (degree 2 vs 4 is 0.125 apart in ``a / max degree``), and unscaled,
    whether the head learns that interaction at all depended on float rounding (the same seed
    learned with AVX-512 kernels and stayed at chance with AVX2 or one thread). Only differences
    between actions of one state are trained, so only differences are meaningful.

    Args:
        state_dim: Width of the state input.
        action_dim: Width of one action row.
        hidden: Hidden width.
    """

    def __init__(self, state_dim: int, action_dim: int, hidden: int = 128) -> None:
        super().__init__()
        self.config = {"state_dim": state_dim, "action_dim": action_dim, "hidden": hidden}
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))
        self.register_buffer("action_mean", torch.zeros(action_dim))
        self.register_buffer("action_std", torch.ones(action_dim))
        self.trunk = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(hidden + action_dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, state: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``(B, state_dim)``, ``(B, A, action_dim)`` -> ``(B, A)`` scores (lower = fewer blocked)."""
        z = self.trunk((state - self.state_mean) / self.state_std)
        a = (actions - self.action_mean) / self.action_std
        return self.head(torch.cat([z[:, None, :].expand(-1, actions.shape[1], -1), a], -1)).squeeze(-1)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):  # noqa: D102
        # Critics shipped before action standardisation have no action statistics: identity.
        state_dict = dict(state_dict)
        state_dict.setdefault("action_mean", torch.zeros_like(self.action_mean))
        state_dict.setdefault("action_std", torch.ones_like(self.action_std))
        return super().load_state_dict(state_dict, strict=strict, assign=assign)


def standardiser(x: np.ndarray, weight: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Mean and scale per column of ``x`` (rows weighted by ``weight``, default all 1).

    A column that is (nearly) constant in the training data keeps scale 1: dividing by its tiny
    spread would turn any other value met at decision time into an enormous input.
    """
    w = np.ones(len(x)) if weight is None else weight.astype(np.float64)
    w = w / w.sum()
    mean = (w[:, None] * x).sum(0)
    std = np.sqrt((w[:, None] * (x - mean) ** 2).sum(0))
    return mean.astype(np.float32), np.where(std > 1e-3, std, 1.0).astype(np.float32)


def critic_inputs(globals_: np.ndarray, actions: np.ndarray, servers: np.ndarray,
                  take: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stack the per-decision arrays (batched on axis 0) into the critic's state and action inputs."""
    n = len(globals_)
    state = np.concatenate([globals_, servers.reshape(n, -1)], axis=1).astype(np.float32)
    action = np.concatenate([actions, take], axis=2).astype(np.float32)
    return state, action


def train_critic(demos: dict[str, np.ndarray], epochs: int = 25, hidden: int = 128, learning_rate: float = 1e-3,
                 batch_size: int = 256, weight_decay: float = 1e-4, seed: int = 0) -> tuple[DeviationCritic, list[float]]:
    """Regress the planner's per-action estimates relative to the agent's action.

    Args:
        demos: Demonstrations from :func:`pacml.distill.collect` (need ``servers`` and ``take``).
        epochs, hidden, learning_rate, batch_size, weight_decay, seed: Training settings.

    Returns:
        The critic (eval mode) and the mean loss of every epoch.
    """
    for key in ("servers", "take", "scores"):
        if key not in demos:
            raise ValueError(f"demonstrations lack {key!r}: collect them again with this version of pacml distill")
    torch.manual_seed(seed)
    state, action = critic_inputs(demos["globals"], demos["actions"], demos["servers"], demos["take"])
    n = len(state)
    scores = demos["scores"].astype(np.float64)
    agent = demos["agent_action"]
    delta = scores - scores[np.arange(n), agent][:, None]
    known = ~np.isnan(delta)
    planned = known.sum(axis=1) > 1  # decisions the planner scored (more than one option)
    state, action, delta, known, agent = state[planned], action[planned], delta[planned], known[planned], agent[planned]
    if not len(state):
        raise ValueError("no planned decisions in the demonstrations")
    critic = DeviationCritic(state.shape[1], action.shape[2], hidden)
    state_mean, state_std = standardiser(state)
    action_mean, action_std = standardiser(action[known])  # the rows the loss sees
    critic.state_mean.copy_(torch.from_numpy(state_mean))
    critic.state_std.copy_(torch.from_numpy(state_std))
    critic.action_mean.copy_(torch.from_numpy(action_mean))
    critic.action_std.copy_(torch.from_numpy(action_std))
    s, a = torch.from_numpy(state), torch.from_numpy(action)
    target = torch.from_numpy(np.nan_to_num(delta).astype(np.float32))
    weight = torch.from_numpy(known.astype(np.float32))
    base = torch.from_numpy(agent)
    opt = torch.optim.Adam(critic.parameters(), lr=learning_rate, weight_decay=weight_decay)
    losses = []
    critic.train()
    for _ in range(epochs):
        order = torch.randperm(len(s))
        total = 0.0
        for start in range(0, len(s), batch_size):
            mb = order[start:start + batch_size]
            pred = critic(s[mb], a[mb])
            pred = pred - pred[torch.arange(len(mb)), base[mb]][:, None]
            loss = (((pred - target[mb]) ** 2) * weight[mb]).sum() / weight[mb].sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(mb)
        losses.append(total / len(s))
    critic.eval()
    return critic, losses


def save_critic(path: str | Path, critic: DeviationCritic, meta: dict[str, Any]) -> Path:
    """Write a critic checkpoint atomically (``meta`` holds the agent and the margin)."""
    buf = io.BytesIO()
    torch.save({"format": CRITIC_FORMAT, "config": critic.config, "model": critic.state_dict(), "meta": meta}, buf)
    return atomic_write(path, lambda fh: fh.write(buf.getvalue()))


def load_critic(path: str | Path) -> tuple[DeviationCritic, dict[str, Any]]:
    """Load a critic: a file, a directory holding ``critic.pt``, or a shipped name."""
    payload = load_payload(path, "critic.pt", CRITIC_FORMAT, "critic", "policy.critic")
    critic = DeviationCritic(**payload["config"])
    critic.load_state_dict(payload["model"])
    critic.eval()
    return critic, payload.get("meta", {})


class PacMLCriticPolicy:
    """The PAC-ML agent, overridden where the deviation critic predicts a clearly better action.

    Args:
        critic: Critic file, directory or shipped name (e.g. ``paper_betaD_critic``).
        checkpoint: The agent; default: the one the critic was trained around (its metadata).
        margin_jobs: Override only if another action is predicted to block at least this many
            fewer jobs; default: the margin picked on validation seeds (metadata).
        critic_model, agent: In-memory objects instead of files (used while distilling).
    """

    def __init__(self, critic: str | Path | None = None, checkpoint: str | Path | None = None,
                 margin_jobs: float | None = None, critic_model: DeviationCritic | None = None,
                 agent: PacMLBetaPolicy | None = None) -> None:
        meta: dict[str, Any] = {}
        if critic_model is None:
            if critic is None:
                raise ConfigError("set policy.critic=PATH", field="policy.critic")
            critic_model, meta = load_critic(critic)
        self.critic = critic_model
        self.meta = meta
        if agent is None:
            agent_ckpt = checkpoint if checkpoint is not None else meta.get("agent_checkpoint")
            if agent_ckpt is None:
                raise ConfigError("set policy.checkpoint=PATH (the critic names no agent)", field="policy.checkpoint")
            agent = PacMLBetaPolicy(agent_ckpt)
        if agent.encoder.placement_candidates:
            raise ConfigError("the deviation critic works with degree-only agents", field="policy.checkpoint")
        self.agent = agent
        margin = margin_jobs if margin_jobs is not None else meta.get("margin_jobs")
        if margin is None:
            raise ConfigError("set policy.margin_jobs (the critic names none)", field="policy.margin_jobs")
        self.margin_jobs = float(margin)
        self.stats = {"decisions": 0, "changed": 0}

    def reset(self, seed: int | None = None) -> None:
        """New episode."""
        self.agent.reset(seed)
        self.stats = {"decisions": 0, "changed": 0}

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """The agent's degree, unless the critic predicts another blocks ``margin_jobs`` fewer jobs."""
        obs = self.agent.encoder.encode(job, state)
        base = int(torch.argmax(self.agent._probabilities(job, obs)))
        self.stats["decisions"] += 1
        best = deviation(self.critic, self.agent.encoder, obs, state, base, self.margin_jobs)
        if best != base:
            self.stats["changed"] += 1
        return Decision(best)


def deviation(critic: DeviationCritic, encoder: Any, obs: dict[str, Any], state: ClusterState, base: int,
              margin_jobs: float) -> int:
    """``base``, or the allowed action (``obs["action_mask"]``) the critic predicts blocks more than
    ``margin_jobs`` fewer jobs than it (the most such)."""
    mask = obs["action_mask"]
    if mask.sum() <= 1 or not mask[base]:
        return base
    s, a = critic_inputs(obs["globals"][None], obs["actions"][None],
                         server_features(state, encoder.fallback_interarrival_s)[None],
                         take_features(state, encoder.max_degree, encoder.fallback_interarrival_s)[None])
    with torch.no_grad():
        pred = critic(torch.from_numpy(s), torch.from_numpy(a))[0].numpy()
    pred = np.where(mask, pred - pred[base], np.inf)
    best = int(np.argmin(pred))
    return best if best != base and pred[best] < -margin_jobs else base


#: Arrival streams whose windows describe a critic's training condition (seeds no evaluation uses).
REFERENCE_SEEDS = tuple(2**30 + i for i in range(4))
REFERENCE_JOBS = 400
#: Largest difference of log10 mean sequential JCT (seconds) between a run's window and a
#: critic's condition: the condition features are unit-free, the critic's inputs are not.
SCALE_TOLERANCE = 0.5


@functools.lru_cache(maxsize=8)
def _condition_critic(file: str, name: str) -> tuple[DeviationCritic, Any, float, Any, str, np.ndarray, float]:
    """A per-beta critic, its agent's encoder, its margin, and its training condition: cluster,
    accounting, the condition windows of :data:`REFERENCE_SEEDS` and their mean log time scale.
    Cached per file: a grid builds a policy per episode, and all of this is deterministic (the
    model and the encoder, whose only cache is per graph, are only read)."""
    from omegaconf import OmegaConf

    from pacml.adaptive.selector import ConditionTracker
    from simulator.build import build_topology, build_workload

    critic, meta = load_critic(file)
    if meta.get("kind") == "adaptive" or meta.get("agent_checkpoint") is None:
        raise ConfigError(f"{name} is not a per-beta critic (pacml distill)", field="policy.condition_critics")
    encoder = PacMLBetaPolicy(meta["agent_checkpoint"]).encoder
    config = Path(file).parent / "distill_config.yaml"
    if not config.is_file():
        raise ConfigError(f"{name}: no distill_config.yaml beside {Path(file).name} (its training condition)",
                          field="policy.condition_critics")
    cfg = OmegaConf.load(config)
    topology = build_topology(cfg)
    workload = build_workload(cfg)
    rows, scale = [], []
    for seed in REFERENCE_SEEDS:
        tracker = ConditionTracker()
        for job in itertools.islice(workload.jobs(seed), REFERENCE_JOBS):
            tracker.observe(job)
            if tracker.full:
                rows.append(tracker.features(topology))
                scale.append(tracker.log_mean_sequential_s())
    return (critic, encoder, float(meta["margin_jobs"]), topology, str(cfg.get("horizon_accounting", "drain")),
            np.asarray(rows, dtype=np.float64), float(np.mean(scale)))


class ConditionCritic:
    """A per-beta deviation critic that the adaptive agent applies only on its own training condition.

    A critic distilled around a per-beta agent (``pacml distill``) learned the paper's D at its
    load; elsewhere its advice costs jobs. So it applies only where the
    condition the agent observes (:class:`pacml.adaptive.selector.ConditionTracker`, a whole window) lies
    within ``radius`` of the windows of its training condition (read from its
    ``distill_config.yaml``), in units of each feature's spread over the selector's training
    conditions, on the same cluster, with the same end-of-horizon accounting and job time scale.

    Args:
        name: Critic file, directory or shipped name (e.g. ``paper_betaD_critic``).
        spread: ``(CONDITION_FEATURES,)`` feature scales (the selector's reference spread).
        radius: Largest distance to the nearest training-condition window.
    """

    def __init__(self, name: str | Path, spread: np.ndarray, radius: float) -> None:
        from pacml.shipped import resolve_checkpoint

        file = resolve_checkpoint(name, "critic.pt", "critic", "policy.condition_critics")
        self.name = str(name)
        (self.critic, self.encoder, self.margin_jobs, self.topology, self.accounting, rows,
         self.log_seq_s) = _condition_critic(str(file.resolve()), self.name)
        self.keep = spread > 1e-6
        self.spread = spread[self.keep].astype(np.float64)
        self.reference = rows[:, self.keep] / self.spread
        self.radius = float(radius)

    def applies(self, condition: np.ndarray, log_seq_s: float, state: ClusterState) -> bool:
        """Whether the run's current condition is this critic's training condition."""
        if state.horizon_accounting != self.accounting or abs(log_seq_s - self.log_seq_s) > SCALE_TOLERANCE:
            return False
        topo = state.topology
        if (topo.num_servers, topo.num_comm_groups, topo.num_racks_per_group, topo.degrees) != (
                self.topology.num_servers, self.topology.num_comm_groups, self.topology.num_racks_per_group,
                self.topology.degrees):
            return False
        diff = self.reference - np.asarray(condition, dtype=np.float64)[self.keep] / self.spread
        return float(np.einsum("ij,ij->i", diff, diff).min()) <= self.radius ** 2

    def degree(self, job: JobSpec, state: ClusterState, base: int) -> int:
        """``base``, or the degree the critic predicts blocks more than its margin fewer jobs."""
        if base > self.encoder.max_degree:
            return base
        return deviation(self.critic, self.encoder, self.encoder.encode(job, state), state, base, self.margin_jobs)


__all__ = ["CRITIC_FORMAT", "ConditionCritic", "PacMLCriticPolicy", "DeviationCritic", "critic_inputs", "load_critic", "save_critic",
           "standardiser", "train_critic"]
