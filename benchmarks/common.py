"""What the benchmark scripts share: their command line, episodes on shared simulator parts, results files.

A script imports it by putting ``benchmarks/`` on ``sys.path`` first (``benchmarks/`` is not a package).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pacml.agent.env import compose_sim_config
from simulator.build import (
    build_feasibility,
    build_policy,
    build_simulation,
    build_topology,
    build_workload,
)
from workloads.io import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]


def ints(text: str) -> list[int]:
    """``"0,1,2"`` as ``[0, 1, 2]``."""
    return [int(s) for s in text.split(",")]


def parser(doc: str, seeds: str | None = None) -> argparse.ArgumentParser:
    """A command line described by the first line of ``doc``, with ``--json PATH`` and, given a
    default, ``--seeds 0,1,2`` (parsed to a list of ints)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    if seeds is not None:
        p.add_argument("--seeds", type=ints, default=seeds)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    return p


def save(path: Path | None, results: Any) -> None:
    """``results`` as indented JSON into ``path`` (nothing without one)."""
    if path is not None:
        atomic_write_json(path, results)


class Episodes:
    """A simulator config whose feasibility engine and workload are built once, shared by every episode."""

    def __init__(self, overrides: Sequence[str]) -> None:
        self.overrides = list(overrides)
        self.cfg = compose_sim_config(self.overrides)
        self.feasibility = build_feasibility(build_topology(self.cfg), self.cfg.sim)
        self.workload = build_workload(self.cfg)

    def policy(self, *overrides: str) -> Any:
        """The policy of this config plus ``overrides`` (e.g. ``policy=para_max``)."""
        return build_policy(compose_sim_config([*self.overrides, *overrides]))

    def run(self, policy: Any, seed: int) -> dict[str, Any]:
        """The summary of one episode of ``policy``."""
        sim = build_simulation(self.cfg, seed=seed, feasibility=self.feasibility, workload=self.workload)
        return sim.run(policy).summary

    def blocking(self, policy: Any, seeds: Iterable[int]) -> list[float]:
        """The blocking rate of ``policy`` on each seed."""
        return [self.run(policy, seed)["blocking_rate"] for seed in seeds]
