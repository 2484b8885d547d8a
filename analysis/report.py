"""``pacml report SWEEP_DIR [--out DIR]``: tables, figures and a Markdown/HTML report of a sweep.

Writes into ``DIR`` (default ``SWEEP_DIR/report``): ``report.md``, ``report.html``,
``figures/*.png|svg`` and ``tables/*.csv``, then prints the path of ``report.md``. Bad input
(not a directory, no finished runs) ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from urllib.parse import quote

import markdown
import pandas as pd
from matplotlib.figure import Figure

from analysis.paper_reference import (
    PAPER_BLOCKING_RATE,
    PAPER_DEMAND_THROUGHPUT_BPS,
    PAPER_HORIZON_S,
    PAPER_MEAN_INTERARRIVAL_S,
    PAPER_POLICY_LABELS,
)
from analysis.plots import (
    DataFigure,
    describe_value,
    format_value,
    ordered_policies,
    per_time,
    plot_blocking_vs_load,
    plot_degree_histogram,
    plot_jct_cdf,
    plot_policy_bars,
    plot_utilisation_timeline,
    policy_label,
    policy_styles,
    rows_with,
    run_time_units,
    save_figure,
    time_unit,
)
from analysis.runs import (
    cluster_num_servers,
    config_columns,
    find_run_dirs,
    group_columns,
    held_fixed,
    is_placement_run,
    load_placement_sweep,
    load_run_config,
    load_sweep_with_jobs,
)
from analysis.stats import MIN_SEEDS_FOR_INTERVAL, aggregate, interval_column, interval_note
from workloads.io import atomic_write_text

log = logging.getLogger(__name__)

PROG = "pacml report"

THROUGHPUT_UNIT_BPS = 1e7
"""Throughputs in the Markdown tables are in units of this many bytes per second."""

SUMMARY_METRICS = {
    "blocking_rate": ("Blocking rate", 1.0, "{:.3f}"),
    "demand_throughput_Bps": ("Throughput (1e7 {per_time})", THROUGHPUT_UNIT_BPS, "{:.2f}"),
    "mean_jct_s": ("Mean JCT ({time})", 1.0, "{:.0f}"),
    "mean_degree": ("Mean degree", 1.0, "{:.2f}"),
    "mean_server_utilisation": ("Server utilisation", 1.0, "{:.3f}"),
}
"""Metrics of the report's summary table: column -> (heading, unit, number format); ``{time}``
and ``{per_time}`` in a heading are the runs' time unit (:func:`analysis.plots.time_unit`)."""

TABLE_METRICS = (*SUMMARY_METRICS, "acceptance_rate", "cluster_throughput_Bps", "mean_speedup",
                 "mean_servers_per_job", "mean_compute_utilisation", "mean_jobs_running",
                 "num_jobs_arrived", "num_blocked_rejected", "num_blocked_no_placement",
                 "num_blocked_jct_target", "num_blocked_running_at_horizon")
"""Metrics aggregated into ``tables/summary.csv`` (those present in the sweep)."""


NO_RUNS = pd.Series({"n": 0, "mean": math.nan, "ci_low": math.nan, "ci_high": math.nan})
"""Statistics of a group without runs."""


class ReportError(Exception):
    """The input cannot make a report (not a directory, no finished runs)."""


@dataclass(frozen=True, slots=True)
class ReportFigure:
    """A figure written for the report: file stem, heading and caption."""

    name: str
    title: str
    caption: str


def build_report(sweep_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """Write the report of the runs under ``sweep_dir`` and return the path of ``report.md``.

    Args:
        sweep_dir: A sweep directory (or any tree of run directories).
        out_dir: Where to write; default ``sweep_dir/report``.

    Raises:
        ReportError: ``sweep_dir`` is not a directory or holds no finished run.
    """
    sweep = Path(sweep_dir)
    if not sweep.is_dir():
        raise ReportError(f"not a directory: {sweep}")
    if any(is_placement_run(run) for run in find_run_dirs(sweep)):
        return build_placement_report(sweep, out_dir)
    # A run whose summary.json or jobs.csv is damaged is skipped whole (one warning naming the
    # file), so the tables and the figures describe the same runs.
    runs, jobs = load_sweep_with_jobs(sweep)
    if runs.empty:
        raise ReportError(f"no finished runs (summary.json) under {sweep}")
    out = Path(out_dir) if out_dir is not None else sweep / "report"
    figures_dir, tables_dir = out / "figures", out / "tables"
    num_skipped = len(find_run_dirs(sweep)) - len(runs)

    groups = group_columns(runs)
    metrics = [m for m in TABLE_METRICS if m in runs.columns]
    summary = aggregate(runs, groups, metrics)
    summary["interval"] = interval_column(summary["n"])
    comparison = paper_comparison(runs)
    atomic_write_text(tables_dir / "runs.csv", runs.to_csv(index=False))
    atomic_write_text(tables_dir / "summary.csv", summary.to_csv(index=False))
    if not comparison.empty:
        atomic_write_text(tables_dir / "paper_comparison.csv", comparison.to_csv(index=False))

    figures = _write_figures(runs, jobs, figures_dir)
    text = _markdown(sweep, runs, num_skipped, groups, summary, comparison, figures)
    report = atomic_write_text(out / "report.md", text)
    atomic_write_text(out / "report.html", _html(text))
    return report


PAPER_SETUP = {"scenario": "paper", "cluster": "ramp32", "workload": "paper", "arrivals": "fixed",
               "horizon_accounting": "paper"}
"""Group choices (and accounting) of the paper's setup (spec §14.1); a run that records another
value for one of them is not in it."""


def paper_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs made in the paper's setup: the paper scenario with its cluster, workload, arrivals,
    accounting, load and horizon, and no command-line override of a nested key outside the policy
    (``sim.*``, ``cluster.*``, ...; a ``policy.*`` override is a variant of the policy, kept and
    shown as its own row)."""
    mask = (_close(runs["mean_interarrival_s"], PAPER_MEAN_INTERARRIVAL_S)
            & _close(runs["horizon_s"], PAPER_HORIZON_S))
    for column, value in PAPER_SETUP.items():
        if column in runs.columns:
            mask &= runs[column].eq(value) | (runs[column].isna() & (column != "scenario"))
    for column in runs.attrs.get("override_columns", ()):
        if column in runs.columns and not column.startswith("policy."):
            mask &= runs[column].isna()
    return runs[mask]


def paper_comparison(runs: pd.DataFrame) -> pd.DataFrame:
    """Our blocking rate and throughput beside the paper's, per beta and policy.

    Only runs in the paper's setup (:func:`paper_runs`) count; every beta they cover gets a row
    for each policy that either we ran or the paper reports (ours NaN, ``n`` 0, if not run). The
    paper's PAC-ML numbers sit beside ``pacml_beta`` (its per-beta agents); ``pacml``, our adaptive
    agent, is not the paper's method and gets none.

    Returns:
        Columns ``beta``, ``policy``, ``n``, ``blocking_mean``, ``blocking_ci_low``,
        ``blocking_ci_high``, ``paper_blocking``, ``throughput_Bps_mean``,
        ``throughput_Bps_ci_low``, ``throughput_Bps_ci_high``, ``paper_throughput_Bps``;
        empty if no run matches.
    """
    matching = paper_runs(runs)
    if matching.empty:
        return pd.DataFrame()
    # Policy variants (a policy.* override) are rows of their own, never averaged with the policy.
    extra = [c for c in group_columns(matching) if c not in ("beta", "policy")]
    keys = ["beta", "policy", *extra]
    stats = aggregate(matching, keys, ["blocking_rate", "demand_throughput_Bps"])
    variants = {p: list(dict.fromkeys(matching.loc[matching["policy"] == p, extra]
                                      .itertuples(index=False, name=None))) or [()]
                for p in matching["policy"].unique()}
    policies = list(dict.fromkeys([*PAPER_POLICY_LABELS, *ordered_policies(matching["policy"])]))
    rows = []
    for beta in sorted(matching["beta"].unique()):
        for policy in policies:
            for variant in variants.get(policy, [tuple(math.nan for _ in extra)]):
                values = dict(zip(extra, variant, strict=True))
                row: dict[str, object] = {"beta": beta, "policy": policy, **values}
                for metric, short, paper in (("blocking_rate", "blocking", PAPER_BLOCKING_RATE),
                                             ("demand_throughput_Bps", "throughput_Bps",
                                              PAPER_DEMAND_THROUGHPUT_BPS)):
                    found = rows_with(stats, {"metric": metric, "beta": beta, "policy": policy, **values})
                    ours = found.iloc[0] if len(found) else NO_RUNS
                    row["n"] = int(ours["n"])
                    row.update({f"{short}_{k}": ours[k] for k in ("mean", "ci_low", "ci_high")})
                    row[f"paper_{short}"] = paper.get(policy, {}).get(beta, math.nan)
                if row["n"] or not math.isnan(row["paper_blocking"]):
                    rows.append(row)
    return pd.DataFrame(rows)


def _fail(message: str) -> NoReturn:
    """``pacml report: error: message`` on one line of stderr, exit status 2."""
    sys.stderr.write(f"{PROG}: error: {' '.join(message.split())}\n")
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    """Bad arguments end in one line (not argparse's usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:  # noqa: D102 - argparse's hook
        _fail(f"{message} (see {PROG} --help)")


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point (``pacml report``)."""
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="sweep (or run) directory written by pacml sim or pacml place")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: SWEEP_DIR/report)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format=f"{PROG}: %(levelname)s: %(message)s")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        _fail(f"--out: {args.out}: exists and is not a directory")
    try:
        report = build_report(args.sweep_dir, args.out)
    except ReportError as exc:
        _fail(str(exc))
    except OSError as exc:  # e.g. --out under a read-only folder
        _fail(f"{exc.filename or args.out or args.sweep_dir}: {exc.strerror or exc}")
    sys.stdout.write(f"report: {report}\n")


def _file_stem(name: str) -> str:
    """``name`` as a safe file name stem (a policy's class or config name)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip("._") or "policy"


def _write_figures(runs: pd.DataFrame, all_jobs: pd.DataFrame, figures_dir: Path) -> list[ReportFigure]:
    """Every figure the runs (and their jobs, :func:`analysis.runs.load_sweep_jobs`) support, saved
    as PNG and SVG with their data as CSV; returns them in report order."""
    written: list[ReportFigure] = []
    groups = group_columns(runs)
    styles = policy_styles(runs["policy"])
    note = interval_note()

    def save(fig: Figure, name: str, title: str, caption: str) -> None:
        save_figure(fig, figures_dir, name)
        written.append(ReportFigure(name, title, caption))

    splits = [c for c in groups if c not in ("policy", "mean_interarrival_s") and runs[c].nunique(dropna=False) > 1]
    split_text = ", ".join("β" if c == "beta" else c for c in splits) or "nothing (one setting)"
    loads = sorted(runs["mean_interarrival_s"].dropna().unique())
    others = [c for c in groups if c != "mean_interarrival_s"]
    # A load that follows another key (each cluster at its own load) is no load axis: nothing to pick.
    follows = bool(others) and runs.groupby(others, dropna=False)["mean_interarrival_s"].nunique().max() <= 1
    load_axis = len(loads) > 1 and not follows
    at_load, where = runs, ""
    if load_axis:
        save(plot_blocking_vs_load(runs, by=groups, styles=styles), "blocking_vs_load", "Blocking rate vs load",
             "Blocking rate against mean inter-arrival time (load grows to the right), one line per "
             f"policy, one panel per value of {split_text}; bands: {note}; hollow markers: each "
             "seed where fewer; n in the legend.")
        # The other figures show one load: the one closest to the paper's.
        load = min(loads, key=lambda x: abs(math.log(x / PAPER_MEAN_INTERARRIVAL_S)))
        at_load = runs[_close(runs["mean_interarrival_s"], load)].copy()
        where = f" at mean inter-arrival time {load:g} {time_unit(at_load)} (one of the {len(loads)} swept)"
        # One load of several: the titles say so instead of calling it held fixed.
        at_load.attrs.update(selected={"mean_interarrival_s": load}, swept={"mean_interarrival_s": loads})
    matches_paper = len(paper_runs(at_load)) == len(at_load)
    reference = {"blocking_rate": PAPER_BLOCKING_RATE,
                 "demand_throughput_Bps": PAPER_DEMAND_THROUGHPUT_BPS} if matches_paper else None
    bar_groups = others if load_axis else groups
    save(plot_policy_bars(at_load, reference=reference, by=bar_groups, styles=styles), "policy_bars",
         "Blocking rate and throughput per setting",
         f"Blocking rate (top) and demand throughput (bottom){where}, one group of bars per value of "
         f"{split_text}, one bar per policy; error bars: {note}; hollow markers: each seed where "
         "fewer; n in the legend"
         + ("; white diamonds are the paper's numbers (spec §14.2-14.3)." if reference else "."))

    jobs = all_jobs[all_jobs["run_dir"].isin(at_load["run_dir"])] if not all_jobs.empty else all_jobs
    if jobs.empty:
        return written
    # Every config column of the job's run, so a figure of jobs names what it holds fixed.
    jobs = jobs.merge(runs[["run_dir", *[c for c in config_columns(runs) if c not in jobs.columns]]],
                      on="run_dir", how="left")
    jobs.attrs["override_columns"] = runs.attrs.get("override_columns", [])
    jobs.attrs.update({k: at_load.attrs[k] for k in ("selected", "swept") if k in at_load.attrs})
    facets = [c for c in groups if c not in ("policy", "mean_interarrival_s")]
    unit = time_unit(at_load)
    save(plot_jct_cdf(jobs, facet=facets, unit=unit, styles=styles), "jct_cdf", "Job completion times",
         f"Distribution of the job completion time of completed jobs{where}, per policy and value of "
         f"{split_text} (seeds pooled), in {unit}.")
    save(plot_degree_histogram(jobs, facet=facets, styles=styles), "degree_histogram", "Chosen partition degrees",
         f"Share of jobs per chosen partition degree{where} (0 = rejected), per policy and value of "
         f"{split_text} (seeds pooled).")
    stems: set[str] = set()
    for run in at_load.groupby("policy", sort=False).head(1).to_dict("records"):
        num_servers = cluster_num_servers(load_run_config(run["run_dir"]))
        if num_servers is None:
            log.warning("no utilisation figure for %s: cluster size unknown", run["run_dir"])
            continue
        setting = ", ".join(describe_value(c, run[c]) for c in groups if c not in ("policy",))
        name = f"{policy_label(run['policy'])}, {setting}, seed {run['seed']}"
        stem = f"utilisation_{_file_stem(run['policy'])}"
        while stem in stems:
            stem += "_"
        stems.add(stem)
        run_unit = time_unit(at_load[at_load["run_dir"] == run["run_dir"]])
        identity = {**held_fixed(at_load), **{c: run[c] for c in groups}, "seed": run["seed"],
                    "run_dir": run["run_dir"]}
        save(plot_utilisation_timeline(jobs[jobs["run_dir"] == run["run_dir"]], num_servers, name, unit=run_unit,
                                       run=identity),
             stem, f"Cluster occupancy: {policy_label(run['policy'])}",
             f"One run ({name}{where}): fraction of the {num_servers} servers held by running "
             "jobs, and the number of jobs running, over simulated time.")
    return written


def _markdown(sweep: Path, runs: pd.DataFrame, num_skipped: int, groups: list[str],
              summary: pd.DataFrame, comparison: pd.DataFrame, figures: list[ReportFigure]) -> str:
    """The report's Markdown text."""
    seeds = sorted(runs["seed"].dropna().unique())
    unit = time_unit(runs)
    lines = [
        f"# Experiment report: {sweep.name}",
        "",
        f"- Sweep directory: `{sweep}`",
        f"- Runs: {len(runs)}" + (f" ({num_skipped} unfinished or unreadable, skipped)"
                                  if num_skipped else ""),
    ]
    lines.append(f"- Policies: {', '.join(policy_label(p) for p in ordered_policies(runs['policy']))}")
    fixed = held_fixed(runs)
    if fixed:
        lines.append("- Held fixed: " + ", ".join(describe_value(k, v) for k, v in fixed.items()))
    varying = [c for c in groups if runs[c].nunique(dropna=False) > 1]
    if varying:
        lines.append("- Differing between runs (each value its own row, curve or panel; never averaged): "
                     + ", ".join(f"{c} ({', '.join(map(format_value, _sorted_values(runs[c])))})"
                                 for c in varying))
    lines.append(f"- Time unit: {unit} (mean inter-arrival time, horizon, JCT; throughput in {per_time(unit)})")
    lines += [f"- Seeds: {', '.join(str(int(s)) for s in seeds)} (the only thing averaged)", "",
              "## Summary", "",
              f"Mean over n seeds; ± half-width (or [low, high] where clipped) of the {interval_note()} "
              f"(none for n < {MIN_SEEDS_FOR_INTERVAL}). Throughput is the demand "
              "throughput (the paper's); utilisation is the time-average fraction of servers held.",
              "", _summary_table(summary, groups, runs), ""]
    lines += ["## Ours vs the paper", ""]
    if comparison.empty:
        lines += [f"No run matches the paper's setup (scenario paper on cluster ramp32, mean inter-arrival "
                  f"{PAPER_MEAN_INTERARRIVAL_S:g}, horizon {PAPER_HORIZON_S:g} profile time units).", ""]
    else:
        lines += ["Paper: spec §14.2 (blocking, mean of 3 seeds) and §14.3 (throughput, in bytes per "
                  "profile time unit, which the paper calls seconds); its PAC-ML (one GNN + PPO agent "
                  "per β, final checkpoint) is set beside ours, PAC-ML (per β) (`policy=pacml_beta`). "
                  f"Ours: mean over n seeds ± the {interval_note()}.", "",
                  _comparison_table(comparison), "", *_comparison_notes(comparison)]
    lines += ["## Figures", "",
              "Each figure's data (one row per plotted point: the values that define its group, the mean, "
              "the interval, n) is beside it as CSV.", ""]
    for fig in figures:
        lines += [f"### {fig.title}", "",
                  f"![{fig.name}](figures/{_url(fig.name)}.png)", "", fig.caption,
                  f"([SVG](figures/{_url(fig.name)}.svg), [data](figures/{_url(fig.name)}.csv))", ""]
    lines += ["## Tables", "",
              "- `tables/runs.csv`: one row per run (config and every metric of summary.json).",
              "- `tables/summary.csv`: mean, std, n, CI and what the interval is per group and metric (tidy).",
              *(["- `tables/paper_comparison.csv`: the table above."] if not comparison.empty
                else []), ""]
    return "\n".join(lines)


def _sorted_values(column: pd.Series) -> list[object]:
    return sorted(column.drop_duplicates().tolist(), key=lambda v: (pd.isna(v), str(type(v)), v if not pd.isna(v) else 0))


def _summary_table(summary: pd.DataFrame, groups: list[str], runs: pd.DataFrame) -> str:
    """Markdown table: one row per group, ``mean ± half-width`` per summary metric."""
    wide = summary.set_index([*groups, "metric"])
    rank = {p: i for i, p in enumerate(ordered_policies(summary["policy"]))}
    keys = sorted(summary[groups].drop_duplicates().itertuples(index=False, name=None),
                  key=lambda key: rank[key[0]])
    metrics = {m: spec for m, spec in SUMMARY_METRICS.items() if m in set(summary["metric"])}
    unit = time_unit(runs)
    units = pd.Series(run_time_units(runs).to_numpy(), index=runs["run_dir"])
    mixed = " or " in unit
    header = [*groups, "n", *(["time unit"] if mixed else []),
              *(heading.format(time=unit if not mixed else "time unit", per_time=per_time(unit) if not mixed
                               else "B per time unit") for heading, _, _ in metrics.values())]
    rows = []
    for policy, *rest in keys:
        key = (policy, *rest)
        cells = [policy_label(policy), *(format_value(v) for v in rest),
                 str(int(wide.loc[(*key, "blocking_rate"), "n"]))]
        if mixed:
            dirs = rows_with(runs, dict(zip(groups, key, strict=True)))["run_dir"]
            cells.append(" or ".join(dict.fromkeys(units[dirs])))
        for metric, (_, scale, fmt) in metrics.items():
            stat = wide.loc[(*key, metric)]
            cells.append(_interval_text(stat["mean"] / scale, stat["ci_low"] / scale, stat["ci_high"] / scale, fmt))
        rows.append(cells)
    return _md_table(header, rows)


def _comparison_table(comparison: pd.DataFrame) -> str:
    """Markdown table of :func:`paper_comparison`."""
    extra = [c for c in comparison.columns if c not in _COMPARISON_COLUMNS]
    header = ["β", "Policy", *extra, "n", "Blocking (ours)", "Blocking (paper)",
              "Throughput 1e7 B per profile time unit (ours)", "Throughput 1e7 B per profile time unit (paper)"]
    unit = THROUGHPUT_UNIT_BPS
    rows = [[r["beta"], _COMPARISON_LABELS.get(r["policy"], policy_label(r["policy"])),
             *(format_value(r[c]) for c in extra), str(r["n"]),
             # A policy the paper reports but this sweep did not run says so, not just a dash.
             _interval_text(r["blocking_mean"], r["blocking_ci_low"], r["blocking_ci_high"], "{:.3f}")
             if r["n"] else "not run",
             _num(r["paper_blocking"], "{:.4f}"),
             _interval_text(r["throughput_Bps_mean"] / unit, r["throughput_Bps_ci_low"] / unit,
                            r["throughput_Bps_ci_high"] / unit, "{:.2f}") if r["n"] else "not run",
             _num(r["paper_throughput_Bps"] / unit, "{:.3f}")]
            for r in comparison.to_dict("records")]
    return _md_table(header, rows)


_COMPARISON_LABELS = {"pacml": "PAC-ML adaptive (ours, not the paper's method)"}
"""Comparison-table labels that differ from the legend's: the adaptive agent (``policy=pacml``)
has no paper number, and its row must not read as the paper's PAC-ML."""


def _comparison_notes(comparison: pd.DataFrame) -> list[str]:
    """Lines under the comparison table: which PAC-ML the paper's numbers belong to, and that
    the paper's agent was not run when no ``pacml_beta`` run is in the table."""
    policies = set(comparison["policy"])
    ran = set(comparison.loc[comparison["n"] > 0, "policy"])
    notes = []
    if "pacml" in policies:
        notes.append("PAC-ML adaptive (`policy=pacml`) is this project's adaptive agent (one agent for "
                     "every β, with block placement), not the paper's method: it has no paper number. "
                     "The paper's PAC-ML is PAC-ML (per β) (`policy=pacml_beta`).")
    if "pacml_beta" not in ran:
        notes.append("The paper's agent, PAC-ML (per β) (`policy=pacml_beta`), was not run in this "
                     "sweep: its rows give the paper's numbers only, beside no result of ours.")
    return [line for note in notes for line in (note, "")]


_COMPARISON_COLUMNS = ("beta", "policy", "n", "blocking_mean", "blocking_ci_low", "blocking_ci_high",
                       "paper_blocking", "throughput_Bps_mean", "throughput_Bps_ci_low", "throughput_Bps_ci_high",
                       "paper_throughput_Bps")


def _interval_text(mean: float, low: float, high: float, fmt: str) -> str:
    """``mean ± half`` for a symmetric interval, ``mean [low, high]`` for one clipped to its
    bounds, just the mean without one, a dash without a mean."""
    if math.isnan(mean):
        return "–"
    if math.isnan(low) or math.isnan(high):
        return fmt.format(mean)
    if math.isclose(mean - low, high - mean, rel_tol=1e-9, abs_tol=1e-12):
        return f"{fmt.format(mean)} ± {fmt.format(high - mean)}"
    return f"{fmt.format(mean)} [{fmt.format(low)}, {fmt.format(high)}]"


def _url(path: str) -> str:
    """A relative path as a link target: each part percent-encoded (a run folder named
    ``graph=a%2Fb.json`` must reach the server as ``%252F``, not as a ``/``)."""
    return "/".join(quote(part, safe="=,+@") for part in path.split("/"))


def _md_text(text: str) -> str:
    """``text`` safe inside a Markdown link text or table cell."""
    return re.sub(r"([\\`\[\]|<>])", r"\\\1", str(text))


def _num(value: float, fmt: str) -> str:
    """A number, or a dash for NaN."""
    return "–" if math.isnan(value) else fmt.format(value)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _close(values: pd.Series, target: float) -> pd.Series:
    """Which of ``values`` equal ``target`` up to float rounding."""
    return (pd.to_numeric(values, errors="coerce") - target).abs() <= 1e-9 * abs(target)


def _html(text: str) -> str:
    """A standalone HTML page of the Markdown report."""
    body = markdown.markdown(text, extensions=["tables"])
    style = ("body{font-family:sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem}"
             "table{border-collapse:collapse;font-size:.9rem}td,th{border:1px solid #ccc;"
             "padding:.2rem .5rem;text-align:right}img{max-width:100%}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Experiment report"
            f"</title><style>{style}</style></head><body>\n{body}\n</body></html>\n")


# ------------------------------------------------------------------ placement sweeps (pacml place)
PLACEMENT_KEYS = ["graph", "devices_choice", "objective"]
"""A placement problem: methods are compared within one (graph, device set, objective)."""


def placement_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per problem and method: mean value over seeds, speed-up over the single device
    and over every other method run on the same problem (``vs_<method>``: its value over ours)."""
    grouped = (runs.groupby([*PLACEMENT_KEYS, "method"], sort=False)
               .agg(graph_name=("graph_name", "first"), n=("seed", "size"), value_ms=("value_ms", "mean"),
                    feasible=("feasible", "all"),
                    single_device=("single_device", "first"), single_ms=("single_device_value_s", "first"),
                    method_wall_s=("method_wall_s", "mean"), evaluations=("evaluations", "mean"))
               .reset_index())
    grouped["single_ms"] = grouped["single_ms"] * 1e3
    finite = grouped["value_ms"].map(math.isfinite)  # an infeasible placement has no speed-up
    grouped["speedup_vs_single"] = (grouped["single_ms"] / grouped["value_ms"]).where(finite)
    methods = list(dict.fromkeys(runs["method"]))
    for other in methods:
        values = grouped[grouped["method"] == other].set_index(PLACEMENT_KEYS)["value_ms"]
        theirs = [values.get(tuple(key), math.nan) for key in grouped[PLACEMENT_KEYS].itertuples(index=False)]
        grouped[f"vs_{other}"] = pd.Series(theirs, dtype=float) / grouped["value_ms"]
    return grouped


def graph_names(graphs: pd.Series, recorded: pd.Series | None = None) -> dict[str, str]:
    """Each ``graph=`` value's display name: the graph's name as its run recorded it
    (``recorded``, summary.json's ``graph_name``), else its file name without ``.json`` (a
    ``graph.txt``'s folder name, a shipped graph's name as is); when two paths give one name,
    the path (so rows stay apart)."""
    values = list(dict.fromkeys(str(g) for g in graphs))
    given = {} if recorded is None else {str(g): str(n) for g, n in zip(graphs, recorded, strict=True) if n}

    def name_of(graph: str) -> str:
        path = Path(graph)
        if graph in given:
            return given[graph]
        if path.name == "graph.txt":
            return path.parent.name or graph
        return (path.stem if path.suffix.lower() == ".json" else path.name) or graph

    short = {g: name_of(g) for g in values}
    counts = pd.Series(list(short.values())).value_counts()
    return {g: (n if counts[n] == 1 else g) for g, n in short.items()}


def plot_placement_speedups(table: pd.DataFrame) -> Figure:
    """Bars: speed-up over the single fastest device, per problem (groups) and method (bars)."""
    problems = list(dict.fromkeys(table[PLACEMENT_KEYS].itertuples(index=False, name=None)))
    methods = list(dict.fromkeys(table["method"]))
    fig = DataFigure(figsize=(max(6.0, 1.1 * len(problems) * max(1, len(methods)) / 2 + 2), 4.2),
                     layout="constrained")
    fig.data = table
    ax = fig.subplots()
    width = 0.8 / max(1, len(methods))
    index = table.set_index([*PLACEMENT_KEYS, "method"])["speedup_vs_single"]
    for j, method in enumerate(methods):
        heights = [index.get((*p, method), math.nan) for p in problems]
        ax.bar([i + (j - (len(methods) - 1) / 2) * width for i in range(len(problems))],
               [0.0 if not math.isfinite(h) else h for h in heights], width, label=method)
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    finite = [h for h in index.tolist() if math.isfinite(h)]
    ax.set_ylim(0, max([1.0, *finite]) * 1.25)  # room for the legend above the bars
    names = graph_names(table["graph"], table["graph_name"] if "graph_name" in table.columns else None)
    ax.set_xticks(range(len(problems)), [f"{names[g]}\n{d}, {o}" for g, d, o in problems],
                  rotation=30 if len(problems) > 4 else 0, fontsize=8)
    ax.set_ylabel("speed-up over the single fastest device")
    ax.set_title("Op placement: speed-up per method (0: infeasible)", fontsize=10)
    ax.legend(fontsize=8, ncols=min(4, len(methods)), loc="upper center")
    ax.grid(axis="y", alpha=0.3)
    return fig


def build_placement_report(sweep: Path, out_dir: str | Path | None = None) -> Path:
    """The report of a ``pacml place`` sweep (see :func:`build_report`); returns ``report.md``'s path."""
    runs = load_placement_sweep(sweep)
    if runs.empty:
        raise ReportError(f"no finished pacml place runs (summary.json) under {sweep}")
    out = Path(out_dir) if out_dir is not None else sweep / "report"
    table = placement_table(runs)
    atomic_write_text(out / "tables" / "placements.csv", runs.to_csv(index=False))
    atomic_write_text(out / "tables" / "placement_summary.csv", table.to_csv(index=False))
    save_figure(plot_placement_speedups(table), out / "figures", "placement_speedups")
    methods = list(dict.fromkeys(runs["method"]))
    names = graph_names(runs["graph"], runs["graph_name"])
    paths = [g for g in dict.fromkeys(runs["graph"]) if names[g] != g]
    lines = [f"# Op placement report: {sweep.name}", "", f"- Sweep directory: `{sweep}`",
             f"- Runs: {len(runs)}", f"- Graphs: {', '.join(_md_text(names[g]) for g in dict.fromkeys(runs['graph']))}"
             + (f" (from {', '.join(f'`{p}`' for p in paths)})" if paths else ""),
             f"- Device sets: {', '.join(dict.fromkeys(runs['devices']))}",
             f"- Methods: {', '.join(methods)}", "", "## Graph x method", "",
             "Value of the objective (ms; mean over n seeds), speed-up over the single fastest device "
             "(the best one-device placement that fits), and `vs X`: method X's value over this one "
             "(above 1: this method is faster than X). Infeasible placements have value inf.", ""]
    header = ["graph", "devices", "objective", "method", "n", "value (ms)", "single device (ms)",
              "speed-up vs single", *(f"vs {m}" for m in methods), "method wall (s)", "evaluations"]
    rows = [[_md_text(names[r["graph"]]), _md_text(r["devices_choice"]), r["objective"], _md_text(r["method"]),
             str(int(r["n"])),
             _num(r["value_ms"], "{:.6g}"), f"{_num(r['single_ms'], '{:.6g}')} ({r['single_device']})",
             _num(r["speedup_vs_single"], "{:.3f}x"), *(_num(r[f"vs_{m}"], "{:.3f}") for m in methods),
             _num(r["method_wall_s"], "{:.3g}"), str(int(r["evaluations"]))] for r in table.to_dict("records")]
    lines += [_md_table(header, rows), "", "## Speed-up over the single device", "",
              "![placement_speedups](figures/placement_speedups.png)", "",
              "One group of bars per graph, device set and objective; one bar per method (the mean over "
              "n seeds); the dashed line is the single fastest device. ([SVG](figures/placement_speedups.svg), "
              "[data](figures/placement_speedups.csv))", "",
              "## Gantt charts", "",
              "Per-device timeline of one step (step, latency) or per-device load (pipeline) of each run.", ""]
    for r in runs.to_dict("records"):
        charts = [c for c in r["gantt"] if c.endswith(".png")]
        where = _relative(Path(r["run_dir"]), out)
        status = _num(r["value_ms"], "{:.6g} ms") if r["feasible"] else f"infeasible: {r['reason']}"
        link = ", ".join(f"[{_md_text(c)}]({_url(f'{where}/{c}')})" for c in charts) or "no chart (gantt=false)"
        lines.append(f"- {_md_text(names[r['graph']])} / {_md_text(r['devices_choice'])} / {r['objective']} / "
                     f"{_md_text(r['method'])} "
                     f"(seed {r['seed']}): {status}; {link}")
    lines += ["", "## Tables", "", "- `tables/placements.csv`: one row per run.",
              "- `tables/placement_summary.csv`: the table above.", ""]
    text = "\n".join(lines)
    report = atomic_write_text(out / "report.md", text)
    atomic_write_text(out / "report.html", _html(text))
    return report


def _relative(target: Path, start: Path) -> str:
    """``target`` relative to ``start`` (as a link in the report), or absolute across drives."""
    try:
        return Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()
    except ValueError:
        return target.resolve().as_posix()
