"""Held-out measurement of ``policy=pacml`` and the per-beta agents, pre-registered.

Everything measured is fixed in this file (the commit that adds it is the record): the grid
(:data:`GRID_ROWS`, seeds 800000-800009) and held-out (:data:`HELDOUT`, :data:`HELDOUT_SEEDS`)
sets, the baselines (the block-placed oracle rule, the best single rule chosen by
:func:`choose_single_rule` on :data:`SELECTION_SEEDS` only, that rule first fit), :data:`AGENT`,
:data:`ABLATIONS` and :data:`PER_BETA_CONDITIONS`. Differences are paired per seed (agent -
baseline, mean +- standard error); a condition is won or lost beyond two standard errors.
The protocol in full: docs/experiments.md ("Held-out comparison of policy=pacml").

Usage (each ``--step`` caches what it ran; ``summary`` writes the tables)::

    nice -n 10 python benchmarks/adaptive/bench_heldout_pacml.py                   # every step
    nice -n 10 python benchmarks/adaptive/bench_heldout_pacml.py --step select     # then rules, grid512
    nice -n 10 python benchmarks/adaptive/bench_heldout_pacml.py --step agent --sets heldout,grid,grid512
    nice -n 10 python benchmarks/adaptive/bench_heldout_pacml.py --step per_beta   # then ablations
    python benchmarks/adaptive/bench_heldout_pacml.py --step summary --sets grid,heldout,grid512
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_conditions import Episode, run_episode  # noqa: E402

from pacml.adaptive.conditions import (  # noqa: E402
    EVAL_SEEDS,
    GRID,
    TRACE_TIME_SCALE,
    Condition,
    paired_difference,
)
from workloads.io import atomic_write_json  # noqa: E402

log = logging.getLogger("bench_heldout_pacml")

# ------------------------------------------------------------------------------------------------
# The pre-registration (fixed before measuring).
# ------------------------------------------------------------------------------------------------

#: Ten seeds no other part of the project uses.
HELDOUT_SEEDS: tuple[int, ...] = tuple(range(900_000, 900_010))
#: Development seeds the single rule is chosen on (the agent's knobs were tuned on these).
SELECTION_SEEDS: tuple[int, ...] = tuple(range(500_100, 500_110))
#: How the agent places its rule's degree (conf/policy/pacml_adaptive.yaml), and so the baselines.
BLOCK_SEARCH = 64
#: The grid's rows measured here (the 512-server row runs last, step grid512).
GRID_ROWS: tuple[Condition, ...] = tuple(c for c in GRID if c.name != "ramp512_C_62.5")
GRID_512: tuple[Condition, ...] = tuple(c for c in GRID if c.name == "ramp512_C_62.5")
#: 128 servers: 4 groups x 4 racks x 8 servers, degrees up to 16 (cluster_overrides((4, 4, 8, 16))).
_RAMP128 = ("cluster.num_comm_groups=4", "cluster.num_racks_per_group=4", "cluster.num_servers_per_rack=8",
            "cluster.max_degree=16")

HELDOUT: tuple[Condition, ...] = (
    Condition("ho_paper_A_750", ("scenario=paper", "beta=A", "mean_interarrival_s=750"),
              "Paper scenario, beta A, a job every 750 (4/3 of the paper's load)."),
    Condition("ho_paper_B_1250", ("scenario=paper", "beta=B", "mean_interarrival_s=1250"),
              "Paper scenario, beta B, a job every 1250 (0.8 of the paper's load)."),
    Condition("ho_poisson_D_700", ("scenario=paper", "beta=D", "arrivals=poisson", "mean_interarrival_s=700"),
              "Paper scenario, beta D, Poisson arrivals, mean gap 700."),
    Condition("ho_uniform_1000", ("scenario=paper", "beta=uniform"),
              "Paper scenario, targets uniform in [0.1, 1], the paper's load."),
    Condition("ho_fixed06_900", ("scenario=paper", "beta=fixed", "beta.value=0.6", "mean_interarrival_s=900"),
              "Paper scenario, every target 0.6 (a value training never drew), a job every 900."),
    Condition("ho_mix_C_1000", ("scenario=paper", "beta=C",
                                "workload.graphs=[gnmt,nasnetamobile,resnet50,densenet121]"),
              "Paper scenario, beta C, the paper's load, two training graphs with two unseen ones."),
    Condition("ho_trace_A_800", ("scenario=paper", "beta=A", "arrivals=trace", "workload=all",
                                 f"arrivals.time_scale={TRACE_TIME_SCALE * 0.8:.6g}", "arrivals.repeat=true"),
              "Paper scenario, beta A, the Philly trace compressed to a mean gap of 800, repeated; all ten graphs."),
    Condition("ho_ramp128_B_250", ("scenario=paper", *_RAMP128, "beta=B", "mean_interarrival_s=250",
                                   "horizon_s=5e5"),
              "128-server RAMP (4x4x8), beta B, a job every 250 (the paper's load per server), horizon 5e5 "
              "(2,000 arrivals)."),
    Condition("ho_physical_B", ("scenario=physical", "beta=B"),
              "Physical scenario (its own family's agent), beta B, a job every second for 1000 s."),
)

#: Rules every cluster offers (teacher_search labels); the single rule is one of them.
SINGLE_RULE_CANDIDATES = ("para_max(16)", "min_feasible(1)", "min_feasible(2)", "min_feasible(4)",
                          "min_feasible(6)", "min_feasible(8)", "min_feasible(16)")

AGENT: tuple[str, tuple[str, ...]] = ("pacml", ("policy=pacml",))
#: Leave-one-out ablations of the shipped agent, and its selector alone (blocks kept).
ABLATIONS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("pacml_no_shadows", ("policy=pacml", "policy.shadow_rules=0"), "shadows"),
    ("pacml_no_blocks", ("policy=pacml", "policy.block_search=0"), "block placement (rule and shadows first fit)"),
    ("pacml_no_critic", ("policy=pacml", "policy.condition_critics=null"), "condition critic"),
    ("pacml_no_guard_fallback", ("policy=pacml", "policy.horizon_guard=false", "policy.feasible_fallback=false"),
     "horizon guard and feasible fallback"),
    ("pacml_selector_blocks", ("policy=pacml", "policy.shadow_rules=0", "policy.condition_critics=null",
                               "policy.horizon_guard=false", "policy.feasible_fallback=false"),
     "the selector alone, placing in blocks"),
)

#: Per-beta agents: (set, condition) pairs; the checkpoint is paper_beta{beta} of the condition.
PER_BETA_CONDITIONS: tuple[tuple[str, str], ...] = (
    ("grid", "paper_A_1000"), ("grid", "paper_B_1000"), ("grid", "paper_C_1000"), ("grid", "paper_D_1000"),
    ("grid", "poisson_B"), ("grid", "trace_C"),
    ("heldout", "ho_paper_A_750"), ("heldout", "ho_paper_B_1250"), ("heldout", "ho_poisson_D_700"),
    ("heldout", "ho_mix_C_1000"),
)

SETS: dict[str, tuple[tuple[Condition, ...], tuple[int, ...]]] = {
    "grid": (GRID_ROWS, EVAL_SEEDS), "heldout": (HELDOUT, HELDOUT_SEEDS), "grid512": (GRID_512, EVAL_SEEDS)}

#: Episodes (agent, ablations, per-beta); the teacher searches (rules) go to their own file, so the two
#: kinds of step can run in two processes at once without writing the same file.
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "adaptive" / "results_heldout_pacml.json"
DEFAULT_RULES_OUT = ROOT / "benchmarks" / "results" / "adaptive" / "results_heldout_pacml_rules.json"
#: Results of the shipped grid (its episode cache): episodes with exactly the same key are reused.
GRID_CACHE = ROOT / "benchmarks" / "results" / "adaptive" / "results_conditions.json"
RESULTS_FORMAT = "pacml-heldout"


# ------------------------------------------------------------------------------------------------
# Measurement.
# ------------------------------------------------------------------------------------------------

def condition(name: str) -> Condition:
    """A condition of any set by name."""
    for conds, _ in SETS.values():
        for c in conds:
            if c.name == name:
                return c
    raise KeyError(name)


def choose_single_rule(means: dict[str, dict[str, float]]) -> str:
    """The candidate with the lowest mean over conditions of its per-condition mean blocking
    (``means``: condition -> rule label -> mean); the first in :data:`SINGLE_RULE_CANDIDATES` on a tie."""
    score = {r: float(np.mean([m[r] for m in means.values()])) for r in SINGLE_RULE_CANDIDATES}
    return min(SINGLE_RULE_CANDIDATES, key=lambda r: score[r])


def load(path: Path) -> dict[str, Any]:
    """The results file, or a fresh one."""
    if path.exists():
        data = json.loads(path.read_text())
        if data.get("format") != RESULTS_FORMAT:
            raise SystemExit(f"bench_heldout_pacml: error: {path} is not a {RESULTS_FORMAT} file")
        return data
    return {"format": RESULTS_FORMAT, "teacher": {}, "episodes": {}, "per_beta": {}}


def teacher(results: dict[str, Any], out: Path, cond: Condition, seeds: Sequence[int], block_search: int) -> dict:
    """Every rule's blocking per seed on ``cond`` (cached under the overrides, seeds and block_search)."""
    from pacml.adaptive.train import teacher_search

    key = json.dumps([cond.name, list(cond.overrides), list(seeds), block_search])
    if key not in results["teacher"]:
        start = time.perf_counter()
        res = teacher_search([*cond.overrides, "progress=false"], list(seeds), samples_per_episode=1,
                             block_search=block_search)
        results["teacher"][key] = {"condition": cond.name, "block_search": block_search, "seeds": list(seeds),
                                   "rules": {r: res["blocking"][i].tolist() for i, r in enumerate(res["rules"])},
                                   "wall_s": round(time.perf_counter() - start, 1)}
        atomic_write_json(out, results)
        log.info("teacher %s block_search=%d: %.0f s", cond.name, block_search, time.perf_counter() - start)
    return results["teacher"][key]


def episodes(results: dict[str, Any], out: Path, conds: Sequence[Condition], seeds: Sequence[int],
             agents: Sequence[tuple[str, tuple[str, ...]]]) -> None:
    """Run (or reuse) every episode of ``agents`` on ``conds`` x ``seeds``."""
    cache = results["episodes"]
    grid_cache = json.loads(GRID_CACHE.read_text())["episodes"] if GRID_CACHE.exists() else {}
    for cond in conds:
        for label, pol in agents:
            start = time.perf_counter()
            for seed in seeds:
                ep = Episode(cond.name, cond.overrides, label, pol, seed)
                if ep.key in cache:
                    continue
                if ep.key in grid_cache and "blocking_rate" in grid_cache[ep.key]:
                    cache[ep.key] = {**grid_cache[ep.key], "from": GRID_CACHE.name}
                    continue
                record = run_episode(ep)
                if "error" in record:
                    log.warning("%s %s seed %d: %s", cond.name, label, seed, record["error"])
                    continue
                cache[ep.key] = {"condition": cond.name, "policy": label, "seed": seed, **record}
                atomic_write_json(out, results)
            log.info("%s | %s done (%.0f s)", cond.name, label, time.perf_counter() - start)
    atomic_write_json(out, results)


class _Recorder:
    """Wraps a policy and records every decision's degree (and whether it named a block)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.degrees: list[int] = []
        self.placements: list[tuple[int, ...] | None] = []

    def reset(self, seed: int | None = None) -> None:
        """As the wrapped policy's."""
        self.policy.reset(seed)

    def decide(self, job: Any, state: Any) -> Any:
        """The wrapped policy's decision, recorded."""
        decision = self.policy.decide(job, state)
        self.degrees.append(int(decision.degree))
        self.placements.append(None if decision.placement is None else tuple(int(s) for s in decision.placement))
        return decision


def per_beta(results: dict[str, Any], out: Path) -> None:
    """Per-beta agent vs its warm-start rule, decision by decision, on PER_BETA_CONDITIONS."""
    from bench_conditions import compose

    from simulator.build import (
        build_feasibility,
        build_policy,
        build_simulation,
        build_topology,
        build_workload,
    )

    for set_name, name in PER_BETA_CONDITIONS:
        cond = condition(name)
        seeds = SETS[set_name][1]
        if name in results["per_beta"] and len(results["per_beta"][name]["seeds"]) == len(seeds):
            continue
        start = time.perf_counter()
        agent_over = ("policy=pacml_beta", f"policy.checkpoint=paper_beta{cond.beta}")
        cfg = compose(cond.overrides, name)
        feas = build_feasibility(build_topology(cfg), cfg.sim)
        workload = build_workload(cfg)
        agent = build_policy(compose([*cond.overrides, *agent_over], "policy"))
        k = agent.teacher_min_degree
        rule_over = ("policy=min_feasible", f"+policy.min_degree={k}")
        rule = build_policy(compose([*cond.overrides, *rule_over], "policy"))
        rows = []
        for seed in seeds:
            runs = {}
            for label, pol in (("agent", agent), ("rule", rule)):
                rec = _Recorder(pol)
                summary = build_simulation(cfg, seed=seed, feasibility=feas, workload=workload).run(rec).summary
                runs[label] = (rec, float(summary["blocking_rate"]))
            a, r = runs["agent"][0], runs["rule"][0]
            first = next((i for i, (x, y) in enumerate(zip(a.degrees, r.degrees, strict=False)) if x != y), None)
            same = a.degrees == r.degrees and a.placements == r.placements
            rows.append({"seed": seed, "agent": runs["agent"][1], "rule": runs["rule"][1], "identical": same,
                         "decisions": len(a.degrees), "first_difference": first,
                         "agent_named_blocks": sum(p is not None for p in a.placements)})
        results["per_beta"][name] = {"set": set_name, "checkpoint": f"paper_beta{cond.beta}",
                                     "warm_start_rule": f"min_feasible({k})", "agent_overrides": list(agent_over),
                                     "rule_overrides": list(rule_over), "seeds": list(seeds), "rows": rows,
                                     "wall_s": round(time.perf_counter() - start, 1)}
        atomic_write_json(out, results)
        log.info("per-beta %s: %d of %d seeds identical (%.0f s)", name, sum(r["identical"] for r in rows),
                 len(rows), time.perf_counter() - start)


# ------------------------------------------------------------------------------------------------
# Summary.
# ------------------------------------------------------------------------------------------------

def _values(results: dict[str, Any], cond: Condition, seeds: Sequence[int], label: str,
            pol: tuple[str, ...]) -> list[float] | None:
    recs = [results["episodes"].get(Episode(cond.name, cond.overrides, label, pol, s).key) for s in seeds]
    if not all(r and "blocking_rate" in r for r in recs):
        return None
    return [float(r["blocking_rate"]) for r in recs]  # type: ignore[index]


def _verdict(d: dict[str, Any]) -> str:
    se = d["se"] or 0.0
    if d["mean"] < -2 * se and d["mean"] < 0:
        return "won"
    if d["mean"] > 2 * se and d["mean"] > 0:
        return "lost"
    return "tied"


def summarise(results: dict[str, Any], rules: dict[str, Any]) -> dict[str, Any]:
    """Per set: each condition's baselines (``rules``: the teacher searches) and the agent's (and
    ablations') paired differences (``results``: the episodes)."""
    single = rules.get("selection", {}).get("rule")
    out: dict[str, Any] = {"single_rule": single, "sets": {}}
    for set_name, (conds, seeds) in SETS.items():
        rows = {}
        for cond in conds:
            t64 = rules["teacher"].get(json.dumps([cond.name, list(cond.overrides), list(seeds), BLOCK_SEARCH]))
            t0 = rules["teacher"].get(json.dumps([cond.name, list(cond.overrides), list(seeds), 0]))
            agent = _values(results, cond, seeds, *AGENT)
            if t64 is None or agent is None:
                continue
            means = {r: float(np.mean(v)) for r, v in t64["rules"].items()}
            oracle = min(means, key=lambda r: means[r])
            row: dict[str, Any] = {"oracle_rule": oracle, "oracle": means[oracle], "agent": float(np.mean(agent)),
                                   "vs_oracle": paired_difference(agent, t64["rules"][oracle])}
            if single is not None:
                row["single"] = means[single]
                row["vs_single"] = paired_difference(agent, t64["rules"][single])
                if t0 is not None:
                    row["single_first_fit"] = float(np.mean(t0["rules"][single]))
                    row["single_blocks_vs_first_fit"] = paired_difference(t64["rules"][single], t0["rules"][single])
            row["ablations"] = {}
            for label, pol, _what in ABLATIONS:
                v = _values(results, cond, seeds, label, pol)
                if v is not None:
                    row["ablations"][label] = {"mean": float(np.mean(v)), "full_minus_it": paired_difference(agent, v),
                                               "vs_oracle": paired_difference(v, t64["rules"][oracle])}
                    if single is not None:
                        row["ablations"][label]["vs_single"] = paired_difference(v, t64["rules"][single])
            rows[cond.name] = row
        agg: dict[str, Any] = {}
        for key in ("vs_oracle", "vs_single"):
            ds = [r[key] for r in rows.values() if key in r]
            if ds:
                m = [d["mean"] for d in ds]
                verdicts = [_verdict(d) for d in ds]
                agg[key] = {"mean": float(np.mean(m)),
                            "se_over_conditions": float(np.std(m, ddof=1) / math.sqrt(len(m))) if len(m) > 1 else None,
                            "conditions": len(m), "won": verdicts.count("won"), "tied": verdicts.count("tied"),
                            "lost": verdicts.count("lost")}
        out["sets"][set_name] = {"seeds": list(seeds), "conditions": rows, "average": agg}
    return out


def print_tables(summary: dict[str, Any]) -> None:
    """Markdown tables on stdout."""
    def pd(d: dict[str, Any]) -> str:
        return f"{d['mean']:+.4f} ± {d['se'] or 0:.4f} ({d['better']}/{d['tied']}/{d['worse']})"

    single = summary["single_rule"]
    print(f"best single rule (chosen on the grid's conditions, seeds {SELECTION_SEEDS[0]}-{SELECTION_SEEDS[-1]}, "
          f"block_search={BLOCK_SEARCH}): {single}\n")
    for set_name, s in summary["sets"].items():
        if not s["conditions"]:
            continue
        print(f"### {set_name}, seeds {s['seeds'][0]}-{s['seeds'][-1]}\n")
        print("| condition | oracle rule (blocks) | oracle | single rule (blocks) | agent | agent − oracle (b/t/w) "
              "| agent − single rule (b/t/w) |")
        print("|---|---|---|---|---|---|---|")
        for name, r in s["conditions"].items():
            print(f"| {name} | {r['oracle_rule']} | {r['oracle']:.4f} | {r.get('single', float('nan')):.4f} | "
                  f"{r['agent']:.4f} | {pd(r['vs_oracle'])} | {pd(r['vs_single']) if 'vs_single' in r else ''} |")
        for key, what in (("vs_oracle", "oracle"), ("vs_single", "single rule")):
            a = s["average"].get(key)
            if a:
                print(f"| **average − {what}** | | | | | **{a['mean']:+.4f} ± {a['se_over_conditions'] or 0:.4f}** "
                      f"(over {a['conditions']} conditions; won {a['won']}, tied {a['tied']}, lost {a['lost']}) | |")
        print()
        labels = [lab for lab, _, _ in ABLATIONS]
        if any(r["ablations"] for r in s["conditions"].values()):
            print("| condition | single rule: blocks − first fit | selector alone (blocks) − single rule (blocks) | "
                  + " | ".join(f"full − {lab}" for lab in labels) + " |")
            print("|---|---|---|" + "---|" * len(labels))
            sums: dict[str, list[float]] = {lab: [] for lab in ["blocks_rule", "selection", *labels]}
            for name, r in s["conditions"].items():
                cells = []
                b = r.get("single_blocks_vs_first_fit")
                cells.append(pd(b) if b else "")
                if b:
                    sums["blocks_rule"].append(b["mean"])
                sel = r["ablations"].get("pacml_selector_blocks", {}).get("vs_single")
                cells.append(pd(sel) if sel else "")
                if sel:
                    sums["selection"].append(sel["mean"])
                for lab in labels:
                    a = r["ablations"].get(lab)
                    cells.append(pd(a["full_minus_it"]) if a else "")
                    if a:
                        sums[lab].append(a["full_minus_it"]["mean"])
                print(f"| {name} | " + " | ".join(cells) + " |")
            print("| **average** | " + " | ".join(f"**{np.mean(v):+.4f}** ({len(v)})" if v else ""
                                                  for v in sums.values()) + " |")
            print()


def per_beta_table(per_beta_results: dict[str, Any]) -> dict[str, Any]:
    """Per condition: seeds with the warm-start rule's decisions exactly, and agent - rule paired."""
    out = {}
    for name, e in per_beta_results.items():
        rows = e["rows"]
        out[name] = {"set": e["set"], "checkpoint": e["checkpoint"], "warm_start_rule": e["warm_start_rule"],
                     "identical_seeds": sum(r["identical"] for r in rows), "seeds": len(rows),
                     "agent": float(np.mean([r["agent"] for r in rows])),
                     "rule": float(np.mean([r["rule"] for r in rows])),
                     "agent_minus_rule": paired_difference([r["agent"] for r in rows], [r["rule"] for r in rows]),
                     "first_difference_at_job": [r["first_difference"] for r in rows]}
    return out


def print_per_beta(table: dict[str, Any]) -> None:
    """The per-beta table (markdown) on stdout."""
    if not table:
        return
    print("| set | condition | checkpoint | warm-start rule | seeds with its decisions exactly | agent | rule "
          "| agent − rule (b/t/w) | first differing decision (job index, per differing seed) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in table.items():
        d = r["agent_minus_rule"]
        firsts = [f for f in r["first_difference_at_job"] if f is not None]
        print(f"| {r['set']} | {name} | {r['checkpoint']} | {r['warm_start_rule']} | {r['identical_seeds']} of "
              f"{r['seeds']} | {r['agent']:.4f} | {r['rule']:.4f} | {d['mean']:+.4f} ± {d['se'] or 0:.4f} "
              f"({d['better']}/{d['tied']}/{d['worse']}) | {', '.join(map(str, firsts)) or '-'} |")
    print()


def main(argv: Sequence[str] | None = None) -> None:
    """Run one step (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", default="all",
                    choices=["all", "select", "rules", "agent", "per_beta", "ablations", "grid512", "summary"],
                    help="all (default): every step in order in this one process, then the summary")
    ap.add_argument("--sets", default="heldout,grid", help="rules/agent/ablations: comma-separated sets, in order")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="episodes (the summary goes beside: *_summary.json)")
    ap.add_argument("--rules-out", type=Path, default=DEFAULT_RULES_OUT, help="teacher searches")
    a = ap.parse_args(argv)
    if a.step == "all":
        extra = ["--out", str(a.out), "--rules-out", str(a.rules_out)]
        for step, step_sets in (("select", "heldout,grid"), ("rules", "heldout,grid"), ("agent", "heldout,grid,grid512"),
                                ("per_beta", "heldout,grid"), ("ablations", "heldout,grid"), ("grid512", "grid512"),
                                ("summary", "grid,heldout,grid512")):
            main(["--step", step, "--sets", step_sets, *extra])
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    sets = [s for s in a.sets.split(",") if s]
    results = load(a.out)
    rules = load(a.rules_out)
    if a.step != "summary":  # provenance: the tree each step ran on (other work may be uncommitted)
        import subprocess

        def git(*args: str) -> str:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

        target = rules if a.step in ("select", "rules", "grid512") else results
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        target.setdefault("runs", []).append({"step": a.step, "sets": sets, "started": started,
                                              "git_head": git("rev-parse", "HEAD"),
                                              "uncommitted": git("status", "--short", "--untracked-files=no").splitlines()})
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        raise SystemExit(f"bench_heldout_pacml: error: --sets: unknown set {unknown[0]!r} (known: {', '.join(SETS)})")
    if a.step == "select":
        means = {}
        for cond in GRID_ROWS:
            t = teacher(rules, a.rules_out, cond, SELECTION_SEEDS, BLOCK_SEARCH)
            means[cond.name] = {r: float(np.mean(v)) for r, v in t["rules"].items()}
        rule = choose_single_rule(means)
        rules["selection"] = {"rule": rule, "seeds": list(SELECTION_SEEDS), "block_search": BLOCK_SEARCH,
                                "mean_over_conditions": {r: float(np.mean([m[r] for m in means.values()]))
                                                         for r in SINGLE_RULE_CANDIDATES}}
        atomic_write_json(a.rules_out, rules)
        log.info("single rule: %s", rule)
    elif a.step == "rules":
        for block_search in (BLOCK_SEARCH, 0):  # the baselines of (i) and (ii) first, first fit after
            for s in sets:
                conds, seeds = SETS[s]
                for cond in conds:
                    teacher(rules, a.rules_out, cond, seeds, block_search)
    elif a.step in ("agent", "ablations"):
        agents = [AGENT] if a.step == "agent" else [(lab, pol) for lab, pol, _ in ABLATIONS]
        for s in sets:
            conds, seeds = SETS[s]
            episodes(results, a.out, conds, seeds, agents)
    elif a.step == "per_beta":
        per_beta(results, a.out)
    elif a.step == "grid512":
        conds, seeds = SETS["grid512"]
        for cond in conds:
            teacher(rules, a.rules_out, cond, seeds, BLOCK_SEARCH)
    else:
        summary = summarise(results, rules)
        summary["per_beta"] = per_beta_table(results["per_beta"])
        # Its own file: the episode files may be growing in another process meanwhile.
        atomic_write_json(a.out.with_name(a.out.stem + "_summary.json"), summary)
        print_tables(summary)
        print_per_beta(summary["per_beta"])


if __name__ == "__main__":
    main()
