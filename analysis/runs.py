"""Load what ``pacml sim`` wrote: one row per run from ``summary.json``, one row per job from ``jobs.csv``.

A run directory is one holding ``summary.json`` or Hydra's ``.hydra/config.yaml``. Only those
files are read; nothing here imports the simulator. Both files are checked as they are read (a
garbled, truncated or missing one raises :class:`RunFileError` naming the file and line), so a
sweep loader can skip the run with one warning instead of plotting nonsense or crashing.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from omegaconf import OmegaConf

log = logging.getLogger(__name__)

CONFIG_COLUMNS = ("scenario", "cluster", "workload", "arrivals", "beta", "policy", "experiment",
                  "mean_interarrival_s", "horizon_s", "horizon_accounting", "seed")
"""Config columns of :func:`load_sweep`, from ``summary.json`` (its ``config`` block first)."""

JOB_OUTCOMES = ("completed", "blocked", "running", "unresolved")
"""Values of ``jobs.csv``'s ``outcome`` column."""

JOB_NUMBER_COLUMNS = ("job_id", "arrival_time_s", "beta", "sequential_jct_s", "max_jct_s", "degree",
                      "num_servers", "jct_s", "start_time_s", "completion_time_s", "speedup",
                      "demand_bytes", "cluster_bytes", "busy_server_s")
"""Numeric ``jobs.csv`` columns (empty or ``nan`` means not applicable)."""

JOB_REQUIRED_COLUMNS = ("job_id", "model", "degree", "num_servers", "servers", "outcome", "block_reason",
                        "jct_s", "start_time_s")
"""``jobs.csv`` columns the analysis needs."""

_SUMMARY_NUMBER_KEY = re.compile(r"^(num_|mean_)|(_rate|_Bps|_s|_per_s)$")
"""``summary.json`` keys whose values must be numbers (or null)."""


class RunFileError(ValueError):
    """A run's ``summary.json`` or ``jobs.csv`` is missing, garbled or truncated (the message names
    the file, and the line where it can)."""


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
        summary = json.loads(path.read_text(encoding="utf-8"))
        _check_summary(summary)
    except FileNotFoundError:
        log.warning("skipping %s: no summary.json (run unfinished or failed)", run)
        return None
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad UTF-8, JSON or content
        log.warning("skipping %s: unreadable summary.json (%s)", run, _one_line(exc))
        return None
    config = summary.pop("config", None) or {}
    resolved = summary.pop("resolved_config", None)
    reasons = summary.pop("blocked_by_reason", None) or {}
    row: dict[str, Any] = {"run_dir": str(run)}
    row.update({k: config.get(k, summary.get(k)) for k in CONFIG_COLUMNS})
    row.update(_nested_overrides(run))
    row[RESOLVED] = flat_config(resolved if isinstance(resolved, dict) else _hydra_config(run))
    row.update({k: v for k, v in summary.items() if k not in row})
    row.update({f"num_blocked_{reason}": count for reason, count in reasons.items()})
    return row


def _check_summary(summary: Any) -> None:
    """Raise ``ValueError`` unless ``summary`` looks like a ``summary.json`` pacml sim writes:
    a JSON object whose counts, rates, times and means are numbers, with object-valued
    ``config`` / ``blocked_by_reason`` and scalar config columns."""
    if not isinstance(summary, dict):
        raise ValueError("not a JSON object")
    if not isinstance(summary.get("blocking_rate"), int | float) or isinstance(summary["blocking_rate"], bool):
        raise ValueError("no numeric blocking_rate")
    for key in ("config", "blocked_by_reason"):
        if not isinstance(summary.get(key) or {}, dict):
            raise ValueError(f"{key!r} is not an object")
    for key, value in [*summary.items(), *(summary.get("blocked_by_reason") or {}).items()]:
        if (_SUMMARY_NUMBER_KEY.search(key) or key in (summary.get("blocked_by_reason") or {})) and not (
                value is None or (isinstance(value, int | float) and not isinstance(value, bool))):
            raise ValueError(f"{key!r} is not a number: {str(value)[:40]!r}")
    config = summary.get("config") or {}
    for key in CONFIG_COLUMNS:
        value = config.get(key, summary.get(key))
        if not (value is None or isinstance(value, str | int | float)):
            raise ValueError(f"{key!r} is not a single value: {str(value)[:40]!r}")


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line (for one-line warnings)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def load_sweep(sweep_dir: str | Path) -> pd.DataFrame:
    """One row per finished run under ``sweep_dir``: config columns, then summary metrics.

    ``blocked_by_reason`` becomes ``num_blocked_<reason>`` columns; nested overrides and every
    other resolved config value that differs between runs become dotted config columns (see
    docs/experiments.md, "Reports"). A run with a missing or corrupt ``summary.json`` is logged
    as a warning and skipped.

    Args:
        sweep_dir: A Hydra sweep directory, a single run directory, or any tree of them.

    Returns:
        The runs sorted by config (empty if none were found). ``attrs["override_columns"]``
        lists the columns that come from command-line overrides.
    """
    rows = [row for run in find_run_dirs(sweep_dir) if (row := read_summary(run)) is not None]
    if not rows:
        return pd.DataFrame(columns=["run_dir", *CONFIG_COLUMNS])
    overrides = sorted({k for row in rows for k in row if "." in k})
    resolved = [row.pop(RESOLVED) for row in rows]
    for row, flat in zip(rows, resolved, strict=True):
        # Simulated seconds per PipeDream profile millisecond: the unit of every time (time_unit).
        row.setdefault(PROFILE_UNIT_COLUMN, flat.get(PROFILE_UNIT_COLUMN_KEY))
    for key in _differing_keys(resolved):
        if key in CONFIG_COLUMNS or key in overrides:
            continue  # already a column (the same value)
        for row, flat in zip(rows, resolved, strict=True):
            row[key] = flat.get(key)
    runs = pd.DataFrame(rows)
    keys = [c for c in config_columns(runs) if runs[c].notna().any()]
    runs = runs.sort_values(keys, na_position="first", kind="stable").reset_index(drop=True)
    runs.attrs["override_columns"] = overrides
    return drop_duplicate_seeds(runs)


def drop_duplicate_seeds(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with one run per setting (:func:`group_columns`) and seed: the first by ``run_dir``
    (a repeat is the same random draw, not a new sample); each repeat is logged as one warning."""
    if runs.empty or not all(c in runs.columns for c in SEED_COLUMNS):
        return runs
    keys = [*group_columns(runs), *SEED_COLUMNS]
    by_dir = runs.sort_values("run_dir", kind="stable")
    repeated = by_dir[by_dir.duplicated(keys, keep=False)]
    if repeated.empty:
        return runs
    for _, same in repeated.groupby(keys, dropna=False, sort=False):
        dirs = same["run_dir"].tolist()
        log.warning("runs %s have the same settings and seed: using only %s (a repeat adds no sample)",
                    ", ".join(dirs), dirs[0])
    keep = ~runs.index.isin(by_dir.index[by_dir.duplicated(keys, keep="first")])
    kept = runs[keep].reset_index(drop=True)
    kept.attrs["override_columns"] = runs.attrs.get("override_columns", [])
    return kept


def config_columns(runs: pd.DataFrame) -> list[str]:
    """The config columns of a :func:`load_sweep` frame (known ones, then dotted keys)."""
    extra = [c for c in runs.columns if "." in c]
    return [c for c in (*CONFIG_COLUMNS, *extra) if c in runs.columns]


PROFILE_UNIT_COLUMN = "profile_time_unit_s"
"""Column of :func:`load_sweep`: the run's ``workload.profile_time_unit_s`` (None if unknown)."""
PROFILE_UNIT_COLUMN_KEY = "workload.profile_time_unit_s"

SEED_COLUMNS = ("seed",)
"""Config values that only pick a random draw: the one thing figures and tables average over."""

RESOLVED = "__resolved__"
"""Key of a run's flattened resolved config in :func:`read_summary`'s row (popped by :func:`load_sweep`)."""

#: Keys of the resolved config that do not change results (as simulator/run.py's resume check).
_NOT_RESULTS = ("progress", "skip_finished", "out_dir", "max_arrivals", "max_estimated_hours",
                "max_estimated_memory_gb")


def flat_config(config: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{"a.b": value}`` with hashable values (a list becomes its JSON text),
    without the keys that do not change results."""
    flat: dict[str, Any] = {}
    if not isinstance(config, dict):
        return flat
    for key, value in config.items():
        name = f"{prefix}{key}"
        if not prefix and key in _NOT_RESULTS:
            continue
        if isinstance(value, dict):
            flat.update(flat_config(value, f"{name}."))
        elif isinstance(value, list | tuple):
            flat[name] = json.dumps(value, sort_keys=True, default=str)
        else:
            flat[name] = value
    return flat


def _hydra_config(run: Path) -> dict[str, Any]:
    """A run's ``.hydra/config.yaml``, resolved where it can be ({} if absent or unreadable)."""
    path = run / ".hydra" / "config.yaml"
    try:
        config = OmegaConf.load(path)
    except (OSError, ValueError):
        return {}
    for resolve in (True, False):
        try:
            data = OmegaConf.to_container(config, resolve=resolve)
        except Exception:  # noqa: BLE001, S112 - an interpolation only Hydra can resolve: keep it unresolved
            continue
        return data if isinstance(data, dict) else {}
    return {}


def _differing_keys(configs: list[dict[str, Any]]) -> list[str]:
    """Keys (dotted) whose value is not the same in every config (a missing key counts as a value),
    seeds excluded, sorted."""
    keys = sorted({k for c in configs for k in c} - set(SEED_COLUMNS))
    missing = object()
    return [k for k in keys if len({_hashable(c.get(k, missing)) for c in configs}) > 1]


def _hashable(value: Any) -> Any:
    """``value`` as a set member (floats equal to ints count as one value, as in the configs)."""
    return value if isinstance(value, int | float | str | bool | type(None)) else repr(value)


def group_columns(runs: pd.DataFrame) -> list[str]:
    """The config columns that tell runs' settings apart: ``policy`` and ``beta``, then every other
    config column whose value differs between runs, except a dotted resolved key whose value the
    columns before it already fix (``arrivals.interval_s`` follows ``mean_interarrival_s``).

    Runs with equal values in these columns differ at most in their seed (:data:`SEED_COLUMNS`),
    so grouping by them averages over seeds only.
    """
    overrides = set(runs.attrs.get("override_columns", ()))
    candidates = [c for c in config_columns(runs) if c not in SEED_COLUMNS]
    # Known columns and the user's own overrides name a setting best; other resolved keys last.
    candidates.sort(key=lambda c: 0 if c in CONFIG_COLUMNS else 1 if c in overrides else 2)
    chosen = [c for c in ("policy", "beta") if c in runs.columns]
    for column in candidates:
        if column in chosen or runs[column].nunique(dropna=False) <= 1:
            continue
        if column in CONFIG_COLUMNS or column in overrides or not chosen:
            chosen.append(column)
            continue
        per_group = runs.groupby(chosen, dropna=False)[column].nunique(dropna=False)
        if (per_group > 1).any():
            chosen.append(column)
    return chosen


def held_fixed(runs: pd.DataFrame) -> dict[str, Any]:
    """The config columns (:data:`CONFIG_COLUMNS` and overrides) with one value in every run, e.g.
    ``{"scenario": "paper", "cluster": "ramp32"}``: what a figure of these runs holds fixed."""
    overrides = set(runs.attrs.get("override_columns", ()))
    fixed = {}
    for column in config_columns(runs):
        if column in SEED_COLUMNS or (column not in CONFIG_COLUMNS and column not in overrides):
            continue
        values = runs[column].dropna().unique()
        if len(values) == 1 and runs[column].notna().all():
            fixed[column] = values[0]
    return fixed


_SERVER_SPAN = re.compile(r"^(\d+)(?:\.\.(\d+))?$")


#: A job holds at most the servers of RAMP's largest design (65,536): a bigger box in a ``servers``
#: cell is a garbled file, refused before it is expanded (it could otherwise exhaust memory).
MAX_SERVERS_PER_JOB = 65_536


def job_server_names(cell: str) -> list[str]:
    """The ``c-r-s`` servers of one ``jobs.csv`` ``servers`` cell, in server-index order
    (``c``, then ``r``, then ``s``).

    Jobs on at most 64 servers list each one (``0-0-0 1-0-0``); bigger ones are written as boxes
    ``C-R-S`` where each part is a number or an inclusive range ``a..b`` (``0..31-0..31-0`` is
    the 1,024 servers of groups 0-31, racks 0-31, server 0; the boxes of a job are disjoint).
    Both forms are read; an empty cell is no server.

    Raises:
        ValueError: A token that is neither form, or more servers than :data:`MAX_SERVERS_PER_JOB`.
    """
    coords: list[tuple[int, int, int]] = []
    for token in cell.split():
        parts = token.split("-")
        spans = [_SERVER_SPAN.match(p) for p in parts]
        if len(parts) != 3 or any(m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1)))
                                  for m in spans):
            raise ValueError(f"bad server {token[:40]!r}: expected c-r-s, each a number or a range a..b")
        c, r, s = (range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1) for m in spans if m is not None)
        if len(coords) + len(c) * len(r) * len(s) > MAX_SERVERS_PER_JOB:
            raise ValueError(f"bad server {token[:40]!r}: more than {MAX_SERVERS_PER_JOB:,} servers in one job")
        coords += [(ci, ri, si) for ci in c for ri in r for si in s]
    return [f"{c}-{r}-{s}" for c, r, s in sorted(coords)]


def load_jobs(run_dir: str | Path, expected_jobs: int | None = None) -> pd.DataFrame:
    """One run's ``jobs.csv`` (one row per job; empty strings for no block reason or servers).

    Rows are in job-id order as ``pacml sim`` writes them (nothing here depends on it). The
    ``servers`` cell is kept as written; :func:`job_server_names` expands it.

    Args:
        run_dir: The run directory.
        expected_jobs: If given (``summary.json``'s ``num_jobs_arrived``), the number of rows the
            file must have (a file cut at a line boundary is otherwise a valid CSV).

    Raises:
        RunFileError: The file is missing, not UTF-8, truncated (no final newline, a short row,
            fewer rows than expected), lacks a needed column, or holds a non-number in a numeric
            column or an unknown outcome; the message names the file and line.
    """
    path = Path(run_dir) / "jobs.csv"
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise RunFileError(f"{path}: {exc.strerror or _one_line(exc)}") from exc
    except UnicodeDecodeError as exc:
        raise RunFileError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    if not text.endswith("\n"):
        raise RunFileError(f"{path}: truncated (no newline at the end)")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
        rows, lines = [], []
        for row in reader:
            if len(row) != len(header):
                raise RunFileError(f"{path}:{reader.line_num}: {len(row)} fields, the header has {len(header)}")
            rows.append(row)
            lines.append(reader.line_num)
    except csv.Error as exc:
        raise RunFileError(f"{path}:{reader.line_num}: {_one_line(exc)}") from exc
    except StopIteration:
        raise RunFileError(f"{path}: empty") from None
    missing = [c for c in JOB_REQUIRED_COLUMNS if c not in header]
    if missing or len(set(header)) != len(header):
        raise RunFileError(f"{path}:1: " + (f"missing columns {', '.join(missing)}" if missing
                                             else "repeated column names"))
    if expected_jobs is not None and len(rows) != expected_jobs:
        raise RunFileError(f"{path}: {len(rows)} jobs, but summary.json counts {expected_jobs} arrivals")
    jobs = pd.DataFrame(rows, columns=header, dtype=object)
    for column in header:
        raw = jobs[column].astype(str)
        if column in JOB_NUMBER_COLUMNS:
            values = pd.to_numeric(raw.where(raw != "", "nan"), errors="coerce")
            bad = values.isna() & ~raw.str.lower().isin(("", "nan"))
            if bad.any():
                i = int(bad.to_numpy().argmax())
                raise RunFileError(f"{path}:{lines[i]}: column {column!r}: not a number: {raw.iloc[i][:40]!r}")
            jobs[column] = values
        else:
            jobs[column] = raw
    unknown = ~jobs["outcome"].isin(JOB_OUTCOMES)
    if unknown.any():
        i = int(unknown.to_numpy().argmax())
        raise RunFileError(f"{path}:{lines[i]}: unknown outcome {jobs['outcome'].iloc[i][:40]!r}")
    return jobs


def load_sweep_jobs(runs: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The jobs of every run in ``runs``, each row tagged with its run's ``columns`` (default:
    ``policy``, ``seed``, ``mean_interarrival_s`` and the :func:`group_columns`) and ``run_dir``.
    ``attrs["setting_columns"]`` holds the run's :func:`group_columns`.

    A job column that a run column would overwrite is renamed ``job_<name>`` (``jobs.csv``'s
    ``beta`` is the job's JCT target fraction, the run's ``beta`` its distribution's name).
    A run whose ``jobs.csv`` is missing or unreadable (:func:`load_jobs`) is logged as one
    warning and skipped.
    """
    return _sweep_jobs(runs, columns)[1]


def load_sweep_with_jobs(sweep_dir: str | Path, columns: Sequence[str] | None = None
                         ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`load_sweep` and :func:`load_sweep_jobs` together, keeping only runs whose files are
    both sound: a run with a bad ``summary.json`` or ``jobs.csv`` is skipped with one warning
    naming the file, so tables and figures describe the same runs.

    Returns:
        ``(runs, jobs)``.
    """
    runs = load_sweep(sweep_dir)
    good, jobs = _sweep_jobs(runs, columns)
    return runs[runs["run_dir"].isin(good)].reset_index(drop=True), jobs


def _sweep_jobs(runs: pd.DataFrame, columns: Sequence[str] | None) -> tuple[list[str], pd.DataFrame]:
    """(run directories whose jobs loaded, their tagged jobs); see :func:`load_sweep_jobs`."""
    setting = group_columns(runs) if not runs.empty else []
    if columns is None:
        columns = tuple(dict.fromkeys(c for c in ("policy", "beta", "seed", "mean_interarrival_s", *setting)
                                      if c in runs.columns))
    frames, good = [], []
    for run in runs.to_dict("records"):
        expected = run.get("num_jobs_arrived")
        expected = int(expected) if isinstance(expected, int | float) and math.isfinite(expected) else None
        try:
            jobs = load_jobs(run["run_dir"], expected)
        except RunFileError as exc:
            log.warning("skipping %s: %s", run["run_dir"], exc)
            continue
        good.append(run["run_dir"])
        jobs = jobs.rename(columns={c: f"job_{c}" for c in (*columns, "run_dir") if c in jobs.columns})
        for column in columns:
            jobs[column] = run[column]
        jobs["run_dir"] = run["run_dir"]
        frames.append(jobs)
    tagged = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    tagged.attrs["setting_columns"] = [c for c in setting if c in columns]
    return good, tagged


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


PLACEMENT_COLUMNS = ("graph", "devices_choice", "objective", "method", "seed")
"""Config columns of :func:`load_placement_sweep`."""


def is_placement_run(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a ``summary.json`` written by ``pacml place``."""
    try:
        summary = json.loads((Path(run_dir) / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(summary, dict) and summary.get("kind") == "placement"


def load_placement_sweep(sweep_dir: str | Path) -> pd.DataFrame:
    """One row per finished ``pacml place`` run under ``sweep_dir``.

    Columns: ``run_dir``, :data:`PLACEMENT_COLUMNS` (``devices_choice`` is the preset name, e.g.
    ``gpu4``), ``devices`` (the set described), ``value_s``, ``value_ms``, ``feasible``,
    ``reason``, ``single_device``, ``single_device_value_s``, ``speedup_vs_single``,
    ``method_wall_s``, ``evaluations``, ``gantt`` (chart file names), ``graph_name`` (the graph's own
    name; "" if the run did not record it). A run whose
    ``summary.json`` is unreadable or lacks these is skipped with one warning.
    """
    rows = []
    for run in find_run_dirs(sweep_dir):
        path = run / "summary.json"
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            log.warning("skipping %s: unreadable summary.json (%s)", run, _one_line(exc))
            continue
        if not isinstance(summary, dict) or summary.get("kind") != "placement":
            continue
        try:
            rows.append(_placement_row(run, summary))
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("skipping %s: summary.json is not a pacml place summary (%s)", run, _one_line(exc))
    columns = ["run_dir", *PLACEMENT_COLUMNS, "graph_name", "devices", "value_s", "value_ms", "feasible", "reason",
               "single_device", "single_device_value_s", "speedup_vs_single", "method_wall_s", "evaluations", "gantt"]
    if not rows:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["graph", "devices_choice", "objective", "method", "seed"], kind="stable",
                             na_position="first").reset_index(drop=True)


def _number(value: Any, key: str) -> float:
    """A JSON number (``None``: not finite, e.g. an infeasible value) as a float."""
    if value is None:
        return math.inf if key.endswith("value_s") else math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key!r} is not a number: {str(value)[:40]!r}")
    return float(value)


def _group_overrides(run: Path, group: str) -> str:
    """``[key=value,...]`` of the run's command-line overrides inside config group ``group``
    (e.g. ``method.max_evaluations=50``), or ``""``: runs that differ in them are different
    methods or device sets, not seeds of one."""
    file = run / ".hydra" / "overrides.yaml"
    try:
        items = yaml.safe_load(file.read_text()) if file.is_file() else []
    except (OSError, yaml.YAMLError):
        return ""
    inner = sorted(str(o).split(".", 1)[1] for o in items or [] if str(o).startswith(f"{group}."))
    return f"[{','.join(inner)}]" if inner else ""


def _placement_row(run: Path, s: dict[str, Any]) -> dict[str, Any]:
    config = s.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError("'config' is not an object")
    described = str(s["devices"]).split(":")[0]
    choice = str(config.get("devices") or described)
    if choice in ("auto", "file") and described and described != choice:
        choice = f"{choice}={described}"  # auto resolves to gpu4 or the file's own devices
    row: dict[str, Any] = {
        "run_dir": str(run),
        "graph": str(s["graph"]),
        "graph_name": str(s.get("graph_name") or ""),
        "devices_choice": choice + _group_overrides(run, "devices"),
        "objective": str(s["objective"]),
        "method": str(s["method"]) + _group_overrides(run, "method"),
        "seed": int(s.get("seed", 0)),
        "devices": str(s["devices"]),
        "feasible": bool(s["feasible"]),
        "reason": str(s.get("reason") or ""),
        "single_device": str(s.get("single_device") or ""),
        "evaluations": int(s.get("evaluations") or 0),
        "gantt": [str(g) for g in s.get("gantt") or []],
    }
    for key in ("value_s", "single_device_value_s", "speedup_vs_single", "method_wall_s"):
        row[key] = _number(s.get(key), key)
    row["value_ms"] = row["value_s"] * 1e3
    return row
