"""A deviation critic distilled from the rollout planner (docs/policies.md, "Deviation critic").

It regresses the planner's estimate ``delta(s, d)`` = expected blocked jobs after choosing ``d``
minus after the agent's action (the planner's *choices* are too rare, marginal and noisy to
imitate), from :func:`pacml.agent.features.server_features` and
:func:`pacml.agent.features.take_features`. Training data come from :mod:`pacml.critic.distill`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pacml.runfiles import save_torch_file
from pacml.shipped import load_payload

CRITIC_FORMAT = "pacml-critic-v1"


class DeviationCritic(nn.Module):
    """Predicts expected blocked jobs per action, up to a per-state constant.

    A state trunk (globals + per-server state) and one head shared by all actions over (trunk,
    action features + the servers the action takes). Both inputs are standardised
    (:func:`standardiser`): the actions of one state often differ in one small feature, and
    unscaled, whether the head learned it depended on the CPU's float rounding. Only differences
    between actions of one state are trained, so only differences are meaningful.
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
        demos: Demonstrations from :func:`pacml.critic.distill.collect` (need ``servers`` and ``take``).
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
    return save_torch_file(path, {"format": CRITIC_FORMAT, "config": critic.config, "model": critic.state_dict(),
                                  "meta": meta})


def load_critic(path: str | Path) -> tuple[DeviationCritic, dict[str, Any]]:
    """Load a critic: a file, a directory holding ``critic.pt``, or a shipped name."""
    payload = load_payload(path, "critic.pt", CRITIC_FORMAT, "critic", "policy.critic")
    critic = DeviationCritic(**payload["config"])
    critic.load_state_dict(payload["model"])
    critic.eval()
    return critic, payload.get("meta", {})
