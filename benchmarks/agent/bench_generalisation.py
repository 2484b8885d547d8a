"""Zero-shot generalisation: agents and heuristics on graphs held out of training.

The shipped ``paper_betaC`` agent was trained on the paper's five graphs only. This runs it, an
agent trained on all ten shipped graphs (``--all-checkpoint``), and the heuristics on a workload
of the five *other* shipped graphs (densenet121, inception_v3, nasnetamobile, resnet50,
resnext50), in the paper scenario with beta C, on evaluation seeds 0, 1, 2.

Usage: python benchmarks/agent/bench_generalisation.py [--all-checkpoint outputs/train/all_betaC/policy.pt]
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

HELD_OUT = "[densenet121,inception_v3,nasnetamobile,resnet50,resnext50]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beta", default="C")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--all-checkpoint", default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    base = ["scenario=paper", f"beta={args.beta}", f"workload.graphs={HELD_OUT}"]
    cfg = compose_sim_config(base)
    feas = build_feasibility(build_topology(cfg), cfg.sim)
    workload = build_workload(cfg)
    policies: dict[str, object] = {
        name: build_policy(compose_sim_config([*base, f"policy={name}"]))
        for name in ("para_max", "para_min", "min_feasible", "min_feasible_4")}
    policies[f"pacml zero-shot (paper_beta{args.beta}, trained on the 5 paper graphs)"] = PacMLBetaPolicy(
        f"paper_beta{args.beta}")
    if args.all_checkpoint:
        policies["pacml trained on all 10 graphs"] = PacMLBetaPolicy(args.all_checkpoint)
    out = {}
    for name, policy in policies.items():
        rates = [build_simulation(cfg, seed=s, feasibility=feas, workload=workload).run(policy).summary["blocking_rate"]
                 for s in seeds]
        out[name] = {"blocking_rate_mean": float(np.mean(rates)), "per_seed": rates}
        print(f"{name:70s} {np.mean(rates):.4f} {[round(r, 4) for r in rates]}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
