"""``method=learned``: the pre-trained GNN + PPO placer behind the common placer interface.

Modes ``greedy``, ``sample`` and ``finetune``, and coarsening of big graphs: docs/learned-placer.md
("Modes and big graphs").
"""

from __future__ import annotations

import copy
import logging
import math
import time
from typing import Any

import numpy as np
import torch

from pacml.placer.checkpoint import DEFAULT_PLACERS, load_placer, resolve_placer
from pacml.placer.decode import decode
from pacml.placer.model import PlacerNet
from pacml.placer.ppo import (
    PPOSettings,
    Task,
    advantages,
    evaluate_rollout,
    greedy_value,
    ppo_update,
)
from simulator.errors import ConfigError
from simulator.place.coarsen import CoarsenedPlacer
from simulator.place.objectives import BoundObjective
from simulator.place.placer import PlacerResult

MODES = ("greedy", "sample", "finetune")
_NETS: dict[str, tuple[PlacerNet, dict[str, Any]]] = {}
_WARNED: set[str] = set()
log = logging.getLogger(__name__)


def _positive_int(value: Any, key: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"must be an integer >= {low}, got {value!r}", field=f"method.{key}")
    return value


class LearnedPlacer:
    """The learned placer (see module docstring).

    Args:
        checkpoint: A ``placer.pt``, a ``pacml train-placer`` run directory or a shipped placer's name;
            ``None``: the shipped placer for the objective.
        mode: ``greedy`` | ``sample`` | ``finetune``.
        samples: Placements sampled in ``sample`` mode.
        max_evaluations: Evaluation budget of ``finetune`` (the greedy placement included; a
            coarsened graph's refinement has its own budget, ``refine_evaluations``).
        batch: Placements per fine-tuning update.
        learning_rate: Fine-tuning step size.
        epochs: Gradient steps per fine-tuning update.
        temperature: Divides the policy's logits when sampling and fine-tuning start (>= 1 explores more).
        max_groups: Coarsen graphs with more groups than this.
        refine_evaluations: Evaluations of the refinement after coarsening.
        threads: Torch threads.
    """

    name = "learned"

    def __init__(self, checkpoint: str | None = None, mode: str = "greedy", samples: int = 64,
                 max_evaluations: int = 1000, batch: int = 16, learning_rate: float = 3e-4, epochs: int = 4,
                 temperature: float = 4.0, max_groups: int = 2000, refine_evaluations: int = 200, threads: int = 1) -> None:
        if mode not in MODES:
            raise ConfigError(f"must be one of {', '.join(MODES)}, got {mode!r}", field="method.mode")
        if checkpoint is not None and (not isinstance(checkpoint, str) or not checkpoint):
            raise ConfigError(f"must be a path or a shipped placer's name, got {checkpoint!r}",
                              field="method.checkpoint")
        self.checkpoint, self.mode = checkpoint, mode
        self.samples = _positive_int(samples, "samples")
        self.max_evaluations = _positive_int(max_evaluations, "max_evaluations")
        self.batch = _positive_int(batch, "batch", 2)
        self.epochs = _positive_int(epochs, "epochs")
        self.max_groups = _positive_int(max_groups, "max_groups", 2)
        self.refine_evaluations = _positive_int(refine_evaluations, "refine_evaluations", 0)
        self.threads = _positive_int(threads, "threads")
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, int | float) or not learning_rate > 0:
            raise ConfigError(f"must be a number > 0, got {learning_rate!r}", field="method.learning_rate")
        self.learning_rate = float(learning_rate)
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 < temperature < math.inf:
            raise ConfigError(f"must be a finite number > 0, got {temperature!r}", field="method.temperature")
        self.temperature = float(temperature)

    def network(self, objective_name: str) -> tuple[PlacerNet, dict[str, Any], str]:
        """The policy network (loaded once per process), its training facts and its file."""
        path = resolve_placer(self.checkpoint, objective_name)
        key = str(path.resolve())
        if key not in _NETS:
            _NETS[key] = load_placer(path)
        net, meta = _NETS[key]
        return net, meta, str(path)

    def check(self, objective: BoundObjective) -> None:
        """Find and load the checkpoint for ``objective`` before any work (``pacml place`` runs this
        while checking its config, so a missing or damaged placer is refused before a run starts).

        Raises:
            ConfigError: (field ``method.checkpoint``) no placer there, or not a loadable one.
        """
        self.network(objective.name)

    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """Place ``objective.graph`` on ``objective.devices`` (see the modes)."""
        t0 = time.perf_counter()
        before = objective.evaluations
        torch.set_num_threads(self.threads)
        net, meta, path = self.network(objective.name)
        info: dict[str, Any] = {"checkpoint": path, "mode": self.mode, "checkpoint_update": meta.get("update")}
        trained = meta.get("objectives")
        if trained and objective.name not in trained and path not in _WARNED:
            _WARNED.add(path)
            log.warning("%s was trained on the %s objective, not %s: expect a weak placement (the shipped "
                        "default for %s is %s)", path, "/".join(trained), objective.name, objective.name,
                        DEFAULT_PLACERS.get(objective.name))
        if objective.graph.num_groups > self.max_groups:
            # HSDAG-style: place clusters of groups, then refine single groups on the fine graph.
            inner = copy.copy(self)
            inner.max_groups = objective.graph.num_groups + 1
            result = CoarsenedPlacer(inner=inner, max_groups=self.max_groups,
                                     refine_evaluations=self.refine_evaluations).place(objective, seed=seed)
            result.info = {**info, **result.info}
            return result
        task = Task.build(objective.graph.name, objective, reference_s=1.0, order_by=net.config.order)
        group_device, curve = self._place_task(net, task, seed)
        info["curve"] = curve
        result = PlacerResult(np.asarray(group_device, dtype=np.int64)[objective.graph.group], info=info)
        result.wall_s = time.perf_counter() - t0
        result.evaluations = objective.evaluations - before
        return result

    # ------------------------------------------------------------------ modes
    def _place_task(self, net: PlacerNet, task: Task, seed: int) -> tuple[np.ndarray, list[tuple[int, float]]]:
        """The best group placement of ``task`` under this mode, with its best-so-far curve."""
        problem = task.problem
        best_value, best = greedy_value(net, task)
        curve = [(1, best_value)]
        if self.mode == "greedy" or (problem.runnable.sum(axis=1) <= 1).all():
            return best, curve  # (every group has one device at most: nothing to search)
        rng = np.random.default_rng(seed)
        net = _tempered(net, self.temperature)
        if self.mode == "sample":
            left = self.samples
            weights = net.scorer_weights(problem)
            while left > 0:
                rollout = decode(problem, weights, batch=min(left, 64), rng=rng, keep=False)
                values = evaluate_rollout(task, rollout)
                left -= len(values)
                i = int(np.argmin(values))
                if values[i] < best_value:
                    best_value, best = float(values[i]), rollout.group_device[i]
                curve.append((curve[-1][0] + len(values), best_value))
            return best, curve
        # finetune: PPO on this task from the pre-trained weights.
        torch.manual_seed(seed)
        net.train()
        settings = PPOSettings(batch=self.batch, tasks_per_update=1, epochs=self.epochs,
                               learning_rate=self.learning_rate)
        optimizer = torch.optim.Adam(net.parameters(), lr=self.learning_rate)
        task.reference_s = best_value if math.isfinite(best_value) and best_value > 0 else 1.0
        used = 1
        while used < self.max_evaluations:
            n = min(self.batch, self.max_evaluations - used)
            rollout = decode(problem, net.scorer_weights(problem), batch=n, rng=rng, keep=n > 1)
            values = evaluate_rollout(task, rollout)
            used += n
            i = int(np.argmin(values))
            if values[i] < best_value:
                best_value, best = float(values[i]), rollout.group_device[i]
            curve.append((used, best_value))
            if n > 1:  # a last single sample is priced but teaches nothing (no baseline)
                ppo_update(net, optimizer, [(task, rollout, advantages(task.rewards(values, -3.0)))], settings)
        return best, curve


def _tempered(net: PlacerNet, temperature: float) -> PlacerNet:
    """A copy of ``net`` whose logits are divided by ``temperature`` (output layer and prior scaled)."""
    net = copy.deepcopy(net)
    with torch.no_grad():
        net.out.weight /= temperature
        net.out.bias /= temperature
        net.prior /= temperature
    return net
