"""What switching rules mid-episode costs: follow rule A for the first N jobs, then rule B.

Blocking is path dependent: the cluster state one rule leaves (which servers are busy, and for
how long) is not the state the other rule would have built, and the adaptive agent's selector can
switch between near-tied rules as its estimate of the condition moves. This runs, on a grid
condition (``pacml/adaptive/conditions.py``) and validation seeds, rule A alone, rule B alone, and A then
B switched after each of several job counts, and prints the mean blocking and its standard error
over the seeds, and the switched runs' paired difference from the better rule alone.

Usage:
    python benchmarks/adaptive/bench_rule_switch.py CONDITION RULE_A RULE_B [--at 10,63,200,500]
        [--seeds 500100-500109] [--workers 2] [--json FILE]
    e.g. paper_D_1000 'min_feasible(4)' 'min_feasible(6)'
"""

from __future__ import annotations

import argparse
import logging
import sys
from multiprocessing import get_context
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pacml.adaptive.conditions import GRID, get_condition, validation_seeds  # noqa: E402
from pacml.adaptive.selector import Rule, rule_candidates  # noqa: E402
from pacml.agent.env import compose_sim_config  # noqa: E402
from simulator.build import build_simulation, build_topology  # noqa: E402
from simulator.policy import Decision  # noqa: E402
from workloads.io import atomic_write_json  # noqa: E402

NEVER = 10**9  # a switch point no episode reaches: rule A alone


class Switched:
    """Decide the first ``at`` jobs of an episode with rule ``a``, the rest with ``b``."""

    def __init__(self, a: Rule, b: Rule, at: int) -> None:
        self.a, self.b, self.at = a, b, at
        self.decided = 0

    def reset(self, seed: int | None = None) -> None:
        """A new episode."""
        self.decided = 0

    def decide(self, job: Any, state: Any) -> Decision:
        """The degree the rule in force gives the job."""
        self.decided += 1
        return Decision((self.a if self.decided <= self.at else self.b).degree(state))


def _run(args: tuple[str, str, str, int, int]) -> tuple[int, int, float]:
    name, a, b, at, seed = args
    cfg = compose_sim_config([*get_condition(name).overrides, "progress=false"])
    rules = {r.label: r for r in rule_candidates(build_topology(cfg))}
    policy = Switched(rules[a], rules[b], at)
    return at, seed, float(build_simulation(cfg, seed=seed).run(policy).summary["blocking_rate"])


def _fail(message: str) -> NoReturn:
    print(f"bench_rule_switch: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    """Run the switched episodes and print the table."""
    logging.basicConfig(level=logging.WARNING)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("condition")
    ap.add_argument("rule_a")
    ap.add_argument("rule_b")
    ap.add_argument("--at", default="10,63,200,500", help="job counts after which to switch")
    ap.add_argument("--seeds", default="500100-500109", help="validation seeds, FIRST-LAST")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    if a.condition not in {c.name for c in GRID}:
        _fail(f"unknown condition {a.condition!r} (one of {', '.join(c.name for c in GRID)})")
    try:
        seeds = validation_seeds(a.seeds)
        points = [int(x) for x in a.at.split(",") if x]
    except ValueError as exc:
        _fail(f"--seeds/--at: {exc}")
    if any(p < 1 for p in points):
        _fail("--at: job counts must be >= 1")
    cfg = compose_sim_config([*get_condition(a.condition).overrides, "progress=false"])
    labels = [r.label for r in rule_candidates(build_topology(cfg))]
    for rule in (a.rule_a, a.rule_b):
        if rule not in labels:
            _fail(f"rule {rule!r} is not offered on {a.condition} (one of {', '.join(labels)})")
    ats = [0, *points, NEVER]  # 0: rule B alone
    tasks = [(a.condition, a.rule_a, a.rule_b, at, s) for at in ats for s in seeds]
    with get_context("spawn").Pool(a.workers) as pool:
        runs = pool.map(_run, tasks, chunksize=1)
    got = {(at, s): b for at, s, b in runs}
    table = {at: np.array([got[(at, s)] for s in seeds]) for at in ats}
    best_alone = min((0, NEVER), key=lambda at: table[at].mean())
    out: dict[str, Any] = {"condition": a.condition, "rule_a": a.rule_a, "rule_b": a.rule_b,
                           "seeds": list(seeds), "runs": {}}
    print(f"{a.condition}: {a.rule_a} for the first N jobs, then {a.rule_b}; {len(seeds)} seeds")
    print(f"{'N':>12s} {'blocking':>9s} {'se':>7s} {'minus best alone':>17s} {'se':>7s}")
    for at in ats:
        d = table[at] - table[best_alone]
        label = f"{a.rule_b} alone" if at == 0 else f"{a.rule_a} alone" if at == NEVER else str(at)
        se = table[at].std(ddof=1) / np.sqrt(len(seeds))
        dse = d.std(ddof=1) / np.sqrt(len(seeds))
        print(f"{label:>12s} {table[at].mean():9.4f} {se:7.4f} {d.mean():+17.4f} {dse:7.4f}")
        out["runs"][label] = {"per_seed": table[at].tolist(), "minus_best_alone": float(d.mean()),
                              "se": float(dse)}
    if a.json:
        atomic_write_json(a.json, out)


if __name__ == "__main__":
    main()
