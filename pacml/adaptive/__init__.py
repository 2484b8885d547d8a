"""The adaptive PAC-ML agent (``policy=pacml``): one degree agent for every condition.

Read in this order:

- ``conditions``: condition descriptions, a leaf (numpy and the simulator's errors and topology; no
  torch, nothing else of pacml): the evaluation grid and its seeds, and the random training
  conditions (``sample_condition``, ``ClusterConditions``, also the per-beta agent's
  ``ppo.random_conditions`` sampler).
- ``selector``: rules as actions, the condition features seen from the arrivals
  (``ConditionTracker``), the rule selector (MLP and nearest-neighbour table, numpy) and its
  ``adaptive.npz`` checkpoint.
- ``policy``: ``PacMLPolicy``, the agent: the selector's pick, the shadow clusters, its settings.
- ``condition_critics``: per-beta deviation critics applied on their own training condition (torch;
  imported by ``policy`` only when ``policy.condition_critics`` names critics).
- ``train``: ``pacml train-adaptive``: the teacher search and the selector fit.

Imports: the simulator, workloads, ``pacml.runfiles``, ``pacml.shipped``, ``pacml.agent`` and
``pacml.critic``; neither imports this package back (but ``pacml.agent.ppo`` the ``conditions`` leaf).
"""
