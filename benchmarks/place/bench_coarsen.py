"""Coarsening: the quality it costs on graphs small enough to place whole, and its speed on big ones.

Part ``quality``: every graph x device preset x inner placer (HEFT, m-ETF), the ``step`` value
of the inner placer on the fine graph beside ``method=coarse`` (chain clustering, contracted view)
at 8 / 32 / 128 clusters, without refinement and with 200 refinement evaluations; the loss is
``coarse / fine - 1``.

Part ``scale``: for each big graph (``simulator/place/large.py``), in a fresh single-threaded
process: build time, coarsening time (chain and metis, 128 clusters), the median time of one
``step`` evaluation, the wall time of coarse + HEFT + 200 refinement evaluations on gpu4 and the
process's peak memory (``ru_maxrss``), then the tracemalloc peak of a second, traced placement.

Usage: python benchmarks/place/bench_coarsen.py [--part quality|scale] (writes
``results/place/results_coarsen.json``; prints a markdown table per part).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import yaml

from simulator.place.coarsen import CoarsenedPlacer, build_inner, coarsen
from simulator.place.devices import device_set_from_config
from simulator.place.large import big_graph, is_big_graph_name
from simulator.place.objectives import bind_objective
from workloads.io import atomic_write_text
from workloads.loaders import load_compute_graph, shipped_models

ROOT = Path(__file__).resolve().parents[2]
DNN_GRAPHS = ("bert24_training", "inceptionv3_training", "bert_l-3_training")
SCALE_GRAPHS = ("densenet121_x16", "transformer350", "nasnetamobile_x32")


def _devices(name: str):
    return device_set_from_config(yaml.safe_load((ROOT / "conf/devices" / f"{name}.yaml").read_text()))


def quality(graphs: list[str], presets: list[str], inners: list[str], clusters: list[int],
            refines: list[int], width: int = 1) -> list[dict]:
    """Rows of fine vs coarse values (see module docstring)."""
    rows = []
    for name in graphs:
        g = big_graph(name) if is_big_graph_name(name) else load_compute_graph(name)
        for preset in presets:
            dev = _devices(preset)
            for inner in inners:
                obj = bind_objective("step", g, dev)
                t0 = time.perf_counter()
                fine = obj.value(build_inner(inner).place(obj, seed=0).placement)
                fine_s = time.perf_counter() - t0
                for k in clusters:
                    for ref in refines:
                        o = bind_objective("step", g, dev)
                        r = CoarsenedPlacer(inner, max_groups=k, refine_evaluations=ref, width=width).place(o, seed=0)
                        value = o.value(r.placement)
                        rows.append({"graph": name, "ops": g.num_nodes, "groups": g.num_groups, "devices": preset,
                                     "inner": inner, "clusters": r.info["clusters"], "max_groups": k, "width": width,
                                     "refine_evaluations": ref, "view": r.info["view"], "fine_s": fine,
                                     "coarse_s": r.info["coarse_value_s"], "value_s": value,
                                     "loss": value / fine - 1 if np.isfinite(fine) and fine > 0 else None,
                                     "wall_s": r.wall_s, "fine_wall_s": fine_s})
                print(f"{name} {preset} {inner}: fine {fine * 1e3:.4g} ms; "
                      + ", ".join(f"{x['max_groups']}/{x['refine_evaluations']}: {x['value_s'] * 1e3:.4g}"
                                  for x in rows[-len(clusters) * len(refines):]), flush=True)
    return rows


def scale_one(name: str, max_groups: int, refine: int, chain: bool) -> dict:
    """One big graph, measured in this process (run it in a fresh one: ``ru_maxrss`` is a process peak)."""
    out: dict = {"graph": name}
    t0 = time.perf_counter()
    g = big_graph(name)
    out.update(build_s=time.perf_counter() - t0, ops=g.num_nodes, edges=g.num_edges, groups=g.num_groups)
    dev = _devices("gpu4")
    obj = bind_objective("step", g, dev)
    p = (np.arange(g.num_groups) % dev.num_devices)[g.group]
    obj.value(p)  # compile / warm
    times = []
    for _ in range(5):
        t = time.perf_counter()
        obj.value(p)
        times.append(time.perf_counter() - t)
    out["eval_s"] = statistics.median(times)
    for method in ("metis", "chain") if chain else ("metis",):
        c = coarsen(g, max_groups, method=method)
        out[f"coarsen_{method}_s"] = c.wall_s
        out[f"coarsen_{method}_clusters"] = c.num_clusters
        out[f"coarsen_{method}_acyclic"] = c.acyclic
    method = "chain" if chain else "metis"
    placer = CoarsenedPlacer("heft", max_groups=max_groups, method=method, refine_evaluations=refine)
    obj = bind_objective("step", g, dev)
    t = time.perf_counter()
    r = placer.place(obj, seed=0)
    out["place_s"] = time.perf_counter() - t
    out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # Again under tracemalloc (which slows every allocation): the placement's own peak, not its time.
    tracemalloc.start()
    placer.place(bind_objective("step", g, dev), seed=0)
    out["tracemalloc_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    out.update({k: r.info[k] for k in ("view", "coarse_value_s", "refined_value_s", "refine_evaluations",
                                       "coarsen_s", "inner_s", "refine_s", "clusters")}, place_method=method)
    return out


def scale(graphs: list[str], max_groups: int, refine: int, chain_graphs: set[str]) -> list[dict]:
    """:func:`scale_one` per graph, each in a fresh single-threaded process."""
    rows = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    for name in graphs:
        code = (f"import json, sys; sys.path.insert(0, {str(ROOT / 'benchmarks' / 'place')!r}); import bench_coarsen as b; "
                f"print(json.dumps(b.scale_one({name!r}, {max_groups}, {refine}, {name in chain_graphs})))")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    """Command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("quality", "scale", "both"), default="both")
    ap.add_argument("--graphs", default="pipedream," + ",".join(DNN_GRAPHS))
    ap.add_argument("--devices", default="gpu4,hetero,cpu_gpu")
    ap.add_argument("--inners", default="heft,m_etf")
    ap.add_argument("--clusters", default="8,32,128")
    ap.add_argument("--refines", default="0,200")
    ap.add_argument("--width", type=int, default=1, help="lanes of the chain method (CoarsenedPlacer width)")
    ap.add_argument("--scale-graphs", default=",".join(SCALE_GRAPHS))
    ap.add_argument("--chain-graphs", default=",".join(SCALE_GRAPHS),
                    help="big graphs whose placement uses chain clustering (the others: metis)")
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/place/results_coarsen.json"))
    a = ap.parse_args()
    graphs = [x for item in a.graphs.split(",") for x in (shipped_models() if item == "pipedream" else [item])]
    result: dict = {}
    path = Path(a.json)
    if path.is_file():
        result = json.loads(path.read_text())
    if a.part in ("quality", "both"):
        result["quality"] = quality(graphs, a.devices.split(","), a.inners.split(","),
                                    [int(x) for x in a.clusters.split(",")], [int(x) for x in a.refines.split(",")], a.width)
    if a.part in ("scale", "both"):
        result["scale"] = scale(a.scale_graphs.split(","), 128, 200, set(a.chain_graphs.split(",")))
    atomic_write_text(path, json.dumps(result, indent=1))
    if "quality" in result:
        print("\n| inner | clusters | refine | mean loss | median loss | max loss | pairs |")
        print("|---|---|---|---|---|---|---|")
        rows = result["quality"]
        for inner in sorted({r["inner"] for r in rows}):
            for k in sorted({r["max_groups"] for r in rows}):
                for ref in sorted({r["refine_evaluations"] for r in rows}):
                    losses = [r["loss"] for r in rows if r["inner"] == inner and r["max_groups"] == k
                              and r["refine_evaluations"] == ref and r["loss"] is not None]
                    if losses:
                        print(f"| {inner} | {k} | {ref} | {np.mean(losses):+.1%} | {np.median(losses):+.1%} | "
                              f"{max(losses):+.1%} | {len(losses)} |")
    if "scale" in result:
        print("\n| graph | ops | edges | build s | chain s | metis s | eval ms | place s | peak RSS MB | traced MB | view |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in result["scale"]:
            chain = f"{r['coarsen_chain_s']:.2f}" if "coarsen_chain_s" in r else "-"
            print(f"| {r['graph']} | {r['ops']} | {r['edges']} | {r['build_s']:.2f} | {chain} | "
                  f"{r['coarsen_metis_s']:.2f} | {r['eval_s'] * 1e3:.1f} | {r['place_s']:.2f} | {r['maxrss_mb']:.0f} | "
                  f"{r['tracemalloc_peak_mb']:.0f} | "
                  f"{r['view']} ({r['place_method']}) |")


if __name__ == "__main__":
    main()
