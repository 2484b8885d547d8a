"""Typed per-job records, run summaries, and the files a run writes (``jobs.csv``, ``summary.json``)."""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from workloads.io import atomic_write_json, atomic_write_text

Outcome = Literal["completed", "blocked", "running", "unresolved"]
"""Each job has exactly one outcome. ``completed``: accepted and finished. ``blocked``: rejected,
unplaceable, over its target, or (``paper`` accounting) still running at the horizon. ``running``:
accepted, still running when a truncated run stopped. ``unresolved``: arrived exactly at the
horizon, never decided (``paper``). *Accepted* means completed or running, so
arrived = accepted + blocked + unresolved in every accounting."""

BlockReason = Literal["", "rejected", "no_placement", "jct_target", "running_at_horizon"]

NAN = float("nan")


@dataclass(frozen=True, slots=True)
class JobRecord:
    """Everything that happened to one job.

    Attributes:
        job_id: Index in the arrival stream.
        model: Graph name.
        arrival_time_s: Arrival time.
        beta: JCT target fraction.
        sequential_jct_s: JCT on one device without communication.
        max_jct_s: Target, ``beta x sequential_jct_s``.
        degree: Chosen partition degree (0 = rejected).
        num_servers: Servers of the job's placement (held if it ran; 0 if it could not be placed;
            may exceed ``degree`` under op-level first fit, spec §15.1).
        servers: Those servers as ``c-r-s`` ids separated by spaces.
        outcome: See :data:`Outcome`.
        block_reason: See :data:`BlockReason` (empty unless blocked).
        jct_s: Simulated JCT of the placement (``nan`` if never placed).
        start_time_s: When it started running (``nan`` if it did not).
        completion_time_s: When it finished (``nan`` unless completed).
        speedup: ``sequential_jct_s / jct_s``.
        demand_bytes: The unpartitioned job's op memory + dependency bytes (spec §9).
        cluster_bytes: The partitioned job's op memory + dependency bytes.
        busy_server_s: Server-seconds of compute over the whole job (all steps).
    """

    job_id: int
    model: str
    arrival_time_s: float
    beta: float
    sequential_jct_s: float
    max_jct_s: float
    degree: int
    num_servers: int
    servers: str
    outcome: Outcome
    block_reason: BlockReason
    jct_s: float
    start_time_s: float
    completion_time_s: float
    speedup: float
    demand_bytes: float
    cluster_bytes: float
    busy_server_s: float

    @property
    def started(self) -> bool:
        """It was placed within its target and ran (whether or not it finished, and even if
        ``paper`` accounting then blocked it for still running at the horizon)."""
        return not math.isnan(self.start_time_s)

    @property
    def accepted(self) -> bool:
        """Its outcome is ``completed`` or ``running`` (never also blocked; see :data:`Outcome`)."""
        return self.outcome in ("completed", "running")


RECORD_FIELDS = tuple(f.name for f in fields(JobRecord))


def records_to_csv(records: Iterable[JobRecord]) -> str:
    """Serialise records as CSV text (header + one row per job, ordered by job id)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(RECORD_FIELDS)
    for rec in sorted(records, key=lambda r: r.job_id):
        row = []
        for name in RECORD_FIELDS:
            value = getattr(rec, name)
            row.append(repr(value) if isinstance(value, float) else value)
        writer.writerow(row)
    return buf.getvalue()


def write_run_files(out_dir: str | Path, records: Sequence[JobRecord], summary: dict[str, Any]) -> None:
    """Write ``jobs.csv`` and ``summary.json`` into ``out_dir`` atomically (summary last)."""
    out = Path(out_dir)
    atomic_write_text(out / "jobs.csv", records_to_csv(records))
    atomic_write_json(out / "summary.json", summary)


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else NAN


def summarise(records: Sequence[JobRecord], *, window_s: float, num_servers: int) -> dict[str, Any]:
    """Run metrics from per-job records (spec §9), all time-averages over ``[0, window_s]``.

    Counts: every job has one outcome, so ``num_jobs_arrived = num_jobs_accepted +
    num_jobs_blocked + num_jobs_unresolved`` and ``num_jobs_accepted = num_jobs_completed +
    num_jobs_running``. ``num_jobs_started`` also counts the jobs ``paper`` accounting blocked for
    running at the horizon: they held servers, so throughput, utilisation, mean degree and servers
    per job are over the started jobs (as in the original).

    Args:
        records: Every arrived job.
        window_s: Measurement window (the horizon).
        num_servers: Servers in the cluster.
    """
    n = len(records)
    outcomes = Counter(r.outcome for r in records)
    reasons = Counter(r.block_reason for r in records if r.outcome == "blocked")
    completed = [r for r in records if r.outcome == "completed"]
    started = [r for r in records if r.started]
    num_accepted = outcomes["completed"] + outcomes["running"]
    demand = cluster = held = busy = running = 0.0
    for r in started:
        end = r.start_time_s + r.jct_s
        overlap = max(0.0, min(end, window_s) - max(r.start_time_s, 0.0))
        frac = overlap / r.jct_s if r.jct_s > 0 else 0.0
        demand += r.demand_bytes * frac
        cluster += r.cluster_bytes * frac
        busy += r.busy_server_s * frac
        held += r.num_servers * overlap
        running += overlap
    w = window_s if window_s > 0 else NAN
    num_blocked = outcomes["blocked"]
    return {
        "blocking_rate": num_blocked / n if n else NAN,
        "acceptance_rate": num_accepted / n if n else NAN,
        "num_jobs_arrived": n,
        "num_jobs_accepted": num_accepted,
        "num_jobs_completed": outcomes["completed"],
        "num_jobs_blocked": num_blocked,
        "num_jobs_running": outcomes["running"],
        "num_jobs_unresolved": outcomes["unresolved"],
        "num_jobs_started": len(started),
        "blocked_by_reason": {k: reasons.get(k, 0) for k in ("rejected", "no_placement", "jct_target",
                                                             "running_at_horizon")},
        "demand_throughput_Bps": demand / w,
        "cluster_throughput_Bps": cluster / w,
        "job_throughput_per_s": sum(1 for r in completed if r.completion_time_s <= window_s) / w,
        "mean_jct_s": _mean([r.jct_s for r in completed]),
        "mean_speedup": _mean([r.speedup for r in completed]),
        "mean_degree": _mean([r.degree for r in started]),
        "mean_servers_per_job": _mean([r.num_servers for r in started]),
        "mean_server_utilisation": held / (num_servers * w),
        "mean_compute_utilisation": busy / (num_servers * w),
        "mean_jobs_running": running / w,
        "window_s": window_s,
    }


def record_as_dict(record: JobRecord) -> dict[str, Any]:
    """A record as a plain dict."""
    return asdict(record)
