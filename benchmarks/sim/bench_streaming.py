"""Streaming results benchmark: the per-job cost of the record sinks, and peak memory against
episode length (results go into BENCHMARKS.md).

1. ``sinks``: one episode's records are fed again, in the order they resolved, to
   :class:`~simulator.records.MemorySink`, :class:`~simulator.records.CsvStreamSink` (a real file)
   and :class:`~simulator.records.SummaryAccumulator`: microseconds per job (and, for
   comparison, ``records_to_csv``: what writing ``jobs.csv`` at the end cost before).
2. ``memory``: each episode length runs in a fresh Python process (``pacml-sim``'s path: streamed
   ``jobs.csv``, or ``--memory-sink`` to keep records as before) and reports its peak RSS.

Usage::

    python benchmarks/sim/bench_streaming.py sinks [--jobs 20000]
    python benchmarks/sim/bench_streaming.py memory --jobs 100000 1000000 [--memory-sink]
        [--placement-cache N] [--json out.json]

``--placement-cache N`` caps the first-fit allocator's cache (``FirstFitAllocator.MAX_CACHE_ENTRIES``, 200,000 by
default) to separate its memory from the simulation's own.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CONF = str(Path(__file__).resolve().parents[2] / "conf")
WORKLOAD = ["scenario=physical", "cluster=ramp512", "arrivals=poisson", "policy=para_max"]

_EPISODE = r"""
import json, resource, sys, time
from pathlib import Path
from hydra import compose, initialize_config_dir
from simulator.build import build_policy, build_simulation
from simulator.allocation.first_fit import FirstFitAllocator
from simulator.records import CsvStreamSink
conf, out, overrides, memory_sink, cache = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4] == "1", int(sys.argv[5])
if cache > 0:
    FirstFitAllocator.MAX_CACHE_ENTRIES = cache
with initialize_config_dir(config_dir=conf, version_base=None):
    cfg = compose(config_name="sim", overrides=overrides)
sink = None if memory_sink else CsvStreamSink(Path(out) / "jobs.csv")
t0 = time.perf_counter()
sim = build_simulation(cfg, sink=sink)
s = sim.run(build_policy(cfg)).summary
wall = time.perf_counter() - t0
print(json.dumps({"jobs": s["num_jobs_arrived"], "blocking_rate": s["blocking_rate"], "wall_s": wall,
                  "jobs_per_min": 60 * s["num_jobs_arrived"] / wall,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "max_reorder_buffer": getattr(sink, "max_buffered", None)}))
"""


def _cfg(overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose(config_name="sim", overrides=overrides)


def memory(jobs: list[int], interarrival_s: float, memory_sink: bool, cache: int) -> list[dict[str, Any]]:
    """Peak RSS of one fresh process per episode length."""
    rows = []
    for n in jobs:
        overrides = [*WORKLOAD, f"mean_interarrival_s={interarrival_s}", f"horizon_s={n * interarrival_s}",
                     f"max_arrivals={2 * n}"]
        with tempfile.TemporaryDirectory() as out:
            done = subprocess.run([sys.executable, "-c", _EPISODE, CONF, out, json.dumps(overrides),
                                   "1" if memory_sink else "0", str(cache)],
                                  capture_output=True, text=True, check=True)
        row = {"target_jobs": n, "memory_sink": memory_sink, "placement_cache": cache or "default",
               **json.loads(done.stdout.strip().splitlines()[-1])}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def sinks(num_jobs: int, interarrival_s: float) -> dict[str, Any]:
    """Microseconds per job of each sink, on one episode's records in their resolution order."""
    from simulator.build import build_policy, build_simulation
    from simulator.records import CsvStreamSink, MemorySink, SummaryAccumulator, records_to_csv

    cfg = _cfg([*WORKLOAD, f"mean_interarrival_s={interarrival_s}", f"horizon_s={num_jobs * interarrival_s}",
                f"max_arrivals={2 * num_jobs}"])
    records = build_simulation(cfg).run(build_policy(cfg)).records
    # Resolution order: completions at their end, everything else when decided (its arrival).
    resolved = sorted(records, key=lambda r: r.completion_time_s if not math.isnan(r.completion_time_s)
                      else r.arrival_time_s)
    out: dict[str, Any] = {"jobs": len(records)}
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in (("memory_sink", MemorySink),
                           ("csv_stream_sink", lambda: CsvStreamSink(Path(tmp) / "jobs.csv")),
                           ("summary_accumulator", lambda: _AccumulatorAsSink(SummaryAccumulator(None)))):
            best = math.inf
            for _ in range(3):
                sink = make()
                t0 = time.perf_counter()
                _feed(sink, records, resolved)
                best = min(best, time.perf_counter() - t0)
            out[f"{name}_us_per_job"] = 1e6 * best / len(records)
    best = math.inf
    for _ in range(3):  # what pacml-sim paid at the end of a run before streaming
        t0 = time.perf_counter()
        records_to_csv(records)
        best = min(best, time.perf_counter() - t0)
    out["records_to_csv_us_per_job"] = 1e6 * best / len(records)
    print(json.dumps(out))
    return out


def _feed(sink: Any, arrivals: list[Any], resolved: list[Any]) -> None:
    """Announce arrivals and add records interleaved by time, as a simulation does."""
    i = 0
    for rec in resolved:
        t = rec.completion_time_s if not math.isnan(rec.completion_time_s) else rec.arrival_time_s
        while i < len(arrivals) and arrivals[i].arrival_time_s <= t:
            sink.arrived(arrivals[i].job_id)
            i += 1
        sink.add(rec)
    sink.close()


class _AccumulatorAsSink:
    def __init__(self, acc: Any) -> None:
        self.acc = acc

    def arrived(self, job_id: int) -> None:
        pass

    def add(self, record: Any) -> None:
        self.acc.add(record)

    def close(self) -> None:
        pass


def main() -> None:
    """Run the benchmark named on the command line."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["sinks", "memory"])
    ap.add_argument("--jobs", type=int, nargs="+", default=None)
    ap.add_argument("--interarrival", type=float, default=0.06, help="mean_interarrival_s (blocking ~0.4)")
    ap.add_argument("--memory-sink", action="store_true", help="keep records in memory (as before streaming)")
    ap.add_argument("--placement-cache", type=int, default=0, help="cap FirstFitAllocator.MAX_CACHE_ENTRIES (0: default)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.what == "sinks":
        result: Any = sinks((args.jobs or [20000])[0], args.interarrival)
    else:
        result = memory(args.jobs or [100000, 1000000], args.interarrival, args.memory_sink, args.placement_cache)
    if args.json is not None:
        args.json.write_text(json.dumps({"python": platform.python_version(), "result": result}, indent=2) + "\n")


if __name__ == "__main__":
    main()
