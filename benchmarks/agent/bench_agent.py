"""Decision latency of the learned policy: time per arriving job, observation building included.

Runs whole paper-scenario episodes with ``PacMLBetaPolicy`` and times every ``decide(job, state)``
call: the shared feasibility function (placement and lookahead of every degree), feature
building and the network's forward pass. Each episode starts with cold placement, lookahead
and embedding caches. Also reports the same call repeated with the job's feasibility already
computed (features + forward only).

Usage: python benchmarks/agent/bench_agent.py [--checkpoint paper_betaC] [--critic NAME] [--beta C] [--episodes 3] [--graphs paper]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from pacml.agent.env import compose_sim_config
from pacml.agent.policy import PacMLBetaPolicy
from pacml.critic.policy import PacMLCriticPolicy
from simulator.build import build_simulation


def measure(checkpoint: str, episodes: int, overrides: list[str], critic: str | None = None) -> dict[str, float]:
    """Per-decision latency percentiles (seconds) over ``episodes`` cold-cache episodes
    (``critic``: the agent plus that deviation critic, ``policy=pacml_critic``)."""
    torch.set_num_threads(1)
    cfg = compose_sim_config(overrides)
    times: list[float] = []
    warm: list[float] = []
    for seed in range(episodes):
        policy = PacMLBetaPolicy(checkpoint)  # fresh embedding cache
        if critic is not None:
            policy = PacMLCriticPolicy(critic, agent=policy)
        sim = build_simulation(cfg, seed=seed)  # fresh placement/lookahead caches
        policy.reset(seed)
        while (job := sim.next_job()) is not None:
            state = sim.state()
            t0 = time.perf_counter()
            decision = policy.decide(job, state)  # feasibility (placements, lookaheads) + features + forward
            times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            policy.decide(job, state)  # again, with this job's feasibility table already filled
            warm.append(time.perf_counter() - t0)
            sim.apply(decision)
        sim.finalize()
    arr, hot = np.array(times), np.array(warm)
    return {"decisions": len(arr), "p50_ms": 1e3 * float(np.percentile(arr, 50)),
            "p99_ms": 1e3 * float(np.percentile(arr, 99)), "max_ms": 1e3 * float(arr.max()),
            "features_and_forward_p50_ms": 1e3 * float(np.percentile(hot, 50)),
            "features_and_forward_p99_ms": 1e3 * float(np.percentile(hot, 99))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="paper_betaC")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--critic", default=None, help="also run this deviation critic (e.g. paper_betaD_critic)")
    parser.add_argument("--beta", default="C", help="beta distribution of the episodes (A-D)")
    parser.add_argument("--graphs", default=None, help="workload.graphs override (e.g. nasnetamobile)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    overrides = ["scenario=paper", f"beta={args.beta}"] + ([f"workload.graphs={args.graphs}"] if args.graphs else [])
    result = {"checkpoint": args.checkpoint, "critic": args.critic, "overrides": overrides, **measure(args.checkpoint, args.episodes, overrides, args.critic)}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
