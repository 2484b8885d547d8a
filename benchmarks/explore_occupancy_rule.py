"""Exploration (negative result): an occupancy-adaptive degree rule on validation seeds.

Where the rollout planner deviates from the k=4 rule on beta D, the cluster tends to be emptier
(it picks 8) or fuller (it picks 2) than average. This script tests the obvious fixed rule made
from that: "smallest feasible degree >= k_low when occupancy <= low, >= 2 when occupancy >= high,
else >= 4", over a grid of thresholds, on validation seeds (never the evaluation seeds 0-2).
BENCHMARKS.md §3 reports the result (no variant beats k=4).

Usage: python benchmarks/explore_occupancy_rule.py --beta D --seeds 500000-500015 --json out.json
"""

from __future__ import annotations

import argparse
import json
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from pacml.env import compose_sim_config
from simulator.build import build_simulation
from simulator.cluster import ClusterState
from simulator.policies.heuristics import min_feasible_degree
from simulator.policy import Decision
from workloads.jobs import JobSpec


class OccupancyRule:
    """``min_feasible(k)`` with ``k`` picked by the cluster's occupancy (fraction of servers held)."""

    def __init__(self, low: float | None, high: float | None, k_low: int = 8, k_high: int = 2, k: int = 4) -> None:
        self.low, self.high, self.k_low, self.k_high, self.k = low, high, k_low, k_high, k

    def reset(self, seed: int | None = None) -> None:
        """Stateless."""

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """The rule's degree for this job."""
        k = self.k
        if self.low is not None and state.occupancy <= self.low:
            k = self.k_low
        elif self.high is not None and state.occupancy >= self.high:
            k = self.k_high
        return Decision(min_feasible_degree(state.feasibility, k))


def _run(args: tuple) -> tuple[tuple, float]:
    low, high, k_low, seed, beta = args
    sim = compose_sim_config([f"beta={beta}"])
    rate = build_simulation(sim, seed=seed).run(OccupancyRule(low, high, k_low)).summary["blocking_rate"]
    return (low, high, k_low), float(rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beta", default="D")
    parser.add_argument("--seeds", default="500000-500015", help="first-last (inclusive)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    first, last = (int(s) for s in args.seeds.split("-"))
    grid = [(None, None, 4)]  # the k=4 rule itself
    for low in (None, 0.25, 0.375, 0.5, 0.625):
        for high in (None, 0.75, 0.875, 0.9375):
            for k_low in ((8,) if low is None else (6, 8)):
                if low is not None or high is not None:
                    grid.append((low, high, k_low))
    jobs = [(*g, s, args.beta) for g in grid for s in range(first, last + 1)]
    with Pool(args.workers) as pool:
        results = pool.map(_run, jobs)
    by_rule: dict[tuple, list[float]] = {}
    for rule, rate in results:
        by_rule.setdefault(rule, []).append(rate)
    rows = sorted(({"low": r[0], "high": r[1], "k_low": r[2], "blocking_rate": float(np.mean(v))}
                   for r, v in by_rule.items()), key=lambda row: row["blocking_rate"])
    out = {"beta": args.beta, "seeds": [first, last], "rules": rows}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
