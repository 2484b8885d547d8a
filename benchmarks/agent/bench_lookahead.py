"""Decision-time planning: the PAC-ML agent with and without rollout lookahead.

Runs, on evaluation seeds 0, 1, 2 of the paper scenario, the shipped per-beta agent
(``policy=pacml_beta``) and the same agent wrapped in the rollout planner (``policy=pacml_lookahead``), and reports
blocking rate, the decisions the planner changed, and per-decision latency (p50 / p99).

Usage: python benchmarks/agent/bench_lookahead.py --betas A,B,C,D --json benchmarks/results/agent/results_lookahead.json
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import Episodes, parser, save  # noqa: E402


class _Timed:
    """Wraps a policy and records the wall time of each decision."""

    def __init__(self, policy) -> None:
        self.policy, self.times_s = policy, []

    def reset(self, seed=None) -> None:
        self.policy.reset(seed)

    def bind(self, workload) -> None:
        if hasattr(self.policy, "bind"):
            self.policy.bind(workload)

    def decide(self, job, state):
        t0 = time.perf_counter()
        decision = self.policy.decide(job, state)
        self.times_s.append(time.perf_counter() - t0)
        return decision


def main() -> None:
    p = parser(__doc__, seeds="0,1,2")
    p.add_argument("--betas", default="A,B,C,D")
    p.add_argument("--policies", default="pacml_beta,pacml_lookahead")
    p.add_argument("--overrides", default="", help="extra Hydra overrides, space-separated")
    args = p.parse_args()
    out: dict[str, dict[str, dict]] = {}
    for beta in args.betas.split(","):
        episodes = Episodes(["scenario=paper", f"beta={beta}", *args.overrides.split()])
        for name in args.policies.split(","):
            rates, changed, times = [], [], []
            for seed in args.seeds:
                policy = episodes.policy(f"policy={name}")
                timed = _Timed(policy)
                rates += episodes.blocking(timed, [seed])
                changed.append(getattr(policy, "stats", {}).get("changed", 0))
                times += timed.times_s
            ms = 1e3 * np.asarray(times)
            row = {"blocking_rate": float(np.mean(rates)), "per_seed": rates, "changed_decisions": changed,
                   "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}
            out.setdefault(beta, {})[name] = row
            print(f"beta {beta} {name:16s} blocking {row['blocking_rate']:.4f} {[round(r, 4) for r in rates]} "
                  f"changed {changed} p50 {row['p50_ms']:.2f} ms p99 {row['p99_ms']:.1f} ms", flush=True)
            save(args.json, out)


if __name__ == "__main__":
    main()
