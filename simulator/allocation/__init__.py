"""Job allocation: which servers of the RAMP cluster a job gets.

Two words, two things (used this way across the project):

* **allocation** (this package): which servers a job holds (spec §5.1, ``sim.placement``:
  ``op_first_fit`` or ``block``);
* **placement** (:mod:`simulator.place`, ``pacml place``, :mod:`pacml.placer`): which device runs
  each op of a graph.

Modules:

* :mod:`~simulator.allocation.free_blocks`: free symmetric blocks of one occupancy, found on prefix
  sums without enumerating blocks;
* :mod:`~simulator.allocation.first_fit`: the simulator's first-fit allocation (the first free block
  whose servers have room; sub-ops chain onto their parents' servers), its result
  :class:`~simulator.allocation.first_fit.Placement` and the lookahead cache's signature;
* :mod:`~simulator.allocation.op_placer`: the bridge, an op placer of ``conf/method/`` run inside the
  job's allocated block (``sim.placement=block``, ``sim.op_placer=<method>``);
* :mod:`~simulator.allocation.pipeline`: pipeline jobs (``scenario=pipeline``, ``sim.pipeline``): a
  job holds a block and runs as a pipeline on it, cut by a stage placer of ``conf/method/``.

May import: :mod:`simulator.topology`, :mod:`simulator.partition`, :mod:`simulator.config`,
:mod:`simulator.errors`, :mod:`simulator.place` (op_placer and pipeline only), :mod:`simulator.step_model`
(pipeline only) and :mod:`workloads`; never the
cluster state, the simulation loop, policies or the commands (``tests/test_layering.py``).
"""
