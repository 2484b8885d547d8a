"""Typed per-job records, run summaries, and the files a run writes (``jobs.csv``, ``summary.json``).

Every finished record goes to a :class:`RecordSink` (:class:`MemorySink` keeps them,
:class:`CsvStreamSink` streams ``jobs.csv``) and to the running :class:`SummaryAccumulator`, so
both sinks give the same summary. The files: docs/simulator.md ("What a run writes").
"""

from __future__ import annotations

import csv
import io
import math
import os
import tempfile
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from workloads.io import atomic_write_json, atomic_write_text, clear_stale_temporaries

if TYPE_CHECKING:
    from simulator.topology import RampTopology

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
        beta: JCT target fraction; ``max_jct_s = beta x sequential_jct_s``.
        sequential_jct_s: JCT on one device without communication; in scenario=pipeline the
            model's degree-1 iteration on the fastest server kind that holds it (data loading
            left out under ``input_loading=prefetched``) times its steps, so ``speedup`` there is
            over that server (docs/pipeline.md, "Targets").
        degree: Chosen partition degree (0 = rejected).
        num_servers: Servers of the job's placement (0 if it could not be placed; may exceed
            ``degree`` under op-level first fit, spec §15.1).
        servers: Those servers (:func:`format_servers`).
        jct_s, start_time_s, completion_time_s: ``nan`` when not placed, started or completed.
        demand_bytes, cluster_bytes: Op memory + dependency bytes, unpartitioned and
            partitioned (spec §9).
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
        """It ran (finished or not; ``paper`` accounting may have blocked it at the horizon)."""
        return not math.isnan(self.start_time_s)

    @property
    def accepted(self) -> bool:
        """Its outcome is ``completed`` or ``running`` (never also blocked; see :data:`Outcome`)."""
        return self.outcome in ("completed", "running")


RECORD_FIELDS = tuple(f.name for f in fields(JobRecord))


SERVERS_LISTED_MAX = 64
"""Jobs holding at most this many servers list each one in ``servers`` (:func:`format_servers`)."""


def _csv_row(rec: JobRecord) -> list[Any]:
    """One ``jobs.csv`` row (floats by ``repr``, so they read back exactly)."""
    row = []
    for name in RECORD_FIELDS:
        value = getattr(rec, name)
        row.append(repr(value) if isinstance(value, float) else value)
    return row


def records_to_csv(records: Iterable[JobRecord]) -> str:
    """Serialise records as CSV text (header + one row per job, ordered by job id)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(RECORD_FIELDS)
    for rec in sorted(records, key=lambda r: r.job_id):
        writer.writerow(_csv_row(rec))
    return buf.getvalue()


def format_servers(topology: RampTopology, servers: Sequence[int]) -> str:
    """The ``servers`` column for a job holding ``servers`` (indices, ascending): up to
    :data:`SERVERS_LISTED_MAX` their ``c-r-s`` names, above that disjoint boxes ``C-R-S`` whose
    parts are numbers or inclusive ranges ``a..b`` (``0..31-0..31-0``: 1,024 servers); see
    docs/simulator.md ("What a run writes")."""
    if len(servers) <= SERVERS_LISTED_MAX:
        return " ".join(topology.server_name(s) for s in servers)
    _, num_racks, per_rack = topology.shape  # server index = (c * R + r) * S + s, as server_name
    # In-rack indices by rack; then runs of consecutive indices, of consecutive racks with the
    # same index runs, and of consecutive groups with the same rack runs, in (c, r, s) order.
    by_rack: dict[tuple[int, int], list[int]] = {}
    for server in sorted(servers):
        rack, s = divmod(server, per_rack)
        by_rack.setdefault(divmod(rack, num_racks), []).append(s)
    by_group: dict[int, list[tuple[int, tuple]]] = {}
    for (c, r), slots in by_rack.items():
        ranges = tuple((s0, s1) for s0, s1, _ in _runs((s, None) for s in slots))
        by_group.setdefault(c, []).append((r, ranges))
    groups = _runs((c, tuple(map(tuple, _runs(racks)))) for c, racks in by_group.items())
    return " ".join(f"{_span(c0, c1)}-{_span(r0, r1)}-{_span(s0, s1)}"
                    for c0, c1, rack_runs in groups for r0, r1, ranges in rack_runs for s0, s1 in ranges)


def _runs(items: Iterable[tuple[int, Any]]) -> list[list[Any]]:
    """``[first, last, value]`` of each run of consecutive indices with equal values."""
    runs: list[list[Any]] = []
    for i, value in items:
        if runs and runs[-1][1] == i - 1 and runs[-1][2] == value:
            runs[-1][1] = i
        else:
            runs.append([i, i, value])
    return runs


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"


class RecordSink(Protocol):
    """Where a simulation puts each job's record: :meth:`arrived` per arrival (job-id order),
    :meth:`add` once the outcome is final (out of order), then :meth:`close`, or :meth:`abort`."""

    records: list[JobRecord]
    """Records kept in memory (empty for a sink that does not keep them)."""

    def arrived(self, job_id: int) -> None:
        """Job ``job_id`` arrived (its record comes later)."""

    def add(self, record: JobRecord) -> None:
        """A job's final record."""

    def close(self) -> None:
        """The run is over: every arrived job has its record."""

    def abort(self) -> None:
        """The run failed: drop whatever is half written."""


class MemorySink:
    """Keeps every record in :attr:`records`: in the order jobs resolve while the run goes, sorted
    by job id once closed (memory grows with the episode)."""

    def __init__(self) -> None:
        self.records: list[JobRecord] = []

    def arrived(self, job_id: int) -> None:
        """Nothing to do: records are kept as they come."""

    def add(self, record: JobRecord) -> None:
        """Keep ``record``."""
        self.records.append(record)

    def close(self) -> None:
        """Sort the records by job id."""
        self.records.sort(key=lambda r: r.job_id)

    def abort(self) -> None:
        """Nothing to drop."""


class CsvStreamSink:
    """Writes ``jobs.csv`` as the run goes, byte for byte what :func:`records_to_csv` writes, and
    keeps no records. Rows go out in job-id order through a reorder buffer holding about the
    running jobs (:attr:`max_buffered`: its high-water mark), in chunks, to a temporary file that
    :meth:`close` renames to ``path`` (a failed or killed run leaves no partial ``path``).

    Args:
        path: Where ``jobs.csv`` goes (its folder is created).
        flush_rows: Rows buffered in memory before a write.
    """

    def __init__(self, path: str | Path, *, flush_rows: int = 4096) -> None:
        self.path = Path(path)
        self.flush_rows = flush_rows
        self.records: list[JobRecord] = []
        self.rows_written = 0
        self.max_buffered = 0  # most records ever waiting in the reorder buffer
        self._slots: deque[list[Any]] = deque()  # [job_id, record or None], arrival order
        self._by_id: dict[int, list[Any]] = {}  # job id -> its slot, while it waits
        self._waiting = 0
        self._lines: list[str] = []
        self._writer = csv.writer(self, lineterminator="\n")  # writes through self.write
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A run killed outright leaves its temporary file; one directory holds one run.
        clear_stale_temporaries(self.path.parent, [self.path.name])
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        self._tmp = Path(tmp)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; keep the usual permissions
        self._fh: io.BufferedWriter | None = os.fdopen(fd, "wb")
        self._writer.writerow(RECORD_FIELDS)

    def write(self, line: str) -> None:
        """Collect one CSV line from the csv writer (not for callers)."""
        self._lines.append(line)

    def arrived(self, job_id: int) -> None:
        """Reserve ``job_id``'s place in the file."""
        slot = [job_id, None]
        self._slots.append(slot)
        self._by_id[job_id] = slot

    def add(self, record: JobRecord) -> None:
        """Write ``record`` as soon as every job that arrived before it is written too (a job never
        announced through :meth:`arrived` goes after every announced one)."""
        slot = self._by_id.pop(record.job_id, None)
        if slot is None:
            slot = [record.job_id, None]
            self._slots.append(slot)
        slot[1] = record
        self._waiting += 1
        slots = self._slots
        while slots and slots[0][1] is not None:
            self._writer.writerow(_csv_row(slots.popleft()[1]))
            self._waiting -= 1
            self.rows_written += 1
        if self._waiting > self.max_buffered:
            self.max_buffered = self._waiting
        if len(self._lines) >= self.flush_rows:
            self._flush()

    def _flush(self) -> None:
        if self._fh is None:
            raise RuntimeError(f"{self.path}: the sink is closed")
        self._fh.write("".join(self._lines).encode())
        self._lines.clear()

    def close(self) -> None:
        """Write the rest, fsync and rename the file to :attr:`path`.

        Raises:
            RuntimeError: A job arrived but never got its record (a simulator bug).
        """
        if self._slots:
            raise RuntimeError(f"{self.path}: job {self._slots[0][0]} arrived but has no record")
        self._flush()
        assert self._fh is not None
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Delete the temporary file (``path`` is left as it was)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self._tmp.unlink(missing_ok=True)
        self._slots.clear()
        self._by_id.clear()


def write_run_files(out_dir: str | Path, records: Sequence[JobRecord] | None, summary: dict[str, Any]) -> None:
    """Write ``jobs.csv`` (unless ``records`` is ``None``: a :class:`CsvStreamSink` wrote it) and
    then ``summary.json`` into ``out_dir``, atomically."""
    out = Path(out_dir)
    if records is not None:
        atomic_write_text(out / "jobs.csv", records_to_csv(records))
    atomic_write_json(out / "summary.json", summary)


class ExactSum:
    """A float sum that is exact until read, so it does not depend on the order of the terms.

    Buffered terms are folded with ``math.fsum`` into a short list of non-overlapping floats
    (``fsum`` rounds correctly, so the remainder ``xs - fsum(xs)`` is again a sum of floats).
    Non-finite terms are added plainly (``inf``/``nan`` whatever the order).

    Args:
        fold_every: Terms buffered between folds (memory vs. calls to ``fsum``).
    """

    __slots__ = ("_parts", "_buffer", "_special", "fold_every")

    def __init__(self, fold_every: int = 4096) -> None:
        self.fold_every = fold_every
        self._parts: list[float] = []
        self._buffer: list[float] = []
        self._special = 0.0

    def add(self, x: float) -> None:
        """Add one term."""
        if math.isfinite(x):
            self._buffer.append(x)
            if len(self._buffer) >= self.fold_every:
                self._fold()
        else:
            self._special += x

    def _fold(self) -> None:
        terms = self._parts + self._buffer
        parts: list[float] = []
        while True:
            s = math.fsum(terms)
            if s == 0.0:
                break
            parts.append(s)
            terms.append(-s)
        self._parts, self._buffer = parts, []

    @property
    def value(self) -> float:
        """The exact sum, rounded once."""
        total = math.fsum(self._parts + self._buffer)
        return self._special + total if self._special else total


class SummaryAccumulator:
    """Running totals of a run's records from which :meth:`summary` gives :func:`summarise`'s
    metrics without keeping the records.

    Args:
        window_s: Measurement window (the horizon), or ``None`` until the run ends (trace replay:
            every started job must then end within the window given to :meth:`summary`; checked).
    """

    def __init__(self, window_s: float | None = None) -> None:
        self.window_s = window_s
        self.outcomes: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.num_started = 0
        self.num_completed_in_window = 0
        self.sum_degree_started = 0
        self.sum_servers_started = 0
        self.max_end_s = -math.inf
        self._sums = {k: ExactSum() for k in ("demand", "cluster", "busy", "held", "running", "jct", "speedup")}

    @property
    def num_jobs(self) -> int:
        """Records added so far."""
        return sum(self.outcomes.values())

    def add(self, r: JobRecord) -> None:
        """Count one job's record."""
        sums = self._sums
        window = math.inf if self.window_s is None else self.window_s
        self.outcomes[r.outcome] += 1
        if r.outcome == "blocked":
            self.reasons[r.block_reason] += 1
        elif r.outcome == "completed":
            sums["jct"].add(r.jct_s)
            sums["speedup"].add(r.speedup)
            if r.completion_time_s <= window:
                self.num_completed_in_window += 1
        if r.started:
            end = r.start_time_s + r.jct_s
            self.max_end_s = max(self.max_end_s, end)
            overlap = max(0.0, min(end, window) - max(r.start_time_s, 0.0))
            frac = overlap / r.jct_s if r.jct_s > 0 else 0.0
            sums["demand"].add(r.demand_bytes * frac)
            sums["cluster"].add(r.cluster_bytes * frac)
            sums["busy"].add(r.busy_server_s * frac)
            sums["held"].add(r.num_servers * overlap)
            sums["running"].add(overlap)
            self.num_started += 1
            self.sum_degree_started += r.degree
            self.sum_servers_started += r.num_servers

    def set_window(self, window_s: float) -> None:
        """Fix the window of an accumulator made without one (records added later are clipped to it).

        Raises:
            ValueError: A window was already set, or a job added so far ends after ``window_s``.
        """
        if self.window_s is not None:
            raise ValueError(f"the window is already {self.window_s} s")
        if self.max_end_s > window_s:
            raise ValueError(f"a started job ends at {self.max_end_s} s, after the window {window_s} s "
                             "given at the end; give the window when the run starts")
        self.window_s = window_s

    def summary(self, *, num_servers: int, window_s: float | None = None) -> dict[str, Any]:
        """The metrics of :func:`summarise` for the records added so far.

        Args:
            num_servers: Servers in the cluster.
            window_s: The window, if none was set before (see :meth:`set_window`).

        Raises:
            ValueError: No window at all, or as :meth:`set_window`.
        """
        if self.window_s is None:
            if window_s is None:
                raise ValueError("no measurement window: give window_s")
            self.set_window(window_s)
        assert self.window_s is not None
        window_s = self.window_s
        n = self.num_jobs
        outcomes, sums = self.outcomes, {k: v.value for k, v in self._sums.items()}
        num_completed, started = outcomes["completed"], self.num_started
        num_accepted = num_completed + outcomes["running"]
        w = window_s if window_s > 0 else NAN
        num_blocked = outcomes["blocked"]
        return {
            "blocking_rate": num_blocked / n if n else NAN,
            "acceptance_rate": num_accepted / n if n else NAN,
            "num_jobs_arrived": n,
            "num_jobs_accepted": num_accepted,
            "num_jobs_completed": num_completed,
            "num_jobs_blocked": num_blocked,
            "num_jobs_running": outcomes["running"],
            "num_jobs_unresolved": outcomes["unresolved"],
            "num_jobs_started": started,
            "blocked_by_reason": {k: self.reasons.get(k, 0) for k in ("rejected", "no_placement", "jct_target",
                                                                      "running_at_horizon")},
            "demand_throughput_Bps": sums["demand"] / w,
            "cluster_throughput_Bps": sums["cluster"] / w,
            "job_throughput_per_s": self.num_completed_in_window / w,
            "mean_jct_s": sums["jct"] / num_completed if num_completed else NAN,
            "mean_speedup": sums["speedup"] / num_completed if num_completed else NAN,
            "mean_degree": self.sum_degree_started / started if started else NAN,
            "mean_servers_per_job": self.sum_servers_started / started if started else NAN,
            "mean_server_utilisation": sums["held"] / (num_servers * w),
            "mean_compute_utilisation": sums["busy"] / (num_servers * w),
            "mean_jobs_running": sums["running"] / w,
            "window_s": window_s,
        }


def summarise(records: Iterable[JobRecord], *, window_s: float, num_servers: int) -> dict[str, Any]:
    """Run metrics from per-job records (spec §9), time-averages over ``[0, window_s]``; the
    counts and what they cover: docs/simulator.md ("What a run writes")."""
    acc = SummaryAccumulator(window_s)
    for r in records:
        acc.add(r)
    return acc.summary(num_servers=num_servers)
