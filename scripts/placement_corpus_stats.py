"""Measure the op placer's corpus: graph counts and sizes per split, and whether placement matters.

Prints, per split, the number of graphs and their node-count range; with ``--check``, places every
graph of the corpus by HEFT on each device preset and reports any infinite value (infeasible);
with ``--ratios NAME ...``, the step value of single-device, round-robin and HEFT placements of
those graphs (synthetic names, shipped names or corpus names) on ``--preset``, and single / HEFT.

Usage:
    python scripts/placement_corpus_stats.py [--synthetic 64] [--seed 0] [--check]
        [--preset gpu4] [--ratios layered_w8_d20_s1_inf towers_c6_b4_s2_train ...]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

from simulator.place.devices import DeviceSet, device_set_from_config
from simulator.place.heuristics import HeftPlacer
from simulator.place.objectives import bind_objective
from simulator.place.placer import RoundRobinPlacer, SingleDevicePlacer
from workloads.compute_graph import ComputeGraph
from workloads.errors import WorkloadError
from workloads.placement_corpus import SPLITS, corpus
from workloads.synthetic_compute import graph_from_name

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ("gpu4", "hetero", "cpu_gpu")


def _devices(preset: str) -> DeviceSet:
    return device_set_from_config(OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "devices" / f"{preset}.yaml")))


def _graph(name: str, known: dict[str, ComputeGraph]) -> ComputeGraph:
    return known[name] if name in known else graph_from_name(name)


def main(argv: list[str] | None = None) -> int:
    """Print the corpus figures; return the exit status (1 if ``--check`` found an infeasible graph)."""
    parser = argparse.ArgumentParser(prog="placement_corpus_stats", description=__doc__.split("\n\n")[0])
    parser.add_argument("--synthetic", type=int, default=64, help="synthetic graphs per split (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic draw")
    parser.add_argument("--check", action="store_true", help="place every graph by HEFT on every preset")
    parser.add_argument("--preset", default="gpu4", choices=PRESETS, help="preset of --ratios")
    parser.add_argument("--ratios", nargs="+", metavar="NAME", default=(), help="graphs to compare placers on")
    parser.add_argument("--by-family", action="store_true",
                        help="single / HEFT on --preset per family of the train split (geometric mean, range)")
    args = parser.parse_args(argv)
    graphs: dict[str, ComputeGraph] = {}
    for split in SPLITS[:-1]:
        items = corpus(split, synthetic=args.synthetic, seed=args.seed)
        graphs.update(items)
        sizes = [g.num_nodes for _, g in items]
        big = sum(g.memory_bytes.sum() > 40e9 for _, g in items)
        print(f"{split:17s} {len(items):4d} graphs, {min(sizes)}-{max(sizes)} nodes "
              f"(total {sum(sizes)}), {big} over 40 GB")
    status = 0
    if args.check:
        for preset in PRESETS:
            devices = _devices(preset)
            start = time.perf_counter()
            bad = []
            for name, g in graphs.items():
                objective = bind_objective("step", g, devices)
                if not math.isfinite(objective.value(HeftPlacer().place(objective).placement)):
                    bad.append(name)
            print(f"HEFT on {preset}: {len(graphs) - len(bad)}/{len(graphs)} finite "
                  f"({time.perf_counter() - start:.1f} s){': infeasible ' + ', '.join(bad) if bad else ''}")
            status |= bool(bad)
    if args.ratios:
        devices = _devices(args.preset)
        print(f"step objective on {args.preset} (ms): graph, nodes, single, round_robin, heft, single/heft")
        for name in args.ratios:
            g = _graph(name, graphs)
            objective = bind_objective("step", g, devices)
            values = [objective.value(p.place(objective).placement) * 1e3
                      for p in (SingleDevicePlacer(), RoundRobinPlacer(), HeftPlacer())]
            print(f"{name:34s} {g.num_nodes:5d} {values[0]:10.2f} {values[1]:10.2f} {values[2]:10.2f} "
                  f"{values[0] / values[2]:6.2f}")
    if args.by_family:
        devices = _devices(args.preset)
        ratios: dict[str, list[float]] = {}
        for name, g in corpus("train", synthetic=args.synthetic, seed=args.seed):
            family = "fx" if name.startswith("fx_") else name.split("_")[0] if _synthetic(name) else "real"
            objective = bind_objective("step", g, devices)
            single = objective.value(SingleDevicePlacer().place(objective).placement)
            ratios.setdefault(family, []).append(single / objective.value(HeftPlacer().place(objective).placement))
        print(f"single / HEFT on {args.preset}, train split: family, graphs, geometric mean, min, max")
        for family, r in sorted(ratios.items()):
            finite = [x for x in r if math.isfinite(x)]
            mean = math.exp(sum(map(math.log, finite)) / len(finite)) if finite else math.nan
            print(f"{family:12s} {len(r):3d} {mean:6.2f} {min(r):6.2f} {max(r):6.2f}"
                  f"{f' ({len(r) - len(finite)} do not fit one device)' if len(finite) < len(r) else ''}")
    return status


def _synthetic(name: str) -> bool:
    try:
        graph_from_name(name)
    except WorkloadError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
