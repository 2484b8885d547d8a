"""Distil the rollout planner around a trained agent into a deviation critic (``pacml distill``).

Two phases (docs/policies.md, "Deviation critic"): planner episodes on training seeds, one atomic
``.npz`` shard each (so a re-run resumes), in ``workers`` processes; then the critic
(:class:`pacml.critic.model.DeviationCritic`) fits the planner's expected blocked jobs per degree,
and its margin is picked on validation seeds, the agent alone included, so distillation never
ships a critic that validated worse than the agent it corrects.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing as mp
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from pacml.agent.env import TRAIN_SEED_LOW, ClusterEnv
from pacml.agent.features import server_features, take_features
from pacml.agent.policy import PacMLBetaPolicy, load_policy
from pacml.runfiles import write_metrics_csv
from simulator.build import build_simulation
from simulator.cli import HydraCommand, preflight, report_user_errors
from simulator.config import SIM_KEYS, SIM_PLUGINS, Rule, dataclass_rules
from simulator.errors import ConfigError
from simulator.policies.lookahead import RolloutLookahead
from workloads.io import atomic_write, atomic_write_json

log = logging.getLogger(__name__)

#: Distillation episodes use simulation seeds from here on (inside the training range).
DISTILL_SEED_BASE = TRAIN_SEED_LOW + 7_000_000


@dataclass
class DistillConfig:
    """Settings of one distillation run (``distill`` in ``conf/distill.yaml``, which comments each).

    ``seed`` offsets the episode seeds (``DISTILL_SEED_BASE + 1000 * seed + i``) and seeds the
    critic; ``time_budget_s`` stops the collection, and the critic fits what was collected.
    """

    checkpoint: str = "paper_betaD"
    episodes: int = 24
    workers: int = 2
    window_jobs: int = 100
    num_futures: int = 32
    margin_jobs: float = 0.25
    seed: int = 0
    eval_seeds: list[int] = field(default_factory=lambda: list(range(500000, 500016)))
    time_budget_s: float | None = 2100.0
    torch_threads: int = 1
    demos_dir: str | None = None
    critic_epochs: int = 25
    critic_hidden: int = 128
    critic_margins: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.25, 0.5])


# ---------------------------------------------------------------------------------- phase 1
def _planner(cfg: DistillConfig) -> RolloutLookahead:
    agent = PacMLBetaPolicy(cfg.checkpoint)
    return RolloutLookahead(agent, window_jobs=cfg.window_jobs, num_futures=cfg.num_futures,
                            margin_jobs=cfg.margin_jobs, seed=cfg.seed)


def collect_episode(sim_config: DictConfig, cfg: DistillConfig, sim_seed: int, path: Path) -> dict[str, float]:
    """Run one planner episode on ``sim_seed`` and write its demonstrations to ``path`` (npz)."""
    import torch  # lazy: torch

    torch.set_num_threads(cfg.torch_threads)
    planner = _planner(cfg)
    agent = planner.default
    assert isinstance(agent, PacMLBetaPolicy)
    env = ClusterEnv(sim_config, mask=agent.encoder.mask, placement_candidates=agent.encoder.placement_candidates)
    if agent.encoder.placement_candidates:
        raise ValueError("distillation supports degree-only agents (placement_candidates=0)")
    planner.bind(env.workload)
    planner.reset(sim_seed)
    env.reset(options={"sim_seed": sim_seed})
    n_actions = env.action_space.n
    steps: list[dict[str, Any]] = []
    enc = agent.encoder
    terminated, info = False, {}
    while not terminated:
        raw = env.raw_observation
        job, state = env.current_job, env.current_state()
        decision = planner.decide(job, state)
        agent_action = int(torch.argmax(agent.probabilities(job, raw)))  # what the agent alone does
        row = np.full(n_actions, np.nan, dtype=np.float32)
        for degree, score in planner.last_scores.items():
            row[degree] = score
        steps.append({"graph_key": raw["graph"].key, "globals": raw["globals"], "actions": raw["actions"],
                      "mask": raw["action_mask"], "action": decision.degree, "agent_action": agent_action,
                      "scores": row, "servers": server_features(state, enc.fallback_interarrival_s),
                      "take": take_features(state, enc.max_degree, enc.fallback_interarrival_s)})
        _, _, terminated, _, info = env.step(decision.degree)
    data = {k: np.array([s[k] for s in steps], dtype=np.int64 if k in ("action", "agent_action") else None)
            for k in steps[0]}

    def write(fh: Any) -> None:
        np.savez_compressed(fh, **data)

    atomic_write(path, write)
    summary = info["summary"]
    return {"seed": sim_seed, "decisions": len(steps), "changed": int(np.sum(data["action"] != data["agent_action"])),
            "blocking_rate": float(summary["blocking_rate"])}


def _collect_worker(args: tuple[dict, dict, int, str]) -> dict[str, float]:
    sim_dict, cfg_dict, sim_seed, path = args
    return collect_episode(OmegaConf.create(sim_dict), DistillConfig(**cfg_dict), sim_seed, Path(path))


def collect(sim_config: DictConfig, cfg: DistillConfig, out_dir: Path, progress: bool = True) -> list[Path]:
    """Collect ``cfg.episodes`` planner episodes into ``out_dir/demos`` (existing shards are kept)."""
    demo_dir = out_dir / "demos"
    demo_dir.mkdir(parents=True, exist_ok=True)
    seeds = [DISTILL_SEED_BASE + 1000 * cfg.seed + i for i in range(cfg.episodes)]
    paths = {s: demo_dir / f"episode_{s}.npz" for s in seeds}
    todo = [s for s in seeds if not paths[s].exists()]
    if len(todo) < len(seeds):
        log.info("resuming: %d of %d episodes already collected", len(seeds) - len(todo), len(seeds))
    sim_dict = OmegaConf.to_container(sim_config, resolve=True)
    jobs = [(sim_dict, asdict(cfg), s, str(paths[s])) for s in todo]
    start = time.perf_counter()
    log_path = out_dir / "demos.jsonl"
    bar = tqdm(total=len(seeds), initial=len(seeds) - len(todo), disable=not progress, unit="episode",
               desc="planner episodes")
    def done(stats: dict[str, float]) -> bool:
        with log_path.open("a") as fh:
            fh.write(json.dumps(stats) + "\n")
        bar.update(1)
        bar.set_postfix(block=f"{stats['blocking_rate']:.3f}", changed=stats["changed"])
        over = cfg.time_budget_s is not None and time.perf_counter() - start > cfg.time_budget_s
        if over:
            log.info("collection time budget reached; imitating what was collected")
        return over

    if jobs and cfg.workers <= 1:
        for job in jobs:
            if done(_collect_worker(job)):
                break
    elif jobs:
        ctx = mp.get_context("spawn")  # fresh interpreters: no forked torch thread pools
        with ctx.Pool(min(cfg.workers, len(jobs))) as pool:
            for stats in pool.imap_unordered(_collect_worker, jobs):
                if done(stats):
                    pool.terminate()
                    break
    bar.close()
    return [p for p in paths.values() if p.exists()]


def load_demos(paths: list[Path]) -> dict[str, np.ndarray]:
    """Concatenate demonstration shards."""
    if not paths:
        raise ValueError("no demonstration episodes collected")
    shards = [dict(np.load(p)) for p in sorted(paths)]
    return {k: np.concatenate([s[k] for s in shards]) for k in shards[0]}


# ---------------------------------------------------------------------------------- phase 2
def fit_critic(sim_config: DictConfig, cfg: DistillConfig, demos: dict[str, np.ndarray], out_dir: Path,
               progress: bool = True) -> dict[str, Any]:
    """Train the deviation critic and pick its margin on the validation seeds.

    Writes ``critic.pt`` (with the agent's checkpoint and the chosen margin in its metadata, so
    ``policy=pacml_critic policy.critic=...`` needs nothing else) and ``critic_metrics.csv``.
    """
    import torch  # lazy: torch

    from pacml.critic.model import save_critic, train_critic  # lazy: torch
    from pacml.critic.policy import PacMLCriticPolicy  # lazy: torch

    torch.set_num_threads(cfg.torch_threads)
    agent = PacMLBetaPolicy(cfg.checkpoint)
    critic, losses = train_critic(demos, epochs=cfg.critic_epochs, hidden=cfg.critic_hidden, seed=cfg.seed)
    env = ClusterEnv(sim_config, mask=agent.encoder.mask)
    rows: list[dict[str, Any]] = []
    candidates = [math.inf, *sorted(cfg.critic_margins)]
    for margin in tqdm(candidates, disable=not progress, desc="critic margins", unit="margin"):
        policy = PacMLCriticPolicy(critic_model=critic, agent=agent, margin_jobs=margin)
        rates, changed = [], []
        for seed in cfg.eval_seeds:
            sim = build_simulation(sim_config, seed=seed, feasibility=env.feasibility, workload=env.workload)
            rates.append(sim.run(policy).summary["blocking_rate"])
            changed.append(policy.stats["changed"])
        rows.append({"margin_jobs": margin, "val_blocking_rate": float(np.mean(rates)),
                     "changed_per_episode": float(np.mean(changed))})
        log.info("margin %s: validation %.4f, %.1f decisions changed per episode", margin, rows[-1]["val_blocking_rate"],
                 rows[-1]["changed_per_episode"])
    write_metrics_csv(out_dir / "critic_metrics.csv", rows)
    best = min(rows, key=lambda r: (r["val_blocking_rate"], -r["margin_jobs"]))  # ties: the larger margin
    n = len(demos["action"])
    changed_demo = int(np.sum(demos["action"] != demos["agent_action"]))
    save_critic(out_dir / "critic.pt", critic, {
        "agent_checkpoint": cfg.checkpoint, "margin_jobs": best["margin_jobs"],
        "val_blocking_rate": best["val_blocking_rate"], "agent_val_blocking_rate": rows[0]["val_blocking_rate"],
        "distill": {**asdict(cfg), "decisions": n, "changed": changed_demo}, "losses": losses})
    summary = {"decisions": n, "changed": changed_demo, "start_val_blocking_rate": rows[0]["val_blocking_rate"],
               "best_val_blocking_rate": best["val_blocking_rate"],
               "margin_jobs": None if math.isinf(best["margin_jobs"]) else best["margin_jobs"],
               "critic_final_loss": losses[-1] if losses else None}
    atomic_write_json(out_dir / "distill_summary.json", summary)
    return summary


def distill(sim_config: DictConfig, cfg: DistillConfig, out_dir: Path, progress: bool = True) -> dict[str, Any]:
    """Both phases; returns the summary (also written to ``distill_summary.json``)."""
    start = time.perf_counter()
    if cfg.demos_dir is not None:
        paths = sorted(Path(cfg.demos_dir).glob("episode_*.npz"))
        if not paths:
            raise ConfigError(f"{cfg.demos_dir}: no demonstration shards (episode_*.npz)", field="distill.demos_dir")
        log.info("fitting on %d episodes from %s", len(paths), cfg.demos_dir)
    else:
        paths = collect(sim_config, cfg, out_dir, progress)
    collect_s = time.perf_counter() - start
    summary = fit_critic(sim_config, cfg, load_demos(paths), out_dir, progress)
    summary.update({"episodes": len(paths), "collect_wall_s": collect_s, "wall_s": time.perf_counter() - start})
    atomic_write_json(out_dir / "distill_summary.json", summary)
    return summary


# ---------------------------------------------------------------------------------- CLI
PROG = "pacml distill"


def distill_from_config(cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
    """Run :func:`distill` from a composed ``conf/distill.yaml`` (re-running in the same
    directory resumes the collection)."""
    data = OmegaConf.to_container(cfg.distill, resolve=True)
    assert isinstance(data, dict)
    unknown = set(data) - set(DistillConfig.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"unknown keys {sorted(unknown)}", field="distill")
    dcfg = DistillConfig(**data)  # type: ignore[arg-type]
    load_policy(dcfg.checkpoint, field="distill.checkpoint")  # fail before any work, naming this command's key
    sim_cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k not in ("distill", "hydra", "progress")])
    (out_dir / "distill_config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    summary = distill(sim_cfg, dcfg, out_dir, progress=bool(cfg.get("progress", True)))
    log.info("distilled %d decisions (%d changed by the planner): validation %.4f -> %.4f; %s",
             summary["decisions"], summary["changed"], summary["start_val_blocking_rate"],
             summary["best_val_blocking_rate"], out_dir / "critic.pt")
    return summary


def command() -> Any:
    """What ``pacml distill``'s config holds, for the one check before any work (simulator/config.py)."""
    count = Rule(int, low=1)
    ranges = {
        "checkpoint": Rule(str, non_empty=True), "episodes": count, "workers": count, "window_jobs": count,
        "num_futures": count, "margin_jobs": Rule(float, low=0.0), "seed": Rule(int, low=0),
        "eval_seeds": Rule(list[int], low=0, non_empty=True),
        "time_budget_s": Rule(float | None, low=0.0, low_open=True), "torch_threads": count,
        "demos_dir": Rule(str | None, non_empty=True),
        "critic_epochs": count, "critic_hidden": count, "critic_margins": Rule(list[float], low=0.0, non_empty=True),
    }
    return HydraCommand(PROG, "distill", keys={**SIM_KEYS, **dataclass_rules("distill", DistillConfig, ranges)},
                        plugins=SIM_PLUGINS)


def main() -> None:
    """Console entry point (``pacml distill``)."""
    cmd = command()

    @hydra.main(version_base=None, config_path="pkg://conf", config_name="distill")
    def _hydra_main(cfg: DictConfig) -> None:
        hc = HydraConfig.get()
        out = Path(hc.runtime.output_dir)
        report_user_errors(PROG, lambda: distill_from_config(cmd.validate(cfg, list(hc.overrides.task)), out))

    preflight(cmd, sys.argv[1:])
    _hydra_main()


if __name__ == "__main__":
    main()
