"""Op placement: graph x method x device set, one objective; values, speed-ups and wall times.

Every method is built from its Hydra config (``conf/method/<name>.yaml``, with overrides given
as ``--set method.key=value``) exactly as ``pacml-place`` builds it, and priced by the same bound
objective. A method that refuses a problem (e.g. ``dp`` on a device set it does not model, or a
DP state space over its cap) is reported with its one-line reason.

Writes ``--json`` (default ``benchmarks/results/place/results_place_<objective>.json``) and prints a
markdown table. Commands: BENCHMARKS.md section 7.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import yaml
from bench_learned_placer import DNN_GRAPHS, ROOT, devices, method

from simulator.place.objectives import bind_objective
from workloads.loaders import load_compute_graph, shipped_models


def _overrides(name: str, items: list[str]) -> dict:
    """The ``--set NAME.key=value`` items of method ``name``, as {key: value}."""
    pairs = (item.partition("=") for item in items)
    return {key.split(".", 1)[1]: yaml.safe_load(value) for key, _, value in pairs if key.startswith(f"{name}.")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objective", default="step", choices=("step", "latency", "pipeline"))
    parser.add_argument("--devices", default="gpu4", help="comma list of presets, or 'file'")
    parser.add_argument("--graphs", default="pipedream", help="comma list; 'pipedream' or 'dnn' for the shipped sets")
    parser.add_argument("--methods", default="single,round_robin,random,metis,heft,m_topo,m_etf,m_sct,pipedream,anneal")
    parser.add_argument("--set", action="append", default=[], help="method override, e.g. mip.time_limit_s=60")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    graphs: list[str] = []
    for item in args.graphs.split(","):
        graphs += list(shipped_models()) if item == "pipedream" else list(DNN_GRAPHS) if item == "dnn" else [item]
    methods = args.methods.split(",")
    rows = []
    for gname in graphs:
        graph = load_compute_graph(gname)
        for dname in args.devices.split(","):
            device_set = devices(dname, graph)
            single = None
            for mname in methods:
                objective = bind_objective(args.objective, graph, device_set)
                t0 = time.perf_counter()
                try:
                    result = method(mname, **_overrides(mname, args.set)).place(objective, seed=args.seed)
                except Exception as exc:  # a refusal is a result here
                    rows.append({"graph": gname, "devices": dname, "method": mname, "value_s": None,
                                 "error": str(exc).splitlines()[0][:200], "wall_s": time.perf_counter() - t0})
                    print(f"{gname:24s} {dname:8s} {mname:13s} refused: {rows[-1]['error']}", flush=True)
                    continue
                wall = time.perf_counter() - t0
                ev = objective.evaluate(result.placement)
                if mname == "single":
                    single = ev.value_s
                info = {k: v for k, v in result.info.items() if isinstance(v, int | float | str | bool | None)}
                rows.append({"graph": gname, "devices": dname, "method": mname, "value_s": ev.value_s,
                             "feasible": ev.feasible, "reason": ev.reason, "wall_s": wall,
                             "evaluations": result.evaluations, "info": info,
                             "devices_used": int(len(np.unique(result.placement)))})
                speed = "" if single is None or not math.isfinite(ev.value_s) else f" x{single / ev.value_s:.2f}"
                print(f"{gname:24s} {dname:8s} {mname:13s} {ev.value_s * 1e3:12.4f} ms{speed} "
                      f"({wall:.2f} s, {result.evaluations} evals){'' if ev.feasible else ' INFEASIBLE ' + ev.reason}",
                      flush=True)
    out = args.json or ROOT / "benchmarks" / "results" / "place" / f"results_place_{args.objective}.json"
    out.write_text(json.dumps({"objective": args.objective, "command": vars(args) | {"json": str(out)},
                               "rows": rows}, indent=1, default=str) + "\n")
    # Markdown: one row per (graph, devices), one column per method, value in ms.
    print()
    print("| graph | devices | " + " | ".join(methods) + " |")
    print("|---|---|" + "---|" * len(methods))
    for gname in graphs:
        for dname in args.devices.split(","):
            cells = []
            for mname in methods:
                row = next((r for r in rows if (r["graph"], r["devices"], r["method"]) == (gname, dname, mname)), None)
                v = None if row is None else row.get("value_s")
                cells.append("refused" if v is None else "inf" if not math.isfinite(v) else f"{v * 1e3:.4g}")
            print(f"| {gname} | {dname} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
