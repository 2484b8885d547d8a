"""The learned placer against the baselines: zero-shot, fine-tuned, pipeline, ablation.

Every method is built from its ``conf/method/<name>.yaml`` (as ``pacml-place`` builds it) and
priced by the same bound objective. Graphs come from ``workloads.placement_corpus``: ``heldout``
(real graphs never used in pre-training) or ``unseen_synthetic`` (families and seeds disjoint
from pre-training), or a comma list of names.

Each part (``zeroshot``, ``finetune``, ``pipeline``, ``ablation``) writes ``--json`` and prints its
summary; the command of each table: BENCHMARKS.md section 8 and, for the detailed ones,
benchmarks/results/place/learned_placer.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from hydra.utils import instantiate
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.place.devices import DeviceSet, device_set_from_config  # noqa: E402
from simulator.place.objectives import bind_objective  # noqa: E402
from workloads.loaders import load_compute_graph  # noqa: E402

#: Non-search baselines of the zero-shot criterion.
NON_SEARCH = ("heft", "m_etf", "m_sct", "metis", "expert")
DNN_GRAPHS = ("bert24_inference", "bert24_training", "inceptionv3_inference", "inceptionv3_training",
              "bert_l-3_inference", "bert_l-3_training")


def devices(name: str, graph) -> DeviceSet:
    """A preset of ``conf/devices`` or a dnn-partitioning graph's own set (``file``)."""
    if name == "file":
        return DeviceSet.for_dnn_partitioning(graph.meta)
    return device_set_from_config(yaml.safe_load((ROOT / "conf/devices" / f"{name}.yaml").read_text()))


def method(name: str, **overrides):
    """A placer built from ``conf/method/<name>.yaml`` with ``overrides``."""
    cfg = OmegaConf.load(ROOT / "conf/method" / f"{name}.yaml")
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return instantiate(cfg)


def graphs(spec: str) -> list[tuple[str, object]]:
    """``heldout`` / ``unseen_synthetic`` (corpus splits) or a comma list of names."""
    if spec in ("heldout", "unseen_synthetic", "train"):
        from workloads.placement_corpus import corpus
        return corpus(spec, synthetic=16, seed=0)
    return [(n, load_compute_graph(n)) for n in spec.split(",")]


def run(placer, objective, seed: int = 0) -> dict:
    """Place, price and time one method on one bound objective."""
    objective.evaluations = 0
    t0 = time.perf_counter()
    try:
        result = placer.place(objective, seed=seed)
    except Exception as exc:  # a method refusing a problem is a result too
        return {"value": math.nan, "refused": " ".join(str(exc).split())[:160], "wall_s": time.perf_counter() - t0}
    value = objective.value(result.placement)
    return {"value": value, "wall_s": time.perf_counter() - t0, "evaluations": result.evaluations,
            "curve": result.info.get("curve")}


def _temp(args) -> dict:
    """``temperature=`` for the learned placer's fine-tuning when ``--temperature`` is given."""
    return {} if args.temperature is None else {"temperature": args.temperature}


def _fmt(v: float) -> str:
    return "inf" if v == math.inf else ("-" if v != v else f"{v * 1e3:.4g}")


def zeroshot(args) -> dict:
    """The zero-shot criterion: learned (greedy) vs every non-search baseline, per (graph, preset)."""
    rows = []
    learned = method("learned", checkpoint=args.checkpoint, mode="greedy")
    for gname, graph in graphs(args.graphs):
        for dname in args.devices.split(","):
            obj = bind_objective(args.objective, graph, devices(dname, graph))
            row = {"graph": gname, "devices": dname, "learned": run(learned, obj)}
            for m in NON_SEARCH:
                row[m] = run(method(m), obj)
            rows.append(row)
            print(gname, dname, {k: _fmt(v["value"]) for k, v in row.items() if isinstance(v, dict)}, flush=True)
    return {"rows": rows, "summary": summarise_zeroshot(rows)}


def summarise_zeroshot(rows: list[dict]) -> dict:
    """Wins, mean ratio to the best non-search baseline, and the gain over the person's split."""
    ratios, wins, better, vs_expert = [], 0, 0, {}
    for row in rows:
        best = min(row[m]["value"] for m in NON_SEARCH if row[m]["value"] == row[m]["value"])
        v = row["learned"]["value"]
        ratios.append(v / best)
        wins += v <= best * (1 + 1e-9)
        better += v < best * (1 - 1e-9)  # strictly better: not a tie with the best baseline
        e = row["expert"]["value"]
        if e == e and math.isfinite(e):
            vs_expert.setdefault(row["devices"], []).append(1 - v / e)
    finite = [r for r in ratios if math.isfinite(r)]
    return {"pairs": len(rows), "at_least_as_good": wins, "strictly_better": better,
            "mean_ratio_to_best": float(np.mean(ratios)),
            # A one-shot policy does not mask memory: its infeasible placements are counted apart.
            "infeasible": len(ratios) - len(finite),
            "mean_ratio_to_best_feasible": float(np.mean(finite)) if finite else math.nan,
            "gain_over_expert_by_preset": {k: float(np.mean(x)) for k, x in vs_expert.items()}}


def finetune(args) -> dict:
    """Fine-tuned learned placer vs local search and annealing at the same evaluation budget."""
    rows = []
    for gname, graph in graphs(args.graphs):
        for dname in args.devices.split(","):
            obj = bind_objective(args.objective, graph, devices(dname, graph))
            row = {"graph": gname, "devices": dname}
            for seed in range(args.seeds):
                row.setdefault("learned", []).append(run(method(
                    "learned", checkpoint=args.checkpoint, mode="finetune", max_evaluations=args.budget,
                    **_temp(args)), obj, seed))
                row.setdefault("local_search", []).append(run(method(
                    "local_search", max_evaluations=args.budget, respect_memory=True), obj, seed))
                row.setdefault("anneal", []).append(run(method("anneal", max_evaluations=args.budget), obj, seed))
            rows.append(row)
            print(gname, dname, {k: [_fmt(r["value"]) for r in v] for k, v in row.items() if isinstance(v, list)},
                  flush=True)
    return {"rows": rows, "summary": summarise_finetune(rows, args.budget)}


def _reach(curve, target: float) -> int | None:
    for evals, best in curve or []:
        if best <= target * (1 + 1e-9):
            return int(evals)
    return None


def summarise_finetune(rows: list[dict], budget: int) -> dict:
    """Share of pairs where fine-tuning is at least as good as local search (mean over seeds), and
    the evaluations it needs to reach local search's final value."""
    good, reach = 0, []
    for row in rows:
        lv = np.mean([r["value"] for r in row["learned"]])
        sv = np.mean([r["value"] for r in row["local_search"]])
        good += lv <= sv * (1 + 1e-9)
        for r, s in zip(row["learned"], row["local_search"], strict=True):
            reach.append(_reach(r["curve"], s["value"]))
    reached = [x for x in reach if x is not None]
    return {"pairs": len(rows), "at_least_as_good_as_local_search": good, "budget": budget,
            "runs_reaching_local_search": f"{len(reached)}/{len(reach)}",
            "median_evaluations_to_reach": float(np.median(reached)) if reached else None}


def pipeline(args) -> dict:
    """Pipeline objective on the dnn-partitioning graphs (their own devices) vs the DP optimum;
    fine-tuning on ``--seeds`` seeds (mean and worst reported)."""
    rows = []
    for gname in DNN_GRAPHS:
        graph = load_compute_graph(gname)
        obj = bind_objective("pipeline", graph, devices("file", graph))
        row = {"graph": gname, "dp": run(method("dp"), obj),
               "learned": run(method("learned", checkpoint=args.checkpoint, mode="greedy"), obj),
               "learned_finetune": [run(method("learned", checkpoint=args.checkpoint, mode="finetune",
                                               max_evaluations=args.budget, **_temp(args)), obj, seed)
                                    for seed in range(args.seeds)]}
        tuned = [r["value"] for r in row["learned_finetune"]]
        dp = row["dp"]["value"]
        row["summary"] = {"greedy_vs_dp": row["learned"]["value"] / dp - 1,
                          "finetune_mean_vs_dp": float(np.mean(tuned)) / dp - 1,
                          "finetune_worst_vs_dp": max(tuned) / dp - 1}
        rows.append(row)
        print(gname, _fmt(dp), _fmt(row["learned"]["value"]), [_fmt(v) for v in tuned],
              {k: f"{100 * v:+.1f}%" for k, v in row["summary"].items()}, flush=True)
    return {"rows": rows, "summary": {r["graph"]: r["summary"] for r in rows}}


def ablation(args) -> dict:
    """Two placers (e.g. with and without message passing) zero-shot on the same pairs."""
    rows = []
    a = method("learned", checkpoint=args.checkpoint, mode="greedy")
    b = method("learned", checkpoint=args.checkpoint_b, mode="greedy")
    for gname, graph in graphs(args.graphs):
        for dname in args.devices.split(","):
            obj = bind_objective(args.objective, graph, devices(dname, graph))
            row = {"graph": gname, "devices": dname, "a": run(a, obj), "b": run(b, obj), "heft": run(method("heft"), obj)}
            rows.append(row)
            print(gname, dname, {k: _fmt(v["value"]) for k, v in row.items() if isinstance(v, dict)}, flush=True)
    r = np.array([row["b"]["value"] / row["a"]["value"] for row in rows])
    return {"rows": rows, "summary": {"pairs": len(rows), "mean_b_over_a": float(r.mean()),
                                       "b_worse": int((r > 1 + 1e-9).sum()), "b_better": int((r < 1 - 1e-9).sum())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("zeroshot", "finetune", "pipeline", "ablation"))
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--checkpoint-b", default=None)
    parser.add_argument("--graphs", default="heldout")
    parser.add_argument("--devices", default="gpu4,hetero,cpu_gpu")
    parser.add_argument("--objective", default="step")
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=None,
                        help="fine-tuning temperature (default: conf/method/learned.yaml's)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    out = {"zeroshot": zeroshot, "finetune": finetune, "pipeline": pipeline, "ablation": ablation}[args.what](args)
    out["args"] = vars(args) | {"json": str(args.json)}
    path = args.json or ROOT / "benchmarks" / "results" / "place" / f"results_learned_{args.what}.json"
    path.write_text(json.dumps(out, indent=1, default=float))
    print(json.dumps(out.get("summary", {}), indent=1, default=float))


if __name__ == "__main__":
    main()
