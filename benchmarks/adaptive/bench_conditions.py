"""Condition grid: agents against para_max, min_feasible and the oracle rule on every grid condition.

Runs every (condition, policy, seed) episode of ``pacml.adaptive.conditions.GRID`` x ``EVAL_SEEDS`` for the
candidate rules (``rule_candidates``: para_max and min_feasible(k) for every k the cluster offers)
and each ``--agent``, keeps the blocking rates in a cache inside the results file (written
atomically after every episode, keyed on the overrides themselves), so an interrupted or repeated
run computes only what is missing. Then, per condition: the *oracle rule* (the candidate with the
lowest mean blocking on those same seeds) and each agent's paired per-seed differences against
the oracle, para_max and min_feasible (mean +- standard error, seeds better/worse); a table on
stdout and a ``summary`` section in the JSON.

Usage::

    python benchmarks/adaptive/bench_conditions.py                       # rules + the shipped agents
    python benchmarks/adaptive/bench_conditions.py --agent "mine=policy=pacml policy.checkpoint=outputs/x/adaptive.npz"
    python benchmarks/adaptive/bench_conditions.py --conditions 'paper_*' poisson_B --seeds 3 --workers 1

``--agent LABEL=OVERRIDES`` is repeatable; ``{scenario}`` and ``{beta}`` in the overrides become
the condition's choices. Without ``--agent`` the shipped agents run: ``pacml=policy=pacml`` (the
adaptive agent of the condition's scenario family) and the per-scenario, per-beta agents,
``per_beta=policy=pacml_beta policy.checkpoint={scenario}_beta{beta}``. An agent that cannot run on a
condition (no such checkpoint, ...) is recorded as unavailable with the one-line reason.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import logging
import multiprocessing
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from pacml.adaptive.conditions import (
    EVAL_SEEDS,
    GRID,
    RULE_PREFIXES,
    TOLERANCE,
    Condition,
    agent_overrides,
    cache_key,
    rule_candidates,
    summarise_condition,
)
from pacml.agent.env import compose_sim_config
from simulator.build import (
    build_feasibility,
    build_policy,
    build_simulation,
    build_topology,
    build_workload,
)
from simulator.cli import USER_ERRORS, fail, one_line
from simulator.errors import ConfigError
from workloads.io import atomic_write_json

log = logging.getLogger("bench_conditions")

ROOT = Path(__file__).resolve().parents[2]
PROG = "bench_conditions.py"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "adaptive" / "results_conditions.json"
SHIPPED_AGENTS = ("pacml=policy=pacml", "per_beta=policy=pacml_beta policy.checkpoint={scenario}_beta{beta}")
#: Memory guard: nothing runs on a cluster larger than this.
MAX_SERVERS = 512
RESULTS_FORMAT = "pacml-conditions"
RESULTS_VERSION = 1


@dataclass(frozen=True)
class Episode:
    """One unit of work: a policy on a condition for one seed."""

    condition: str
    condition_overrides: tuple[str, ...]
    policy: str
    policy_overrides: tuple[str, ...]
    seed: int

    @property
    def key(self) -> str:
        """Its results-cache key."""
        return cache_key(self.condition, self.condition_overrides, self.policy, self.policy_overrides, self.seed)


def compose(overrides: Sequence[str], what: str) -> Any:
    """``compose_sim_config`` with Hydra's composition errors as one :class:`ConfigError` naming ``what``."""
    try:
        return compose_sim_config(list(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(f"{' '.join(overrides)}: {one_line(str(exc))}", field=what) from None


# ---- worker side: one condition's simulator parts at a time, reused across its seeds and rules ----
_STATE: dict[str, Any] = {}


def _condition_parts(overrides: tuple[str, ...]) -> dict[str, Any]:
    """The composed config, feasibility (its caches) and workload of a condition, built once per worker."""
    if _STATE.get("overrides") != overrides:
        _STATE.clear()  # one condition at a time bounds memory (the 512-server caches are the big ones)
        cfg = compose(overrides, "condition")
        _STATE.update(overrides=overrides, cfg=cfg, feasibility=build_feasibility(build_topology(cfg), cfg.sim),
                      workload=build_workload(cfg), policies={})
    return _STATE


def run_episode(ep: Episode) -> dict[str, Any]:
    """Run one episode; returns its record (``blocking_rate``), ``unavailable`` (a user error:
    cached) or ``error`` (anything else: not cached, so a re-run tries again)."""
    start = time.perf_counter()
    try:
        parts = _condition_parts(ep.condition_overrides)
        policy = parts["policies"].get(ep.policy_overrides)
        if policy is None:
            policy = build_policy(compose([*ep.condition_overrides, *ep.policy_overrides], "policy"))
            parts["policies"][ep.policy_overrides] = policy
        sim = build_simulation(parts["cfg"], seed=ep.seed, feasibility=parts["feasibility"], workload=parts["workload"])
        summary = sim.run(policy).summary
    except USER_ERRORS as exc:
        return {"unavailable": one_line(str(exc))}
    except Exception as exc:  # noqa: BLE001 - reported per episode; the rest of the grid goes on
        return {"error": f"{type(exc).__name__}: {one_line(str(exc))}"}
    return {"blocking_rate": float(summary["blocking_rate"]), "num_jobs_arrived": int(summary["num_jobs_arrived"]),
            "wall_s": round(time.perf_counter() - start, 4)}


# ---- driver side ----
@dataclass
class Plan:
    """What one invocation evaluates: conditions, their policies and the seeds."""

    conditions: list[Condition]
    condition_overrides: dict[str, tuple[str, ...]]
    rules: dict[str, list[tuple[str, tuple[str, ...]]]]
    agents: dict[str, list[tuple[str, tuple[str, ...]]]]
    seeds: tuple[int, ...]

    def episodes(self) -> list[Episode]:
        """Every episode, condition by condition (so a worker's caches stay warm)."""
        return [Episode(c.name, self.condition_overrides[c.name], label, pol, seed)
                for c in self.conditions
                for label, pol in [*self.rules[c.name], *self.agents[c.name]] for seed in self.seeds]


def select_conditions(patterns: Sequence[str]) -> list[Condition]:
    """Grid conditions matching any of ``patterns`` (names or globs; commas also separate), in grid order."""
    wanted = [p for item in patterns for p in item.split(",") if p]
    for pattern in wanted:
        if not any(fnmatch.fnmatchcase(c.name, pattern) for c in GRID):
            raise ConfigError(f"{pattern!r} matches no condition (known: {', '.join(c.name for c in GRID)})",
                              field="--conditions")
    return [c for c in GRID if any(fnmatch.fnmatchcase(c.name, p) for p in wanted)]


def parse_agents(specs: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """``LABEL=OVERRIDES`` strings as (label, overrides)."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for spec in specs:
        label, sep, rest = spec.partition("=")
        label = label.strip()
        overrides = tuple(rest.split())
        if not sep or not label or not overrides:
            raise ConfigError(f"expected LABEL=OVERRIDES (e.g. 'mine=policy=pacml policy.checkpoint=x.npz'), got {spec!r}", field="--agent")
        if label.startswith(RULE_PREFIXES):
            raise ConfigError(f"label {label!r} is taken by a rule; pick another", field="--agent")
        if label in (lab for lab, _ in out):
            raise ConfigError(f"label {label!r} given twice", field="--agent")
        out.append((label, overrides))
    return out


def make_plan(args: argparse.Namespace) -> Plan:
    """Resolve and check everything cheap before any episode runs (raises :class:`ConfigError`)."""
    if not 1 <= args.seeds <= len(EVAL_SEEDS):
        raise ConfigError(f"must be 1..{len(EVAL_SEEDS)}, got {args.seeds}", field="--seeds")
    if args.workers < 1:
        raise ConfigError(f"must be >= 1, got {args.workers}", field="--workers")
    agents = parse_agents(args.agent or list(SHIPPED_AGENTS))
    conditions = select_conditions(args.conditions or ["*"])
    plan = Plan(conditions, {}, {}, {}, EVAL_SEEDS[:args.seeds])
    for cond in conditions:
        overrides = (*cond.overrides, *args.override)
        topology = build_topology(compose(overrides, f"condition {cond.name}"))
        if topology.num_servers > MAX_SERVERS:
            raise ConfigError(f"{cond.name} has {topology.num_servers} servers; this benchmark runs at most "
                              f"{MAX_SERVERS} (memory guard)", field="--conditions")
        plan.condition_overrides[cond.name] = overrides
        plan.rules[cond.name] = rule_candidates(topology)
        plan.agents[cond.name] = [(label, agent_overrides(pol, cond)) for label, pol in agents]
    return plan


def load_results(path: Path) -> dict[str, Any]:
    """The results file (its episode cache), or a fresh one."""
    if not path.exists():
        return {"format": RESULTS_FORMAT, "version": RESULTS_VERSION, "episodes": {}}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}; move it away to start afresh", field="--out") from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT or data.get("version") != RESULTS_VERSION:
        raise ConfigError(f"{path} is not a {RESULTS_FORMAT} v{RESULTS_VERSION} results file", field="--out")
    return data


def run_missing(plan: Plan, results: dict[str, Any], out: Path, workers: int) -> int:
    """Run every episode of ``plan`` missing from the cache, saving after each; returns how many ran."""
    cache: dict[str, Any] = results["episodes"]
    todo = [ep for ep in plan.episodes() if ep.key not in cache]
    groups: dict[tuple[str, str], int] = {}
    for ep in todo:
        groups[ep.condition, ep.policy] = groups.get((ep.condition, ep.policy), 0) + 1
    log.info("%d episodes to run (%d cached) with %d worker(s)", len(todo),
             len(plan.episodes()) - len(todo), workers)
    start = time.perf_counter()

    def finished(ep: Episode, record: dict[str, Any]) -> None:
        if "error" in record:
            log.warning("%s | %s seed %d failed: %s", ep.condition, ep.policy, ep.seed, record["error"])
        else:
            cache[ep.key] = {"condition": ep.condition, "policy": ep.policy, "seed": ep.seed, **record}
            atomic_write_json(out, results)
        groups[ep.condition, ep.policy] -= 1
        if not groups[ep.condition, ep.policy]:
            recs = [cache.get(Episode(ep.condition, ep.condition_overrides, ep.policy, ep.policy_overrides, s).key)
                    for s in plan.seeds]
            rates = [r["blocking_rate"] for r in recs if r and "blocking_rate" in r]
            note = next((r["unavailable"] for r in recs if r and "unavailable" in r), None)
            log.info("%s | %s: %s, %.1f s of episodes, %.0f s elapsed", ep.condition, ep.policy,
                     f"unavailable ({note})" if note else f"mean blocking {sum(rates) / max(len(rates), 1):.4f} "
                     f"over {len(rates)} seeds", sum(r.get("wall_s", 0.0) for r in recs if r),
                     time.perf_counter() - start)

    if workers == 1:
        for ep in todo:
            finished(ep, run_episode(ep))
        return len(todo)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {pool.submit(run_episode, ep): ep for ep in todo}
        try:
            for fut in as_completed(futures):
                finished(futures[fut], fut.result())
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return len(todo)


def summarise(plan: Plan, results: dict[str, Any]) -> dict[str, Any]:
    """The ``summary`` section: per condition and the grid average of agent - oracle."""
    cache = results["episodes"]
    conditions: dict[str, Any] = {}
    for cond in plan.conditions:
        overrides = plan.condition_overrides[cond.name]

        def records(label: str, pol: tuple[str, ...], name: str = cond.name,
                    over: tuple[str, ...] = overrides) -> list[dict[str, Any] | None]:
            return [cache.get(cache_key(name, over, label, pol, s)) for s in plan.seeds]

        rule_recs = {label: records(label, pol) for label, pol in plan.rules[cond.name]}
        entry: dict[str, Any] = {"description": cond.description, "overrides": list(overrides),
                                 "episode_seconds": round(sum(r.get("wall_s", 0.0) for label, pol in
                                                              [*plan.rules[cond.name], *plan.agents[cond.name]]
                                                              for r in records(label, pol) if r), 2)}
        missing = [label for label, recs in rule_recs.items() if not all(r and "blocking_rate" in r for r in recs)]
        if missing:
            entry["incomplete"] = f"rules without every seed: {', '.join(missing)}"
            conditions[cond.name] = entry
            continue
        agents: dict[str, list[float]] = {}
        unavailable: dict[str, str] = {}
        for label, pol in plan.agents[cond.name]:
            recs = records(label, pol)
            note = next((r["unavailable"] for r in recs if r and "unavailable" in r), None)
            if note:
                unavailable[label] = note
            elif all(r and "blocking_rate" in r for r in recs):
                agents[label] = [r["blocking_rate"] for r in recs]  # type: ignore[index]
            else:
                unavailable[label] = "incomplete: some seeds failed (see the log)"
        jobs = [r["num_jobs_arrived"] for recs in rule_recs.values() for r in recs if r]
        entry["mean_jobs_arrived"] = round(sum(jobs) / len(jobs), 1)
        entry.update(summarise_condition({k: [r["blocking_rate"] for r in v] for k, v in rule_recs.items()}, agents))  # type: ignore[index]
        entry["unavailable"] = unavailable
        conditions[cond.name] = entry
    grid: dict[str, Any] = {}
    labels = list(dict.fromkeys(label for c in plan.conditions for label, _ in plan.agents[c.name]))
    for label in [*labels, "para_max", "min_feasible"]:
        diffs = {name: e["compared"][label]["vs_oracle"]["mean"] for name, e in conditions.items()
                 if label in e.get("compared", {})}
        if diffs:
            grid[label] = {"mean_vs_oracle": sum(diffs.values()) / len(diffs), "conditions": len(diffs),
                           "within_tolerance": sum(d <= TOLERANCE for d in diffs.values()),
                           "below_oracle": sum(d < 0 for d in diffs.values())}
    return {"seeds": list(plan.seeds), "tolerance": TOLERANCE, "conditions": conditions, "grid_average": grid}


def _se(cmp: dict[str, Any]) -> str:
    return f"{cmp['mean']:+.4f}" + (f" +-{cmp['se']:.4f}" if cmp["se"] is not None else "")


def print_table(summary: dict[str, Any], agents: Sequence[str]) -> None:
    """One row per condition: oracle, para_max, min_feasible and each agent vs the oracle."""
    head = f"{'condition':16s} {'oracle rule':>16s} {'oracle':>7s} {'para_max':>8s} {'min_feas':>8s}"
    for label in agents:
        head += f" | {label[:10]:>10s} {'- oracle +- SE':>18s} {'b/w':>5s}"
    print(head)
    for name, e in summary["conditions"].items():
        if "incomplete" in e:
            print(f"{name:16s} incomplete: {e['incomplete']}")
            continue
        row = (f"{name:16s} {e['oracle']['rule']:>16s} {e['oracle']['mean']:7.4f} {e['rules']['para_max']:8.4f} "
               f"{e['rules']['min_feasible']:8.4f}")
        for label in agents:
            c = e["compared"].get(label)
            row += (f" | {'n/a':>10s} {'':>18s} {'':>5s}" if c is None else
                    f" | {c['mean']:10.4f} {_se(c['vs_oracle']):>18s} "
                    f"{c['vs_oracle']['better']:>2d}/{c['vs_oracle']['worse']:<2d}")
        print(row)
    for label, g in summary["grid_average"].items():
        print(f"grid average {label} - oracle: {g['mean_vs_oracle']:+.4f} over {g['conditions']} conditions "
              f"({g['within_tolerance']} within +{summary['tolerance']}, {g['below_oracle']} below)")


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--agent", action="append", metavar="LABEL=OVERRIDES",
                        help=f"agent to evaluate (repeatable; default: {' and '.join(map(repr, SHIPPED_AGENTS))})")
    parser.add_argument("--conditions", nargs="+", metavar="NAME", help="names or globs (default: all)")
    parser.add_argument("--seeds", type=int, default=len(EVAL_SEEDS), help="first N evaluation seeds (default 10)")
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results JSON (also the episode cache)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="extra pacml-sim override for every condition (part of the cache key), e.g. horizon_s=2e4")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        plan = make_plan(args)
        results = load_results(args.out)
    except USER_ERRORS as exc:
        fail(PROG, one_line(str(exc)))
    start = time.perf_counter()
    try:
        ran = run_missing(plan, results, args.out, args.workers)
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted; finished episodes are saved in {args.out}\n")
        raise SystemExit(130) from None
    labels = list(dict.fromkeys(label for c in plan.conditions for label, _ in plan.agents[c.name]))
    results["summary"] = summarise(plan, results)
    results["summary"]["episodes_run"] = ran
    results["summary"]["wall_s"] = round(time.perf_counter() - start, 1)
    atomic_write_json(args.out, results)
    print_table(results["summary"], labels)
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
