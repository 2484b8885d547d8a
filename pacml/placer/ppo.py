"""PPO for the learned placer: tasks, rewards, one update, fine-tuning on one task.

Rewards are GDP's ``-sqrt(value / reference)`` (docs/learned-placer.md, "Training"); a
placement's advantage is its reward minus its task's batch mean, over their spread (no critic),
shared by every decision of the placement; the clipped PPO loss adds an entropy bonus.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from pacml.placer.decode import Rollout, decode
from pacml.placer.model import PlacerNet, problem_tensors
from pacml.placer.problem import ORDER_BY, GroupProblem
from pacml.placer.settings import PPOSettings
from simulator.place.heuristics import HeftPlacer
from simulator.place.objectives import BoundObjective
from simulator.place.placer import SingleDevicePlacer


@dataclass(eq=False)
class Task:
    """One placement task and its reward scale.

    Attributes:
        name: ``graph/devices/objective``.
        objective: The bound objective (its counter counts this task's evaluations).
        problem: The decoder's arrays.
        reference_s: The best cheap baseline's value (reward scale).
        reference: Which baseline that was.
    """

    name: str
    objective: BoundObjective
    problem: GroupProblem
    reference_s: float
    reference: str

    @classmethod
    def build(cls, name: str, objective: BoundObjective, reference_s: float | None = None,
              order_by: str = ORDER_BY) -> Task:
        """The task of ``objective`` with its reference: ``reference_s`` if given, else the best of
        HEFT and the best single device (their evaluations are not counted against any budget).
        ``order_by``: the decoder's group order (:meth:`GroupProblem.from_objective`)."""
        if reference_s is not None:
            best, best_name = (reference_s if reference_s > 0 else math.inf), "given"
        else:
            before = objective.evaluations
            best, best_name = math.inf, "none"
            for placer in (HeftPlacer(), SingleDevicePlacer()):
                v = objective.value(placer.place(objective).placement)
                if v < best:
                    best, best_name = v, placer.name
            objective.evaluations = before
        return cls(name=name, objective=objective, problem=GroupProblem.from_objective(objective, order_by),
                   reference_s=best if math.isfinite(best) else 1.0, reference=best_name)

    def rewards(self, values: NDArray[np.float64], infeasible: float) -> NDArray[np.float64]:
        """``-sqrt(value / reference)``; ``infeasible`` for an infeasible placement."""
        ratio = values / self.reference_s
        return np.where(np.isfinite(ratio), -np.sqrt(np.maximum(ratio, 0.0)), infeasible)


def evaluate_rollout(task: Task, rollout: Rollout) -> NDArray[np.float64]:
    """The objective value of every placement of ``rollout`` (one evaluation each)."""
    return np.array([task.objective.value_groups(gd) for gd in rollout.group_device])


def advantages(rewards: NDArray[np.float64]) -> NDArray[np.float64]:
    """Rewards centred on their batch mean and scaled by their spread (zero if all are equal)."""
    centred = rewards - rewards.mean()
    spread = centred.std()
    return centred / spread if spread > 1e-9 else np.zeros_like(centred)


def policy_loss(net: PlacerNet, problem: GroupProblem, rollout: Rollout, adv: NDArray[np.float64],
                settings: PPOSettings) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped PPO loss (minus the entropy bonus) of one task's rollout, with its statistics."""
    mask = torch.from_numpy(rollout.mask)
    g, b = rollout.actions.shape
    if net.config.decoder == "oneshot":
        logits = net.oneshot_logits(problem).unsqueeze(1).expand(g, b, -1).masked_fill(~mask, -1e9)
    else:
        static = net.static_part(*problem_tensors(problem))
        order = torch.from_numpy(problem.order)
        feats = torch.from_numpy(rollout.features)                  # (G, B, D, F)
        rows = static[order].unsqueeze(1).expand(g, b, -1)
        logits = net.logits(rows, feats).masked_fill(~mask, -1e9)
    logp_all = torch.log_softmax(logits, dim=-1)
    actions = torch.from_numpy(rollout.actions)
    logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(logp - torch.from_numpy(rollout.logp))
    a = torch.from_numpy(adv.astype(np.float32)).unsqueeze(0).expand(g, b)
    surrogate = torch.minimum(ratio * a, ratio.clamp(1 - settings.clip, 1 + settings.clip) * a)
    probs = logp_all.exp()
    entropy = -(probs * logp_all.masked_fill(~mask, 0.0)).sum(-1)
    # Decisions with one allowed device carry no choice: leave them out of both terms.
    free = (mask.sum(-1) > 1).float()
    denom = free.sum().clamp(min=1.0)
    loss = -(surrogate * free).sum() / denom - settings.ent_coef * (entropy * free).sum() / denom
    with torch.no_grad():
        stats = {"entropy": float((entropy * free).sum() / denom),
                 "clip_frac": float((((ratio - 1).abs() > settings.clip).float() * free).sum() / denom)}
    return loss, stats


def ppo_update(net: PlacerNet, optimizer: torch.optim.Optimizer,
               batch: list[tuple[Task, Rollout, NDArray[np.float64]]], settings: PPOSettings) -> dict[str, float]:
    """``settings.epochs`` gradient steps over every task's rollout (one step per epoch, summed over tasks)."""
    stats: dict[str, float] = {}
    for _ in range(settings.epochs):
        optimizer.zero_grad()
        total = 0.0
        agg: dict[str, float] = {}
        for task, rollout, adv in batch:
            if not np.any(adv):
                continue
            loss, s = policy_loss(net, task.problem, rollout, adv, settings)
            (loss / len(batch)).backward()
            total += float(loss.detach())
            for k, v in s.items():
                agg[k] = agg.get(k, 0.0) + v / len(batch)
        if total == 0.0 and not agg:
            break
        nn.utils.clip_grad_norm_(net.parameters(), settings.max_grad_norm)
        optimizer.step()
        stats = {"loss": total / len(batch), **agg}
    return stats


def greedy_value(net: PlacerNet, task: Task) -> tuple[float, NDArray[np.int64]]:
    """The policy's most likely placement of ``task`` (zero-shot) and its value (one evaluation)."""
    rollout = decode(task.problem, net.scorer_weights(task.problem), batch=1, greedy=True, keep=False)
    group_device = rollout.group_device[0]
    return task.objective.value_groups(group_device), group_device
