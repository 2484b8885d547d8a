"""Learned placement vs first-fit: blocking rate at the paper's load and at higher loads.

Runs, on evaluation seeds 0, 1, 2 of the paper scenario, the degree-only PAC-ML agent (first-fit
placement), a learned-placement agent (``--placement-checkpoint``) and heuristics, at several
mean inter-arrival times (the paper's 1000 and higher loads).

Usage: python benchmarks/agent/bench_placement.py --beta C --placement-checkpoint outputs/train/place_betaC/policy.pt
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from pacml.agent.policy import PacMLBetaPolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import Episodes, parser, save  # noqa: E402


def main() -> None:
    p = parser(__doc__, seeds="0,1,2")
    p.add_argument("--beta", default="C")
    p.add_argument("--placement-checkpoint", required=True)
    p.add_argument("--loads", default="1000,750,500", help="mean inter-arrival times")
    args = p.parse_args()
    out: dict[str, dict[str, float]] = {}
    for load in args.loads.split(","):
        episodes = Episodes(["scenario=paper", f"beta={args.beta}", f"mean_interarrival_s={load}"])
        policies = {name: episodes.policy(f"policy={name}") for name in ("para_max", "min_feasible", "min_feasible_4")}
        policies["pacml (degree only, first-fit)"] = PacMLBetaPolicy(f"paper_beta{args.beta}")
        policies["pacml (learned placement)"] = PacMLBetaPolicy(args.placement_checkpoint)
        for name, policy in policies.items():
            rates = episodes.blocking(policy, args.seeds)
            out.setdefault(name, {})[load] = float(np.mean(rates))
            print(f"interarrival {load:>5s} {name:34s} {np.mean(rates):.4f} {[round(r, 4) for r in rates]}", flush=True)
    save(args.json, out)


if __name__ == "__main__":
    main()
