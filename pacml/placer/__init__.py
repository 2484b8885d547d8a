"""The learned op placer: which device runs each op of one job (GDP / HSDAG style), a GNN + PPO
policy pre-trained over many graphs and device sets, behind the op placers' common interface
(``pacml place method=learned``).

- :mod:`~pacml.placer.problem`, :mod:`~pacml.placer.arrays`,
  :mod:`~pacml.placer.slots`, :mod:`~pacml.placer.pipeline_loads`: one placement task as arrays
  and the fast evaluation of a placement.
- :mod:`~pacml.placer.model`, :mod:`~pacml.placer.decode`: the network and how it decodes a placement.
- :mod:`~pacml.placer.settings`, :mod:`~pacml.placer.ppo`, :mod:`~pacml.placer.trainer`: pre-training.
- :mod:`~pacml.placer.checkpoint`: ``placer.pt`` files and the shipped placers.
- :mod:`~pacml.placer.learned`: ``method=learned``; :mod:`~pacml.placer.cli`: ``pacml train-placer``.
- :mod:`pacml.placer.fx`: a PyTorch model as an op graph (torch.fx) and the corpus models.

Imports: :mod:`simulator.place` (the op-placement problem, objectives, devices, placer protocol),
:mod:`simulator` errors and config plumbing, :mod:`workloads` and :mod:`pacml.runfiles`; never the
job-level agents (``pacml.agent``, the adaptive agent).
"""
