"""Pre-training the learned placer on many (graph, device preset, objective) tasks, with exact
resume and a whole-run time budget; what the run directory holds: docs/learned-placer.md
("Training").
"""

from __future__ import annotations

import io
import logging
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from pacml.placer.checkpoint import save_placer
from pacml.placer.decode import decode
from pacml.placer.model import NetConfig, PlacerNet
from pacml.placer.ppo import (
    PPOSettings,
    Task,
    advantages,
    evaluate_rollout,
    greedy_value,
    ppo_update,
)
from pacml.runfiles import (
    CHECKPOINT,
    PREVIOUS_CHECKPOINT,
    load_torch_file,
    write_checkpoint,
    write_metrics_csv,
)
from simulator.errors import ConfigError
from simulator.place.devices import DeviceSet
from simulator.place.objectives import bind_objective
from workloads.compute_graph import ComputeGraph
from workloads.io import atomic_write, atomic_write_json

log = logging.getLogger(__name__)


class PlacerTrainer:
    """PPO pre-training over a pool of (graph, devices, objective) tasks.

    Args:
        graphs: Pre-training graphs ``(name, graph)``.
        devices: Device sets ``(name, DeviceSet or None)``; ``None`` means a graph's own device set
            (dnn-partitioning files), skipped for graphs without one.
        seed: Seed of the task draws, the samples and the initial weights.
        time_budget_s: Wall-time budget of the whole run over all sessions (``None``: no limit).
        max_updates: Stop after this many updates (``None``: no limit).
        started_at: ``perf_counter()`` the session's time counts from (default: now).
    """

    def __init__(self, graphs: list[tuple[str, ComputeGraph]], devices: list[tuple[str, DeviceSet | None]],
                 objectives: list[str], *, net: NetConfig, ppo: PPOSettings, out_dir: str | Path, seed: int = 0,
                 time_budget_s: float | None = None, max_updates: int | None = None, validate_every: int = 25,
                 validation_tasks: int = 12, checkpoint_every: int = 25, started_at: float | None = None) -> None:
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.graphs = dict(graphs)
        self.keys: list[tuple[str, str, str]] = []
        self.device_sets: dict[str, DeviceSet | None] = dict(devices)
        for gname, graph in graphs:
            for dname, dset in devices:
                if dset is None and "max_accelerators" not in graph.meta:
                    continue
                for obj in objectives:
                    self.keys.append((gname, dname, obj))
        if not self.keys:
            raise ConfigError("no task: no pre-training graph brings its own device set (only dnn-partitioning "
                              "graphs do, with corpus.real=true); name a device preset too", field="presets")
        self.net_config, self.ppo = net, ppo
        self.seed = seed
        torch.manual_seed(seed)
        self.net = PlacerNet(net)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=ppo.learning_rate)
        self.rng = np.random.default_rng(seed)
        val_rng = np.random.default_rng([seed, 1])
        pick = val_rng.choice(len(self.keys), size=min(validation_tasks, len(self.keys)), replace=False)
        self.validation = [self.keys[i] for i in sorted(pick.tolist())]
        self.time_budget_s, self.max_updates = time_budget_s, max_updates
        self.validate_every, self.checkpoint_every = validate_every, checkpoint_every
        self.update = 0
        self.evaluations = 0
        self.elapsed_s = 0.0
        self.best_val = math.inf
        self.history: list[dict[str, float]] = []
        self._tasks: dict[tuple[str, str, str], Task] = {}
        self._session_start = time.perf_counter() if started_at is None else started_at
        self._origin = self._session_start
        self._writer = None
        self._checkpoint_good = False

    # ------------------------------------------------------------------ tasks
    def task(self, key: tuple[str, str, str]) -> Task:
        """The task of ``(graph, devices, objective)``, built on first use."""
        task = self._tasks.get(key)
        if task is None:
            gname, dname, obj = key
            graph = self.graphs[gname]
            dset = self.device_sets[dname] or DeviceSet.for_dnn_partitioning(graph.meta)
            task = Task.build(f"{gname}/{dname}/{obj}", bind_objective(obj, graph, dset), order_by=self.net.config.order)
            self._tasks[key] = task
        return task

    def elapsed(self) -> float:
        """Wall time of the run over all sessions so far."""
        return time.perf_counter() - self._origin

    @property
    def writer(self):
        """TensorBoard writer (created on first use)."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter  # lazy: tensorboard
            self._writer = SummaryWriter(str(self.out / "tb"))
        return self._writer

    # ------------------------------------------------------------------ one update
    def step(self) -> dict[str, float]:
        """Draw tasks, sample placements, take one PPO update; returns the update's statistics."""
        picks = self.rng.choice(len(self.keys), size=min(self.ppo.tasks_per_update, len(self.keys)), replace=False)
        batch = []
        ratios = []
        for i in sorted(picks.tolist()):
            task = self.task(self.keys[i])
            rollout = decode(task.problem, self.net.scorer_weights(task.problem), batch=self.ppo.batch, rng=self.rng)
            values = evaluate_rollout(task, rollout)
            self.evaluations += len(values)
            rewards = task.rewards(values, self.ppo.infeasible_reward)
            batch.append((task, rollout, advantages(rewards)))
            finite = values[np.isfinite(values)]
            ratios.append(float(finite.mean() / task.reference_s) if len(finite) else math.nan)
        stats = ppo_update(self.net, self.optimizer, batch, self.ppo)
        self.update += 1
        return {"sample_ratio": float(np.nanmean(ratios)) if not all(map(math.isnan, ratios)) else math.nan, **stats}

    def validate(self) -> dict[str, float]:
        """Greedy (zero-shot) value over the validation tasks, relative to each task's reference."""
        ratios = []
        for key in self.validation:
            task = self.task(key)
            value, _ = greedy_value(self.net, task)
            ratios.append(value / task.reference_s if math.isfinite(value) else 10.0)
        return {"val_ratio": float(np.mean(ratios)), "val_worst": float(np.max(ratios))}

    # ------------------------------------------------------------------ the loop
    def remaining_work(self) -> str | None:
        """Why this run is finished (update cap or budget reached), or ``None``."""
        if self.max_updates is not None and self.update >= self.max_updates:
            return f"max_updates={self.max_updates} reached"
        if self.time_budget_s is not None and self.elapsed() >= self.time_budget_s:
            return f"time_budget_s={self.time_budget_s:g} used"
        return None

    def train(self, progress: bool = True) -> dict[str, Any]:
        """Train until the update cap or the time budget; checkpoint, validate and log on the way."""
        bar = tqdm(total=self.max_updates, initial=self.update, disable=not progress, unit="update",
                   desc="pacml-train-placer", dynamic_ncols=True)
        recent: list[float] = []
        try:
            while self.remaining_work() is None:
                # Leave room for one more update, the last checkpoint and validation inside the
                # budget; the typical update (median of the recent ones) is the measure, since
                # the first visits to tasks are slow (their baselines are computed then).
                typical_s = float(np.median(recent[-20:])) if recent else 0.0
                if self.time_budget_s is not None and self.update > 0 and \
                        self.elapsed() + 2.0 * typical_s + 3.0 > self.time_budget_s:
                    log.info("stopping at update %d: %.0f s of time_budget_s=%g used, too little left for "
                             "another update (%.1f s) and the final validation", self.update, self.elapsed(),
                             self.time_budget_s, typical_s)
                    break
                t0 = time.perf_counter()
                row: dict[str, float] = {"update": self.update + 1}
                row.update(self.step())
                last_update_s = time.perf_counter() - t0
                recent.append(last_update_s)
                if self.update % self.validate_every == 0:
                    row.update(self._validate())
                row.update({"evaluations": self.evaluations, "wall_s": self.elapsed(), "update_s": last_update_s})
                self._log(row)
                bar.update(1)
                bar.set_postfix(val=f"{self.best_val:.4f}", sample=f"{row.get('sample_ratio', math.nan):.3f}")
                if self.update % self.checkpoint_every == 0:
                    self.save_checkpoint()
        finally:
            bar.close()
        if self.history and "val_ratio" not in self.history[-1] and self.history[-1]["update"] == self.update:
            # The last update gets its validation in its own row (no second row for one update).
            self.history[-1].update(self._validate())
            self._log(self.history.pop())
        elif not self.history:
            self._log({"update": self.update, **self._validate(), "evaluations": self.evaluations,
                       "wall_s": self.elapsed()})
        self.save_checkpoint()
        summary = self.summary()
        atomic_write_json(self.out / "train_summary.json", summary)
        self._plot_curve()
        if self._writer is not None:
            self._writer.flush()
        return summary

    def _validate(self) -> dict[str, float]:
        stats = self.validate()
        if stats["val_ratio"] < self.best_val:
            self.best_val = stats["val_ratio"]
            save_placer(self.out / "placer.pt", self.net, self._meta())
        return stats

    def summary(self) -> dict[str, Any]:
        """What ``train_summary.json`` holds."""
        return {"updates": self.update, "evaluations": self.evaluations, "wall_s": round(self.elapsed(), 1),
                "best_val_ratio": self.best_val, "tasks": len(self.keys), "tasks_built": len(self._tasks),
                "graphs": len(self.graphs), "validation": ["/".join(k) for k in self.validation],
                "net": asdict(self.net_config), "ppo": asdict(self.ppo)}

    def _meta(self) -> dict[str, Any]:
        return {"update": self.update, "evaluations": self.evaluations, "val_ratio": self.best_val,
                "wall_s": round(self.elapsed(), 1), "graphs": sorted(self.graphs),
                "devices": sorted(self.device_sets), "objectives": sorted({k[2] for k in self.keys})}

    def _log(self, row: dict[str, float]) -> None:
        self.history.append(row)
        for key, value in row.items():
            if key != "update" and isinstance(value, float | int) and value == value:
                self.writer.add_scalar(f"placer/{key}", value, int(row["update"]))
        write_metrics_csv(self.out / "metrics.csv", self.history)

    def _plot_curve(self) -> None:
        """``curve.png``: sampled and validation (greedy) value relative to the reference, per update."""
        import matplotlib  # lazy: matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: matplotlib (after use("Agg"))

        fig, ax = plt.subplots(figsize=(6, 3.5))
        upd = [r["update"] for r in self.history if "sample_ratio" in r]
        ax.plot(upd, [r["sample_ratio"] for r in self.history if "sample_ratio" in r], lw=0.8, alpha=0.6,
                label="sampled placements (training tasks)")
        val = [(r["update"], r["val_ratio"]) for r in self.history if "val_ratio" in r]
        if val:
            ax.plot(*zip(*val, strict=True), marker="o", ms=3, label="greedy, validation tasks")
        ax.axhline(1.0, color="grey", ls="--", lw=0.8, label="reference (best of HEFT, single device)")
        ax.set_xlabel("PPO update")
        ax.set_ylabel("value / reference")
        ax.legend(fontsize=8)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=120)
        plt.close(fig)
        atomic_write(self.out / "curve.png", lambda fh: fh.write(buf.getvalue()))

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this trainer is."""
        return {"format": "pacml-train-placer", "version": 1, "update": self.update,
                "evaluations": self.evaluations, "elapsed_s": self.elapsed(), "best_val": self.best_val,
                "history": self.history, "model": self.net.state_dict(), "optimizer": self.optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(), "np_rng": self.rng.bit_generator.state,
                "keys": self.keys, "net": asdict(self.net_config), "ppo": asdict(self.ppo)}

    def save_checkpoint(self) -> Path:
        """Write ``checkpoint.pt`` atomically, keeping the one before as ``checkpoint.prev.pt``,
        and the current policy as ``placer_last.pt``."""
        path = write_checkpoint(self.out, self.state_dict(), keep_previous=self._checkpoint_good)
        self._checkpoint_good = True
        save_placer(self.out / "placer_last.pt", self.net, self._meta())
        return path

    def resume(self, target: str | Path) -> Path:
        """Restore from a run directory (or checkpoint file), falling back to ``checkpoint.prev.pt``.

        Raises:
            ConfigError: (field ``resume``) no usable checkpoint, or one of another run's tasks.
        """
        target = Path(target)
        first = target / CHECKPOINT if target.is_dir() else target
        problems = []
        for path in (first, first.parent / PREVIOUS_CHECKPOINT):
            if not path.is_file():
                problems.append(f"{path}: no such file")
                continue
            try:
                state = load_torch_file(path, "training checkpoint")
                if not isinstance(state, dict) or state.get("format") != "pacml-train-placer":
                    raise ValueError("not a pacml train-placer checkpoint")
                if [tuple(k) for k in state["keys"]] != self.keys:
                    raise ValueError("written by a run with other tasks (graphs, devices or objectives)")
                self.net.load_state_dict(state["model"])
                self.optimizer.load_state_dict(state["optimizer"])
                torch.set_rng_state(state["torch_rng"])
                self.rng.bit_generator.state = state["np_rng"]
            except Exception as exc:  # torch/pickle raise many types for a damaged file
                text = " ".join(str(exc).split())[:200]
                problems.append(text if text.startswith("cannot read") else f"{path}: {text}")
                continue
            self.update, self.evaluations = state["update"], state["evaluations"]
            self.elapsed_s, self.best_val, self.history = state["elapsed_s"], state["best_val"], state["history"]
            self._origin = self._session_start - self.elapsed_s
            self._checkpoint_good = path == first
            if problems:
                log.warning("resuming from the previous checkpoint %s: %s", path, "; ".join(problems))
            return path
        raise ConfigError(f"no usable checkpoint: {'; '.join(problems)}", field="resume")
