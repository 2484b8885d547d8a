"""Per-beta deviation critics that the adaptive agent applies only on their own training condition.

A critic distilled around a per-beta agent (``pacml distill``, :mod:`pacml.critic`) helps on the
condition it was trained on and costs jobs elsewhere; :class:`ConditionCritic` recognises that
condition from the windows the adaptive agent observes. Loads torch: :mod:`pacml.adaptive.policy`
imports this module only when ``policy.condition_critics`` names critics.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from pacml.adaptive.selector import ConditionTracker
from pacml.agent.policy import PacMLBetaPolicy
from pacml.critic.model import DeviationCritic, load_critic
from pacml.critic.policy import deviation
from pacml.shipped import resolve_checkpoint
from simulator.build import build_topology, build_workload
from simulator.cluster import ClusterState
from simulator.errors import ConfigError
from workloads.jobs import JobSpec

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
    """A per-beta deviation critic applied only where the observed condition (a whole window) lies
    within ``radius`` of the windows of its training condition (from its ``distill_config.yaml``),
    in units of ``spread``, on the same cluster, accounting and job time scale.

    Args:
        name: Critic file, directory or shipped name (e.g. ``paper_betaD_critic``).
        spread: ``(CONDITION_FEATURES,)`` feature scales (the selector's reference spread).
        radius: Largest distance to the nearest training-condition window.
    """

    def __init__(self, name: str | Path, spread: np.ndarray, radius: float) -> None:
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
