"""Decision latency of ``scenario=pipeline`` (issue 45): the whole decision per arriving job.

Times, per job, ``sim.state()`` + ``policy.decide(job, state)`` + ``sim.apply(decision)``:
everything between the job's arrival and its placement (the rule's degrees, the block search of
``policy.block_search``, every stage placer cut the feasibility table asks for, the placement).
Each episode runs in a fresh process (cold caches: no cut, placement or lookahead computed yet),
while a spinner (``python -c 'while 1: pass'``) started here keeps one core busy. Cases: clusters
x ``min_feasible`` with ``policy.block_search`` 0 and 64 x stage placers ``pipedream`` and
``dp_mixed``. The 32-server clusters run at their calibrated loads (``+pipeline_cluster=...``: a
job every 0.6 s / 0.9 s, 1,000 s); the 512-server ones at the same load per server (16x the
arrivals) for 100 s. ``ramp512_hetero`` is ``cluster=ramp512`` with :data:`HETERO512` (racks 0-3
of every group the profiled GPU, 4-7 a half-speed, half-memory one: ``ramp32_hetero``'s split).

Usage: python benchmarks/pipeline/latency.py [--seeds 100,101,102] [--beta A] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: ``ramp32_hetero``'s two kinds on ``ramp512`` (8 racks per group: half of them slow).
HETERO512 = ("+cluster.server_kinds=[{kind:gpu,racks:[0,1,2,3],speed:1.0,memory_capacity_bytes:80.0e9},"
             "{kind:gpu_half,racks:[4,5,6,7],speed:0.5,memory_capacity_bytes:40.0e9}]")
CLUSTERS = {"ramp32": ["+pipeline_cluster=ramp32"], "ramp32_hetero": ["+pipeline_cluster=ramp32_hetero"],
            "ramp512": ["cluster=ramp512", "mean_interarrival_s=0.0375", "horizon_s=100"],
            "ramp512_hetero": ["cluster=ramp512", HETERO512, "mean_interarrival_s=0.05625", "horizon_s=100"]}
#: The done-when's bound per cluster size (ms).
BOUND_MS = {32: 50.0, 512: 100.0}


def episode(overrides: list[str], seed: int) -> dict:
    """One cold episode in this process: per-decision seconds and the stage placer's counters."""
    from pacml.agent.env import compose_sim_config  # lazy: the parent only launches episodes
    from simulator.build import build_policy, build_simulation

    cfg = compose_sim_config(overrides)
    sim = build_simulation(cfg, seed=seed)
    policy = build_policy(cfg)
    policy.reset(seed)
    times = []
    while (job := sim.next_job()) is not None:
        t0 = time.perf_counter()
        sim.apply(policy.decide(job, sim.state()))
        times.append(time.perf_counter() - t0)
    summary = sim.finalize().summary
    return {"times_s": times, "blocking": summary["blocking_rate"],
            "placer_calls": summary["pipeline_placer_calls"], "placer_wall_s": summary["pipeline_placer_wall_s"]}


def case_overrides(cluster: str, block_search: int, placer: str, beta: str) -> list[str]:
    """The Hydra overrides of one case."""
    return ["scenario=pipeline", *CLUSTERS[cluster], "policy=min_feasible", f"policy.block_search={block_search}",
            f"sim.pipeline.stage_placer={placer}", f"beta={beta}", "progress=false"]


def run_case(overrides: list[str], seeds: list[int], bound_ms: float) -> dict:
    """Every seed's episode in a fresh process; percentiles over all their decisions (ms) and how
    many took ``bound_ms`` or more."""
    times, first, calls, placer_s, blocking = [], [], 0, 0.0, []
    for seed in seeds:
        out = subprocess.run([sys.executable, __file__, "--episode", str(seed), "--", *overrides],
                             check=True, capture_output=True, text=True).stdout
        ep = json.loads(out.splitlines()[-1])
        times += ep["times_s"]
        first.append(ep["times_s"][0])
        calls += ep["placer_calls"]
        placer_s += ep["placer_wall_s"]
        blocking.append(ep["blocking"])
    ms = 1e3 * np.array(times)
    return {"decisions": len(ms), "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "max_ms": float(ms.max()), "over_bound": int((ms >= bound_ms).sum()), "first_ms": [1e3 * t for t in first], "placer_calls": calls,
            "placer_wall_s": placer_s, "blocking": blocking}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="100,101,102")
    parser.add_argument("--beta", default="A")
    parser.add_argument("--clusters", default=",".join(CLUSTERS))
    parser.add_argument("--placers", default="pipedream,dp_mixed")
    parser.add_argument("--block-search", default="0,64")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--episode", type=int, default=None, help=argparse.SUPPRESS)  # child: one episode
    args, rest = parser.parse_known_args()
    if args.episode is not None:
        print(json.dumps(episode([a for a in rest if a != "--"], args.episode)))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    spinner = subprocess.Popen([sys.executable, "-c", "while 1: pass"])  # one core busy throughout
    t0 = time.perf_counter()
    rows = []
    try:
        for cluster in args.clusters.split(","):
            for block_search in [int(b) for b in args.block_search.split(",")]:
                for placer in args.placers.split(","):
                    overrides = case_overrides(cluster, block_search, placer, args.beta)
                    bound = BOUND_MS[32 if cluster.startswith("ramp32") else 512]
                    row = {"cluster": cluster, "block_search": block_search, "stage_placer": placer,
                           **run_case(overrides, seeds, bound)}
                    row["meets_bound"] = row["p99_ms"] < bound
                    rows.append(row)
                    print(f"{cluster:15s} block_search={block_search:<3d} {placer:10s} n={row['decisions']} "
                          f"p50 {row['p50_ms']:.2f} p99 {row['p99_ms']:.2f} max {row['max_ms']:.1f} ms "
                          f"({row['over_bound']} >= {bound:g} ms), first "
                          f"{'/'.join(f'{f:.0f}' for f in row['first_ms'])} ms, p99 < {bound:g} ms: "
                          f"{row['meets_bound']}", flush=True)
    finally:
        spinner.kill()
        spinner.wait()
    result = {"seeds": seeds, "beta": args.beta, "wall_s": time.perf_counter() - t0, "cases": rows}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
