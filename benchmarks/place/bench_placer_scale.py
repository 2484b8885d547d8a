"""Scale of the learned placer: GNN forward pass at 1k-50k ops, and whole placements of 50k-op graphs.

Each graph runs in a fresh process on one core (``torch.set_num_threads(1)``) so its peak
resident memory (``ru_maxrss``, taken right after the learned placement) is its own. Per graph: the group problem's build time and the
GNN's forward pass over the *uncoarsened* group graph (what a policy without coarsening would
pay), then ``method=learned`` end to end (coarsening to ``max_groups`` clusters, greedy placement,
refinement) against HEFT through the same coarsening.

Usage:
    python benchmarks/place/bench_placer_scale.py --checkpoint placer_step \\
        --graphs transformer7,densenet121_x16,transformer350,nasnetamobile_x32
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, resource, sys, time
t_start = time.perf_counter()
import torch
torch.set_num_threads(1)
from omegaconf import OmegaConf
from simulator.place.devices import device_set_from_config
from simulator.place.objectives import bind_objective
from simulator.place.coarsen import CoarsenedPlacer
from workloads.loaders import load_compute_graph
from simulator.place.large import big_graph, is_big_graph_name
from pacml.placer.learned import LearnedPlacer
from pacml.placer.model import problem_tensors
from pacml.placer.problem import GroupProblem
name, ckpt, preset = sys.argv[1], sys.argv[2], sys.argv[3]
out = {"graph": name}
t = time.perf_counter()
g = big_graph(name) if is_big_graph_name(name) else load_compute_graph(name)
out.update(ops=g.num_nodes, groups=g.num_groups, edges=g.num_edges, build_graph_s=time.perf_counter() - t)
obj = bind_objective("step", g, device_set_from_config(OmegaConf.load(f"conf/devices/{preset}.yaml")))
placer = LearnedPlacer(checkpoint=ckpt)
net = placer.network("step")[0]
t = time.perf_counter()
r = placer.place(obj)
out["learned_place_s"] = time.perf_counter() - t
out["learned_value_s"] = obj.value(r.placement)
out["clusters"] = r.info.get("clusters")
# Peak memory of everything so far: loading, binding and the whole learned placement.
out["peak_rss_place_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
h = CoarsenedPlacer(inner="heft", max_groups=placer.max_groups, refine_evaluations=placer.refine_evaluations).place(obj) \
    if g.num_groups > placer.max_groups else None
out["heft_place_s"] = time.perf_counter() - t if h is not None else None
from simulator.place.heuristics import HeftPlacer
if h is None:
    t = time.perf_counter(); h = HeftPlacer().place(obj); out["heft_place_s"] = time.perf_counter() - t
out["heft_value_s"] = obj.value(h.placement)
# The GNN over the *uncoarsened* group graph (what placing op by op would cost), last: its problem
# arrays (sibling edges of all-to-all split ops) dominate memory on the partitioned graphs.
t = time.perf_counter()
problem = GroupProblem.from_objective(obj)
out["problem_s"] = time.perf_counter() - t
with torch.no_grad():
    x, ei = problem_tensors(problem)
    net.static_part(x, ei)  # warm-up
    t = time.perf_counter()
    net.static_part(x, ei)
    out["gnn_forward_s"] = time.perf_counter() - t
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["process_s"] = time.perf_counter() - t_start
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="placer_step")
    parser.add_argument("--graphs", default="transformer7,densenet121_x16,transformer350,nasnetamobile_x32")
    parser.add_argument("--devices", default="gpu4")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "place" / "results_placer_scale.json")
    args = parser.parse_args()
    rows = []
    for name in args.graphs.split(","):
        proc = subprocess.run([sys.executable, "-c", CHILD, name, args.checkpoint, args.devices], cwd=ROOT,
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(name, "failed:", proc.stderr.strip().splitlines()[-1:], flush=True)
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.json.write_text(json.dumps({"rows": rows, "args": {k: str(v) for k, v in vars(args).items()}}, indent=1))
    print("| graph | ops | groups | edges | GNN forward (uncoarsened) | learned: place s / value ms | peak RSS of the placement MB | HEFT (same coarsening): s / ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['graph']} | {r['ops']:,} | {r['groups']:,} | {r['edges']:,} | {r['gnn_forward_s']:.3f} s | "
              f"{r['learned_place_s']:.2f} / {r['learned_value_s'] * 1e3:.1f} | {r['peak_rss_place_mb']:.0f} | "
              f"{r['heft_place_s']:.2f} / {r['heft_value_s'] * 1e3:.1f} |")


if __name__ == "__main__":
    main()
