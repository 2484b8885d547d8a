"""Prototype (not shipped): shadow clusters re-forked from the real cluster's state every window.

The shipped shadows (``pacml.adaptive.ShadowCluster``) start from an empty cluster and count
blocking from the first job, so on 512 servers they measure each rule from a state the real
cluster is no longer in. This prototype tests the obvious fix: every ``window`` jobs (after a
64-job warm-up) it forks one shadow per candidate rule from the real cluster's *current* state
(a :class:`~simulator.policies.lookahead.RolloutCluster` holding its running jobs), runs them
on the next ``window`` arriving jobs, and then follows the rule that blocked fewest jobs in that
window (by more than ``margin``).
A fork that follows the real cluster's own rule blocks exactly the jobs the real cluster blocks
(checked with ``--check``).

Seeds are validation seeds 500100-500104, never the grid's.

Usage: python benchmarks/proto_refork_shadows.py CONDITIONS VARIANT_JSON... | --check
  e.g. ramp512_C_62.5,physical_D '{"shadow_rules":0}' '{"shadow_rules":8}' '{"window":128}'
"""

from __future__ import annotations

import json
import sys
from multiprocessing import get_context
from typing import Any

import numpy as np

from pacml.adaptive import AdaptivePolicy, Rule
from pacml.conditions import get_condition
from pacml.env import compose_sim_config
from simulator.build import build_simulation
from simulator.policies.lookahead import RolloutCluster
from simulator.policy import Decision

SEEDS = range(500100, 500105)

class Shadow:
    """One rule on a fork of the real cluster: its running jobs become release events."""

    def __init__(self, rule: Rule, state: Any) -> None:
        self.rule = rule
        self.cluster = RolloutCluster(state.feasibility.engine, state.occupied_mask, state.running)
        self.blocked = 0
        self.decided = 0

    def step(self, job: Any) -> None:
        """Decide the real cluster's arriving job with the rule."""
        table = self.cluster.table(job)
        self.decided += 1
        self.blocked += not self.cluster.start(table, self.rule.degree_for(table))


class Refork(AdaptivePolicy):
    """The adaptive agent with shadows re-forked from the real state every ``window`` jobs."""

    def __init__(self, checkpoint: str, window: int = 128, k: int = 8, margin: int = 2, warm: int = 64) -> None:
        super().__init__(checkpoint)
        self.window, self.k, self.margin, self.warm = window, k, margin, warm

    def reset(self, seed: int | None = None) -> None:
        """A new episode."""
        super().reset(seed)
        self.n = 0
        self.sh: list[Shadow] = []
        self.follow: Rule | None = None

    def decide(self, job: Any, state: Any) -> Decision:
        """The followed rule's degree."""
        rules, scores = self._scores(job, state)
        pick = rules[int(np.argmax(scores))]
        self.n += 1
        if self.n >= self.warm and (self.n - self.warm) % self.window == 0:
            if self.sh:  # a window is over: follow its best rule, measured from the state it started in
                best = min(self.sh, key=lambda s: s.blocked)
                cur = next((s for s in self.sh if s.rule == (self.follow or pick)), None)
                if cur is None or best.blocked + self.margin < cur.blocked:
                    self.follow = best.rule
            order = np.argsort(-scores, kind="stable")[:self.k]
            self.sh = [Shadow(rules[int(i)], state) for i in sorted(order)]
        for shadow in self.sh:
            shadow.step(job)
        rule = self.follow or pick
        self.chosen.append(rule.label)
        return Decision(rule.degree(state))


def run(args: tuple[str, str, dict[str, Any]]) -> tuple[str, str, float]:
    """Mean blocking of one variant on one grid condition over the validation seeds."""
    cond, checkpoint, kw = args
    cfg = compose_sim_config([*get_condition(cond).overrides, "progress=false"])
    out = []
    for seed in SEEDS:
        policy = Refork(checkpoint, **kw) if "window" in kw else AdaptivePolicy(checkpoint, **kw)
        out.append(build_simulation(cfg, seed=seed).run(policy).summary["blocking_rate"])
    return cond, json.dumps(kw), float(np.mean(out))


def check() -> None:
    """A fork following the real cluster's rule blocks exactly what the real cluster blocks."""
    for over, k in ((["scenario=paper", "beta=D"], 4),
                    (["scenario=paper", "cluster=ramp512", "beta=C", "mean_interarrival_s=62.5", "horizon_s=2.5e5"], 8)):
        cfg = compose_sim_config([*over, "progress=false"])
        rule = Rule("min_feasible", k)
        sim = build_simulation(cfg, seed=500100)
        n, shadow, real_after = 0, None, 0
        while (job := sim.next_job()) is not None:
            state = sim.state()
            n += 1
            if n == 300:
                shadow = Shadow(rule, state)
            if shadow is not None:
                shadow.step(job)
            blocked = sim.apply(Decision(rule.degree(state))) is not None
            real_after += blocked and shadow is not None
        assert shadow is not None
        print(f"{' '.join(over)}: real cluster blocked {real_after}, fork {shadow.blocked} "
              f"of the last {shadow.decided} jobs")


def main() -> None:
    if sys.argv[1:] == ["--check"]:
        check()
        return
    conds, variants = sys.argv[1].split(","), [json.loads(v) for v in sys.argv[2:]]
    with get_context("forkserver").Pool(2) as pool:
        res = pool.map(run, [(c, "paper_adaptive", v) for c in conds for v in variants])
    table: dict[str, dict[str, float]] = {}
    for c, v, b in res:
        table.setdefault(v, {})[c] = b
    for v, row in table.items():
        cells = " ".join(f"{c}={b:.4f}" for c, b in row.items())
        print(f"{v:45s} {cells} avg={np.mean(list(row.values())):.4f}", flush=True)


if __name__ == "__main__":
    main()
