"""Arrival processes: when jobs arrive (and, for trace replay, which model each one trains)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from workloads.errors import WorkloadError
from workloads.loaders import DATA_DIR

#: The Philly-derived trace shipped with the package.
DEFAULT_TRACE = DATA_DIR / "traces" / "gavel-philly" / "2869ce.trace"


@dataclass(frozen=True, slots=True)
class Arrival:
    """One job arrival.

    Attributes:
        time_s: Arrival time.
        model: Graph name the job trains, or ``None`` to let the workload choose one.
    """

    time_s: float
    model: str | None = None


@runtime_checkable
class ArrivalProcess(Protocol):
    """A (possibly infinite) stream of arrivals in non-decreasing time order."""

    def arrivals(self, rng: np.random.Generator) -> Iterator[Arrival]:
        """Yield arrivals; ``rng`` is this process's own random stream."""
        ...


def _positive(value: float, field: str, *, zero_ok: bool = False) -> float:
    if (not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value)
            or value < 0 or (value == 0 and not zero_ok)):
        raise WorkloadError(f"must be a finite number {'>=' if zero_ok else '>'} 0, got {value!r}", field=field)
    return float(value)


class FixedInterval:
    """Deterministic arrivals every ``interval_s`` starting at ``start_s`` (the paper's process).

    Args:
        interval_s: Time between arrivals (paper: 1000 time units).
        start_s: Time of the first arrival.
    """

    def __init__(self, interval_s: float, start_s: float = 0.0) -> None:
        self.interval_s = _positive(interval_s, "arrivals.interval_s")
        self.start_s = _positive(start_s, "arrivals.start_s", zero_ok=True)

    def arrivals(self, rng: np.random.Generator) -> Iterator[Arrival]:
        """Yield ``start_s + k * interval_s`` for k = 0, 1, ... (computed, not accumulated)."""
        k = 0
        while True:
            yield Arrival(self.start_s + k * self.interval_s)
            k += 1


class Poisson:
    """Poisson arrivals: exponential inter-arrival times.

    Give exactly one of ``rate_per_s`` (jobs per second) or ``mean_interval_s``.
    The first arrival is at ``start_s``.
    """

    def __init__(self, rate_per_s: float | None = None, mean_interval_s: float | None = None,
                 start_s: float = 0.0) -> None:
        if (rate_per_s is None) == (mean_interval_s is None):
            raise WorkloadError("give exactly one of rate_per_s and mean_interval_s", field="arrivals")
        if rate_per_s is not None:
            self.mean_interval_s = 1.0 / _positive(rate_per_s, "arrivals.rate_per_s")
        else:
            self.mean_interval_s = _positive(mean_interval_s, "arrivals.mean_interval_s")  # type: ignore[arg-type]
        self.start_s = _positive(start_s, "arrivals.start_s", zero_ok=True)

    def arrivals(self, rng: np.random.Generator) -> Iterator[Arrival]:
        """Yield arrivals with i.i.d. exponential gaps."""
        t = self.start_s
        while True:
            yield Arrival(t)
            t += float(rng.exponential(self.mean_interval_s))


#: Default mapping of the Philly/Gavel job types to shipped graphs (nearest architecture).
DEFAULT_TRACE_MODEL_MAP: dict[str, str] = {
    "ResNet-18": "resnet18",
    "ResNet-50": "resnet50",
    "Transformer": "gnmt",
    "LM": "gnmt",
    "Recommendation": "alexnet",
    "A3C": "squeezenet1_0",
    "CycleGAN": "vgg16",
}


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One line of a Gavel/Philly trace."""

    job_type: str
    total_steps: int
    arrival_time_s: float
    num_gpus: int
    line: int


def read_gavel_trace(path: str | Path) -> list[TraceJob]:
    """Parse a Gavel-format trace (tab-separated; spec: ``shared/README``).

    Columns: job type, command, step-count flag, needs-data-dir flag, total steps, arrival time
    (s), scale factor (GPUs requested).

    Raises:
        WorkloadError: naming the file, line and column of a malformed row.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise WorkloadError(f"cannot read trace: {exc.strerror}", path=path) from None
    jobs: list[TraceJob] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        cols = raw.split("\t")
        if len(cols) != 7:
            raise WorkloadError(f"expected 7 tab-separated columns, got {len(cols)}", path=path, line=lineno)
        values: list = []
        for col, cast, field in ((4, int, "total_steps"), (5, float, "arrival_time"), (6, int, "scale_factor")):
            try:
                values.append(cast(cols[col]))
            except ValueError:
                what = "an integer" if cast is int else "a number"
                raise WorkloadError(f"not {what}: {cols[col]!r}", path=path, line=lineno, field=field) from None
        steps, t, gpus = values
        if not math.isfinite(t) or t < 0:
            raise WorkloadError(f"arrival time must be >= 0, got {t}", path=path, line=lineno, field="arrival_time")
        if jobs and t < jobs[-1].arrival_time_s:
            raise WorkloadError("arrival times must be non-decreasing", path=path, line=lineno, field="arrival_time")
        jobs.append(TraceJob(cols[0].strip(), steps, t, gpus, lineno))
    if not jobs:
        raise WorkloadError("trace has no jobs", path=path)
    return jobs


def trace_family(job_type: str) -> str:
    """Strip the batch-size suffix: ``'ResNet-18 (batch size 32)'`` -> ``'ResNet-18'``."""
    return re.sub(r"\s*\(.*\)\s*$", "", job_type).strip()


class TraceReplay:
    """Replay a Philly-derived (Gavel format) trace; each job type maps to a graph.

    Args:
        path: Trace file (default: the shipped ``2869ce.trace``).
        model_map: Job-type family (batch-size suffix stripped) or full job type -> graph name.
        time_scale: Multiplies trace times (e.g. 0.1 compresses 10x to raise the load).
        unmapped: ``"error"`` stops on a job type missing from ``model_map``; ``"skip"`` drops it.
        repeat: Replay the trace again after its last job (shifted by its span) for long horizons.
    """

    def __init__(self, path: str | Path | None = None, model_map: Mapping[str, str] | None = None,
                 time_scale: float = 1.0, unmapped: Literal["error", "skip"] = "error",
                 repeat: bool = False) -> None:
        self.path = Path(path) if path else DEFAULT_TRACE
        self.model_map = dict(DEFAULT_TRACE_MODEL_MAP if model_map is None else model_map)
        self.time_scale = _positive(time_scale, "arrivals.time_scale")
        if unmapped not in ("error", "skip"):
            raise WorkloadError(f"must be 'error' or 'skip', got {unmapped!r}", field="arrivals.unmapped")
        if not isinstance(repeat, bool):
            raise WorkloadError(f"must be true or false, got {repeat!r}", field="arrivals.repeat")
        self.repeat = repeat
        self.jobs = read_gavel_trace(self.path)
        self._models: list[str | None] = []
        for job in self.jobs:
            model = self.model_map.get(job.job_type, self.model_map.get(trace_family(job.job_type)))
            if model is None and unmapped == "error":
                raise WorkloadError(
                    f"job type {job.job_type!r} has no graph in arrivals.model_map "
                    f"(add '{trace_family(job.job_type)}: <graph>' or set arrivals.unmapped=skip)",
                    path=self.path, line=job.line, field="job_type")
            self._models.append(model)

    def models(self) -> set[str]:
        """Graph names the trace refers to (so the workload can check they are loaded)."""
        return {m for m in self._models if m is not None}

    def arrivals(self, rng: np.random.Generator) -> Iterator[Arrival]:
        """Yield the trace's arrivals in order (``rng`` is unused: replay is deterministic)."""
        span = (self.jobs[-1].arrival_time_s - self.jobs[0].arrival_time_s) * self.time_scale
        gap = span / max(len(self.jobs) - 1, 1)
        offset = 0.0
        while True:
            for job, model in zip(self.jobs, self._models, strict=True):
                if model is not None:
                    yield Arrival(offset + job.arrival_time_s * self.time_scale, model)
            if not self.repeat:
                return
            offset += span + gap
