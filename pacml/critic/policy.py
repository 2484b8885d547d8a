"""``policy=pacml_critic``: a per-beta agent whose decisions the deviation critic may override.

:func:`deviation` is the override rule (keep the agent's action unless the critic predicts another
allowed action blocks more than ``margin_jobs`` fewer jobs), shared with the adaptive agent's
condition critics (:mod:`pacml.adaptive.condition_critics`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from pacml.agent.features import server_features, take_features
from pacml.agent.policy import PacMLBetaPolicy
from pacml.critic.model import DeviationCritic, critic_inputs, load_critic
from simulator.cluster import ClusterState
from simulator.errors import ConfigError
from simulator.policy import Decision
from workloads.jobs import JobSpec


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
        base = int(torch.argmax(self.agent.probabilities(job, obs)))
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
