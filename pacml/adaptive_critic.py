"""A deviation critic for the adaptive agent: the rollout planner's judgement across conditions.

The adaptive agent (:mod:`pacml.adaptive`) picks a rule for the condition it observes and decides
every job with it; at best it matches the best rule. To go below the best rule a policy must
decide some jobs differently from any fixed rule, and the rollout planner
(:class:`simulator.policies.lookahead.RolloutLookahead`) shows where: it simulates the next
arrivals after each candidate degree, with the agent's rule deciding them, and finds states where
another degree blocks fewer jobs. Its per-beta distillation (:mod:`pacml.critic`) beat the tuned
rule at the paper's load (BENCHMARKS.md §3). This module does the same for the adaptive agent, on
conditions drawn from its training family:

* **Collection** (:func:`collect_episode`): the adaptive agent runs a random condition of the
  family (:func:`pacml.adaptive.sample_condition`, clusters of the critic's size); on a random
  ``plan_frac`` of its decisions the planner scores every feasible degree (0 = reject) by the
  expected blocked jobs over ``window_jobs`` arrivals sampled from the condition's workload,
  decided by the agent's current rule. One ``.npz`` shard per episode, written atomically.
* **Fit** (:func:`pacml.critic.train_critic`): a :class:`pacml.critic.DeviationCritic` regresses
  each degree's score minus the agent's degree's, from the agent's view of the condition
  (:class:`pacml.adaptive.ConditionTracker`), the rule it follows, the job, the cluster's
  per-server state and the servers each degree would take.
* **Use** (``policy.critic`` of :class:`pacml.adaptive.AdaptivePolicy`): the agent's degree is
  replaced when the critic predicts another feasible one blocks more than ``critic_margin`` fewer
  jobs. The per-server inputs tie the critic to clusters of the size it was trained on
  (``meta["num_servers"]``); on other clusters the agent decides alone.

The inputs are plain numpy; at decision time the critic is one small MLP forward pass.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pacml.adaptive import Rule, rule_features
from pacml.features import action_features, global_features, server_features, take_features
from simulator.cluster import ClusterState
from workloads.io import atomic_write
from workloads.jobs import JobSpec

log = logging.getLogger(__name__)

#: Episode seeds of critic collection start here (training range, apart from the selector's
#: teacher search, TRAIN_SEED_LOW + 1000 * seed + ..., and pacml-distill's + 7e6).
COLLECT_SEED_BASE = 1_000_000 + 8_000_000


def observation(job: JobSpec, state: ClusterState, rule: Rule, condition: NDArray[np.float32],
                base_degree: int) -> dict[str, NDArray[Any]]:
    """The critic's inputs for one decision (the keys :func:`pacml.critic.critic_inputs` stacks).

    ``globals``: the job and cluster summary (:func:`pacml.features.global_features`), the
    condition features and the followed rule's features; ``actions``: per degree ``0..max``, the
    agent's action features plus whether it is the rule's degree; ``servers`` and ``take``: which
    servers are held until when, and which each feasible degree would take; ``mask``: feasible
    degrees (0 always).
    """
    topology = state.topology
    top = max(topology.degrees)
    glob = np.concatenate([global_features(job, state), condition, rule_features(rule, topology)])
    acts = action_features(job, state, top)
    is_base = np.zeros((top + 1, 1), dtype=np.float32)
    mask = state.feasibility.mask("feasible", top)
    is_base[base_degree if mask[base_degree] else 0] = 1.0
    return {"globals": glob.astype(np.float32), "actions": np.concatenate([acts, is_base], axis=1),
            "servers": server_features(state), "take": take_features(state, top), "mask": mask}


@dataclass
class CollectSettings:
    """Settings of critic collection (``pacml-train-adaptive-critic``'s ``critic`` section).

    Attributes:
        checkpoint: The adaptive agent the critic is trained around.
        num_servers: Cluster size of the conditions (the critic's per-server inputs fix it).
        episodes: Collection episodes (conditions), at most.
        jobs_per_episode: Arrivals per episode.
        plan_frac: Share of decisions the planner scores (the rest only advance the episode).
        window_jobs, num_futures: Planner rollout length and futures per scored decision.
        core_frac: Share of conditions drawn densely near the paper's load (as the selector's).
        seed: Draws the conditions.
        shadow_rules: The agent's shadows during collection (as it runs by default).
    """

    checkpoint: str = "paper_adaptive"
    num_servers: int = 32
    episodes: int = 400
    jobs_per_episode: int = 500
    plan_frac: float = 0.25
    window_jobs: int = 100
    num_futures: int = 16
    core_frac: float = 0.5
    seed: int = 0
    shadow_rules: int = 8


def episode_overrides(cfg: CollectSettings, index: int) -> list[str]:
    """Overrides of collection episode ``index``: a random condition of the selector's training
    family on a cluster of ``cfg.num_servers`` servers (drawn until one is)."""
    from pacml.adaptive import sample_condition

    rng = np.random.default_rng([cfg.seed, 77, index])
    while True:
        over = sample_condition(rng, cfg.jobs_per_episode, cfg.core_frac)
        dims = {o.split("=")[0]: o.split("=")[1] for o in over if o.startswith("cluster.")}
        servers = (int(dims["cluster.num_comm_groups"]) * int(dims["cluster.num_racks_per_group"])
                   * int(dims["cluster.num_servers_per_rack"]))
        if servers == cfg.num_servers:
            return over


def collect_episode(cfg: CollectSettings, index: int, path: Path) -> dict[str, float]:
    """Run collection episode ``index`` and write its shard to ``path``; returns its stats."""
    from pacml.adaptive import AdaptivePolicy
    from pacml.env import compose_sim_config
    from simulator.build import build_simulation, build_workload
    from simulator.policies.lookahead import RolloutLookahead

    start = time.perf_counter()
    overrides = episode_overrides(cfg, index)
    seed = COLLECT_SEED_BASE + 1000 * cfg.seed + index
    sim_cfg = compose_sim_config([*overrides, "progress=false"])
    workload = build_workload(sim_cfg)
    sim = build_simulation(sim_cfg, seed=seed, workload=workload)
    # The agent as this (unshipped) critic was measured around; its episodes are 32-server ones, where
    # neither shadow_max_servers nor shadow_all_above_servers ever applies.
    agent = AdaptivePolicy(cfg.checkpoint, shadow_rules=cfg.shadow_rules, shadow_max_servers=256)
    agent.reset(seed)
    planner = RolloutLookahead(None, window_jobs=cfg.window_jobs, num_futures=cfg.num_futures, seed=cfg.seed)
    planner.reset(seed)
    planner.bind(workload)
    rng = np.random.default_rng([cfg.seed, 78, index])
    rows: dict[str, list[Any]] = {k: [] for k in ("globals", "actions", "servers", "take", "scores", "agent_action")}
    while (job := sim.next_job()) is not None:
        state = sim.state()
        decision = agent.decide(job, state)
        if rng.random() < cfg.plan_frac:
            rule = agent.last_rule
            assert rule is not None and agent.last_condition is not None
            obs = observation(job, state, rule, agent.last_condition, decision.degree)
            candidates = np.flatnonzero(obs["mask"])
            if len(candidates) > 1:
                got = planner.scores(state, [int(d) for d in candidates], planner.sample_futures(), rule.degree_for)
                scores = np.full(len(obs["mask"]), np.nan)
                scores[candidates] = [got[int(d)] for d in candidates]
                for key in ("globals", "actions", "servers", "take"):
                    rows[key].append(obs[key])
                rows["scores"].append(scores)
                rows["agent_action"].append(int(np.argmax(obs["actions"][:, -1])))
        sim.apply(decision)
    summary = sim.finalize().summary
    meta = {"overrides": overrides, "seed": seed, "blocking_rate": summary["blocking_rate"],
            "scored": len(rows["scores"])}
    if not rows["scores"]:  # an idle episode: nothing to learn, but the shard marks it done
        arrays: dict[str, NDArray[Any]] = {}
    else:
        arrays = {k: np.stack(v) for k, v in rows.items()}

    def write(fh: Any) -> None:
        np.savez_compressed(fh, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)

    atomic_write(path, write)
    return {"scored": float(meta["scored"]), "seconds": time.perf_counter() - start,
            "blocking_rate": float(summary["blocking_rate"])}


def load_shards(paths: list[Path]) -> dict[str, NDArray[Any]]:
    """Concatenate collection shards (episodes without scored decisions are skipped)."""
    parts: dict[str, list[NDArray[Any]]] = {}
    for p in paths:
        with np.load(p, allow_pickle=False) as data:
            if "scores" not in data.files:
                continue
            for k in ("globals", "actions", "servers", "take", "scores", "agent_action"):
                parts.setdefault(k, []).append(data[k])
    if not parts:
        raise ValueError("no scored decisions in the collection shards")
    return {k: np.concatenate(v) for k, v in parts.items()}


def settings_meta(cfg: CollectSettings) -> dict[str, Any]:
    """What a critic checkpoint records about its collection."""
    return {"kind": "adaptive", "collect": asdict(cfg), "num_servers": cfg.num_servers}


# ---------------------------------------------------------------------------- training run
@dataclass
class CriticTrainConfig(CollectSettings):
    """Knobs of ``pacml-train-adaptive-critic`` (``conf/train_adaptive_critic.yaml``).

    Attributes (beyond :class:`CollectSettings`):
        workers: Processes collecting episodes and validating margins.
        time_budget_s: The whole run (collection stops at ``collect_budget_frac`` of it).
        collect_budget_frac: Share of the budget for collection.
        epochs, hidden, learning_rate: Critic fit settings.
        margins: Margins (expected blocked jobs) tried on the validation episodes; the agent
            without the critic is always a candidate too.
        val_conditions: Validation conditions (same family, other draws), one seed each
            (500200 + i: validation seeds, never training or evaluation ones).
        torch_threads: Torch threads per process.
    """

    workers: int = 2
    time_budget_s: float = 2400.0
    collect_budget_frac: float = 0.75
    epochs: int = 25
    hidden: int = 128
    learning_rate: float = 1e-3
    margins: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.25, 0.5])
    val_conditions: int = 32
    torch_threads: int = 1


#: Validation episodes draw conditions from this index on (collection uses 0, 1, 2, ...).
VAL_INDEX_BASE = 1_000_000
VAL_SEED_BASE = 500_200


def _collect_worker(args: tuple[CriticTrainConfig, int, str]) -> tuple[int, dict[str, float]]:
    import torch

    cfg, index, path = args
    torch.set_num_threads(cfg.torch_threads)
    return index, collect_episode(cfg, index, Path(path))


def _validate_worker(args: tuple[CriticTrainConfig, int, str | None, float]) -> tuple[int, str | None, float, float]:
    """Blocking of the agent (with the critic at ``margin``, or alone) on validation condition ``i``."""
    import torch

    from pacml.adaptive import AdaptivePolicy
    from pacml.env import compose_sim_config
    from simulator.build import build_simulation

    cfg, i, critic, margin = args
    torch.set_num_threads(cfg.torch_threads)
    overrides = episode_overrides(cfg, VAL_INDEX_BASE + i)
    sim_cfg = compose_sim_config([*overrides, "progress=false"])
    policy = AdaptivePolicy(cfg.checkpoint, shadow_rules=cfg.shadow_rules, shadow_max_servers=256,
                            critic=critic, critic_margin=margin if critic else None)
    summary = build_simulation(sim_cfg, seed=VAL_SEED_BASE + i).run(policy).summary
    return i, critic, margin, float(summary["blocking_rate"])


def _run_pool(cfg: CriticTrainConfig, worker: Any, tasks: list[Any], deadline: float, what: str,
              progress: bool) -> list[Any]:
    """:func:`pacml.adaptive_train.run_until` with a progress line every 10 tasks."""
    from pacml.adaptive_train import run_until

    start, count = time.monotonic(), 0

    def finished(_: Any) -> None:
        nonlocal count
        count += 1
        if progress and count % 10 == 0:
            log.info("%s: %d of %d done (%.0f s)", what, count, len(tasks), time.monotonic() - start)

    return run_until(worker, tasks, cfg.workers, deadline, finished)


def train(cfg: CriticTrainConfig, out_dir: Path, progress: bool = True) -> dict[str, Any]:
    """Collect (resumable: existing shards are kept), fit, pick the margin, write ``critic.pt``."""
    import torch

    from pacml.critic import save_critic, train_critic
    from workloads.io import atomic_write_text

    out_dir.mkdir(parents=True, exist_ok=True)
    used_file = out_dir / "time_used.json"
    used_before = json.loads(used_file.read_text())["seconds"] if used_file.is_file() else 0.0
    start = time.monotonic() - used_before
    budget = cfg.time_budget_s
    shards = out_dir / "episodes"
    shards.mkdir(exist_ok=True)
    todo = [(cfg, i, str(shards / f"{i:04d}.npz")) for i in range(cfg.episodes)
            if not (shards / f"{i:04d}.npz").is_file()]
    log.info("collection: %d of %d episodes done, %d to go", cfg.episodes - len(todo), cfg.episodes, len(todo))
    _run_pool(cfg, _collect_worker, todo, start + budget * cfg.collect_budget_frac, "collection", progress)
    atomic_write_text(used_file, json.dumps({"seconds": time.monotonic() - start}))
    collect_s = time.monotonic() - start
    paths = sorted(shards.glob("*.npz"))
    demos = load_shards(paths)
    torch.set_num_threads(cfg.torch_threads)
    critic, losses = train_critic(demos, epochs=cfg.epochs, hidden=cfg.hidden, learning_rate=cfg.learning_rate,
                                  seed=cfg.seed)
    path = out_dir / "critic.pt"
    meta = {**settings_meta(cfg), "agent_checkpoint": cfg.checkpoint, "margin_jobs": 0.0,
            "episodes": len(paths), "decisions": int(len(demos["scores"]))}
    save_critic(path, critic, meta)
    tasks = [(cfg, i, None, 0.0) for i in range(cfg.val_conditions)]
    tasks += [(cfg, i, str(path), m) for m in cfg.margins for i in range(cfg.val_conditions)]
    got = _run_pool(cfg, _validate_worker, tasks, start + budget, "margin search", progress)
    table: dict[str, dict[int, float]] = {}
    for i, critic_path, margin, blocking in got:
        table.setdefault("agent" if critic_path is None else f"{margin:g}", {})[i] = blocking
    full = [k for k, v in table.items() if len(v) == cfg.val_conditions]
    means = {k: float(np.mean(list(table[k].values()))) for k in full}
    margins = {k: means[k] for k in full if k != "agent"}
    best = min(margins, key=lambda k: (margins[k], -float(k))) if margins else None
    helps = best is not None and ("agent" not in means or margins[best] < means["agent"])
    meta |= {"margin_jobs": float(best) if best is not None else max(cfg.margins),
             "validation_blocking": means, "helps_on_validation": bool(helps)}
    save_critic(path, critic, meta)
    per_condition = [{"overrides": episode_overrides(cfg, VAL_INDEX_BASE + i), "seed": VAL_SEED_BASE + i,
                      **{k: table[k].get(i) for k in sorted(table)}} for i in range(cfg.val_conditions)]
    summary = {"episodes": len(paths), "decisions": int(len(demos["scores"])), "collect_s": collect_s,
               "total_s": time.monotonic() - start, "fit_losses": losses, **{k: meta[k] for k in (
                   "margin_jobs", "validation_blocking", "helps_on_validation")},
               "validation_per_condition": per_condition}
    atomic_write_text(out_dir / "train_summary.json", json.dumps(summary, indent=2))
    atomic_write_text(used_file, json.dumps({"seconds": time.monotonic() - start}))
    log.info("adaptive critic: %d decisions from %d episodes; validation blocking %s; margin %s; %s",
             summary["decisions"], len(paths), {k: round(v, 4) for k, v in means.items()}, meta["margin_jobs"], path)
    if not helps:
        log.warning("the critic did not beat the agent alone on the validation conditions")
    return summary


# ---------------------------------------------------------------------------- the console command
PROG = "pacml-train-adaptive-critic"


def command() -> Any:
    """What ``pacml-train-adaptive-critic``'s config holds, for the one check before any work."""
    from simulator.cli import HydraCommand, _override_keys
    from simulator.schema import MAX_SEED, Rule, dataclass_rules, validate_config

    count, positive = Rule(int, low=1), Rule(float, low=0.0, low_open=True)
    frac = Rule(float, low=0.0, low_open=True, high=1.0)
    ranges = {"num_servers": Rule(int, low=2), "episodes": count, "jobs_per_episode": Rule(int, low=20),
              "plan_frac": frac, "window_jobs": count, "num_futures": count,
              "core_frac": Rule(float, low=0.0, high=1.0), "seed": Rule(int, low=0, high=MAX_SEED),
              "shadow_rules": Rule(int, low=0), "workers": count, "time_budget_s": positive,
              "collect_budget_frac": frac, "epochs": count, "hidden": count, "learning_rate": positive,
              "margins": Rule(list[float], low=0.0, non_empty=True), "val_conditions": count,
              "torch_threads": count, "checkpoint": Rule(str, non_empty=True)}
    keys = {"progress": Rule(bool), **dataclass_rules("critic", CriticTrainConfig, ranges)}

    class _Command(HydraCommand):
        def validate(self, cfg: Any, overrides: Any) -> Any:
            return validate_config(cfg, keys=self.keys, plugins=(), given=_override_keys(overrides))

    return _Command(PROG, "train_adaptive_critic", keys=keys, plugins=())


def main() -> None:
    """Console entry point (``pacml-train-adaptive-critic``)."""
    import sys

    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from simulator.cli import preflight, report_user_errors
    from workloads.io import atomic_write_text

    cmd = command()

    @hydra.main(version_base=None, config_path="pkg://conf", config_name="train_adaptive_critic")
    def _hydra_main(cfg: Any) -> None:
        hc = HydraConfig.get()
        out_dir = Path(hc.runtime.output_dir)

        def body() -> None:
            checked = cmd.validate(cfg, list(hc.overrides.task))
            data = OmegaConf.to_container(checked.critic, resolve=True)
            assert isinstance(data, dict)
            atomic_write_text(out_dir / "train_config.yaml", OmegaConf.to_yaml(checked, resolve=True))
            train(CriticTrainConfig(**data), out_dir, progress=bool(checked.get("progress", True)))  # type: ignore[arg-type]

        report_user_errors(PROG, body)

    preflight(cmd, sys.argv[1:])
    _hydra_main()


__all__ = ["COLLECT_SEED_BASE", "CollectSettings", "CriticTrainConfig", "main", "train", "collect_episode", "episode_overrides", "load_shards",
           "observation", "settings_meta"]
