"""Op placers inside the cluster simulator: blocking rate and decision latency per op placer.

Physical scenario, ``cluster=ramp32_hetero``, one degree policy (``min_feasible_4``) for every op
placer, betas A-D, seeds 100-109; every placer sees the same job streams, so blocking differences
against the first placer of ``--placers`` are paired by seed (mean +- standard error). Decision
latency (arrival handed to the policy to decision applied) as p50 / p99 over every decision, with
each placer's caches shared across its episodes. ``--set KEY=VALUE`` passes an override to every
episode. Commands: BENCHMARKS.md section 8, "In the cluster simulator".
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from pacml.agent.env import compose_sim_config
from simulator.build import (
    build_feasibility,
    build_policy,
    build_simulation,
    build_topology,
    build_workload,
)
from workloads.io import atomic_write_json


def parse_seeds(text: str) -> list[int]:
    """``100-109`` or ``1,2,5``."""
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-"))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",")]


def run_episode(cfg: DictConfig, seed: int, feasibility: Any, workload: Any, policy: Any) -> tuple[dict, list[float]]:
    """One episode; returns its summary and the wall time of every decision (seconds)."""
    sim = build_simulation(cfg, seed=seed, feasibility=feasibility, workload=workload)
    bind = getattr(policy, "bind", None)
    if callable(bind):
        bind(sim.workload)
    policy.reset(seed)
    latencies: list[float] = []
    while True:
        job = sim.next_job()
        if job is None:
            break
        t0 = time.perf_counter()
        sim.apply(policy.decide(job, sim.state()))
        latencies.append(time.perf_counter() - t0)
    return sim.finalize().summary, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placers", default="first_fit,heft,m_etf,m_sct,metis",
                        help="comma-separated sim.op_placer values; the first is the reference")
    parser.add_argument("--betas", default="A,B,C,D")
    parser.add_argument("--seeds", default="100-109")
    parser.add_argument("--policy", default="min_feasible_4", help="degree policy (conf/policy/) for every placer")
    parser.add_argument("--cluster", default="ramp32_hetero")
    parser.add_argument("--scenario", default="physical")
    parser.add_argument("--horizon-s", type=float, default=None, help="shorter episodes (default: the scenario's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any further config override, e.g. --set workload.graphs=all (repeatable)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    placers = args.placers.split(",")
    betas = args.betas.split(",")
    seeds = parse_seeds(args.seeds)
    base = [f"scenario={args.scenario}", f"cluster={args.cluster}", f"policy={args.policy}"]
    if args.horizon_s is not None:
        base.append(f"horizon_s={args.horizon_s}")
    base.extend(args.set)
    rates: dict[str, dict[str, list[float]]] = {}
    latency: dict[str, list[float]] = {}
    info: dict[str, dict[str, Any]] = {}
    wall: dict[str, float] = {}
    for placer in placers:
        cfg0 = compose_sim_config([*base, f"sim.op_placer={placer}"])
        feas = build_feasibility(build_topology(cfg0), cfg0.sim)  # shared by all episodes of this placer
        t_placer = time.perf_counter()
        for beta in betas:
            cfg = compose_sim_config([*base, f"sim.op_placer={placer}", f"beta={beta}"])
            workload = build_workload(cfg)
            policy = build_policy(cfg)
            for seed in seeds:
                summary, lat = run_episode(cfg, seed, feas, workload, policy)
                rates.setdefault(placer, {}).setdefault(beta, []).append(float(summary["blocking_rate"]))
                latency.setdefault(placer, []).extend(lat)
                print(f"{placer:12s} beta={beta} seed={seed} blocking {summary['blocking_rate']:.4f} "
                      f"({summary['wall_time_s']:.1f} s)", flush=True)
        wall[placer] = time.perf_counter() - t_placer
        op = feas.placer.op_placer
        info[placer] = op.info() if op is not None else {"op_placer": "first_fit"}
        info[placer].update(feas.step_model.cache_info())

    ref = placers[0]
    table: dict[str, Any] = {}
    print(f"\n| op placer | {' | '.join(f'beta {b}' for b in betas)} | decision p50 / p99 (ms) |")
    print(f"|---|{'---|' * len(betas)}---|")
    for placer in placers:
        row = {}
        cells = []
        for beta in betas:
            r = np.array(rates[placer][beta])
            d = r - np.array(rates[ref][beta])
            se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else float("nan")
            row[beta] = {"blocking_mean": float(r.mean()), "blocking_per_seed": r.tolist(),
                         f"diff_vs_{ref}_mean": float(d.mean()), f"diff_vs_{ref}_se": se,
                         "better_seeds": int((d < 0).sum()), "worse_seeds": int((d > 0).sum())}
            cells.append(f"{r.mean():.4f}" if placer == ref else f"{r.mean():.4f} ({d.mean():+.4f} ± {se:.4f})")
        lat = np.array(latency[placer]) * 1e3
        row["decision_ms"] = {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)),
                              "max": float(lat.max()), "decisions": len(lat)}
        row["wall_s"] = wall[placer]
        row["counters"] = info[placer]
        table[placer] = row
        print(f"| {placer} | {' | '.join(cells)} | {row['decision_ms']['p50']:.2f} / {row['decision_ms']['p99']:.2f} |")
    if args.json:
        atomic_write_json(args.json, {"command_args": vars(args) | {"json": str(args.json)},
                                      "overrides": base, "seeds": seeds, "reference": ref,
                                      "results": table, "config": OmegaConf.to_container(cfg0.sim)})


if __name__ == "__main__":
    main()
