"""The op-placer plug-in interface, its shared helpers and the simplest baselines.

A placer is any object with ``place(objective, *, seed) -> PlacerResult`` (built from
``conf/method/<name>.yaml``); each ``objective.value`` call is one evaluation, and a group (an op
and its backward mirror; a colour class) stays on one device (:func:`expand_groups`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError
from simulator.place.objectives import BoundObjective


@dataclass
class PlacerResult:
    """What a placer returns.

    Attributes:
        placement: Device index of every node.
        evaluations: Objective evaluations used.
        wall_s: Wall time of the method.
        info: Method-specific facts for ``summary.json`` (e.g. DP states, MIP bound and gap).
    """

    placement: NDArray[np.int64]
    evaluations: int = 0
    wall_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Placer(Protocol):
    """Puts every node of a graph on a device."""

    name: str

    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """Return a placement for ``objective.graph`` on ``objective.devices``."""
        ...


def expand_groups(objective: BoundObjective, group_device: NDArray[np.int64]) -> NDArray[np.int64]:
    """Per-node placement from a per-group assignment (see :func:`runnable_groups` to repair
    groups put on a kind that cannot run them)."""
    return np.asarray(group_device, dtype=np.int64)[objective.graph.group]


def runnable_groups(objective: BoundObjective, group_device: NDArray[np.int64]) -> NDArray[np.int64]:
    """Move every group put on a device that cannot run one of its nodes (e.g. a node not
    supported on accelerators) to the first device that can run the whole group."""
    g = objective.graph
    group_device = np.array(group_device, dtype=np.int64)
    ok = np.ones((g.num_groups, objective.devices.num_devices), dtype=bool)
    np.logical_and.at(ok, g.group, np.isfinite(objective.time_s))
    bad = np.flatnonzero(~ok[np.arange(g.num_groups), group_device])
    for k in bad.tolist():
        runnable = np.flatnonzero(ok[k])
        if len(runnable):
            group_device[k] = runnable[0]
    return group_device


def accelerators(objective: BoundObjective) -> NDArray[np.int64]:
    """Indices of the devices that are not host CPUs (all devices if every one is a CPU)."""
    acc = np.flatnonzero(~objective.devices.is_cpu)
    return acc if len(acc) else np.arange(objective.devices.num_devices)


def check_int(value, key: str, *, low: int, allow_none: bool = False) -> int | None:
    """``value`` as an int ``>= low`` (or ``None`` if allowed); else a ConfigError naming ``method.key``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ConfigError(f"must be an integer >= {low}{' or null' if allow_none else ''}, got {value!r}",
                          field=f"method.{key}")
    return int(value)


def check_float(value, key: str, *, low: float, high: float = math.inf, low_open: bool = True) -> float:
    """``value`` as a finite float in the range; else a ConfigError naming ``method.key``."""
    ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) \
        and (value > low if low_open else value >= low) and value <= high
    if not ok:
        raise ConfigError(f"must be a number in {'(' if low_open else '['}{low:g}, {high:g}], got {value!r}",
                          field=f"method.{key}")
    return float(value)


def check_bool(value, key: str) -> bool:
    """``value`` if it is a bool; else a ConfigError naming ``method.key``."""
    if not isinstance(value, bool):
        raise ConfigError(f"must be true or false, got {value!r}", field=f"method.{key}")
    return value


@contextlib.contextmanager
def quiet_stdout():
    """Send file descriptor 1 to /dev/null for the duration (C libraries that print)."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def timed_place(place):
    """Decorator of a placer's ``place(objective, *, seed)``: :func:`timed` around it."""
    @functools.wraps(place)
    def timed_call(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        return timed(objective, lambda: place(self, objective, seed=seed))
    return timed_call


def timed(objective: BoundObjective, run) -> PlacerResult:
    """Run ``run()`` (returning a placement or a result) and fill in evaluations and wall time."""
    before = objective.evaluations
    t0 = time.perf_counter()
    out = run()
    result = out if isinstance(out, PlacerResult) else PlacerResult(np.asarray(out, dtype=np.int64))
    result.wall_s = time.perf_counter() - t0
    result.evaluations = objective.evaluations - before
    return result


class SingleDevicePlacer:
    """Everything on the one device that gives the best value and fits (the speed-up baseline)."""

    name = "single"

    @timed_place
    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """Try each device; keep the best feasible (or the first, if none fits)."""
        n = objective.graph.num_nodes
        best, best_value = 0, math.inf
        for d in range(objective.devices.num_devices):
            value = objective.value(np.full(n, d, dtype=np.int64))
            if value < best_value:
                best, best_value = d, value
        return PlacerResult(np.full(n, best, dtype=np.int64),
                            info={"device": objective.devices.names[best]})


class RoundRobinPlacer:
    """Groups dealt to the accelerators in turn (the CPUs too if there are only CPUs), in
    topological order of their first node."""

    name = "round_robin"

    @timed_place
    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """Deal the groups out one by one."""
        g = objective.graph
        rank = np.empty(g.num_groups, dtype=np.int64)  # of each group's first node in topological order
        rank[list(dict.fromkeys(int(g.group[v]) for v in g.topological_order))] = np.arange(g.num_groups)
        acc = accelerators(objective)
        return PlacerResult(expand_groups(objective, runnable_groups(objective, acc[rank % len(acc)])))


class RandomPlacer:
    """Each group on an accelerator (a CPU if there are only CPUs) drawn uniformly at random (seeded)."""

    name = "random"

    @timed_place
    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """Draw one device per group."""
        rng = np.random.default_rng(seed)
        acc = accelerators(objective)
        return PlacerResult(expand_groups(objective, runnable_groups(
            objective, acc[rng.integers(0, len(acc), objective.graph.num_groups)])))
