"""Op placement: which device runs each op of a graph (``pacml place``), as GDP, HSDAG and the
classic heuristics pose it.

:mod:`~simulator.place.devices` (the device set), :mod:`~simulator.place.kernel` (list scheduling),
:mod:`~simulator.place.objectives` (step time, pipeline throughput), :mod:`~simulator.place.placer`
(the placer protocol and its result), then one module per family of methods (``heuristics``: HEFT, m-TOPO,
m-ETF, m-SCT, PipeDream, METIS; ``dp``, ``mip``, ``local_search``, ``expert``, ``coarsen``,
``from_file``), :mod:`~simulator.place.large` (graphs too big to ship) and the command,
:mod:`~simulator.place.cli`. The learned placer lives in :mod:`pacml.placer`; the job's servers
come from :mod:`simulator.allocation` (which runs these placers inside a job's block).

May import: the simulator's leaves and cluster model (:mod:`simulator.errors`,
:mod:`simulator.config`, :mod:`simulator.partition`) and :mod:`workloads`; never
:mod:`simulator.allocation` or the simulation loop. Only :mod:`~simulator.place.cli` imports the
command plumbing (:mod:`simulator.cli`).
"""
