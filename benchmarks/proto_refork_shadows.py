"""Prototype (not shipped): shadow clusters re-forked from the real cluster's state every window.

The shipped shadows (``pacml.adaptive.ShadowCluster``) start from an empty cluster and count
blocking from the first job, so on 512 servers they measure each rule from a state the real
cluster is no longer in. This prototype tests the obvious fix: every ``window`` jobs (after a
64-job warm-up) it forks one shadow per candidate rule from the real cluster's *current* state
(its running jobs become release events), runs them on the next ``window`` arriving jobs, and
then follows the rule that blocked fewest jobs in that window (by more than ``margin``).
A fork that follows the real cluster's own rule blocks exactly the jobs the real cluster blocks
(checked with ``--check``).

It reaches into ``simulator.simulation`` internals, hence a benchmark script, not library code.
Seeds are validation seeds 500100-500104, never the grid's.

Usage: python benchmarks/proto_refork_shadows.py CONDITIONS VARIANT_JSON... | --check
  e.g. ramp512_C_62.5,physical_D '{"shadow_rules":0}' '{"shadow_rules":8}' '{"window":128}'
"""
from __future__ import annotations

import bisect
import heapq
import json
import sys
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

import numpy as np
import simpy

from pacml.adaptive import AdaptivePolicy, Rule, _DiscardSink, _Feed
from pacml.conditions import get_condition
from pacml.env import compose_sim_config
from simulator.build import build_simulation
from simulator.policy import Decision
from simulator.simulation import Simulation, _Running

SEEDS = range(500100, 500105)

@dataclass
class _Phantom:
    """A running job of the real cluster, as the fork sees it: servers held until a release time."""

    mask: int
    servers: tuple[int, ...]

    @property
    def num_servers(self) -> int:
        """Servers held."""
        return len(self.servers)


class _Env(simpy.Environment):
    """A SimPy environment that starts at the real cluster's time and counts its events."""

    def __init__(self, start_s: float) -> None:
        super().__init__(initial_time=start_s)
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


class ForkSim(Simulation):
    """A simulation that starts where ``state`` is: its time, its running jobs' servers busy until
    their end times (without records), then the jobs fed to it."""

    def __init__(self, feed: _Feed, state: Any) -> None:
        super().__init__(feed, state.feasibility.engine, seed=0, horizon_s=state.horizon_s,  # type: ignore[arg-type]
                         horizon_accounting=state.horizon_accounting, sink=_DiscardSink())
        self.env = _Env(state.time_s)  # the parent's processes were registered on a clock at 0
        self._request = self.env.event()
        self._finished = self.env.event()
        for i, (end_s, mask) in enumerate(state.running):
            job_id = -(i + 1)
            servers = tuple(j for j in range(self.topology.num_servers) if mask >> j & 1)
            placement = _Phantom(mask, servers)
            self.cluster.allocate(job_id, placement)  # type: ignore[arg-type]
            run = _Running(None, len(servers), placement, end_s - state.time_s, state.time_s,  # type: ignore[arg-type]
                           0.0, 0.0, self.env.event())
            self._running[job_id] = run
            end = run.start_s + run.jct_s
            self._running_sorted.append((end, mask))
            self._releases_sorted.append((end, mask, len(servers)))
            self._ends.append((end, job_id))
            self.env.process(self._phantom(run, job_id))
        self._running_sorted.sort()
        self._releases_sorted.sort()
        self._ends.sort()
        self.env.process(self._arrivals())
        if self.accounting == "paper":
            self.env.process(self._stop())

    def _stop(self) -> Any:
        yield self.env.timeout(max(self.horizon_s - self.env.now, 0.0))
        if not self._finished.triggered:
            self._finished.succeed()

    def _phantom(self, run: _Running, job_id: int) -> Any:
        yield self.env.timeout(run.jct_s)
        if self._finished.triggered:
            return
        self.cluster.release(job_id)
        del self._running[job_id]
        end = run.start_s + run.jct_s
        del self._running_sorted[bisect.bisect_left(self._running_sorted, (end, run.placement.mask))]
        entry = (end, run.placement.mask, run.placement.num_servers)
        del self._releases_sorted[bisect.bisect_left(self._releases_sorted, entry)]
        heap = self._ends
        while heap and heap[0][1] not in self._running:
            heapq.heappop(heap)
        run.done.succeed()


class Shadow:
    """One rule on a fork of the real cluster."""

    def __init__(self, rule: Rule, state: Any) -> None:
        self.rule = rule
        self.feed = _Feed()
        self.sim = ForkSim(self.feed, state)
        self.blocked = 0
        self.decided = 0

    def step(self, job: Any) -> None:
        """Decide the real cluster's arriving job with the rule."""
        self.feed.queue.append(job)
        if self.sim.next_job() is not job:
            raise RuntimeError("fork out of step")
        self.decided += 1
        self.blocked += self.sim.apply(Decision(self.rule.degree(self.sim.state()))) is not None


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
