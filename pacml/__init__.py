"""PAC-ML: learned policies for a RAMP cluster and learned op placement (torch).

Subpackages ``agent`` (per-beta agent), ``critic`` (deviation critic, ``pacml distill``),
``adaptive`` (the adaptive agent) and ``placer`` (learned op placer; ``placer.fx``: torch.fx
import); each one's ``__init__`` docstring says what lives there and what it may import (layout:
docs/development.md). Imports go one way: ``runfiles`` and ``shipped`` (leaves) <- ``agent`` <-
``critic`` <- ``adaptive``; ``placer`` imports ``runfiles`` and never the job-level agents;
``cli`` imports each command's module only when run (``tests/test_layering.py``).

The per-beta agent's environment is registered on ``import pacml`` as ``pacml/JobPartition-v0``
(cheap: no torch, no simulator). Gymnasium >= 1.0 has no plug-in entry points, so code that never
imports pacml names the module: ``gym.make("pacml:pacml/JobPartition-v0")``.
"""

import gymnasium as gym

ENV_ID = "pacml/JobPartition-v0"

if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="pacml.agent.env:ClusterEnv")
