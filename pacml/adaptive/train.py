"""Training the adaptive agent (``pacml train-adaptive``): teacher search, then the selector fit.

1. **Teacher search**: ``num_conditions`` random conditions (:func:`pacml.adaptive.conditions.sample_condition`:
   beta A-D, uniform and fixed targets; 0.25x-4x the paper's load per server; fixed and Poisson
   arrivals; eight clusters of 32-512 servers; mixes of six graphs), each simulated under every
   rule on ``seeds_per_condition`` training seeds, in ``workers`` processes. One atomic
   ``conditions/NNNN.npz`` per condition, so a re-run in the same directory computes only what is
   missing (resume).
2. **Fit**: the selector MLP minimises the expected regret over the conditions not held out for
   validation (every ``val_every``-th condition); the epoch with the lowest validation regret of
   the *argmax* rule is kept.

Everything runs within ``time_budget_s`` (teacher search gets ``teacher_budget_frac`` of it; the
processes still running at its deadline are stopped and their conditions dropped).
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing as mp
import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from numpy.typing import NDArray
from omegaconf import OmegaConf

from pacml.adaptive.conditions import sample_condition
from pacml.adaptive.policy import start_rule_on
from pacml.adaptive.selector import (
    WINDOW,
    ConditionTracker,
    NeighbourTable,
    Rule,
    SelectorWeights,
    rule_candidates,
    rule_features,
    save_adaptive,
)
from pacml.agent.env import TRAIN_SEED_LOW, compose_sim_config
from pacml.runfiles import apply_resume_overrides, write_metrics_csv  # also registers the resolvers
from simulator.build import build_feasibility, build_simulation, build_topology, build_workload
from simulator.cli import HydraCommand, override_keys, preflight, report_user_errors
from simulator.config import MAX_SEED, dataclass_rules, validate_config
from simulator.config import Rule as KeyRule
from simulator.errors import ConfigError
from simulator.policies.heuristics import placed_decision
from simulator.policies.lookahead import RolloutCluster
from simulator.topology import RampTopology
from workloads.io import atomic_write, atomic_write_text

log = logging.getLogger(__name__)
PROG = "pacml train-adaptive"
#: Training condition samples saved with a selector (:meth:`pacml.adaptive.selector.SelectorWeights.novelty`).
REFERENCE_ROWS = 4096


@dataclass
class AdaptiveTrainConfig:
    """Knobs of ``pacml train-adaptive`` (``conf/train_adaptive.yaml``)."""

    num_conditions: int = 3000
    seeds_per_condition: int = 2
    jobs_per_episode: int = 500
    workers: int = 2
    seed: int = 0
    time_budget_s: float = 3600.0
    teacher_budget_frac: float = 0.85
    val_every: int = 5
    hidden: int = 64
    epochs: int = 400
    learning_rate: float = 3.0e-3
    weight_decay: float = 1.0e-4
    torch_threads: int = 1
    batch_rows: int = 20000
    core_frac: float = 0.5
    scenario: str = "paper"
    window: int = WINDOW
    neighbours: int | None = None
    block_search: int = 0


def condition_overrides(cfg: AdaptiveTrainConfig, index: int) -> list[str]:
    """The overrides of training condition ``index`` (a pure function of the run's seed)."""
    return sample_condition(np.random.default_rng([cfg.seed, index]), cfg.jobs_per_episode, cfg.core_frac,
                            cfg.scenario)


def condition_seeds(cfg: AdaptiveTrainConfig, index: int) -> list[int]:
    """Training simulation seeds of condition ``index`` (>= TRAIN_SEED_LOW, never evaluation seeds)."""
    base = TRAIN_SEED_LOW + 1000 * cfg.seed + index * cfg.seeds_per_condition
    return [base + s for s in range(cfg.seeds_per_condition)]


def _search_worker(args: tuple[list[str], list[int], str, int, int]) -> tuple[str, float]:
    overrides, seeds, path, window, block_search = args
    start = time.perf_counter()
    res = teacher_search(overrides, seeds, window=window, block_search=block_search)
    meta = json.dumps({"overrides": res["overrides"], "seeds": res["seeds"], "rules": res["rules"],
                       "window": window, "horizon_s": res["horizon_s"], "block_search": block_search})

    def write(fh: Any) -> None:
        np.savez(fh, blocking=res["blocking"], end_blocking=res["end_blocking"], rule_features=res["rule_features"],
                 conditions=res["conditions"], meta=np.frombuffer(meta.encode(), dtype=np.uint8))

    atomic_write(path, write)
    return path, time.perf_counter() - start


def load_condition(path: Path) -> dict[str, Any]:
    """One teacher-search result file."""
    with np.load(path, allow_pickle=False) as data:
        out = {k: data[k] for k in ("blocking", "rule_features", "conditions")}
        out |= json.loads(bytes(data["meta"]).decode())
    return out


def labels(result: dict[str, Any]) -> np.ndarray:
    """Mean blocking per rule of one condition, as the fit sees it (over its training seeds)."""
    return result["blocking"].mean(axis=1)


def run_until(worker: Any, tasks: list[Any], workers: int, deadline: float, on_result: Any = None) -> list[Any]:
    """``worker(task)`` for every task in ``workers`` processes until done or ``deadline``
    (``time.monotonic``); tasks still running then are stopped and dropped. ``on_result(result)``
    is called as each one finishes. Returns the finished results."""
    out: list[Any] = []
    pool = mp.get_context("forkserver").Pool(workers)
    try:
        pending: list[Any] = []
        queue = list(tasks)
        while queue or pending:
            while queue and len(pending) < workers and time.monotonic() < deadline:
                pending.append(pool.apply_async(worker, (queue.pop(0),)))
            if time.monotonic() >= deadline:
                log.info("time budget reached with %d tasks unfinished", len(queue) + len(pending))
                break
            finished = [p for p in pending if p.ready()]
            for p in finished:
                pending.remove(p)
                out.append(p.get())
                if on_result is not None:
                    on_result(out[-1])
            if not finished:
                time.sleep(0.2)
    finally:
        pool.terminate()
        pool.join()
    return out


def search(cfg: AdaptiveTrainConfig, out_dir: Path, deadline: float, progress: bool = True,
           on_done: Any = None) -> list[Path]:
    """Teacher search over the run's conditions until done or ``deadline`` (``time.monotonic``);
    ``on_done()`` is called after each condition is written."""
    folder = out_dir / "conditions"
    folder.mkdir(parents=True, exist_ok=True)
    todo = [(condition_overrides(cfg, i), condition_seeds(cfg, i), str(folder / f"{i:04d}.npz"), cfg.window,
             cfg.block_search) for i in range(cfg.num_conditions) if not (folder / f"{i:04d}.npz").is_file()]
    done = cfg.num_conditions - len(todo)
    log.info("teacher search: %d of %d conditions done, %d to go (%d workers)", done, cfg.num_conditions,
             len(todo), cfg.workers)
    start = time.monotonic()

    def finished(result: tuple[str, float]) -> None:
        nonlocal done
        done += 1
        if on_done is not None:
            on_done()
        if progress:
            log.info("condition %s searched in %.1f s (%d/%d, %.0f s elapsed)", Path(result[0]).stem, result[1],
                     done, cfg.num_conditions, time.monotonic() - start)

    run_until(_search_worker, todo, cfg.workers, deadline, finished)
    return sorted(folder.glob("*.npz"))


def _dataset(results: list[dict[str, Any]]) -> tuple[Any, Any, Any]:
    """Padded tensors: condition samples ``(N, C)``, their rules ``(N, R, F)``, regrets ``(N, R)``
    (``inf`` pads missing rules)."""
    import torch  # lazy: torch

    width = max(len(r["rules"]) for r in results)
    conds, rules, regrets = [], [], []
    for r in results:
        mean = labels(r)
        regret = np.full(width, np.inf)
        regret[: len(mean)] = mean - mean.min()
        feats = np.zeros((width, r["rule_features"].shape[1]), dtype=np.float32)
        feats[: len(mean)] = r["rule_features"]
        for c in r["conditions"]:
            conds.append(c)
            rules.append(feats)
            regrets.append(regret)
    return (torch.tensor(np.stack(conds)), torch.tensor(np.stack(rules)),
            torch.tensor(np.stack(regrets), dtype=torch.float32))


def fit(cfg: AdaptiveTrainConfig, train: list[dict[str, Any]], val: list[dict[str, Any]], out_dir: Path,
        deadline: float, drop: tuple[int, ...] = ()) -> tuple[SelectorWeights, dict[str, float]]:
    """Fit the selector by expected regret; keep the epoch with the best validation argmax regret.

    ``drop``: condition-feature columns zeroed everywhere (ablations: what the selector does
    without, e.g., the load or target features).
    """
    import torch  # lazy: torch
    from torch import nn  # lazy: torch

    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.torch_threads)
    xc, xr, reg = _dataset(train)
    vc, vr, vreg = _dataset(val) if val else (xc, xr, reg)
    for column in drop:
        xc[:, column] = 0.0
        vc[:, column] = 0.0
    dim = xc.shape[1] + xr.shape[2]
    net = nn.Sequential(nn.Linear(dim, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(),
                        nn.Linear(cfg.hidden, 1))
    opt = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)

    def scores(c: torch.Tensor, r: torch.Tensor, regret: torch.Tensor) -> torch.Tensor:
        x = torch.cat([c.unsqueeze(1).expand(-1, r.shape[1], -1), r], dim=2)
        return net(x).squeeze(-1).masked_fill(torch.isinf(regret), -1e9)

    def argmax_regret(c: torch.Tensor, r: torch.Tensor, regret: torch.Tensor) -> float:
        with torch.no_grad():
            pick = scores(c, r, regret).argmax(dim=1)
            return float(regret.gather(1, pick[:, None]).mean())

    finite = lambda t: torch.where(torch.isinf(t), torch.zeros_like(t), t)  # noqa: E731
    # Above batch_rows samples, each epoch (and the train regret) takes a random batch_rows of them,
    # so an epoch's cost stops growing with the search; at or below it: every row.
    rows_total = xc.shape[0]
    sampler = torch.Generator().manual_seed(cfg.seed)
    probe = (torch.randperm(rows_total, generator=sampler)[: cfg.batch_rows] if rows_total > cfg.batch_rows
             else slice(None))
    best = (math.inf, None, -1)
    rows = []
    for epoch in range(cfg.epochs):
        if time.monotonic() >= deadline:
            log.info("fit: time budget reached after %d epochs", epoch)
            break
        batch = (torch.randperm(rows_total, generator=sampler)[: cfg.batch_rows] if rows_total > cfg.batch_rows
                 else torch.arange(rows_total))
        # One Adam step per epoch.
        opt.zero_grad()
        p = torch.softmax(scores(xc[batch], xr[batch], reg[batch]), dim=1)
        loss = (p * finite(reg[batch])).sum(dim=1).mean()
        loss.backward()
        opt.step()
        if epoch % 5 == 0 or epoch == cfg.epochs - 1:
            tr, va = argmax_regret(xc[probe], xr[probe], reg[probe]), argmax_regret(vc, vr, vreg)
            rows.append({"epoch": epoch, "loss": float(loss.detach()), "train_regret": tr, "val_regret": va})
            if va < best[0]:
                best = (va, [(m.weight.detach().double().numpy().copy(), m.bias.detach().double().numpy().copy())
                             for m in net if isinstance(m, nn.Linear)], epoch)
            if epoch % 50 == 0:  # the fit takes minutes: show it moving
                log.info("fit epoch %d/%d: train regret %.4f, validation %.4f (best %.4f at epoch %d)", epoch,
                         cfg.epochs, tr, va, best[0], best[2])
    write_metrics_csv(out_dir / "metrics.csv", rows, columns=("epoch", "loss", "train_regret", "val_regret"))
    assert best[1] is not None
    return SelectorWeights(best[1]), {"best_epoch": best[2], "val_regret": best[0],
                                      "train_regret": rows[-1]["train_regret"] if rows else math.nan}


def reference_conditions(results: list[dict[str, Any]], seed: int, rows: int = REFERENCE_ROWS) -> np.ndarray:
    """A random ``rows`` of the condition samples of ``results`` (all when fewer), saved with the
    selector so the agent can tell how far a condition is from its training data."""
    conds = np.concatenate([r["conditions"] for r in results]).astype(np.float32)
    if len(conds) <= rows:
        return conds
    pick = np.random.default_rng([seed, 31]).choice(len(conds), size=rows, replace=False)
    return conds[np.sort(pick)]


def neighbour_table(results: list[dict[str, Any]], cfg: AdaptiveTrainConfig) -> NeighbourTable:
    """The nearest-neighbour lookup over ``results`` (``cfg.neighbours`` voters), with the labels the
    fit uses."""
    assert cfg.neighbours is not None
    return NeighbourTable.build([(r["conditions"], r["rule_features"], labels(r)) for r in results],
                                cfg.neighbours)


def selector_regret(weights: SelectorWeights, results: list[dict[str, Any]]) -> float:
    """Mean regret of the selector's pick over the condition samples of ``results`` (numpy, as the
    policy decides; the fit's own measure for the MLP)."""
    out = []
    for r in results:
        mean = labels(r)
        regret = mean - mean.min()
        out.extend(regret[int(np.argmax(weights.scores(c, r["rule_features"])))] for c in r["conditions"])
    return float(np.mean(out)) if out else math.nan


def baseline_regrets(results: list[dict[str, Any]]) -> dict[str, float]:
    """Mean regret on ``results`` of fixed rules (every rule label present in all of them)."""
    out: dict[str, float] = {}
    common = set.intersection(*(set(r["rules"]) for r in results)) if results else set()
    for label in sorted(common):
        vals = []
        for r in results:
            mean = labels(r)
            vals.append(mean[r["rules"].index(label)] - mean.min())
        out[label] = float(np.mean(vals))
    return out


def train(cfg: AdaptiveTrainConfig, out_dir: Path, progress: bool = True,
          conditions_dir: Path | None = None) -> dict[str, Any]:
    """The whole run (resumable in ``out_dir``); writes ``adaptive.npz`` and ``train_summary.json``.

    ``conditions_dir``: another run's teacher search (its ``conditions/``) to fit on instead of
    searching (a *refit*: the whole budget goes to the fit).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    used_file = out_dir / USED_FILE
    used_before = json.loads(used_file.read_text())["seconds"] if used_file.is_file() else 0.0
    start = time.monotonic() - used_before  # the budget is the total over resumed sessions

    def record_time() -> None:
        atomic_write_text(used_file, json.dumps({"seconds": time.monotonic() - start}))

    budget = cfg.time_budget_s if cfg.time_budget_s else math.inf
    if conditions_dir is None:
        paths = search(cfg, out_dir, start + budget * cfg.teacher_budget_frac, progress, on_done=record_time)
    else:
        paths = sorted(conditions_dir.glob("*.npz"))
        log.info("refit on the teacher search in %s: %d conditions", conditions_dir, len(paths))
    search_s = time.monotonic() - start
    results = [load_condition(p) for p in paths]
    index = [int(p.stem) for p in paths]
    val = [r for i, r in zip(index, results, strict=True) if i % cfg.val_every == 0]
    tr = [r for i, r in zip(index, results, strict=True) if i % cfg.val_every != 0]
    if not tr:
        raise ConfigError("no training condition finished within the time budget", field="adaptive.time_budget_s")
    weights, stats = fit(cfg, tr, val, out_dir, start + budget)
    weights.reference = reference_conditions(tr, cfg.seed)
    if cfg.neighbours is not None:
        weights.neighbours = neighbour_table(tr, cfg)
        stats = {**stats, "val_regret_mlp": stats["val_regret"], "val_regret": selector_regret(weights, val)}
        log.info("nearest-neighbour selector (k=%d): validation regret %.4f (the MLP's: %.4f)", cfg.neighbours,
                 stats["val_regret"], stats["val_regret_mlp"])
    base = baseline_regrets(val)
    best_fixed = min(base, key=base.get) if base else None
    meta = {"train_config": asdict(cfg), "conditions": len(results)}
    save_adaptive(out_dir / "adaptive.npz", weights, meta)
    summary = {"conditions": len(results), "train_conditions": len(tr), "val_conditions": len(val),
               **({"refit_of": str(conditions_dir.parent)} if conditions_dir is not None else {}),
               "teacher_search_s": search_s, "total_s": time.monotonic() - start, **stats,
               "val_regret_best_fixed_rule": base.get(best_fixed, math.nan) if best_fixed else math.nan,
               "best_fixed_rule": best_fixed, "val_regret_fixed_rules": base}
    atomic_write_text(out_dir / "train_summary.json", json.dumps(summary, indent=2))
    record_time()
    log.info("adaptive agent: validation regret %.4f (best fixed rule %s: %.4f) on %d conditions; %s",
             stats["val_regret"], best_fixed, summary["val_regret_best_fixed_rule"], len(val), out_dir / "adaptive.npz")
    return summary


# ---------------------------------------------------------------------------- the teacher search
def teacher_search(overrides: Sequence[str], seeds: Sequence[int], samples_per_episode: int = 24,
                   window: int = WINDOW, block_search: int = 0) -> dict[str, Any]:
    """Every rule of :func:`rule_candidates` on ``seeds`` of one condition: the rules' labels and
    features, their blocking rates ``(rules, seeds)`` and condition features sampled along the
    episodes (from the last ``window`` arrivals; the same for every rule).

    One simulation per seed, decided by the first rule; every rule runs on a
    :class:`~simulator.policies.lookahead.RolloutCluster` fed the same arrivals, as the shadow
    clusters do. If the first rule's copy ever blocks other jobs than its simulation, the condition
    is simulated rule by rule instead (:func:`teacher_search_full`, the same numbers at about four
    times the cost). ``block_search`` > 0: the rules place as the agent with that setting does.
    """
    new_sim, topology, rules = _teacher_setup(overrides)
    blocking = np.zeros((len(rules), len(seeds)))
    end = np.zeros((len(rules), len(seeds)))
    conds: list[NDArray[np.float32]] = []
    horizon_s = None
    for j, seed in enumerate(seeds):
        sim = new_sim(int(seed))
        horizon_s = sim.horizon_s
        tracker = ConditionTracker(window)
        copies: list[RolloutCluster] = []
        blocked = np.zeros(len(rules), dtype=np.int64)
        while (job := sim.next_job()) is not None:
            state = sim.state()
            if not copies:
                copies = [RolloutCluster(state.feasibility.engine) for _ in rules]
            tracker.observe(job)
            conds.append(tracker.features(topology))
            for i, rule in enumerate(rules):
                blocked[i] += not start_rule_on(copies[i], job, rule, block_search)
            sim.apply(placed_decision(state.feasibility, rules[0].degree(state), block_search))
        summary = sim.finalize().summary
        if sim.accounting == "paper" and sim.horizon_s is not None:  # running at the horizon counts as blocked
            at_end = np.array([c.running_after(sim.horizon_s) for c in copies], dtype=np.int64)
            blocked += at_end
            end[:, j] = at_end / summary["num_jobs_arrived"]
        if int(blocked[0]) != summary["num_jobs_blocked"]:
            log.warning("teacher search: the rollout copy of %s blocked %d jobs, its simulation %d (%s, seed %d);"
                        " simulating every rule", rules[0].label, blocked[0], summary["num_jobs_blocked"],
                        " ".join(overrides), seed)
            return teacher_search_full(overrides, seeds, samples_per_episode, window, block_search)
        blocking[:, j] = blocked / summary["num_jobs_arrived"]
    return _teacher_result(overrides, seeds, rules, topology, blocking, conds, samples_per_episode, end, horizon_s)


def teacher_search_full(overrides: Sequence[str], seeds: Sequence[int], samples_per_episode: int = 24,
                        window: int = WINDOW, block_search: int = 0) -> dict[str, Any]:
    """:func:`teacher_search` by one full simulation per rule and seed (the reference; slower)."""
    new_sim, topology, rules = _teacher_setup(overrides)
    blocking = np.zeros((len(rules), len(seeds)))
    end = np.zeros((len(rules), len(seeds)))
    conds: list[NDArray[np.float32]] = []
    horizon_s = None
    for j, seed in enumerate(seeds):
        for i, rule in enumerate(rules):
            tracker = ConditionTracker(window) if i == 0 else None
            sim = new_sim(int(seed))
            horizon_s = sim.horizon_s
            while (job := sim.next_job()) is not None:
                state = sim.state()
                if tracker is not None:
                    tracker.observe(job)
                    conds.append(tracker.features(topology))
                sim.apply(placed_decision(state.feasibility, rule.degree(state), block_search))
            summary = sim.finalize().summary
            blocking[i, j] = summary["blocking_rate"]
            end[i, j] = summary["blocked_by_reason"]["running_at_horizon"] / summary["num_jobs_arrived"]
    return _teacher_result(overrides, seeds, rules, topology, blocking, conds, samples_per_episode, end, horizon_s)


def oracle_rule(overrides: Sequence[str], seeds: Sequence[int], block_search: int = 0) -> dict[str, Any]:
    """The best rule of one condition on ``seeds`` (lowest mean blocking), from one
    :func:`teacher_search`: ``rule`` (its label), ``per_seed`` (its blocking per seed) and
    ``rules`` (every rule's mean). ``block_search``: the rules placed as that setting places them."""
    res = teacher_search([*overrides, "progress=false"], seeds, samples_per_episode=1, block_search=block_search)
    mean = res["blocking"].mean(axis=1)
    best = int(np.argmin(mean))
    return {"rule": res["rules"][best], "per_seed": res["blocking"][best].tolist(),
            "rules": dict(zip(res["rules"], mean.tolist(), strict=True))}


def _teacher_setup(overrides: Sequence[str]) -> tuple[Any, RampTopology, list[Rule]]:
    """A condition's simulation factory (``seed -> Simulation``, sharing one feasibility engine and
    workload), its topology and its rules."""
    cfg = compose_sim_config([*overrides, "progress=false"])
    topology = build_topology(cfg)
    feas = build_feasibility(topology, cfg.get("sim", {}))
    workload = build_workload(cfg)
    return (lambda seed: build_simulation(cfg, seed=seed, feasibility=feas, workload=workload),
            topology, rule_candidates(topology))


def _teacher_result(overrides: Sequence[str], seeds: Sequence[int], rules: list[Rule], topology: RampTopology,
                    blocking: NDArray[np.float64], conds: list[NDArray[np.float32]],
                    samples_per_episode: int, end: NDArray[np.float64], horizon_s: float | None) -> dict[str, Any]:
    # A stable seed (str hash() is salted per process, which made the kept samples differ by run).
    rng = np.random.default_rng(zlib.crc32("\x1f".join(overrides).encode()))
    cond = np.stack(conds)
    keep = rng.choice(len(cond), size=min(samples_per_episode * len(seeds), len(cond)), replace=False)
    return {"overrides": list(overrides), "seeds": [int(s) for s in seeds], "rules": [r.label for r in rules],
            "rule_features": np.stack([rule_features(r, topology) for r in rules]),
            "blocking": blocking, "end_blocking": end, "horizon_s": horizon_s, "conditions": cond[np.sort(keep)]}


# ---------------------------------------------------------------------------- the command
CONFIG_FILE = "train_config.yaml"
USED_FILE = "time_used.json"
#: Retired settings and the value that turned them off: a saved run config (resume, refit) holding one
#: at that value loads without it; at any other value it cannot be reproduced, so it is refused.
RETIRED = {"tune_neighbours": False, "label_horizon_s": None, "jobs_per_server": 0, "minibatch_rows": None,
           "size_spread_frac": 0.0}
#: Settings a resumed run may change (everything else comes from the run's own config).
RESUME_OVERRIDABLE = ("adaptive.time_budget_s", "adaptive.workers", "progress")
#: Settings that define a teacher search: a refit (``refit=RUN``) cannot change them.
SEARCH_KEYS = ("num_conditions", "seeds_per_condition", "jobs_per_episode", "seed", "core_frac", "scenario",
               "window", "block_search")


def adaptive_run_dir(resume: str | None, default: str) -> str:
    """``hydra.run.dir``: the resumed run's own directory when ``resume`` names one, else ``default``."""
    if resume and (Path(str(resume)) / CONFIG_FILE).is_file():
        return str(resume)
    return default


OmegaConf.register_new_resolver("pacml_adaptive_run_dir", adaptive_run_dir, replace=True)


def command() -> Any:
    """What ``pacml train-adaptive``'s config holds, for the one check before any work."""
    count, positive = KeyRule(int, low=1), KeyRule(float, low=0.0, low_open=True)
    ranges = {"num_conditions": count, "seeds_per_condition": count, "jobs_per_episode": KeyRule(int, low=20),
              "workers": count, "seed": KeyRule(int, low=0, high=MAX_SEED),
              "time_budget_s": KeyRule(float | None, low=0.0, low_open=True),
              "teacher_budget_frac": KeyRule(float, low=0.0, low_open=True, high=1.0), "val_every": KeyRule(int, low=2),
              "hidden": count, "epochs": count, "learning_rate": positive, "weight_decay": KeyRule(float, low=0.0),
              "torch_threads": count, "batch_rows": count,
              "core_frac": KeyRule(float, low=0.0, high=1.0),
              "scenario": KeyRule(Literal["paper", "physical"]), "window": KeyRule(int, low=2),
              "neighbours": KeyRule(int | None, low=1), "block_search": KeyRule(int, low=0)}
    keys = {"progress": KeyRule(bool), "resume": KeyRule(str | None, non_empty=True),
            "refit": KeyRule(str | None, non_empty=True),
            **dataclass_rules("adaptive", AdaptiveTrainConfig, ranges)}

    class _Command(HydraCommand):
        def validate(self, cfg: Any, overrides: Any) -> Any:
            cfg = validate_config(cfg, keys=self.keys, plugins=(), given=override_keys(overrides))
            if cfg.get("resume") and not (Path(str(cfg.resume)) / CONFIG_FILE).is_file():
                raise ConfigError(f"no pacml train-adaptive run at {cfg.resume} (no {CONFIG_FILE})", field="resume")
            if cfg.get("refit"):
                if cfg.get("resume"):
                    raise ConfigError("resume and refit exclude each other (a refit writes a new run)", field="refit")
                source = Path(str(cfg.refit))
                if not (source / CONFIG_FILE).is_file() or not any((source / "conditions").glob("*.npz")):
                    raise ConfigError(f"no pacml train-adaptive teacher search at {cfg.refit} (no {CONFIG_FILE} "
                                      "or no conditions/*.npz)", field="refit")
                for key in override_keys(overrides):
                    if key.startswith("adaptive.") and key.split(".", 1)[1] in SEARCH_KEYS:
                        raise ConfigError(f"a refit reuses {cfg.refit}'s teacher search, so its search settings "
                                          f"({', '.join(SEARCH_KEYS)}) come from that run", field=key)
            return cfg

    return _Command(PROG, "train_adaptive", keys=keys, plugins=())


def train_from_config(cfg: Any, out_dir: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Train (or resume) from a composed ``conf/train_adaptive.yaml``."""
    resumed = bool(cfg.get("resume"))
    if resumed:
        out_dir = Path(str(cfg.resume))
        saved = OmegaConf.load(out_dir / CONFIG_FILE)
        apply_resume_overrides(saved, cfg, overrides, RESUME_OVERRIDABLE)
        cfg = saved
    conditions_dir = None
    if cfg.get("refit"):
        conditions_dir = Path(str(cfg.refit)) / "conditions"
        if not resumed:  # a resumed refit's saved config already holds the merged settings
            # The source run's settings (its search's describe the conditions fitted on), then
            # the fit settings given on this command line.
            source = OmegaConf.load(Path(str(cfg.refit)) / CONFIG_FILE)
            given = override_keys(overrides or [])
            for key, value in source.get("adaptive", {}).items():
                if key in RETIRED and value != RETIRED[key]:
                    raise ConfigError(f"was retired (measured no better); {cfg.refit} was searched with it on",
                                      field=f"adaptive.{key}")
                if f"adaptive.{key}" not in given and key in cfg.adaptive:
                    OmegaConf.update(cfg, f"adaptive.{key}", value, merge=False)
    data = OmegaConf.to_container(cfg.adaptive, resolve=True)
    assert isinstance(data, dict)
    for key, off in RETIRED.items():
        if key in data and data.pop(key) != off:
            raise ConfigError(f"was retired (measured no better); a run with it on cannot be continued by this "
                              f"version, only with {key}={off}", field=f"adaptive.{key}")
    acfg = AdaptiveTrainConfig(**data)  # type: ignore[arg-type]
    atomic_write_text(out_dir / CONFIG_FILE, OmegaConf.to_yaml(cfg, resolve=True))
    return train(acfg, out_dir, progress=bool(cfg.get("progress", True)), conditions_dir=conditions_dir)


def main() -> None:
    """Console entry point (``pacml train-adaptive``)."""
    cmd = command()

    @hydra.main(version_base=None, config_path="pkg://conf", config_name="train_adaptive")
    def _hydra_main(cfg: Any) -> None:
        hc = HydraConfig.get()
        overrides = list(hc.overrides.task)
        report_user_errors(PROG, lambda: train_from_config(cmd.validate(cfg, overrides), Path(hc.runtime.output_dir),
                                                           overrides))

    preflight(cmd, sys.argv[1:])
    _hydra_main()


if __name__ == "__main__":
    main()
