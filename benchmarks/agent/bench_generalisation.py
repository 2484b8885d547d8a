"""Zero-shot generalisation: agents and heuristics on graphs held out of training.

The shipped ``paper_betaC`` agent was trained on the paper's five graphs only. This runs it, an
agent trained on all ten shipped graphs (``--all-checkpoint``), and the heuristics on a workload
of the five *other* shipped graphs (densenet121, inception_v3, nasnetamobile, resnet50,
resnext50), in the paper scenario with beta C, on evaluation seeds 0, 1, 2.

Usage: python benchmarks/agent/bench_generalisation.py [--all-checkpoint outputs/train/all_betaC/policy.pt]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from pacml.agent.policy import PacMLBetaPolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import Episodes, parser, save  # noqa: E402

HELD_OUT = "[densenet121,inception_v3,nasnetamobile,resnet50,resnext50]"


def main() -> None:
    p = parser(__doc__, seeds="0,1,2")
    p.add_argument("--beta", default="C")
    p.add_argument("--all-checkpoint", default=None)
    args = p.parse_args()
    episodes = Episodes(["scenario=paper", f"beta={args.beta}", f"workload.graphs={HELD_OUT}"])
    policies: dict[str, object] = {
        name: episodes.policy(f"policy={name}") for name in ("para_max", "para_min", "min_feasible", "min_feasible_4")}
    policies[f"pacml zero-shot (paper_beta{args.beta}, trained on the 5 paper graphs)"] = PacMLBetaPolicy(
        f"paper_beta{args.beta}")
    if args.all_checkpoint:
        policies["pacml trained on all 10 graphs"] = PacMLBetaPolicy(args.all_checkpoint)
    out = {}
    for name, policy in policies.items():
        rates = episodes.blocking(policy, args.seeds)
        out[name] = {"blocking_rate_mean": float(np.mean(rates)), "per_seed": rates}
        print(f"{name:70s} {np.mean(rates):.4f} {[round(r, 4) for r in rates]}", flush=True)
    save(args.json, out)


if __name__ == "__main__":
    main()
