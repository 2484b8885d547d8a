"""Decision latency of a degree agent from cold caches, with a breakdown, optionally on a busy host.

Times every ``decide(job, state)`` of the per-beta agent (``policy=pacml_beta``), or of the
adaptive agent with ``--pacml [OVERRIDE ...]``, over whole episodes, each with a fresh simulation
and policy (cold caches; numba kernels warmed once), inside :func:`simulator.run.frozen_heap` as
``pacml sim`` runs (``--no-freeze``: without). The breakdown wraps the placer, step model and
encoder: ``placement``, ``lookahead``, ``free_blocks``, ``features``, ``forward`` and ``gc``.
Above the paper cluster's degree 16 the agent is an untrained ``ActorCritic`` of the shipped
sizes (its cost, not its decisions). ``--busy`` keeps the other core busy and pins this process
to core 0; the load average and each decision's CPU time (``cpu_*``) are reported with the wall
times. Details: docs/experiments.md ("Decision latency benchmark").

Usage:
    python benchmarks/adaptive/bench_decision.py [--cluster ramp32|ramp512] [--beta C] [--interarrival S]
        [--episodes 3] [--max-decisions N] [--no-freeze] [--busy] [--json PATH] [--pacml [OVERRIDE ...]]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pacml.agent.env import compose_sim_config
from pacml.agent.features import ACTION_FEATURES, GLOBAL_FEATURES, Encoder
from pacml.agent.policy import PacMLBetaPolicy
from simulator.build import build_simulation
from simulator.run import frozen_heap

PARTS = ("placement", "lookahead", "free_blocks", "features", "forward", "gc")


class _Timer:
    """Accumulates wall time per part for the decision under way."""

    def __init__(self) -> None:
        self.parts = dict.fromkeys(PARTS, 0.0)
        self._active: list[str] = []  # the timed calls under way, outermost first
        self._gc_start = 0.0

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks`` hook: a collection's time goes to ``gc`` and out of every timed call it
        interrupted (so the parts do not overlap)."""
        if phase == "start":
            self._gc_start = time.perf_counter()
            return
        spent = time.perf_counter() - self._gc_start
        self.parts["gc"] += spent
        for part in self._active:
            self.parts[part] -= spent

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._active.append(part)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.parts[part] += time.perf_counter() - t0
                self._active.pop()
        return timed


def _policy(cluster: str, beta: str, max_degree: int) -> PacMLBetaPolicy:
    """The shipped checkpoint on the paper cluster; an untrained agent offering every degree otherwise."""
    if cluster == "ramp32":
        return PacMLBetaPolicy(f"paper_beta{beta}")
    from pacml.agent.model import ActorCritic

    torch.manual_seed(0)
    model = ActorCritic(global_features=GLOBAL_FEATURES, action_features=ACTION_FEATURES).eval()
    return PacMLBetaPolicy(model=model, encoder=Encoder(max_degree=max_degree))


def _warm_kernels(overrides: list[str]) -> None:
    """Compile (or load from numba's disk cache) every kernel once, outside the timings."""
    sim = build_simulation(compose_sim_config(overrides), seed=10_000)
    job = sim.next_job()
    assert job is not None
    table = sim.state().feasibility
    for d in table.degrees:
        table.jct_s(d)
        table.num_free_blocks(d)
    table.num_free_blocks_of(table.degrees)


def measure(cluster: str, beta: str, episodes: int, interarrival_s: float | None,
            max_decisions: int | None = None, thaw: bool = False,
            pacml: list[str] | None = None) -> dict[str, Any]:
    """Cold-cache latency of every decision of ``episodes`` episodes (seeds 0..episodes-1; at
    most ``max_decisions`` per episode; ``thaw``: without :func:`simulator.run.frozen_heap`;
    ``pacml``: time ``policy=pacml`` as ``pacml sim`` builds it, with these extra overrides,
    instead: its ``features`` are the condition features, its ``forward`` the selector's scores,
    and its shadow clusters' simulation is in the total)."""
    torch.set_num_threads(1)
    overrides = ["scenario=paper", f"beta={beta}", f"cluster={cluster}"]
    if interarrival_s is not None:
        overrides.append(f"mean_interarrival_s={interarrival_s}")
    _warm_kernels(overrides)
    cfg = compose_sim_config(overrides)
    total: list[float] = []
    cpu: list[float] = []  # this thread's CPU time: what the decision costs whatever else runs
    parts: dict[str, list[float]] = {p: [] for p in PARTS}
    where: list[tuple[int, int, str, float]] = []  # episode, decision number, graph, occupancy
    for seed in range(episodes):
        sim = build_simulation(cfg, seed=seed)  # fresh placement / free-block / lookahead caches
        feas = sim.feasibility
        adaptive = pacml is not None
        if adaptive:
            from simulator.build import build_policy

            policy = build_policy(compose_sim_config([*overrides, "policy=pacml", *pacml]))
        else:
            policy = _policy(cluster, beta, sim.topology.max_degree)  # fresh embedding cache
        policy.reset(seed)
        timer = _Timer()
        placer, step_model = feas.placer, feas.step_model
        placer.place = timer.wrap("placement", placer.place)
        placer.num_free_blocks = timer.wrap("free_blocks", placer.num_free_blocks)
        placer.num_free_blocks_of = timer.wrap("free_blocks", placer.num_free_blocks_of)
        step_model.step = timer.wrap("lookahead", step_model.step)
        if not adaptive:
            policy.encoder.encode = timer.wrap("features", policy.encoder.encode)
            policy.probabilities = timer.wrap("forward", policy.probabilities)
        else:
            policy.tracker.features = timer.wrap("features", policy.tracker.features)
            policy.weights.scores = timer.wrap("forward", policy.weights.scores)
        gc.callbacks.append(timer.on_gc)
        decided = 0
        heap = nullcontext() if thaw else frozen_heap()  # as pacml-sim runs an episode
        heap.__enter__()
        while (max_decisions is None or decided < max_decisions) and (job := sim.next_job()) is not None:
            decided += 1
            state = sim.state()
            timer.parts = dict.fromkeys(PARTS, 0.0)
            c0, t0 = time.thread_time(), time.perf_counter()
            decision = policy.decide(job, state)
            total.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
            if not adaptive:  # encode() includes the feasibility queries.
                feasibility_s = timer.parts["placement"] + timer.parts["lookahead"] + timer.parts["free_blocks"]
                timer.parts["features"] -= feasibility_s
            for p in PARTS:
                parts[p].append(timer.parts[p])
            where.append((seed, decided, job.graph.name if hasattr(job.graph, "name") else "", state.occupancy))
            sim.apply(decision)
        heap.__exit__(None, None, None)
        gc.callbacks.remove(timer.on_gc)
    arr = np.array(total)
    p99_at = arr >= np.percentile(arr, 99)

    def ms(x: np.ndarray, q: float) -> float:
        return round(1e3 * float(np.percentile(x, q)), 4)

    return {
        "overrides": overrides, "decisions": len(arr),
        "p50_ms": ms(arr, 50), "p99_ms": ms(arr, 99), "max_ms": round(1e3 * float(arr.max()), 4),
        "mean_ms": round(1e3 * float(arr.mean()), 4),
        "cpu_p50_ms": ms(np.array(cpu), 50), "cpu_p99_ms": ms(np.array(cpu), 99),
        "cpu_max_ms": round(1e3 * max(cpu), 4),
        "breakdown_mean_ms": {p: round(1e3 * float(np.mean(v)), 4) for p, v in parts.items()},
        "breakdown_p99_ms": {p: ms(np.array(v), 99) for p, v in parts.items()},
        # What the slowest 1 % of decisions spent their time on (mean over them).
        "slowest": [{"episode": where[i][0], "decision": where[i][1], "graph": where[i][2],
                     "occupancy": round(where[i][3], 3), "ms": round(1e3 * arr[i], 3),
                     **{p: round(1e3 * parts[p][i], 3) for p in PARTS}} for i in np.argsort(arr)[::-1][:10]],
        "breakdown_of_slowest_1pct_ms": {p: round(1e3 * float(np.array(v)[p99_at].mean()), 4) for p, v in parts.items()},
    }


def _busy_core() -> subprocess.Popen | None:
    """Pin this process to core 0 and spin a process on core 1 (``None`` on a 1-core host)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    os.sched_setaffinity(0, {cores[0]})
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    os.sched_setaffinity(spinner.pid, {cores[1]})
    return spinner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="ramp32", help="cluster config (ramp32: paper; ramp512: degrees 1..64)")
    parser.add_argument("--beta", default="C")
    parser.add_argument("--interarrival", type=float, default=None, help="mean_interarrival_s override")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--max-decisions", type=int, default=None, help="stop each episode after this many decisions")
    parser.add_argument("--no-freeze", action="store_true",
                        help="do not freeze the heap as pacml-sim does (full garbage collections visit every object)")
    parser.add_argument("--busy", action="store_true", help="keep the other core busy while measuring")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--pacml", nargs="*", default=None, metavar="OVERRIDE",
                        help="time policy=pacml as pacml sim builds it (with these policy overrides) instead")
    args = parser.parse_args()
    spinner = _busy_core() if args.busy else None
    load_before = os.getloadavg()[0]
    try:
        result = {"cluster": args.cluster, "busy": spinner is not None, "frozen_heap": not args.no_freeze,
                  "agent": (f"policy=pacml {' '.join(args.pacml)}".strip() if args.pacml is not None else
                            f"paper_beta{args.beta}" if args.cluster == "ramp32" else "untrained, every degree"),
                  "host": f"{platform.machine()} {os.cpu_count()} cores",
                  **measure(args.cluster, args.beta, args.episodes, args.interarrival, args.max_decisions,
                          args.no_freeze, args.pacml)}
        # Other processes on the host (1-minute load average, the spinner included): wall times
        # above are for this load; CPU times (cpu_*) do not depend on it.
        result["load_average_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
