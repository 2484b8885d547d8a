"""Measure the op placer's corpus: graph counts and sizes per split, and HEFT on every graph.

Prints, per split, the number of graphs and their node-count range; with ``--check``, places every
graph of the corpus by HEFT on each device preset and reports any infinite value (infeasible).

Usage:
    python scripts/placement_corpus_stats.py [--synthetic 64] [--seed 0] [--check]
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
from workloads.compute_graph import ComputeGraph
from workloads.placement_corpus import SPLITS, corpus

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ("gpu4", "hetero", "cpu_gpu")


def _devices(preset: str) -> DeviceSet:
    return device_set_from_config(OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "devices" / f"{preset}.yaml")))


def main(argv: list[str] | None = None) -> int:
    """Print the corpus figures; return the exit status (1 if ``--check`` found an infeasible graph)."""
    parser = argparse.ArgumentParser(prog="placement_corpus_stats", description=__doc__.split("\n\n")[0])
    parser.add_argument("--synthetic", type=int, default=64, help="synthetic graphs per split (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic draw")
    parser.add_argument("--check", action="store_true", help="place every graph by HEFT on every preset")
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
    return status


if __name__ == "__main__":
    sys.exit(main())
