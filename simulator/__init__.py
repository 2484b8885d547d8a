"""The RAMP cluster simulator and the op-placement problem (no torch).

Read it bottom up; a module imports only from the items before its own (``tests/test_layering.py``
and ``tests/test_import_cycles.py`` check the rules that matter):

* leaves: :mod:`~simulator.errors` (exceptions, one-line messages), :mod:`~simulator.estimate`
  (the run-size cost model) and :mod:`~simulator.config` (the one typed check of a config,
  ``instantiate_checked``, ``CONF_DIR``);
* the cluster and a job's graph: :mod:`~simulator.topology` (servers, symmetric blocks),
  :mod:`~simulator.comm` (collectives), :mod:`~simulator.partition` (splitting a job's ops; it
  borrows op placement's list-scheduling kernel, lazily);
* :mod:`simulator.place`: op placement, which device runs each op (its command,
  :mod:`simulator.place.cli`, sits with the commands below);
* :mod:`simulator.allocation`: job allocation, which servers a job gets (first fit, free blocks,
  an op placer inside the job's block);
* :mod:`~simulator.step_model` (a job's training-step time on its servers),
  :mod:`~simulator.feasibility`, :mod:`~simulator.cluster` (occupancy and the policy's snapshot),
  :mod:`~simulator.records` (per-job records);
* :mod:`~simulator.policy` (the policy protocol), :mod:`simulator.policies` (heuristics, lookahead
  planner), :mod:`~simulator.simulation` (the SimPy episode loop);
* :mod:`~simulator.build` (objects from a config), then the commands: :mod:`~simulator.cli`
  (plumbing for the entry points only), :mod:`~simulator.run` (``pacml sim``) and
  :mod:`simulator.place.cli` (``pacml place``).

Words: *allocation* is which servers a job gets; *placement* is which device runs each op.
May import: :mod:`workloads`; never :mod:`pacml`, :mod:`analysis` (``pacml place`` draws its
Gantt chart with :mod:`analysis.gantt`, lazily) or torch.
"""
