"""Free-block search and placement at scale: per-job cost on 512, 4,096 and 65,536 servers.

Each cluster runs in a fresh process (so its peak resident memory is its own). A job stream of
the paper's five graphs at degrees drawn uniformly from the cluster's degrees is placed in block
mode (``scenario=physical`` knobs) against a cluster kept between ~60% and ~90% busy: jobs are
placed (``FirstFitAllocator.place``: first-fit free-block search, then the placement shifted into the
block) until one fails or 90% are busy, then random running jobs leave down to 60%. Reported per
cluster: topology build time and memory (tracemalloc), the first call (loading the compiled
kernels), first fit of the largest degree on an empty cluster, and the wall time of ``place``
per job: overall, for the jobs whose (graph, degree, block shape) was placed before (a search
plus a shift: the steady state of an episode, which uses few degrees) and for the first
placements (a per-op first-fit scan inside the block, once per graph, degree and shape).

No lookahead is run (the step model at degree > 64 is another part of issue 15).

Usage: python benchmarks/sim/bench_blocks.py [--jobs 20000] [--json benchmarks/results/sim/results_blocks.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = [(8, 8, 8, 64), (16, 16, 16, 1024), (64, 64, 16, 1024)]

CHILD = r"""
import json, resource, sys, time, tracemalloc
import numpy as np
from simulator.build import SimKnobs, build_feasibility
from simulator.topology import RampTopology
from workloads.graph import TrainingGraph
from workloads.loaders import load_graph_set

C, R, S, max_degree, num_jobs = map(int, sys.argv[1:6])
knobs = SimKnobs(min_op_time_s=1e-5, edge_sizing="activation", placement="block", comm_quirks=False)
graphs = [TrainingGraph(g) for g in load_graph_set("paper", time_unit_s=1e-3)]
out = {"servers": C * R * S, "shape": [C, R, S], "max_degree": max_degree}
tracemalloc.start()
t = time.perf_counter()
topo = RampTopology(C, R, S, max_degree=max_degree)
degrees = topo.degrees
out["topology_build_s"] = time.perf_counter() - t
out["num_degrees"] = len(degrees)
out["topology_bytes"] = tracemalloc.get_traced_memory()[0]
tracemalloc.stop()
placer = build_feasibility(topo, knobs).placer
top = degrees[-1]
t = time.perf_counter()
placer.first_fit_block(2, 1)  # first call: loads the compiled kernels from numba's disk cache
out["first_call_s"] = time.perf_counter() - t
t = time.perf_counter()
block = placer.first_fit_block(top, 0)
out["first_fit_empty_top_degree_s"] = time.perf_counter() - t
out["blocks_of_top_degree"] = topo.num_blocks(top)
rng = np.random.default_rng(0)

def run(n):
    occupied, running, times, busy, missed = 0, [], [], [], []
    for _ in range(n):
        graph = graphs[int(rng.integers(len(graphs)))]
        degree = int(degrees[int(rng.integers(len(degrees)))])
        shifted = len(placer._relative)
        t0 = time.perf_counter()
        placement = placer.place(graph, degree, occupied)
        times.append(time.perf_counter() - t0)
        missed.append(len(placer._relative) != shifted)  # first placement of this graph, degree and shape
        if placement is not None:
            occupied |= placement.mask
            running.append(placement.mask)
        if placement is None or occupied.bit_count() > 0.9 * topo.num_servers:
            while running and occupied.bit_count() > 0.6 * topo.num_servers:
                occupied &= ~running.pop(int(rng.integers(len(running))))
        busy.append(occupied.bit_count() / topo.num_servers)
    return np.array(times), np.array(missed), float(np.mean(busy))

times, missed, busy = run(num_jobs)
hit = times[~missed]
out.update({"jobs": num_jobs, "mean_busy_fraction": busy, "total_s": float(times.sum()),
            "jobs_per_s": len(times) / float(times.sum()),
            "first_placements": int(missed.sum()), "first_placement_mean_us": 1e6 * float(times[missed].mean()),
            "shifted_mean_us": 1e6 * float(hit.mean()), "shifted_p99_us": 1e6 * float(np.quantile(hit, 0.99)),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for C, R, S, max_degree in CLUSTERS:
        done = subprocess.run([sys.executable, "-c", CHILD, str(C), str(R), str(S), str(max_degree), str(args.jobs)],
                              cwd=ROOT, capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"clusters": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
