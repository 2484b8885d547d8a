"""The block-aware reference rule of issue 43: the smallest degree with *any* free block in which
the job meets its target, placed in the first such block (first-fit order, no bound).

Written against the policy interface only (``state.feasibility.free_blocks`` and
``feasible(degree, block)``), so it runs on any version of the simulator; used by
``tests/test_hetero_blocks.py`` and ``benchmarks/sim/bench_hetero_blocks.py`` as the yardstick the
shared feasibility layer must reach on a cluster of mixed server kinds.
"""

from __future__ import annotations

from simulator.cluster import ClusterState
from simulator.policy import Decision
from workloads.jobs import JobSpec


class BlockAwareMinFeasible:
    """Smallest degree that some free block can take within the target; rejects otherwise."""

    def reset(self, seed: int | None = None) -> None:
        """Stateless."""

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """The first feasible (degree, free block), degrees ascending, blocks in first-fit order."""
        table = state.feasibility
        for degree in table.degrees:
            for block in table.free_blocks(degree):
                if table.feasible(degree, block):
                    return Decision(degree, block.servers)
        return Decision(0)
