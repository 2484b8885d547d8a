"""Load what ``pacml-sim`` wrote: one row per run from ``summary.json``, one row per job from ``jobs.csv``.

A run directory is one holding ``summary.json`` or Hydra's ``.hydra/config.yaml``. Only those
files are read; nothing here imports the simulator.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

log = logging.getLogger(__name__)

CONFIG_COLUMNS = ("scenario", "cluster", "workload", "arrivals", "beta", "policy", "experiment",
                  "mean_interarrival_s", "horizon_s", "horizon_accounting", "seed")
"""Config columns of :func:`load_sweep`, from ``summary.json`` (its ``config`` block first)."""


def find_run_dirs(sweep_dir: str | Path) -> list[Path]:
    """Every run directory under ``sweep_dir`` (itself included), sorted."""
    root = Path(sweep_dir)
    found = {p.parent for p in root.rglob("summary.json")}
    found |= {p.parent.parent for p in root.rglob(".hydra/config.yaml")}
    return sorted(d for d in found if ".submitit" not in d.parts)


def read_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """One run's ``summary.json`` flattened to config columns and metrics.

    Returns:
        The row, or None (with a warning logged) if the file is missing or unreadable.
    """
    run = Path(run_dir)
    path = run / "summary.json"
    try:
        summary = json.loads(path.read_text())
        if not isinstance(summary, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        log.warning("skipping %s: no summary.json (run unfinished or failed)", run)
        return None
    except (OSError, ValueError) as exc:
        log.warning("skipping %s: unreadable summary.json (%s)", run, exc)
        return None
    config = summary.pop("config", None) or {}
    summary.pop("resolved_config", None)  # the full config, kept for resume checks; not a column
    reasons = summary.pop("blocked_by_reason", None) or {}
    row: dict[str, Any] = {"run_dir": str(run)}
    row.update({k: config.get(k, summary.get(k)) for k in CONFIG_COLUMNS})
    row.update(_nested_overrides(run))
    row.update({k: v for k, v in summary.items() if k not in row})
    row.update({f"num_blocked_{reason}": count for reason, count in reasons.items()})
    return row


def load_sweep(sweep_dir: str | Path) -> pd.DataFrame:
    """One row per finished run under ``sweep_dir``: config columns, then summary metrics.

    Runs are found recursively. ``blocked_by_reason`` becomes ``num_blocked_<reason>`` columns.
    Nested command-line overrides (e.g. ``policy.degree=4``) become extra config columns named
    by their dotted key. A run with a missing or corrupt ``summary.json`` is logged as
    a warning and skipped.

    Args:
        sweep_dir: A Hydra sweep directory, a single run directory, or any tree of them.

    Returns:
        The runs sorted by config (empty if none were found).
    """
    rows = [row for run in find_run_dirs(sweep_dir) if (row := read_summary(run)) is not None]
    if not rows:
        return pd.DataFrame(columns=["run_dir", *CONFIG_COLUMNS])
    runs = pd.DataFrame(rows)
    keys = [c for c in config_columns(runs) if runs[c].notna().any()]
    return runs.sort_values(keys, na_position="first", kind="stable").reset_index(drop=True)


def config_columns(runs: pd.DataFrame) -> list[str]:
    """The config columns of a :func:`load_sweep` frame (known ones, then dotted overrides)."""
    extra = [c for c in runs.columns if "." in c]
    return [c for c in (*CONFIG_COLUMNS, *extra) if c in runs.columns]


def load_jobs(run_dir: str | Path) -> pd.DataFrame:
    """One run's ``jobs.csv`` (one row per job; empty strings for no block reason or servers)."""
    jobs = pd.read_csv(Path(run_dir) / "jobs.csv")
    for column in ("block_reason", "servers"):
        jobs[column] = jobs[column].fillna("").astype(str)
    return jobs


def load_sweep_jobs(runs: pd.DataFrame, columns: tuple[str, ...] = ("policy", "beta", "seed",
                    "mean_interarrival_s")) -> pd.DataFrame:
    """The jobs of every run in ``runs``, each row tagged with its run's ``columns``.

    A job column that a run column would overwrite is renamed ``job_<name>`` (``jobs.csv``'s
    ``beta`` is the job's JCT target fraction, the run's ``beta`` its distribution's name).
    A run whose ``jobs.csv`` is missing or unreadable is logged as a warning and skipped.
    """
    frames = []
    for run in runs.to_dict("records"):
        try:
            jobs = load_jobs(run["run_dir"])
        except (OSError, ValueError, KeyError) as exc:
            log.warning("skipping jobs of %s: %s", run["run_dir"], exc)
            continue
        jobs = jobs.rename(columns={c: f"job_{c}" for c in columns if c in jobs.columns})
        for column in columns:
            jobs[column] = run[column]
        frames.append(jobs)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_run_config(run_dir: str | Path) -> dict[str, Any]:
    """One run's resolved Hydra config (``.hydra/config.yaml``) as plain data ({} if absent)."""
    path = Path(run_dir) / ".hydra" / "config.yaml"
    if not path.is_file():
        return {}
    config = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    return config if isinstance(config, dict) else {}


def cluster_num_servers(config: dict[str, Any]) -> int | None:
    """Servers in the run's cluster (a RAMP: groups x racks x servers per rack), or None."""
    cluster = config.get("cluster") or {}
    keys = ("num_comm_groups", "num_racks_per_group", "num_servers_per_rack")
    if not all(k in cluster for k in keys):
        return None
    return math.prod(int(cluster[k]) for k in keys)


def _nested_overrides(run: Path) -> dict[str, Any]:
    """A run's command-line overrides of nested keys (``a.b=value``; Hydra's own excluded).

    Top-level keys are group choices or :data:`CONFIG_COLUMNS` already, or do not change results
    (``progress``, ``out_dir``, ``skip_finished``).
    """
    path = run / ".hydra" / "overrides.yaml"
    try:
        overrides = OmegaConf.load(path)
    except (OSError, ValueError):
        return {}
    extra: dict[str, Any] = {}
    for item in overrides if isinstance(overrides, Iterable) else ():
        key, sep, value = str(item).partition("=")
        key = key.lstrip("+~")
        if sep and "." in key and not key.startswith("hydra."):
            extra[key] = _scalar(value)
    return extra


def _scalar(text: str) -> int | float | str:
    """``text`` as an int or a float if it reads as one."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text
