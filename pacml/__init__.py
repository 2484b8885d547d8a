"""PAC-ML: learned policies for a RAMP cluster and learned op placement (torch).

One concept per subpackage; each one's ``__init__`` docstring says what lives there and what it
may import. Nothing here is imported by :mod:`simulator` or :mod:`workloads`.

- ``pacml.agent``: the per-beta PAC-ML agent (``policy=pacml_beta``, ``pacml train``): Gymnasium
  environment, observation features, rewards, PyG actor-critic, PPO, ``PacMLBetaPolicy``.
- ``pacml.adaptive``: the adaptive agent (``policy=pacml``, ``pacml train-adaptive``), one agent
  across cluster conditions: its conditions (a leaf module), rule selector, policy and trainer.
- ``pacml.critic``: the deviation critic for a per-beta agent (``policy=pacml_critic``) and planner
  distillation (``pacml distill``).
- ``pacml.placer``: the learned op placer (GDP / HSDAG style, ``method=learned``,
  ``pacml train-placer``); ``pacml.placer.fx``: a PyTorch model as an op graph (torch.fx) and the
  models of the placer's corpus.
- ``pacml.shipped``: where the shipped checkpoints live and how a name resolves to a file (a leaf).
- ``pacml.runfiles``: files every training run writes (checkpoint, metrics, saved config), shared by
  the trainers; ``pacml.cli``: the ``pacml`` command, which dispatches to each command's Hydra app.
- ``pacml/checkpoints/``: the shipped agents, critics and placers (data, no code).

Imports go one way: ``runfiles`` and ``shipped`` (leaves) <- ``agent`` <- ``critic`` <- ``adaptive``
(the per-beta agent's ``ppo.random_conditions`` reads only the ``adaptive.conditions`` leaf);
``placer`` imports ``runfiles`` and never the job-level agents; ``cli`` names each command's module
and imports it only when run (``tests/test_layering.py``).

The per-beta agent's environment is registered on ``import pacml`` as ``pacml/JobPartition-v0``
(cheap: no torch, no simulator). Gymnasium >= 1.0 has no plug-in entry points any more
(``gymnasium.envs`` entry points were dropped in 1.0), so code that never imports pacml uses
gymnasium's module prefix, which imports pacml first: ``gym.make("pacml:pacml/JobPartition-v0")``.
"""

import gymnasium as gym

ENV_ID = "pacml/JobPartition-v0"

if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="pacml.agent.env:ClusterEnv")
