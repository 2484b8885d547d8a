"""Step-model (lookahead) cost against partition degree: aggregate vs dependency-level model.

For each graph and degree, on a RAMP of ``--shape`` (default 64 x 64 x 16 = 65,536 servers): the
job's sub-op ``i`` of a ``k``-way op runs on server ``i`` of the first ``degree``-server block of
the first-fit shape (built by formula, no block enumeration). Measured, each from a cold cache:

* ``build_s``: building the partition (``Partitioner.aggregate`` / ``Partitioner.partition``);
* ``lookahead_s``: one step simulation on the built partition (median of ``--repeats``);
* ``retained_MB``: bytes of the partition's arrays (what the partition cache keeps);
* ``peak_MB``: tracemalloc peak of build + one lookahead (numpy allocations; numba's kernel
  scratch, O(sub-ops + servers used), is not traced);
* ``same_step``: whether both models give the same step time, bit for bit (where both ran).

The dependency-level model runs only up to ``--max-dep-degree`` (default 64; at 1,024 resnet18
has ~10^7 dependencies).

Usage: python benchmarks/sim/bench_step_scale.py [--graphs resnet18,vgg16,alexnet]
       [--degrees 16,64,256,1024] [--shape 64,64,16] [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import tracemalloc
from typing import Any

import numpy as np

from simulator.allocation.first_fit import FirstFitAllocator, Placement
from simulator.comm import RampCommModel
from simulator.partition import Partitioner
from simulator.step_model import StepModel
from simulator.topology import RampTopology
from workloads.graph import TrainingGraph
from workloads.loaders import load_graph_set

#: The paper graphs in profile milliseconds (as the issue's measurements) with a 10 us quantum.
TIME_UNIT_S = 1e-3
QUANTUM_S = 1e-5


def first_block_servers(topology: RampTopology, degree: int) -> list[int]:
    """Servers of the first block of the first symmetric shape for ``degree``, at (0, 0, 0)."""
    shapes = topology.block_shapes(degree)
    if not shapes:
        raise SystemExit(f"no {degree}-server block on {topology}")
    x, y, z = shapes[0]
    C, R, S = topology.shape
    if z == -1:
        coords = [(t, t, 0) for t in range(degree)]
    else:
        coords = [(a % C, b % R, c % S) for a in range(x) for b in range(y) for c in range(z)]
    return [(c * R + r) * S + s for c, r, s in coords]


def nbytes(obj: Any) -> int:
    return sum(v.nbytes for v in vars(obj).values() if isinstance(v, np.ndarray))


def measure(graph: TrainingGraph, degree: int, topology: RampTopology, comm: RampCommModel, sizing: str,
            repeats: int, dependency_level: bool) -> dict[str, Any]:
    partitioner = Partitioner(QUANTUM_S, sizing, split_sizes=topology.split_sizes)
    step_model = StepModel(partitioner, comm)
    servers = first_block_servers(topology, degree)
    splits = partitioner.splits(graph, degree)
    placer = FirstFitAllocator(topology, partitioner)
    placement: Placement = placer.make_placement(tuple(tuple(servers[:k]) for k in splits.tolist()))
    out: dict[str, Any] = {"graph": graph.name, "degree": degree, "max_split": int(splits.max()),
                           "sub_ops": int(2 * splits.sum())}

    def run(build, simulate, tag: str) -> float:
        tracemalloc.start()
        t0 = time.perf_counter()
        part = build(graph, degree)
        out[f"{tag}_build_s"] = time.perf_counter() - t0
        result = simulate(part, placement)
        out[f"{tag}_peak_MB"] = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
        walls = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            simulate(part, placement)
            walls.append(time.perf_counter() - t0)
        out[f"{tag}_lookahead_s"] = statistics.median(walls)
        out[f"{tag}_retained_MB"] = nbytes(part) / 1e6
        out["deps"] = result.num_deps
        return result.step_time_s

    step = run(partitioner.aggregate, step_model.simulate, "agg")
    out["step_time_s"] = step
    if dependency_level:
        ref = run(partitioner.partition, step_model.simulate_dependencies, "dep")
        out["same_step"] = ref == step
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default="resnet18,vgg16,alexnet")
    ap.add_argument("--degrees", default="16,64,256,1024")
    ap.add_argument("--shape", default="64,64,16")
    ap.add_argument("--sizing", default="activation", choices=["paper", "activation"])
    ap.add_argument("--max-dep-degree", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    shape = tuple(int(x) for x in args.shape.split(","))
    degrees = [int(x) for x in args.degrees.split(",")]
    topology = RampTopology(*shape, max_degree=max(degrees))
    comm = RampCommModel(topology)
    graphs = {g.name: TrainingGraph(g) for g in load_graph_set(args.graphs.split(","), time_unit_s=TIME_UNIT_S)}
    # Compile the kernels once outside the measurements.
    measure(next(iter(graphs.values())), 2, topology, comm, args.sizing, 1, True)
    rows = []
    for graph in graphs.values():
        for degree in degrees:
            row = measure(graph, degree, topology, comm, args.sizing, args.repeats, degree <= args.max_dep_degree)
            rows.append(row)
            print(json.dumps({k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": platform.processor() or platform.machine(), "shape": shape,
                       "sizing": args.sizing, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
