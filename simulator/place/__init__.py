"""Op placement: which device runs each op of a graph (``pacml place``); see docs/op-placement.md.

May import: the simulator's leaves and cluster model (:mod:`simulator.errors`,
:mod:`simulator.config`, :mod:`simulator.partition`) and :mod:`workloads`; never
:mod:`simulator.allocation` or the simulation loop. Only :mod:`~simulator.place.cli` imports the
command plumbing (:mod:`simulator.cli`).
"""
