"""Job allocation: which servers of the RAMP cluster a job gets.

Two words, two things (used this way across the project):

* **allocation** (this package): which servers a job holds (spec §5.1, ``sim.placement``:
  ``op_first_fit`` or ``block``);
* **placement** (:mod:`simulator.place`, ``pacml place``, :mod:`pacml.placer`): which device runs
  each op of a graph.

Modules: :mod:`~simulator.allocation.free_blocks` (free symmetric blocks of one occupancy),
:mod:`~simulator.allocation.first_fit` (first-fit allocation and its ``Placement``),
:mod:`~simulator.allocation.op_placer` (an op placer of ``conf/method/`` inside the job's block),
:mod:`~simulator.allocation.pipeline` (pipeline jobs, ``scenario=pipeline``).

May import: :mod:`simulator.topology`, :mod:`simulator.partition`, :mod:`simulator.config`,
:mod:`simulator.errors`, :mod:`simulator.place` (op_placer and pipeline only), :mod:`simulator.step_model`
(pipeline only) and :mod:`workloads`; never the
cluster state, the simulation loop, policies or the commands (``tests/test_layering.py``).
"""
