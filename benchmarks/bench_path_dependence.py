"""How much the first jobs' rule changes the blocking of the rest (why shadows cannot undo a bad start).

Runs the paper scenario with ``min_feasible(4)`` throughout, then with another rule for the first
``n`` jobs and ``min_feasible(4)`` after, on the same seeds, and prints each run's blocking rate.

Usage: python benchmarks/bench_path_dependence.py [--beta C] [--interarrival 1000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pacml.adaptive import Rule
from pacml.env import compose_sim_config
from simulator.build import build_feasibility, build_simulation, build_topology, build_workload
from simulator.policy import Decision

SEEDS = (800000, 800001, 800002, 800003)
#: (rule of the first jobs as min_feasible(k), number of first jobs); (4, 0) is the baseline.
STARTS = ((4, 0), (16, 50), (16, 200), (2, 50), (6, 50))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beta", default="C")
    parser.add_argument("--interarrival", type=float, default=1000.0)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results_path_dependence.json"))
    args = parser.parse_args()
    over = ["scenario=paper", f"beta={args.beta}", f"mean_interarrival_s={args.interarrival}", "progress=false"]
    cfg = compose_sim_config(over)
    topo = build_topology(cfg)
    feas, workload = build_feasibility(topo, cfg.get("sim", {})), build_workload(cfg)
    rows = []
    for first, n in STARTS:
        blocking = []
        for seed in SEEDS:
            sim = build_simulation(cfg, seed=seed, feasibility=feas, workload=workload)
            decided = 0
            while sim.next_job() is not None:
                k = first if decided < n else 4
                decided += 1
                sim.apply(Decision(Rule("min_feasible", k).degree(sim.state())))
            blocking.append(round(sim.finalize().summary["blocking_rate"], 4))
        rows.append({"first_rule": f"min_feasible({first})", "first_jobs": n, "then": "min_feasible(4)",
                     "blocking_per_seed": blocking})
        print(f"min_feasible({first:2d}) for {n:3d} jobs, then min_feasible(4): {blocking}", flush=True)
    args.json.write_text(json.dumps({"overrides": over, "seeds": list(SEEDS), "runs": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
