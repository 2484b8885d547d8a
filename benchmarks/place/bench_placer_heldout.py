"""The shipped learned op placers against every heuristic on held-out graphs, pre-registered.

Four model classes never in the corpus (``benchmarks/data/placer_heldout/``, written by
``heldout_placer_graphs.py``; refused if any matches a ``train`` graph's content fingerprint).
Parts: ``pipeline`` (16 dnn-partitioning forms against ``method=dp`` and the heuristics),
``step`` (the 4 fx training steps x gpu4, hetero, cpu_gpu) and ``cluster``
(``bench_cluster_placers.py`` with these graphs). Zero-shot is the greedy placement; fine-tuned
is ``mode=finetune`` with 1,000 evaluations on seeds 4301-4303, paired with anneal and local
search at the same budget. ``--smoke`` runs one training graph with one seed. The protocol in
full: docs/experiments.md ("Held-out graphs for the learned placer").

Usage::

    nice -n 10 python benchmarks/place/bench_placer_heldout.py pipeline --json benchmarks/results/place/results_placer_heldout_pipeline.json
    nice -n 10 python benchmarks/place/bench_placer_heldout.py step --json benchmarks/results/place/results_placer_heldout_step.json

Each writes its JSON (and a CSV beside it, one row per pair) atomically and prints markdown tables.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_learned_placer import devices, method, run  # noqa: E402

from simulator.place.objectives import bind_objective  # noqa: E402
from workloads.io import atomic_write_json, atomic_write_text  # noqa: E402
from workloads.loaders import load_compute_graph  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "placer_heldout"
MODELS = ("ho_unet_d3", "ho_wide_inception_c3", "ho_partransformer_l3_d512_h2", "ho_moe_l3_e3")
PIPELINE_FILES = tuple(f"{m}_{form}_{links}" for m in MODELS for form in ("train", "inf") for links in ("fast", "slow"))
PRESETS = ("gpu4", "hetero", "cpu_gpu")
PIPELINE_HEURISTICS = ("heft", "m_etf", "m_sct", "m_topo", "metis", "pipedream", "expert")
STEP_HEURISTICS = ("heft", "m_etf", "m_sct", "m_topo", "metis", "expert")
SEARCH = ("anneal", "local_search")
SEEDS = (4301, 4302, 4303)
BUDGET = 1000
DP_MAX_PAIRS = 400_000_000
CHECKPOINT = {"pipeline": "placer_pipeline", "step": "placer_step"}


def check_held_out(graphs: list) -> None:
    """Refuse to measure if a held-out graph (or its forward part) is a training graph by content."""
    from workloads.placement_corpus import content_fingerprint, corpus

    train = {content_fingerprint(g) for _, g in corpus("train", synthetic=48, seed=0, max_nodes=4000)}
    for name, g in graphs:
        if content_fingerprint(g) in train:
            raise SystemExit(f"{name}: same content as a training graph; not held out")


def _search(name: str):
    extra = {"respect_memory": True} if name == "local_search" else {}
    return method(name, max_evaluations=BUDGET, **extra)


def measure_pair(graph, objective_name: str, device_name: str, heuristics: tuple[str, ...], with_dp: bool) -> dict:
    """Every method on one (graph, device set) pair."""
    obj = bind_objective(objective_name, graph, devices(device_name, graph))
    ckpt = CHECKPOINT[objective_name]
    row: dict = {"zero_shot": run(method("learned", checkpoint=ckpt, mode="greedy"), obj)}
    if with_dp:
        t0 = time.perf_counter()
        try:
            res = method("dp", max_pairs=DP_MAX_PAIRS, fallback=None).place(obj, seed=0)
            row["dp"] = {"value": obj.value(res.placement), "optimal": bool(res.info.get("optimal")),
                         "wall_s": time.perf_counter() - t0}
        except Exception as exc:  # no DP value for this pair: reported as such
            row["dp"] = {"value": math.nan, "refused": " ".join(str(exc).split())[:160]}
    row["heuristics"] = {h: run(method(h), obj) for h in heuristics}
    row["finetuned"], row["search"] = [], {s: [] for s in SEARCH}
    for seed in SEEDS:
        row["finetuned"].append(run(method("learned", checkpoint=ckpt, mode="finetune", max_evaluations=BUDGET),
                                    obj, seed))
        for s in SEARCH:
            row["search"][s].append(run(_search(s), obj, seed))
    for r in [row["zero_shot"], *row["finetuned"], *[x for v in row["search"].values() for x in v]]:
        r.pop("curve", None)
    return row


def _mean_se(xs: list[float]) -> tuple[float, float]:
    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std(ddof=1) / math.sqrt(len(a))) if len(a) > 1 else math.nan


def summarise(row: dict) -> dict:
    """Ratios of one pair (see the module docstring)."""
    hv = {h: r["value"] for h, r in row["heuristics"].items() if r["value"] == r["value"]}
    best_h = min(hv, key=hv.get)
    best = hv[best_h]
    z = row["zero_shot"]["value"]
    ft = [r["value"] for r in row["finetuned"]]
    out = {"best_heuristic": best_h, "best_heuristic_value": best, "zero_shot_vs_best": z / best,
           "finetuned_vs_best": _mean_se([v / best for v in ft]),
           "finetuned_vs_best_per_seed": [v / best for v in ft]}
    for s in SEARCH:
        sv = [r["value"] for r in row["search"][s]]
        out[f"finetuned_vs_{s}"] = _mean_se([a / b for a, b in zip(ft, sv, strict=True)])
        out[f"{s}_vs_best"] = _mean_se([v / best for v in sv])
    if "dp" in row and row["dp"]["value"] == row["dp"]["value"]:
        dp = row["dp"]["value"]
        out.update({"dp_value": dp, "zero_shot_vs_dp": z / dp, "finetuned_vs_dp": _mean_se([v / dp for v in ft]),
                    "finetuned_vs_dp_per_seed": [v / dp for v in ft], "best_heuristic_vs_dp": best / dp})
    return out


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _pm(ms: tuple[float, float]) -> str:
    return f"{ms[0]:.3f} ± {ms[1]:.3f}"


def table(rows: list[dict], part: str) -> str:
    """A markdown table, one line per pair."""
    head = ["graph", "devices", "best heuristic", "zero-shot / best", "fine-tuned / best (mean ± SE)",
            "fine-tuned / anneal", "fine-tuned / local search"]
    if part == "pipeline":
        head[3:3] = ["DP ms (optimal?)", "best heuristic / DP", "zero-shot / DP", "fine-tuned / DP (mean ± SE)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        s = r["summary"]
        cells = [r["graph"], r["devices"], f"{s['best_heuristic']} {s['best_heuristic_value'] * 1e3:.4g}",
                 f"{s['zero_shot_vs_best']:.3f}", _pm(s["finetuned_vs_best"]), _pm(s["finetuned_vs_anneal"]),
                 _pm(s["finetuned_vs_local_search"])]
        if part == "pipeline":
            dp = r.get("dp", {})
            cells[3:3] = [f"{s['dp_value'] * 1e3:.4g} ({'yes' if dp.get('optimal') else 'not proven'})"
                          if "dp_value" in s else "-",
                          f"{s.get('best_heuristic_vs_dp', math.nan):.3f}", f"{s.get('zero_shot_vs_dp', math.nan):.3f}",
                          _pm(s["finetuned_vs_dp"]) if "finetuned_vs_dp" in s else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def overall(rows: list[dict], part: str) -> dict:
    """Counts over the pairs (module docstring)."""
    s = [r["summary"] for r in rows]
    tol = 1 + 1e-9
    out = {"pairs": len(rows),
           "zero_shot_at_least_as_good_as_best_heuristic": sum(x["zero_shot_vs_best"] <= tol for x in s),
           "zero_shot_strictly_better": sum(x["zero_shot_vs_best"] < 1 - 1e-9 for x in s),
           "finetuned_mean_at_least_as_good_as_best_heuristic": sum(x["finetuned_vs_best"][0] <= tol for x in s),
           "finetuned_mean_at_least_as_good_as_anneal": sum(x["finetuned_vs_anneal"][0] <= tol for x in s),
           "finetuned_mean_at_least_as_good_as_local_search": sum(x["finetuned_vs_local_search"][0] <= tol for x in s),
           "zero_shot_vs_best_range": [min(x["zero_shot_vs_best"] for x in s), max(x["zero_shot_vs_best"] for x in s)],
           "zero_shot_vs_best_mean": float(np.mean([x["zero_shot_vs_best"] for x in s])),
           "finetuned_vs_best_mean": float(np.mean([x["finetuned_vs_best"][0] for x in s])),
           "finetuned_vs_best_per_seed_range": [min(min(x["finetuned_vs_best_per_seed"]) for x in s),
                                                max(max(x["finetuned_vs_best_per_seed"]) for x in s)]}
    if part == "pipeline":
        d = [x for x in s if "dp_value" in x]
        out.update({"with_dp": len(d),
                    "zero_shot_vs_dp_range": [min(x["zero_shot_vs_dp"] for x in d), max(x["zero_shot_vs_dp"] for x in d)],
                    "zero_shot_within_2pct_of_dp": sum(x["zero_shot_vs_dp"] <= 1.02 for x in d),
                    "finetuned_mean_within_2pct_of_dp": sum(x["finetuned_vs_dp"][0] <= 1.02 for x in d),
                    "finetuned_every_seed_within_2pct_of_dp": sum(max(x["finetuned_vs_dp_per_seed"]) <= 1.02 for x in d),
                    "finetuned_vs_dp_mean_range": [min(x["finetuned_vs_dp"][0] for x in d),
                                                   max(x["finetuned_vs_dp"][0] for x in d)],
                    "finetuned_vs_dp_per_seed_range": [min(min(x["finetuned_vs_dp_per_seed"]) for x in d),
                                                       max(max(x["finetuned_vs_dp_per_seed"]) for x in d)]})
    return out


def csv_text(rows: list[dict], part: str) -> str:
    """One CSV row per pair: the values behind the tables."""
    cols = ["graph", "devices", "best_heuristic", "best_heuristic_ms", "zero_shot_ms", "zero_shot_vs_best",
            "finetuned_vs_best_mean", "finetuned_vs_best_se", "finetuned_vs_anneal_mean", "finetuned_vs_anneal_se",
            "finetuned_vs_local_search_mean", "finetuned_vs_local_search_se", "n_seeds"]
    if part == "pipeline":
        cols += ["dp_ms", "dp_optimal", "zero_shot_vs_dp", "finetuned_vs_dp_mean", "finetuned_vs_dp_se"]
    out = [",".join(cols)]
    for r in rows:
        s = r["summary"]
        vals = [r["graph"], r["devices"], s["best_heuristic"], s["best_heuristic_value"] * 1e3,
                r["zero_shot"]["value"] * 1e3, s["zero_shot_vs_best"], *s["finetuned_vs_best"],
                *s["finetuned_vs_anneal"], *s["finetuned_vs_local_search"], len(SEEDS)]
        if part == "pipeline":
            vals += [s.get("dp_value", math.nan) * 1e3, r.get("dp", {}).get("optimal"), s.get("zero_shot_vs_dp", math.nan),
                     *s.get("finetuned_vs_dp", (math.nan, math.nan))]
        out.append(",".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in vals))
    return "\n".join(out) + "\n"


def main() -> None:
    """Run one part once and write its results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("pipeline", "step"))
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true", help="one training graph, one seed (tests the code)")
    args = parser.parse_args()
    global SEEDS
    import torch
    torch.set_num_threads(1)
    if args.part == "pipeline":
        graphs = [(f, load_compute_graph(DATA / "dnn" / f"{f}.json")) for f in PIPELINE_FILES]
        pairs = [(f, g, "file") for f, g in graphs]
    else:
        graphs = [(m, load_compute_graph(DATA / "fx" / f"{m}.json")) for m in MODELS]
        pairs = [(m, g, d) for m, g in graphs for d in PRESETS]
    if args.smoke:
        from workloads.placement_corpus import corpus
        SEEDS = SEEDS[:1]
        name = "bert24_training" if args.part == "pipeline" else "fx_branch_cnn_c4"
        graph = dict(corpus("train", synthetic=0))[name]
        graphs, pairs = [], [(name, graph, "file" if args.part == "pipeline" else "cpu_gpu")]
    check_held_out(graphs)
    commit = _commit()  # at the start: HEAD may move while a long run goes on
    t0 = time.perf_counter()
    rows = []
    for name, graph, dev in pairs:
        row = {"graph": name, "devices": dev,
               **measure_pair(graph, args.part, dev,
                              PIPELINE_HEURISTICS if args.part == "pipeline" else STEP_HEURISTICS,
                              with_dp=args.part == "pipeline")}
        row["summary"] = summarise(row)
        rows.append(row)
        print(name, dev, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row["summary"].items()
                          if not isinstance(v, list)}, flush=True)
    result = {"part": args.part, "commit": commit, "checkpoint": CHECKPOINT[args.part], "seeds": list(SEEDS),
              "budget": BUDGET, "wall_s": time.perf_counter() - t0, "summary": overall(rows, args.part), "rows": rows}
    atomic_write_json(args.json, result)
    atomic_write_text(args.json.with_suffix(".csv"), csv_text(rows, args.part))
    print(table(rows, args.part))
    print(result["summary"])


if __name__ == "__main__":
    main()
