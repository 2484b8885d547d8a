"""PPO hyper-parameters (``pacml train``'s ``ppo`` section), apart from the training loop.

Kept free of torch so that ``pacml train`` checks its config (the key rules come from this
dataclass) before the seconds of importing torch (:mod:`pacml.agent.ppo` re-exports it).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PPOConfig:
    """PPO hyper-parameters and training-loop settings (one docstring per field)."""

    total_steps: int = 2_000_000
    """Decisions (environment steps, summed over environments) to train for."""
    time_budget_s: float | None = 2700.0
    """Wall time for everything, warm start and final checkpoint included (summed over resumed
    sessions, counted from the trainer's creation); ``None``: no limit."""
    num_envs: int = 8
    """Environments stepped in lock-step."""
    num_steps: int = 256
    """Steps per environment per rollout (batch = num_envs x num_steps)."""
    learning_rate: float = 3e-5
    """Adam learning rate."""
    anneal_lr: bool = True
    """Linearly anneal the learning rate to 0 over ``total_steps``."""
    gamma: float = 0.999
    """Discount factor (one step = one job arrival)."""
    gae_lambda: float = 0.98
    """GAE lambda."""
    num_minibatches: int = 4
    """Minibatches per epoch."""
    update_epochs: int = 4
    """Passes over each batch."""
    clip_coef: float = 0.1
    """Surrogate clipping coefficient."""
    clip_vloss: bool = True
    """Clip the value loss as PPO2 does."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Gradient clipping norm."""
    target_kl: float | None = 0.01
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
    warmstart: str | None = "auto"
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
    warmstart_budget_frac: float = 0.5
    """Largest share of the remaining time budget the warm start may use (the rest is PPO's)."""
    checkpoint_every: int = 10
    """Updates between checkpoints."""
    eval_every: int = 10
    """Updates between validation runs."""
    eval_seeds: list[int] = field(default_factory=lambda: [500_000, 500_001])
    """Simulation seeds of the validation episodes (greedy policy); best = lowest blocking."""
    random_conditions: bool = False
    """Each training episode draws its condition on the run's cluster from the adaptive agent's
    training distribution (:class:`pacml.adaptive.conditions.ClusterConditions`: load, arrivals, targets, graph
    mix); validation runs ``eval_seeds`` on each of ``val_conditions`` such draws. False: every
    episode is the run's own config."""
    condition_jobs: int = 500
    """With ``random_conditions``, arrivals per episode."""
    val_conditions: int = 6
    """With ``random_conditions``, conditions drawn once (from the run's seed) for validation."""
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
