"""``pacml sim``: simulate one episode (or a Hydra sweep of them) and write its results.

Examples::

    pacml sim scenario=paper policy=para_max beta=C seed=0
    pacml sim policy=fixed policy.degree=4 workload.graphs=path/to/graphs/
    pacml sim -m policy=para_max,para_min,min_feasible beta=A,B,C,D seed=0,1,2

Each run writes ``jobs.csv`` (streamed) and ``summary.json`` (last) into its Hydra output
directory (docs/simulator.md, "What a run writes"); a run whose ``summary.json`` already exists
for the same config is skipped (``skip_finished``), so an interrupted sweep resumes.
"""

from __future__ import annotations

import gc
import logging
import math
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from simulator.build import build_policy, build_simulation
from simulator.cli import HydraCommand, finished_run, policy_name, preflight, report_user_errors
from simulator.records import CsvStreamSink, write_run_files
from workloads.io import clear_stale_temporaries

log = logging.getLogger(__name__)

PROG = "pacml sim"
GROUPS = ("cluster", "workload", "arrivals", "beta", "policy", "scenario", "experiment")
#: What ``pacml sim``'s config holds, for the one check before any work (simulator/config.py).
COMMAND = HydraCommand(PROG, "sim")


#: ``workload.profile_time_unit_s`` when the config does not set it (as :func:`simulator.build.build_simulation`).
DEFAULT_PROFILE_TIME_UNIT_S = 1e-3
#: The unit of simulated times when profile numbers are read as seconds (``profile_time_unit_s=1``,
#: the paper scenario): one unit is one profile millisecond, not a second.
PROFILE_TIME_UNITS = "profile time units"


def time_unit(cfg: DictConfig | dict[str, Any]) -> str:
    """The unit of the run's simulated times, from ``workload.profile_time_unit_s``: ``"s"``,
    :data:`PROFILE_TIME_UNITS`, or for another value a description of it."""
    workload = cfg.get("workload") or {}
    unit_s = float(workload.get("profile_time_unit_s", DEFAULT_PROFILE_TIME_UNIT_S))
    if math.isclose(unit_s, DEFAULT_PROFILE_TIME_UNIT_S):
        return "s"
    if math.isclose(unit_s, 1.0):
        return PROFILE_TIME_UNITS
    return f"simulated s (a profile ms read as {unit_s:g} s)"


#: Overrides the run's log line already names (``policy._target_`` as the policy's name).
_LINE_KEYS = ("scenario", "policy", "beta", "seed", "policy._target_")


def other_overrides(overrides: list[str], exclude_keys: list[str] | tuple[str, ...] = ()) -> str:
    """The overrides that name a run beside its scenario, policy, beta and seed, as in a sweep's run
    folder name (sorted, without ``exclude_keys``)."""
    skip = {*_LINE_KEYS, *exclude_keys}
    return ",".join(sorted(o for o in map(str, overrides) if o.partition("=")[0].lstrip("+~") not in skip))


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects alive on entry (libraries, the policy's model, the cluster) out of Python's
    full garbage collections while the block runs (with torch loaded a full collection visits
    ~400,000 objects), then hand them back. Results do not depend on it."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_config(cfg: DictConfig, out_dir: str | Path, choices: dict[str, Any] | None = None) -> dict[str, Any]:
    """Simulate the episode ``cfg`` describes and write its files into ``out_dir``.

    Returns:
        The summary (also written as ``summary.json``).
    """
    out = Path(out_dir)
    policy = build_policy(cfg)
    sink = CsvStreamSink(out / "jobs.csv")
    try:
        sim = build_simulation(cfg, sink=sink)
    except BaseException:
        sink.abort()
        raise
    total = sim.horizon_s
    unit = time_unit(cfg)
    with tqdm(total=total, disable=not cfg.get("progress", True),
              unit=" time units" if unit == PROFILE_TIME_UNITS else "s", unit_scale=True,
              desc=f"{PROG} {choices.get('policy', '') if choices else ''}".strip(), leave=False,
              mininterval=0.5) as bar, frozen_heap():
        result = sim.run(policy, bar)
    summary = result.summary
    summary["config"] = {**(choices or {}), "seed": int(cfg.seed),
                         "mean_interarrival_s": cfg.get("mean_interarrival_s"),
                         "horizon_s": cfg.get("horizon_s")}
    summary["resolved_config"] = _comparable(cfg)
    summary.setdefault("time_unit", unit)
    write_run_files(out, None, summary)  # jobs.csv is already in place
    return summary


def _comparable(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config minus keys that do not change results (for the resume check)."""
    data = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(data, dict)
    for key in ("progress", "skip_finished", "out_dir", "max_arrivals", "max_estimated_hours",
                "max_estimated_memory_gb"):
        data.pop(key, None)
    return data


#: The files a run writes through a temporary file (``workloads.io.atomic_write``: ``.{name}.*.tmp``).
RUN_FILES = ("jobs.csv", "summary.json")


@hydra.main(version_base=None, config_path="pkg://conf", config_name="sim")
def _hydra_main(cfg: DictConfig) -> None:
    hc = HydraConfig.get()
    # Checked again here: a sweep's jobs get values (e.g. from an experiment) preflight did not see.
    report_user_errors(PROG, lambda: COMMAND.validate(cfg, list(hc.overrides.task)))
    out = Path(cfg.out_dir) if cfg.get("out_dir") else Path(hc.runtime.output_dir)
    choices = {k: v for k, v in hc.runtime.choices.items() if k in GROUPS and v is not None}
    choices["policy"] = policy_name(choices.get("policy"), hc.overrides.task)
    clear_stale_temporaries(out, RUN_FILES)  # one folder holds one run
    if cfg.get("skip_finished", True) and finished_run(out, _comparable(cfg)):
        log.info("skipping %s: summary.json already written for this config", out)
        return

    others = other_overrides(list(hc.overrides.task), list(hc.job.config.override_dirname.exclude_keys))
    named = f"{choices.get('policy')} beta={choices.get('beta')} seed={cfg.seed}{' ' + others if others else ''}"

    def body() -> None:
        s = run_config(cfg, out, choices)
        per_unit = "B per profile time unit" if time_unit(cfg) == PROFILE_TIME_UNITS else "B/s"
        log.info("%s | %s | blocking %.4f, throughput %.4g %s, %d jobs in %.2f s wall -> %s",
                 choices.get("scenario", "-"), named, s["blocking_rate"], s["demand_throughput_Bps"],
                 per_unit, s["num_jobs_arrived"], s["wall_time_s"], out)

    report_user_errors(PROG, body)


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM (``timeout``, a batch scheduler) stops the run like Ctrl-C: the streamed jobs.csv
    is discarded, not left as a temporary file."""
    raise KeyboardInterrupt


def main() -> None:
    """Console entry point (``pacml sim``)."""
    preflight(COMMAND, sys.argv[1:])
    signal.signal(signal.SIGTERM, _terminate)
    try:
        _hydra_main()
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted; the unfinished run wrote no jobs.csv or summary.json\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
