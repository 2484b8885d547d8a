"""Learned placement vs first-fit: blocking rate at the paper's load and at higher loads.

Runs, on evaluation seeds 0, 1, 2 of the paper scenario, the degree-only PAC-ML agent (first-fit
placement), a learned-placement agent (``--placement-checkpoint``) and heuristics, at several
mean inter-arrival times (the paper's 1000 and higher loads).

Usage: python benchmarks/agent/bench_placement.py --beta C --placement-checkpoint outputs/train/place_betaC/policy.pt
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from pacml.agent.env import compose_sim_config
from pacml.agent.policy import PacMLBetaPolicy
from simulator.build import (
    build_feasibility,
    build_policy,
    build_simulation,
    build_topology,
    build_workload,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beta", default="C")
    parser.add_argument("--placement-checkpoint", required=True)
    parser.add_argument("--loads", default="1000,750,500", help="mean inter-arrival times")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out: dict[str, dict[str, float]] = {}
    for load in args.loads.split(","):
        base = ["scenario=paper", f"beta={args.beta}", f"mean_interarrival_s={load}"]
        cfg = compose_sim_config(base)
        feas = build_feasibility(build_topology(cfg), cfg.sim)
        workload = build_workload(cfg)
        policies = {name: build_policy(compose_sim_config([*base, f"policy={name}"]))
                    for name in ("para_max", "min_feasible", "min_feasible_4")}
        policies["pacml (degree only, first-fit)"] = PacMLBetaPolicy(f"paper_beta{args.beta}")
        policies["pacml (learned placement)"] = PacMLBetaPolicy(args.placement_checkpoint)
        for name, policy in policies.items():
            rates = [build_simulation(cfg, seed=s, feasibility=feas, workload=workload).run(policy)
                     .summary["blocking_rate"] for s in seeds]
            out.setdefault(name, {})[load] = float(np.mean(rates))
            print(f"interarrival {load:>5s} {name:34s} {np.mean(rates):.4f} {[round(r, 4) for r in rates]}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
