"""PAC-ML: a GNN + PPO agent that chooses each arriving job's partition degree.

``pacml.agent.env.ClusterEnv`` wraps the simulator as a Gymnasium environment (registered as
``pacml/JobPartition-v0``), ``pacml.agent.model`` holds the PyG actor-critic, ``pacml.agent.ppo`` the training
loop, and ``pacml.agent.policy.PacMLBetaPolicy`` runs a trained agent behind the simulator's policy interface.

The environment is registered on ``import pacml`` (cheap: no torch, no simulator). Gymnasium
>= 1.0 has no plug-in entry points any more (``gymnasium.envs`` entry points were dropped in
1.0), so code that never imports pacml uses gymnasium's module prefix, which imports pacml
first: ``gym.make("pacml:pacml/JobPartition-v0")``.
"""

import gymnasium as gym

ENV_ID = "pacml/JobPartition-v0"

if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="pacml.agent.env:ClusterEnv")
