"""PAC-ML: a GNN + PPO agent that chooses each arriving job's partition degree.

``pacml.env.ClusterEnv`` wraps the simulator as a Gymnasium environment (registered as
``pacml/JobPartition-v0``), ``pacml.model`` holds the PyG actor-critic, ``pacml.ppo`` the training
loop, and ``pacml.policy.PacMLPolicy`` runs a trained agent behind the simulator's policy interface.
"""

import gymnasium as gym

ENV_ID = "pacml/JobPartition-v0"

if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="pacml.env:ClusterEnv")
