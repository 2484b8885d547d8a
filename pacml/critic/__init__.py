"""Critics for the per-beta agent: the deviation critic distilled from the rollout planner.

- ``model``: ``DeviationCritic`` (torch), its training on the planner's per-action estimates, its
  ``critic.pt`` checkpoint.
- ``policy``: ``PacMLCriticPolicy`` (``policy=pacml_critic``): a per-beta agent whose decisions the
  critic may override, and the override rule ``deviation``.
- ``distill``: ``pacml distill``: collect the planner's estimates around a per-beta agent and train
  a critic.

Imports: the simulator, workloads, ``pacml.runfiles``, ``pacml.shipped`` and the per-beta agent
(``pacml.agent``); never ``pacml.adaptive`` (the adaptive agent imports critics, in
``pacml.adaptive.condition_critics``, not the other way round).
"""
