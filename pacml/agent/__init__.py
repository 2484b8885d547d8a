"""The per-beta PAC-ML agent (``policy=pacml_beta``): a GNN + PPO agent trained for one JCT-target
distribution that chooses each arriving job's partition degree.

- :mod:`~pacml.agent.env`: ``ClusterEnv``, the simulator as a Gymnasium environment
  (``pacml/JobPartition-v0``, registered by ``import pacml``).
- :mod:`~pacml.agent.features`: the observation encoder, a pure function of ``(job, ClusterState)``.
- :mod:`~pacml.agent.rewards`: rewards, pure functions of one decision's outcome.
- :mod:`~pacml.agent.model`: the PyG actor-critic.
- :mod:`~pacml.agent.ppo_config` and :mod:`~pacml.agent.ppo`: PPO's settings and its training loop.
- :mod:`~pacml.agent.train`: ``pacml train`` (Hydra app, ``conf/train.yaml``).
- :mod:`~pacml.agent.policy`: ``PacMLBetaPolicy``, a trained agent behind the simulator's policy
  interface, and the checkpoint files it reads.

Imports: :mod:`simulator`, :mod:`workloads` and :mod:`pacml.runfiles` (torch lazily where a command
need not wait for it); never the adaptive agent, except that ``ppo.random_conditions`` draws its
training conditions with the adaptive agent's condition sampler (imported lazily, only then).
"""
