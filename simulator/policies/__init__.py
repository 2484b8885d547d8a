"""Degree policies shipped with the simulator: the paper's heuristics (:mod:`~simulator.policies.heuristics`)
and the lookahead planner (:mod:`~simulator.policies.lookahead`), each built from ``conf/policy/``.

Each follows the protocol of :mod:`simulator.policy`. May import the cluster state, feasibility and
topology of :mod:`simulator` and :mod:`workloads`; never :mod:`simulator.cli`, :mod:`pacml` or torch
(the learned policies live in :mod:`pacml`).
"""
