"""Op-placement objective speed: evaluations per second per objective x graph x device preset.

A search baseline (local search, annealing) or a learned placer spends its budget in objective
evaluations, so their rate bounds every method's quality per second. Each cell times
``BoundObjective.value_groups`` on random group placements (every group on a uniformly drawn
device; infeasible ones count too, they are priced ``inf``) for about ``--seconds`` on one core,
after one warm-up call. For ``step`` it also times the reference path (the pure-Python kernel
``simulator.step_model.list_schedule``, as the objectives used before the compiled kernel) on the
same placements and checks that both give the same values bit for bit.

Graphs: shipped names, plus ``synthetic200`` (a 200-forward-op training step: a chain with random
skip edges, ResNet-like times and sizes; 400 nodes). ``file`` as a preset means the graph's own
device set (dnn-partitioning graphs). The cold cost of the compiled kernel (import plus first
compile, with an empty numba cache in a temporary directory) is measured in a subprocess.

Usage: python benchmarks/place/bench_place_eval.py [--seconds 0.5] [--graphs resnet50 synthetic200 ...]
       [--presets gpu4 gpu8 hetero cpu_gpu] [--json benchmarks/results/place/results_place_eval.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from simulator.place.devices import DeviceSet, device_set_from_config
from simulator.place.objectives import bind_objective
from simulator.step_model import list_schedule
from workloads.compute_graph import ComputeGraph
from workloads.graph import OpGraph, TrainingGraph
from workloads.io import atomic_write_text
from workloads.loaders import load_compute_graph

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_GRAPHS = ("resnet50", "synthetic200", "inception_v3", "nasnetamobile", "bert24_training",
                  "inceptionv3_training", "bert_l-3_training")
DEFAULT_PRESETS = ("gpu4", "gpu8", "hetero", "cpu_gpu")
OBJECTIVES = ("step", "latency", "pipeline")


def synthetic_training_graph(num_forward_ops: int = 200, seed: int = 0) -> ComputeGraph:
    """A training step of ``num_forward_ops`` forward ops: a chain plus skip edges (ResNet-like).

    Forward times ~ lognormal around 1 ms, backward twice that; activations ~ lognormal around
    4 MB, parameters around 2 MB; op ``i`` gets a skip edge from one of ops ``i-8..i-2`` with
    probability 0.3.
    """
    rng = np.random.default_rng(seed)
    n = num_forward_ops
    fwd_s = rng.lognormal(np.log(1e-3), 0.8, n)
    edges = [(i - 1, i) for i in range(1, n)]
    for i in range(2, n):
        if rng.random() < 0.3:
            edges.append((int(rng.integers(max(0, i - 8), i - 1)), i))
    graph = OpGraph(name=f"synthetic{n}", op_ids=tuple(f"op{i}" for i in range(n)),
                    labels=tuple(f"op{i}" for i in range(n)), forward_time_s=fwd_s,
                    backward_time_s=2 * fwd_s, activation_bytes=rng.lognormal(np.log(4e6), 1.0, n),
                    parameter_bytes=rng.lognormal(np.log(2e6), 1.5, n),
                    edges=np.array(sorted(set(edges)), dtype=np.int64), loss_index=n - 1, source="synthetic")
    return ComputeGraph.from_training_graph(TrainingGraph(graph), time_unit_s=1.0)


def graph_named(name: str) -> ComputeGraph:
    """A shipped graph, or ``synthetic<N>``."""
    if name.startswith("synthetic"):
        return synthetic_training_graph(int(name.removeprefix("synthetic") or 200))
    return load_compute_graph(name)


def preset(name: str, graph: ComputeGraph) -> DeviceSet:
    """A preset from ``conf/devices``, or ``file``: the graph's own devices."""
    if name == "file":
        return DeviceSet.for_dnn_partitioning(graph.meta)
    return device_set_from_config(OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "devices" / f"{name}.yaml")))


def _reference_value(obj, placement) -> float:
    """The ``step`` value through the pure-Python kernel (the objectives' code before the compiled one)."""
    if not obj.feasible(placement):
        return float("inf")
    g = obj.graph
    edge_t = obj.edge_time_s(placement)
    node_t = obj.time_s[np.arange(g.num_nodes), placement]
    offset = 0.0
    for nodes, edge_idx, out_ptr, out_dst, indeg, sources in obj._csr:
        if len(nodes):
            _, fin = list_schedule(out_ptr.tolist(), out_dst.tolist(), indeg.tolist(), edge_t[edge_idx].tolist(),
                                   node_t[nodes].tolist(), placement[nodes].tolist(), sources.tolist())
            offset = max(fin) + offset
    return offset


def _rate(fn, placements, seconds: float) -> tuple[float, list[float]]:
    """Calls per second of ``fn`` over the placements (cycled) for about ``seconds``; the first values."""
    fn(placements[0])  # warm-up (loads the compiled kernel)
    values, calls = [], 0
    t0 = time.perf_counter()
    while True:
        for p in placements:
            v = fn(p)
            if calls < len(placements):
                values.append(v)
            calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return calls / elapsed, values


def cell(graph: ComputeGraph, graph_name: str, preset_name: str, objective: str, seconds: float,
         seed: int = 0) -> dict[str, Any]:
    """One row: evaluations/s of ``objective`` for ``graph`` on ``preset_name``."""
    dev = preset(preset_name, graph)
    obj = bind_objective(objective, graph, dev)
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, dev.num_devices, size=(200, graph.num_groups))
    rate, values = _rate(obj.value_groups, list(groups), seconds)
    row = {"graph": graph_name, "preset": preset_name, "objective": objective, "nodes": graph.num_nodes,
           "forward_nodes": int((~graph.is_backward).sum()), "edges": graph.num_edges, "groups": graph.num_groups,
           "devices": dev.num_devices, "evals_per_s": rate,
           "feasible_fraction": float(np.mean(np.isfinite(values))), "mean_value_s": float(
               np.mean([v for v in values if np.isfinite(v)])) if np.isfinite(values).any() else None}
    if objective == "step":
        nodes = [g[graph.group] for g in groups[:50]]
        ref_rate, ref_values = _rate(lambda p: _reference_value(obj, p), nodes, min(seconds, 0.5))
        row["python_reference_evals_per_s"] = ref_rate
        row["speedup_over_reference"] = rate / ref_rate
        row["equal_to_reference"] = bool(ref_values == values[:len(ref_values)])
    return row


def cold_start() -> dict[str, float]:
    """Import + first ``step`` evaluation (numba compile) with an empty cache, in a fresh interpreter."""
    code = ("import time; t0 = time.perf_counter()\n"
            "import numpy as np\n"
            "from simulator.place.objectives import bind_objective\n"
            "from simulator.place.devices import Device, DeviceSet\n"
            "from workloads.loaders import load_compute_graph\n"
            "t1 = time.perf_counter()\n"
            "g = load_compute_graph('resnet50')\n"
            "d = DeviceSet.full_mesh('m', [Device(f'g{i}', 'gpu', 1.0, 8e10) for i in range(4)],"
            " bandwidth_Bps=4e11, latency_s=2.5e-7)\n"
            "o = bind_objective('step', g, d)\n"
            "t2 = time.perf_counter(); o.value(np.zeros(g.num_nodes, np.int64)); t3 = time.perf_counter()\n"
            "print(t1 - t0, t3 - t2)\n")
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        for label in ("cold", "warm"):  # second run: the cache written by the first
            env = {**os.environ, "NUMBA_CACHE_DIR": cache}
            res = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                                 check=True)
            imp, first = map(float, res.stdout.split())
            out[f"{label}_import_s"] = imp
            out[f"{label}_first_eval_s"] = first
    return out


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark, print a table, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.5, help="timing per cell")
    ap.add_argument("--graphs", nargs="+", default=list(DEFAULT_GRAPHS))
    ap.add_argument("--presets", nargs="+", default=list(DEFAULT_PRESETS),
                    help="device presets for graphs without their own devices (dnn-partitioning graphs use 'file')")
    ap.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES)
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "place" / "results_place_eval.json")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'graph':<22}{'preset':<9}{'objective':<10}{'nodes':>6}{'evals/s':>10}{'python ref/s':>14}"
          f"{'x':>6}{'feasible':>9}")
    for name in args.graphs:
        graph = graph_named(name)
        presets = ["file"] if "max_accelerators" in graph.meta else args.presets
        for pre in presets:
            for objective in args.objectives:
                row = cell(graph, name, pre, objective, args.seconds)
                rows.append(row)
                ref = row.get("python_reference_evals_per_s")
                print(f"{name:<22}{pre:<9}{objective:<10}{row['nodes']:>6}{row['evals_per_s']:>10,.0f}"
                      + (f"{ref:>14,.0f}{row['speedup_over_reference']:>6.1f}" if ref else f"{'':>14}{'':>6}")
                      + f"{row['feasible_fraction']:>9.2f}", flush=True)
                if ref and not row["equal_to_reference"]:
                    raise SystemExit(f"{name}/{pre}: compiled and reference step values differ")
    cold = cold_start()
    print(f"cold start (empty numba cache): import {cold['cold_import_s']:.2f} s, first evaluation "
          f"{cold['cold_first_eval_s']:.2f} s; from the cache: {cold['warm_first_eval_s']:.2f} s")
    result = {"machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine(),
                          "cpus": os.cpu_count(), "load_average_1_5_15min": os.getloadavg()},
              "seconds_per_cell": args.seconds, "placements": "200 random group placements per cell (seed 0)",
              "cold_start": cold, "rows": rows}
    atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
