"""The placer's settings (network sizes, PPO knobs), apart from the torch code that uses them.

Kept free of torch so that ``pacml train-placer`` checks its config (the key rules come from these
dataclasses) before the seconds of importing torch; :mod:`pacml.placer.model` and
:mod:`pacml.placer.ppo` re-export them.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Decoders: ``sequential`` (groups placed one by one, priced from the partial placement) or
#: ``oneshot`` (GDP: every group's device distribution at once, from the graph alone).
DECODERS = ("sequential", "oneshot")


@dataclass(frozen=True)
class NetConfig:
    """Sizes of :class:`PlacerNet` (saved in checkpoints)."""

    hidden: int = 64
    layers: int = 3
    use_edges: bool = True
    prior: float = 5.0
    #: Earliest finish with insertion into idle gaps (HEFT's policy); False: after the device's last
    #: group (the first placers were trained so).
    insertion: bool = False
    #: Placement order of the groups: ``rank`` (HEFT's upward rank over the forward pass, the
    #: first placers' order) or ``full_rank`` (HEFT's own: over the whole step, as
    #: HEFT schedules it; see :func:`pacml.placer.problem.GroupProblem.from_objective`) or ``first``
    #: (topological position of each group's first node).
    order: str = "rank"
    #: Whether the earliest-finish prior adds the transfers to consumers placed earlier (the
    #: backward pass's gradients, under ``rank``) to a device's finish time; ``False``: the finish
    #: time alone, as HEFT's device rule.
    cost_outputs: bool = True
    #: ``sequential`` (every shipped placer) or ``oneshot`` (GDP's design; see the module docstring).
    decoder: str = "sequential"
    #: Attention heads of the one-shot decoder's self-attention layer.
    heads: int = 4
    #: Device slots of the one-shot decoder (the most devices it can place on).
    max_devices: int = 16


@dataclass(frozen=True)
class PPOSettings:
    """PPO knobs of the placer (``ppo`` in ``conf/train_placer.yaml``)."""

    batch: int = 16
    tasks_per_update: int = 4
    epochs: int = 4
    clip: float = 0.2
    learning_rate: float = 3e-4
    ent_coef: float = 0.01
    max_grad_norm: float = 1.0
    infeasible_reward: float = -3.0
