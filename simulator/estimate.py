"""Before any work: about how long an episode will run and how much memory it will need.

A cost model fitted to ``benchmarks/sim/bench_scale.py``: per decision, a policy's own cost plus
a cost growing with the cluster, and memory of the interpreter, caches, torch and the cluster.
Rough (off by up to 8x): enough to refuse a run of hours or of more memory than the machine has
(docs/scale.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Per-decision wall seconds ``(fixed, per server)`` of each policy class on one core, fitted to
#: the scale benchmark (physical scenario, paper graphs, Poisson arrivals, streamed results).
POLICY_COST_S: dict[str, tuple[float, float]] = {
    "ParaMax": (9.0e-5, 6.0e-9),
    "ParaMin": (1.2e-4, 1.0e-8),
    "RandomPolicy": (2.0e-4, 1.9e-8),
    "FixedDegree": (9.0e-5, 6.0e-9),
    "Sequential": (9.0e-5, 6.0e-9),
    "MinFeasible": (1.2e-4, 1.9e-8),
    "PacMLBetaPolicy": (5.0e-4, 6.0e-7),
    "PacMLCriticPolicy": (8.0e-4, 9.0e-7),
    "RolloutLookahead": (0.3, 1.1e-4),
}
#: A policy this table does not know (a user's plug-in) is assumed to cost what min_feasible does.
DEFAULT_POLICY_COST_S = POLICY_COST_S["MinFeasible"]
#: Op-level first fit (``sim.placement=op_first_fit``) searches free blocks for every op, not once
#: per job: its per-server cost is this many times the block mode's.
OP_FIRST_FIT_FACTOR = 50.0

#: Interpreter, numpy, SimPy and the graphs, plus the bounded placement and lookahead caches.
BASE_MEMORY_BYTES = 1.0e9
#: A policy that loads torch (``pacml.*``).
TORCH_MEMORY_BYTES = 450e6
#: Per server: coordinates, per-server arrays, occupancy and the running jobs it can hold.
PER_SERVER_MEMORY_BYTES = 500.0


@dataclass(frozen=True)
class RunEstimate:
    """What one episode is expected to cost: wall seconds per decision and in all (``None`` with
    ``arrivals`` unknown, e.g. a trace replay), peak memory, for the policy class assumed."""

    arrivals: float | None
    per_job_s: float
    wall_s: float | None
    memory_bytes: float
    num_servers: int
    policy: str


def _cluster_servers(cluster: Mapping[str, Any]) -> int | None:
    try:
        dims = [int(cluster.get(k, d)) for k, d in (("num_comm_groups", 4), ("num_racks_per_group", 4),
                                                     ("num_servers_per_rack", 2))]
    except (TypeError, ValueError):
        return None
    return math.prod(dims) if all(d >= 1 for d in dims) else None


def estimate_run(cfg: Mapping[str, Any], arrivals: float | None) -> RunEstimate | None:
    """The cost of the episode ``cfg`` describes (``None`` if the cluster is not a RAMP we can size)."""
    cluster = cfg.get("cluster")
    if not isinstance(cluster, Mapping):
        return None
    servers = _cluster_servers(cluster)
    if servers is None:
        return None
    policy = cfg.get("policy")
    target = str(policy.get("_target_", "")) if isinstance(policy, Mapping) else ""
    name = target.rsplit(".", 1)[-1]
    fixed_s, per_server_s = POLICY_COST_S.get(name, DEFAULT_POLICY_COST_S)
    sim = cfg.get("sim")
    if isinstance(sim, Mapping) and sim.get("placement") == "op_first_fit":
        per_server_s *= OP_FIRST_FIT_FACTOR
    per_job = fixed_s + per_server_s * servers
    uses_torch = target.startswith("pacml.") or "pacml." in str(policy)
    memory = BASE_MEMORY_BYTES + (TORCH_MEMORY_BYTES if uses_torch else 0.0) + PER_SERVER_MEMORY_BYTES * servers
    finite = arrivals is not None and math.isfinite(arrivals)
    return RunEstimate(arrivals=arrivals if finite else None, per_job_s=per_job,
                       wall_s=per_job * arrivals if finite else None,  # type: ignore[operator]
                       memory_bytes=memory, num_servers=servers, policy=name or "?")


def physical_memory_bytes() -> float | None:
    """RAM of this machine (``None`` if the OS does not say)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _per_decision(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds >= 1 else f"{seconds * 1e3:.3g} ms"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.2g} s"


def refusal(est: RunEstimate, max_hours: float | None, max_memory_gb: float | None) -> tuple[str, str] | None:
    """``(key, message)`` if the estimate exceeds a limit, else ``None``.

    ``max_memory_gb=None`` means 90 % of this machine's RAM; ``max_hours=None`` means no limit.
    """
    limit_gb = max_memory_gb
    if limit_gb is None:
        ram = physical_memory_bytes()
        limit_gb = None if ram is None else 0.9 * ram / 1e9
    if limit_gb is not None and est.memory_bytes / 1e9 > limit_gb:
        return ("max_estimated_memory_gb",
                f"this run would need about {est.memory_bytes / 1e9:.3g} GB ({est.num_servers:,} servers), "
                f"more than {limit_gb:.3g} GB{' (90% of this machine)' if max_memory_gb is None else ''}; "
                "use a smaller cluster, or raise max_estimated_memory_gb to run it anyway")
    if max_hours is not None and est.wall_s is not None and est.wall_s > max_hours * 3600:
        return ("max_estimated_hours",
                f"this episode would run for about {_duration(est.wall_s)} ({est.arrivals:,.0f} arrivals x "
                f"~{_per_decision(est.per_job_s)} per decision for policy {est.policy} on {est.num_servers:,} "
                f"servers; a rough estimate), more than max_estimated_hours={max_hours:g}; "
                "shorten horizon_s, or raise max_estimated_hours to run it anyway")
    return None
