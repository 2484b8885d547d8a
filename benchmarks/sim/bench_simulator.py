"""Simulator speed benchmarks (results go into BENCHMARKS.md).

Measures, each from a cold cache (fresh partitioner, placer and lookahead cache):

1. a full paper-preset episode (1001 arrivals) per heuristic: wall time, events/s, jobs/s;
2. the 16-way ResNet-18 lookahead (partitioning + placement + step simulation);
3. scaling: a 512-server RAMP episode, and the largest shipped graph (nasnetamobile).

Usage: python benchmarks/sim/bench_simulator.py [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from pacml.agent.env import compose_sim_config
from simulator.build import build_feasibility, build_policy, build_simulation
from simulator.topology import RampTopology
from workloads.graph import TrainingGraph
from workloads.loaders import load_graph_set


def episode(overrides: list[str], repeats: int) -> dict[str, Any]:
    """Median over ``repeats`` cold-cache episodes."""
    cfg = compose_sim_config(overrides)
    rows = []
    for r in range(repeats):
        t0 = time.perf_counter()
        sim = build_simulation(cfg, seed=r)  # fresh caches every time
        result = sim.run(build_policy(cfg))
        wall = time.perf_counter() - t0
        s = result.summary
        rows.append({"wall_s": wall, "events": s["events_simulated"], "jobs": s["num_jobs_arrived"],
                     "lookaheads": s["lookaheads"], "lookahead_wall_s": s["lookahead_wall_s"],
                     "blocking_rate": s["blocking_rate"]})
    wall = statistics.median(x["wall_s"] for x in rows)
    events = statistics.median(x["events"] for x in rows)
    jobs = statistics.median(x["jobs"] for x in rows)
    return {"overrides": " ".join(overrides), "wall_s_median": wall, "wall_s_max": max(x["wall_s"] for x in rows),
            "events_per_s": events / wall, "jobs_per_s": jobs / wall, "jobs": jobs, "events": events,
            "lookaheads": statistics.median(x["lookaheads"] for x in rows),
            "lookahead_wall_s": statistics.median(x["lookahead_wall_s"] for x in rows),
            "blocking_rate_mean": statistics.mean(x["blocking_rate"] for x in rows)}


def lookahead(model: str, degree: int, topology: RampTopology, overrides: list[str], repeats: int) -> dict[str, Any]:
    """Cold lookahead of ``model`` at ``degree`` on an empty cluster: partition + place + step."""
    cfg = compose_sim_config(overrides)
    (graph,) = load_graph_set(model, time_unit_s=float(cfg.workload.profile_time_unit_s))
    times = []
    for _ in range(repeats):
        tg = TrainingGraph(graph)
        feas = build_feasibility(topology, cfg.sim)
        t0 = time.perf_counter()
        placement = feas.placer.place(tg, degree, 0)
        step = feas.step_model.step(tg, degree, placement)
        times.append(time.perf_counter() - t0)
    pg = feas.step_model.partitioner.partition(tg, degree)
    return {"model": model, "degree": degree, "servers": topology.num_servers, "wall_s_median": statistics.median(times),
            "sub_ops": pg.num_sub_ops, "deps": pg.num_deps, "step_time_s": step.step_time_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    out: dict[str, Any] = {"machine": {"python": platform.python_version(), "cpu": _cpu(), "cores": _cores()}}
    paper = ["scenario=paper", "progress=false"]
    out["episodes"] = [episode([*paper, f"policy={p}", "beta=A"], args.repeats)
                       for p in ("para_max", "para_min", "random", "min_feasible")]
    ramp512 = ["scenario=paper", "cluster=ramp512", "mean_interarrival_s=62.5", "progress=false"]
    out["episodes"] += [episode([*ramp512, f"policy={p}", "beta=A", "policy.max_degree=64"] if p == "para_max"
                                else [*ramp512, f"policy={p}", "beta=A"], max(1, args.repeats // 2))
                        for p in ("para_max", "min_feasible")]
    out["episodes"].append(episode([*paper, "workload=all", "policy=min_feasible", "beta=A"], max(1, args.repeats // 2)))
    paper_topo = RampTopology()
    out["lookaheads"] = [lookahead("resnet18", 16, paper_topo, paper, args.repeats)]
    out["lookaheads"] += [lookahead("nasnetamobile", d, paper_topo, paper, 3) for d in (1, 4, 16)]
    big = RampTopology(8, 8, 8, max_degree=64)
    out["lookaheads"] += [lookahead("resnet18", d, big, paper, 3) for d in (16, 64)]
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


if __name__ == "__main__":
    main()
