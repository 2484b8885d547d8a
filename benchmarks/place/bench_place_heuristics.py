"""The heuristic op placers side by side: objective value, speed-up over the single best device
and wall time, graph x preset x objective.

Each method is built from ``conf/method/<name>.yaml`` and its placement priced by the objective;
``single`` is the best single device that fits (the speed-up baseline). ``file`` is a
dnn-partitioning graph's own device set (CPU + ``maxFPGAs`` accelerators).

Usage: python benchmarks/place/bench_place_heuristics.py [--graphs resnet50,...] [--presets gpu4,hetero,cpu_gpu,file]
       [--objectives step,pipeline] [--out benchmarks/results/place/results_place_heuristics.json]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import OmegaConf

from simulator.place.devices import DeviceSet, device_set_from_config
from simulator.place.objectives import bind_objective
from simulator.place.placer import SingleDevicePlacer
from workloads.loaders import load_compute_graph

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("heft", "m_topo", "m_etf", "m_sct", "metis", "pipedream")
PIPEDREAM_GRAPHS = ("resnet50", "inception_v3", "vgg16", "gnmt")
DNN_GRAPHS = ("bert24_inference", "bert24_training", "inceptionv3_inference", "inceptionv3_training",
              "bert_l-3_inference", "bert_l-3_training")


def run(graphs: list[str], presets: list[str], objectives: list[str]) -> list[dict]:
    """One row per (graph, preset, objective, method)."""
    rows = []
    methods = {name: instantiate(OmegaConf.load(ROOT / "conf" / "method" / f"{name}.yaml")) for name in METHODS}
    for graph_name in graphs:
        graph = load_compute_graph(graph_name)
        for preset in presets:
            if preset == "file":
                if "max_accelerators" not in graph.meta:
                    continue
                devices = DeviceSet.for_dnn_partitioning(graph.meta)
            else:
                devices = device_set_from_config(
                    OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "devices" / f"{preset}.yaml")))
            for objective_name in objectives:
                objective = bind_objective(objective_name, graph, devices)
                single = SingleDevicePlacer().place(objective)
                base = objective.value(single.placement)
                for name, placer in [("single", SingleDevicePlacer()), *methods.items()]:
                    result = placer.place(objective, seed=0)
                    value = objective.value(result.placement)
                    rows.append({
                        "graph": graph_name, "preset": preset, "objective": objective_name, "method": name,
                        "value_ms": value * 1e3, "speedup": base / value if math.isfinite(value) and value > 0 else 0.0,
                        "own_makespan_ms": result.info.get("own_makespan_s", math.nan) * 1e3,
                        "wall_s": result.wall_s, "evaluations": result.evaluations})
    return rows


def main() -> None:
    """Run and print a markdown table of speed-ups (value in ms in brackets)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default=",".join(PIPEDREAM_GRAPHS + DNN_GRAPHS))
    parser.add_argument("--presets", default="gpu4,hetero,cpu_gpu,file")
    parser.add_argument("--objectives", default="step,pipeline")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "place" / "results_place_heuristics.json"))
    args = parser.parse_args()
    rows = run(args.graphs.split(","), args.presets.split(","), args.objectives.split(","))
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    print("| graph | preset | objective | single (ms) | " + " | ".join(METHODS) + " |")
    print("|---|---|---|---|" + "---|" * len(METHODS))
    keys = sorted({(r["graph"], r["preset"], r["objective"]) for r in rows},
                  key=lambda k: ([r["graph"] for r in rows].index(k[0]), k[1], k[2]))
    for key in keys:
        cell = {r["method"]: r for r in rows if (r["graph"], r["preset"], r["objective"]) == key}
        best = max(cell[m]["speedup"] for m in METHODS)
        parts = [f"**{cell[m]['speedup']:.2f}**" if cell[m]["speedup"] == best else f"{cell[m]['speedup']:.2f}"
                 for m in METHODS]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {cell['single']['value_ms']:.4g} | " + " | ".join(parts) + " |")
    walls = {m: max(r["wall_s"] for r in rows if r["method"] == m) for m in METHODS}
    print("max wall time (s): " + ", ".join(f"{m} {w:.2f}" for m, w in walls.items()))


if __name__ == "__main__":
    main()
