"""Figures of a sweep: each function takes run or job tables and returns a :class:`DataFigure`.

Built with the object-oriented API, never pyplot (no window, no global state). What a figure
averages, splits and writes as CSV: docs/experiments.md ("Reports: pacml report").
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from analysis.paper_reference import PAPER_POLICY_LABELS
from analysis.runs import PROFILE_UNIT_COLUMN, group_columns, held_fixed
from analysis.stats import MIN_SEEDS_FOR_INTERVAL, aggregate, interval_column, interval_note
from workloads.io import atomic_write, atomic_write_text

POLICY_ORDER = ("para_max", "para_min", "random", "min_feasible", "min_feasible_4", "sequential", "fixed",
                "pacml", "pacml_beta")
"""Known policies in plotting order; each keeps its colour and marker in every figure."""

POLICY_LABELS = {**PAPER_POLICY_LABELS, "min_feasible": "Min_feasible", "min_feasible_4": "Min_feasible (>=4)",
                 "sequential": "Sequential", "fixed": "Fixed", "pacml": "PAC-ML",
                 "pacml_beta": "PAC-ML (per β)", "foresight": "foresight (oracle)"}
"""Our policy name -> legend label (the paper's where it has one; pacml, the adaptive agent, is
ours, and the paper's PAC-ML is pacml_beta; foresight sees the run's future)."""

BLOCKING_LABEL = "Blocking rate (fraction of arrived jobs)"

Reference = Mapping[str, Mapping[str, float]]
"""Reference values by policy, then beta distribution (e.g. the paper's)."""


@dataclass(frozen=True, slots=True)
class PolicyStyle:
    """How one policy is drawn: colour and marker (unique within a set of policies)."""

    colour: str
    marker: str


_KNOWN_STYLES = {
    "para_max": PolicyStyle("#1f77b4", "o"), "para_min": PolicyStyle("#ff7f0e", "s"),
    "random": PolicyStyle("#2ca02c", "^"), "min_feasible": PolicyStyle("#d62728", "D"),
    "min_feasible_4": PolicyStyle("#9467bd", "v"), "sequential": PolicyStyle("#8c564b", "P"),
    "fixed": PolicyStyle("#e377c2", "X"), "pacml": PolicyStyle("#000000", "*"),
    "pacml_beta": PolicyStyle("#bcbd22", "h"),
}
# Any other policy (a user's class, lookahead, ...) takes the next pair: 14 colours (no grey, none
# of the known ones) x 8 markers, coprime counts so the first 112 pairs all differ.
_EXTRA_COLOURS = ("#17becf", "#393b79", "#e6550d", "#637939", "#843c39", "#7b4173", "#3182bd", "#8c6d31",
                  "#31a354", "#ad494a", "#756bb1", "#de9ed6", "#6baed6", "#fd8d3c")
_EXTRA_MARKERS = ("<", ">", "p", "d", "8", "H", "1", "4")


def policy_label(policy: str) -> str:
    """Legend label of a policy (its config name, or its class name for ``policy._target_=``)."""
    return POLICY_LABELS.get(policy, str(policy))


def ordered_policies(policies: Iterable[str]) -> list[str]:
    """Distinct policies, known ones in :data:`POLICY_ORDER` first, then by name."""
    rank = {p: i for i, p in enumerate(POLICY_ORDER)}
    return sorted(set(policies), key=lambda p: (rank.get(p, len(rank)), str(p)))


def policy_styles(policies: Iterable[str]) -> dict[str, PolicyStyle]:
    """A colour and marker per policy, different for every policy of ``policies``: the known
    ones keep theirs; the others take the next unused pair in :func:`ordered_policies` order."""
    styles: dict[str, PolicyStyle] = {}
    extra = 0
    for policy in ordered_policies(policies):
        if policy in _KNOWN_STYLES:
            styles[policy] = _KNOWN_STYLES[policy]
        else:
            styles[policy] = PolicyStyle(_EXTRA_COLOURS[extra % len(_EXTRA_COLOURS)],
                                         _EXTRA_MARKERS[extra % len(_EXTRA_MARKERS)])
            extra += 1
    return styles


class DataFigure(Figure):
    """A figure and the table of the values it plots (``data``), which :func:`save_figure`
    writes beside it as CSV."""

    data: pd.DataFrame | None = None


PROFILE_TIME_UNITS = "profile time units"
"""Time unit of runs that read profile numbers as seconds (``workload.profile_time_unit_s=1``,
as the paper scenario does): one unit is one PipeDream profile millisecond, not a second."""

# Line styles by drawing order: identical curves drawn over one another stay visible.
_LINESTYLES = ("-", "--", ":", "-.")


def run_time_units(runs: pd.DataFrame) -> pd.Series:
    """The unit of each run's simulated times: ``"s"``, :data:`PROFILE_TIME_UNITS` or, for
    another ``workload.profile_time_unit_s``, a description of it.

    Read from the run's resolved ``workload.profile_time_unit_s`` (the ``profile_time_unit_s``
    column of :func:`analysis.runs.load_sweep`), else from a ``workload.profile_time_unit_s``
    override column, else from the scenario (the paper scenario reads profiles as seconds).
    """
    given = pd.Series(np.nan, index=runs.index, dtype=float)
    for column in ("workload.profile_time_unit_s", PROFILE_UNIT_COLUMN):
        if column in runs.columns:
            values = pd.to_numeric(runs[column], errors="coerce")
            given = values.where(values.notna(), given)
    scenario = runs["scenario"] if "scenario" in runs.columns else pd.Series("", index=runs.index)
    fallback = np.where(scenario.eq("paper"), 1.0, 1e-3)
    unit_s = given.where(given.notna(), pd.Series(fallback, index=runs.index))
    return unit_s.map(_unit_name)


def _unit_name(profile_time_unit_s: float) -> str:
    if math.isclose(profile_time_unit_s, 1e-3):
        return "s"
    if math.isclose(profile_time_unit_s, 1.0):
        return PROFILE_TIME_UNITS
    return f"simulated s (a profile ms read as {profile_time_unit_s:g} s)"


def time_unit(runs: pd.DataFrame) -> str:
    """The unit of simulated times in ``runs`` (:func:`run_time_units`): ``"s"`` or
    :data:`PROFILE_TIME_UNITS`; when runs differ, the units joined by ``" or "`` (each run's is
    in the ``time_unit`` column of the report's tables)."""
    if runs.empty:
        return "s"
    return " or ".join(dict.fromkeys(run_time_units(runs)))


def per_time(unit: str) -> str:
    """``"B/s"`` for seconds, ``"B per profile time unit"`` for profile units."""
    if unit == "s":
        return "B/s"
    return " or ".join("B/s" if u == "s" else f"B per {u.removesuffix('s') if u == PROFILE_TIME_UNITS else u}"
                       for u in unit.split(" or "))


def throughput_label(unit: str = "s") -> str:
    """Axis label of the demand throughput in ``unit`` (:func:`time_unit`)."""
    return f"Demand throughput ({per_time(unit)})"


def format_value(value: Any) -> str:
    """A config value as text (a float in ``%g`` form)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def describe_value(column: str, value: Any) -> str:
    """``column=value`` for titles and legends (``β A`` for the beta distribution)."""
    text = format_value(value)
    return f"β {text}" if column == "beta" else f"{column}={text}"


def held_fixed_line(runs: pd.DataFrame, skip: Sequence[str] = ()) -> str:
    """``held fixed: scenario=paper, cluster=ramp32, ...`` (:func:`analysis.runs.held_fixed`)."""
    fixed = {k: v for k, v in held_fixed(runs).items() if k not in skip}
    return ("held fixed: " + ", ".join(describe_value(k, v) for k, v in fixed.items())) if fixed else ""


def selected_line(selected: Mapping[str, Any], swept: Mapping[str, Sequence[Any]]) -> str:
    """``shown at mean_interarrival_s=1000 (one of 500, 1000, 2000 swept)``: the value a figure
    shows of a key its sweep varies, so its title does not call that key held fixed."""
    parts = []
    for key, value in selected.items():
        others = ", ".join(format_value(v) for v in swept.get(key, ()))
        parts.append(describe_value(key, value) + (f" (one of {others} swept)" if others else ""))
    return ("shown at " + ", ".join(parts)) if parts else ""


def _suptitle(fig: Figure, first: str, runs: pd.DataFrame) -> None:
    """The figure's title: what it shows, then the values its runs hold fixed, wrapped to its width.

    A key in ``runs.attrs["selected"]`` (``{key: value}``, with ``runs.attrs["swept"]``: ``{key:
    all values}``) is one value picked from a sweep that varies it: it is named as shown, not
    held fixed.
    """
    width = max(40, int(fig.get_figwidth() * 11))
    lines = [textwrap.fill(first, width)]
    selected = dict(runs.attrs.get("selected", {}))
    if line := selected_line(selected, runs.attrs.get("swept", {})):
        lines.append(textwrap.fill(line, width))
    if line := held_fixed_line(runs, skip=tuple(selected)):
        lines.append(textwrap.fill(line, width))
    fig.suptitle("\n".join(lines), fontsize="medium")


def _setting_columns(runs: pd.DataFrame, by: Sequence[str] | None, *needed: str) -> list[str]:
    """``by`` (default :func:`analysis.runs.group_columns`) with ``needed`` columns added."""
    columns = list(by) if by is not None else group_columns(runs)
    return [*columns, *(c for c in needed if c in runs.columns and c not in columns)]


def _with_fixed(data: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``data`` with the config values ``runs`` hold fixed (:func:`analysis.runs.held_fixed`) in front."""
    fixed = {k: v for k, v in held_fixed(runs).items() if k not in data.columns}
    out = data.copy()
    for i, (key, value) in enumerate(fixed.items()):
        out.insert(i, key, value)
    return out


def _with_context(stats: pd.DataFrame, runs: pd.DataFrame, confidence: float) -> pd.DataFrame:
    """``stats`` with the held-fixed config values in front and a column saying what the interval is."""
    out = _with_fixed(stats, runs)
    out["interval"] = interval_column(out["n"], confidence)
    return out


def _panels(frame: pd.DataFrame, columns: Sequence[str]) -> list[tuple[str, dict[str, Any], pd.DataFrame]]:
    """(title, values, rows) per combination of ``columns`` that vary in ``frame`` (one panel,
    untitled, if none does)."""
    varying = _varying(frame, columns)
    if not varying:
        return [("", {}, frame)]
    panels = []
    for key, rows in frame.groupby(varying, dropna=False, sort=True):
        values = dict(zip(varying, key if isinstance(key, tuple) else (key,), strict=True))
        panels.append((", ".join(describe_value(c, v) for c, v in values.items()), values, rows))
    return panels


def rows_with(frame: pd.DataFrame, values: Mapping[str, Any]) -> pd.DataFrame:
    """Rows of ``frame`` with ``values`` in their columns (NaN matches NaN)."""
    mask = pd.Series(True, index=frame.index)
    for column, value in values.items():
        mask &= frame[column].isna() if pd.isna(value) else frame[column].eq(value)
    return frame[mask]


def _n_text(n: Iterable[int]) -> str:
    values = sorted({int(x) for x in n})
    if not values:
        return "n=0"
    return f"n={values[0]}" if len(values) == 1 else f"n={values[0]}-{values[-1]}"


def _grid(count: int, width: float, height: float, ncols_max: int = 3,
          pad: tuple[float, float] = (2.2, 1.0), sharex: bool = False) -> tuple[DataFigure, np.ndarray]:
    """A figure of ``count`` panels of ``width`` x ``height`` inches plus ``pad`` (shared y)."""
    ncols = min(ncols_max, count)
    nrows = math.ceil(count / ncols)
    size = (width * ncols + pad[0], height * nrows + pad[1])
    fig = DataFigure(figsize=size, layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=sharex, sharey=True, squeeze=False).ravel()
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes


def plot_blocking_vs_load(runs: pd.DataFrame, confidence: float = 0.95, by: Sequence[str] | None = None,
                          styles: Mapping[str, PolicyStyle] | None = None) -> DataFigure:
    """Blocking rate against mean inter-arrival time (log x axis, load growing to the right), one
    line per policy, one panel per setting (see docs/experiments.md, "Reports").

    Args:
        runs: One row per run with ``policy``, ``mean_interarrival_s``, ``blocking_rate``.
        confidence: Coverage of the bands.
        by: The columns that tell settings apart.
        styles: Colour and marker per policy (default :func:`policy_styles` of these runs).
    """
    columns = _setting_columns(runs, by, "policy", "mean_interarrival_s")
    stats = aggregate(runs, columns, ["blocking_rate"], confidence)
    styles = styles or policy_styles(runs["policy"])
    panel_columns = [c for c in columns if c not in ("policy", "mean_interarrival_s")]
    panels = _panels(stats, panel_columns)
    fig, axes = _grid(len(panels), 4.2, 3.9)
    loads = sorted(stats["mean_interarrival_s"].dropna().unique())
    for ax, (title, values, panel) in zip(axes, panels, strict=False):
        panel_runs = rows_with(runs, values)
        for policy in ordered_policies(panel["policy"]):
            line = panel[panel["policy"] == policy].sort_values("mean_interarrival_s")
            style = styles[policy]
            ax.plot(line["mean_interarrival_s"], line["mean"], marker=style.marker, color=style.colour,
                    label=f"{policy_label(policy)} ({_n_text(line['n'])})")
            if line["ci_low"].notna().any():
                ax.fill_between(line["mean_interarrival_s"], line["ci_low"], line["ci_high"],
                                color=style.colour, alpha=0.2, linewidth=0)
            few = line[line["n"] < MIN_SEEDS_FOR_INTERVAL]
            if not few.empty:
                seeds = rows_with(panel_runs, {"policy": policy})
                seeds = seeds[seeds["mean_interarrival_s"].isin(few["mean_interarrival_s"])]
                ax.scatter(seeds["mean_interarrival_s"], seeds["blocking_rate"], marker=style.marker,
                           facecolors="none", edgecolors=style.colour, s=22, linewidths=0.8)
        ax.set_xscale("log")
        ax.set_xticks(loads, [f"{x:g}" for x in loads])
        ax.minorticks_off()
        ax.set_xlim(max(loads) * 1.15, min(loads) / 1.15)
        ax.set_ylim(0, 1)
        ax.set_xlabel(f"Mean inter-arrival time ({time_unit(panel_runs)}, log scale; heavier load →)")
        ax.set_ylabel(BLOCKING_LABEL)
        ax.set_title(title, fontsize="medium")
        ax.grid(alpha=0.3)
        # Below the panel: inside, it would hide points near a blocking rate of 1 (or 0).
        ax.legend(title="Policy", loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize="small",
                  ncols=min(2, len(panel["policy"].unique())))
    _suptitle(fig, f"Blocking rate vs load: mean of n seeds; band: {interval_note(confidence)}; "
                   f"hollow markers: each seed where n < {MIN_SEEDS_FOR_INTERVAL}", runs)
    fig.data = _with_context(stats, runs, confidence)
    return fig


def plot_policy_bars(runs: pd.DataFrame, confidence: float = 0.95,
                     reference: Mapping[str, Reference] | None = None,
                     reference_label: str = "paper", by: Sequence[str] | None = None,
                     styles: Mapping[str, PolicyStyle] | None = None) -> DataFigure:
    """Blocking rate and demand throughput per setting, one bar per policy (see
    docs/experiments.md, "Reports").

    Args:
        runs: One row per run with ``policy``, ``beta``, ``blocking_rate``,
            ``demand_throughput_Bps``.
        confidence: Coverage of the error bars.
        reference: Optional values to mark on the bars, by metric column
            (``blocking_rate``, ``demand_throughput_Bps``), then policy, then beta.
        reference_label: Legend label of the reference markers.
        by: The columns that tell settings apart.
        styles: Colour and marker per policy (default :func:`policy_styles` of these runs).
    """
    unit = time_unit(runs)
    panels = (("blocking_rate", BLOCKING_LABEL), ("demand_throughput_Bps", throughput_label(unit)))
    columns = _setting_columns(runs, by, "policy")
    stats = aggregate(runs, columns, [m for m, _ in panels], confidence)
    styles = styles or policy_styles(runs["policy"])
    category_columns = [c for c in columns if c != "policy"]
    categories = _panels(stats, category_columns)
    # One setting: its group is labelled by its values (e.g. "β C"), not a vague "all runs".
    named = _varying(stats, category_columns) or [c for c in category_columns if c in stats.columns]
    one_setting = "\n".join(describe_value(c, stats[c].iloc[0]) for c in named) if len(categories) == 1 else ""
    policies = ordered_policies(stats["policy"])
    betas = runs["beta"].dropna().unique() if "beta" in runs.columns else []
    only_beta = betas[0] if len(betas) == 1 else None
    width = 0.8 / len(policies)
    fig = DataFigure(figsize=(max(9.0, 1.6 * len(categories) + 0.4 * len(categories) * len(policies)), 7.5),
                     layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True)
    for ax, (metric, ylabel) in zip(axes, panels, strict=True):
        table = stats[stats["metric"] == metric]
        for i, policy in enumerate(policies):
            x = np.arange(len(categories)) + (i - (len(policies) - 1) / 2) * width
            rows = [rows_with(table, {**values, "policy": policy}) for _, values, _ in categories]
            mean = np.array([r["mean"].iloc[0] if len(r) else np.nan for r in rows])
            low = np.array([r["ci_low"].iloc[0] if len(r) else np.nan for r in rows])
            high = np.array([r["ci_high"].iloc[0] if len(r) else np.nan for r in rows])
            n = [int(r["n"].iloc[0]) for r in rows if len(r)]
            yerr = np.vstack([mean - low, high - mean])  # NaN: no interval, no bar drawn
            style = styles[policy]
            ax.bar(x, mean, width, yerr=yerr, capsize=3, color=style.colour,
                   label=f"{policy_label(policy)} ({_n_text(n)})", error_kw={"elinewidth": 1, "ecolor": "0.3"})
            for xi, r, (_, values, _) in zip(x, rows, categories, strict=True):
                if len(r) and r["n"].iloc[0] < MIN_SEEDS_FOR_INTERVAL:
                    seeds = rows_with(runs, {**values, "policy": policy})[metric].dropna()
                    ax.scatter(np.full(len(seeds), xi), seeds, marker=style.marker, facecolors="white",
                               edgecolors="black", s=18, linewidths=0.7, zorder=3)
            ref = (reference or {}).get(metric, {}).get(policy, {})
            ref_y = [ref.get(values.get("beta", only_beta), math.nan) for _, values, _ in categories]
            if not all(math.isnan(y) for y in ref_y):
                ax.plot(x, ref_y, linestyle="none", marker="D", markersize=6,
                        markerfacecolor="white", markeredgecolor="black", label=reference_label)
        ax.set_xticks(np.arange(len(categories)), [title.replace(", ", "\n") or one_setting for title, _, _ in categories])
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylim(0, 1)
    axes[-1].set_xlabel("JCT-target distribution" if named == ["beta"] else "Setting" if named else "")
    _figure_legend(fig, last=reference_label)
    _suptitle(fig, f"Blocking rate and throughput per setting: mean of n seeds; error bars: "
                   f"{interval_note(confidence)}; hollow markers: each seed where n < {MIN_SEEDS_FOR_INTERVAL}",
              runs)
    fig.data = _with_context(stats, runs, confidence)
    return fig


def plot_jct_cdf(jobs: pd.DataFrame, facet: str | Sequence[str] | None = None, unit: str = "s",
                 styles: Mapping[str, PolicyStyle] | None = None) -> DataFigure:
    """Empirical CDF of completed jobs' JCT, one line per policy, one panel per setting.

    Policies whose curves are identical (same decisions, same JCTs) would hide each other: each
    policy is drawn in its own line style and a thinner line than the one before, and a policy
    identical to an earlier one in every panel is labelled ``"B (= A)"``; identical curves in
    only some panels are listed in those panels.

    Args:
        jobs: One row per job with ``policy``, ``outcome``, ``jct_s`` (and the ``facet``
            columns), e.g. :func:`analysis.runs.load_sweep_jobs`; jobs of several seeds are pooled.
        facet: Columns splitting the panels (those absent are ignored); default the jobs'
            ``attrs["setting_columns"]`` (:func:`analysis.runs.load_sweep_jobs`) other than the
            policy, else ``beta``.
        unit: Unit of ``jct_s`` for the axis label (:func:`time_unit` of the runs); in the
            paper scenario times are :data:`PROFILE_TIME_UNITS`, not seconds.
        styles: Colour and marker per policy (default :func:`policy_styles` of these jobs).
    """
    done = jobs[jobs["outcome"] == "completed"]
    facets = _facet_columns(jobs, facet)
    fig, panels = _faceted(done, facets)
    styles = styles or policy_styles(done["policy"])
    policies = ordered_policies(done["policy"])
    curves = [{p: np.sort(panel.loc[panel["policy"] == p, "jct_s"].dropna().to_numpy())
               for p in ordered_policies(panel["policy"])} for _, (_, _, panel) in panels]
    twins = [_identical_to_earlier(panel_curves) for panel_curves in curves]
    labels = {p: policy_label(p) for p in policies}
    named: set[str] = set()
    for policy in policies:
        # Twins in every panel where the policy has a curve: the legend can say so once.
        seen_in = [t[policy] for t, c in zip(twins, curves, strict=True)
                   if policy in c and c[policy].size]
        common = [q for q in seen_in[0] if all(q in t for t in seen_in[1:])] if seen_in else []
        if common:
            labels[policy] += f" (= {policy_label(common[0])})"
            named.add(policy)
    rows = []
    for (ax, (name, values, panel)), panel_curves, panel_twins in zip(panels, curves, twins, strict=True):
        for policy, jct in panel_curves.items():
            if jct.size:
                i = policies.index(policy)
                fraction = np.arange(1, jct.size + 1) / jct.size
                ax.step(jct, fraction, where="post",
                        color=styles[policy].colour, label=labels[policy],
                        linestyle=_LINESTYLES[i % len(_LINESTYLES)],
                        linewidth=max(3.0 - 0.6 * i, 1.0))
                num_runs = panel.loc[panel["policy"] == policy, "run_dir"].nunique() \
                    if "run_dir" in panel.columns else math.nan
                rows += [{**values, "policy": policy, "jct": j, "fraction_completed": f,
                          "n_jobs": int(jct.size), "n_runs": num_runs} for j, f in zip(jct, fraction, strict=True)]
        partial = [f"{policy_label(p)} = {policy_label(q[0])}" for p, q in panel_twins.items()
                   if q and p not in named]
        if partial:
            ax.text(0.98, 0.04, "identical: " + "; ".join(partial), transform=ax.transAxes,
                    ha="right", va="bottom", fontsize="small")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel(f"Job completion time ({unit}, log scale)")
        ax.set_ylabel("Fraction of completed jobs")
        ax.set_title(name, fontsize="medium")
        ax.grid(alpha=0.3)
    _label_outer([ax for ax, _ in panels], ncols=min(2, len(panels)))
    _figure_legend(fig)
    _suptitle(fig, "JCT of completed jobs (empirical CDF, seeds pooled)", jobs)
    data = pd.DataFrame(rows, columns=[*_varying(done, facets), "policy", "jct", "fraction_completed",
                                       "n_jobs", "n_runs"])
    data.insert(data.columns.get_loc("jct") + 1, "jct_unit", unit)
    fig.data = _with_fixed(data, jobs)
    return fig


def _facet_columns(jobs: pd.DataFrame, facet: str | Sequence[str] | None) -> list[str]:
    if facet is None:
        facet = [c for c in jobs.attrs.get("setting_columns", ["beta"]) if c != "policy"]
    columns = [facet] if isinstance(facet, str) else list(facet)
    return [c for c in columns if c in jobs.columns]


def _varying(frame: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    return [c for c in columns if c in frame.columns and frame[c].nunique(dropna=False) > 1]


def _identical_to_earlier(curves: Mapping[str, np.ndarray]) -> dict[str, list[str]]:
    """For each policy (in order), the earlier policies with exactly the same sorted JCTs."""
    items = list(curves.items())
    return {policy: [other for other, earlier in items[:i]
                     if jct.size and np.array_equal(earlier, jct)]
            for i, (policy, jct) in enumerate(items)}


def plot_degree_histogram(jobs: pd.DataFrame, facet: str | Sequence[str] | None = None,
                          styles: Mapping[str, PolicyStyle] | None = None) -> DataFigure:
    """Share of jobs per chosen partition degree, one bar per policy, one panel per setting.

    Jobs never decided (``outcome == "unresolved"``) are left out; degree 0 is a rejection.

    Args:
        jobs: One row per job with ``policy``, ``outcome``, ``degree`` (and the ``facet`` columns).
        facet: Columns splitting the panels, as in :func:`plot_jct_cdf`.
        styles: Colour and marker per policy (default :func:`policy_styles` of these jobs).
    """
    decided = jobs[jobs["outcome"] != "unresolved"]
    facets = _facet_columns(jobs, facet)
    degrees = sorted(int(d) for d in decided["degree"].unique())
    fig, panels = _faceted(decided, facets)
    styles = styles or policy_styles(decided["policy"])
    rows = []
    for ax, (name, values, panel) in panels:
        policies = ordered_policies(panel["policy"])
        width = 0.8 / max(len(policies), 1)
        for i, policy in enumerate(policies):
            chosen = panel.loc[panel["policy"] == policy]
            share = chosen["degree"].value_counts(normalize=True).reindex(degrees, fill_value=0.0)
            x = np.arange(len(degrees)) + (i - (len(policies) - 1) / 2) * width
            ax.bar(x, share.to_numpy(), width, color=styles[policy].colour,
                   label=policy_label(policy))
            num_runs = chosen["run_dir"].nunique() if "run_dir" in chosen.columns else math.nan
            rows += [{**values, "policy": policy, "degree": d, "share_of_decided_jobs": float(v),
                      "n_jobs": len(chosen), "n_runs": num_runs} for d, v in share.items()]
        ax.set_xticks(np.arange(len(degrees)), [str(d) for d in degrees])
        ax.set_xlabel("Chosen partition degree (0 = rejected)")
        ax.set_ylabel("Fraction of decided jobs")
        ax.set_title(name, fontsize="medium")
        ax.grid(axis="y", alpha=0.3)
    _label_outer([ax for ax, _ in panels], ncols=min(2, len(panels)))
    _figure_legend(fig)
    _suptitle(fig, "Partition degree chosen per job (seeds pooled)", jobs)
    fig.data = _with_fixed(pd.DataFrame(rows, columns=[*_varying(decided, facets), "policy", "degree",
                                                       "share_of_decided_jobs", "n_jobs", "n_runs"]), decided)
    return fig


def occupancy_over_time(jobs: pd.DataFrame) -> pd.DataFrame:
    """Servers held and jobs running over time, as a step function of one run's jobs.

    An accepted job holds ``num_servers`` servers from ``start_time_s`` to
    ``start_time_s + jct_s``.

    Returns:
        Columns ``time_s``, ``servers_held``, ``jobs_running``: each row's values hold from its
        ``time_s`` until the next row's; the first row is at time 0.
    """
    ran = jobs[jobs["start_time_s"].notna() & jobs["jct_s"].notna()]
    start, end = ran["start_time_s"], ran["start_time_s"] + ran["jct_s"]
    events = pd.DataFrame({
        "time_s": pd.concat([pd.Series([0.0]), start, end], ignore_index=True),
        "servers_held": pd.concat([pd.Series([0]), ran["num_servers"], -ran["num_servers"]],
                                  ignore_index=True),
        "jobs_running": np.concatenate([[0], np.ones(len(ran), int), -np.ones(len(ran), int)]),
    })
    steps = events.groupby("time_s", sort=True).sum().cumsum()
    return steps.reset_index()


def time_average(steps: pd.DataFrame, column: str) -> float:
    """Time-weighted mean of a step ``column`` of :func:`occupancy_over_time` up to its last step."""
    duration_s = np.diff(steps["time_s"].to_numpy())
    if duration_s.sum() <= 0:
        return math.nan
    return float(np.dot(steps[column].to_numpy()[:-1], duration_s) / duration_s.sum())


def plot_utilisation_timeline(jobs: pd.DataFrame, num_servers: int, title: str = "",
                              unit: str = "s", run: Mapping[str, Any] | None = None) -> DataFigure:
    """One run's cluster utilisation (fraction of servers held) and jobs running over time.

    Args:
        jobs: One run's jobs (:func:`analysis.runs.load_jobs`).
        num_servers: Servers in the cluster.
        title: What run this is (e.g. policy, beta and seed), added to the figure title.
        unit: Unit of simulated time (:func:`time_unit` of the run).
        run: The config values that identify the run (policy, its setting, seed, ``run_dir``),
            written in front of every row of the figure's data so the CSV says whose it is.
    """
    steps = occupancy_over_time(jobs)
    steps["servers_held"] = steps["servers_held"] / num_servers
    fig = DataFigure(figsize=(11, 6), layout="constrained")
    data = steps.rename(columns={"time_s": "time", "servers_held": "servers_held_fraction"}).assign(time_unit=unit)
    for i, (key, value) in enumerate((run or {}).items()):
        data.insert(i, key, value)
    fig.data = data
    top, bottom = fig.subplots(2, 1, sharex=True)
    rows = ((top, "servers_held", "Servers held (fraction of cluster)", "C0"),
            (bottom, "jobs_running", "Jobs running (count)", "C2"))
    for ax, column, ylabel, colour in rows:
        ax.step(steps["time_s"], steps[column], where="post", color=colour, linewidth=0.6,
                label=column.replace("_", " "))
        mean = time_average(steps, column)
        ax.axhline(mean, color="black", linestyle="--", linewidth=1,
                   label=f"time average ({mean:.3g})")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.grid(alpha=0.3)
    top.set_ylim(0, 1.05)
    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))  # a count of jobs
    bottom.set_xlabel(f"Simulated time ({unit})")
    fig.suptitle(f"Cluster occupancy over time{': ' + title if title else ''}")
    return fig


def save_figure(fig: Figure, directory: str | Path, name: str,
                formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Write ``fig`` as ``directory/name.<format>`` for each format, and, for a
    :class:`DataFigure`, its data as ``directory/name.csv`` (each file atomically).

    Returns:
        The written paths, in ``formats`` order, then the CSV's.
    """
    paths = []
    for fmt in formats:
        path = Path(directory) / f"{name}.{fmt}"
        atomic_write(path, lambda fh, fmt=fmt: fig.savefig(fh, format=fmt, dpi=150))
        paths.append(path)
    data = getattr(fig, "data", None)
    if isinstance(data, pd.DataFrame):
        paths.append(atomic_write_text(Path(directory) / f"{name}.csv", data.to_csv(index=False)))
    return paths


def _faceted(frame: pd.DataFrame, facets: Sequence[str]
             ) -> tuple[DataFigure, list[tuple[Axes, tuple[str, dict[str, Any], pd.DataFrame]]]]:
    """A figure with one panel per combination of the ``facets`` that vary (two per row, shared
    axes), with its title, values and rows."""
    groups = _panels(frame, facets)
    fig, axes = _grid(len(groups), 5.5, 3.6, ncols_max=2, pad=(1.8, 0.9), sharex=True)
    return fig, list(zip(axes, groups, strict=False))


def _label_outer(axes: Sequence[Axes], ncols: int) -> None:
    """Show x labels only under the lowest panel of each column, y labels only in the first."""
    for i, ax in enumerate(axes):
        if i + ncols < len(axes):
            ax.xaxis.label.set_visible(False)
        else:
            ax.xaxis.set_tick_params(labelbottom=True)
        if i % ncols:
            ax.yaxis.label.set_visible(False)


def _figure_legend(fig: Figure, last: str | None = None) -> None:
    """One legend for the figure, outside the panels on the right (entries of all panels).

    Args:
        fig: The figure.
        last: A label to list after the others (e.g. reference markers).
    """
    seen: dict[str, object] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    if last in seen:
        seen[last] = seen.pop(last)
    fig.legend(list(seen.values()), list(seen), loc="outside right center", title="Policy")
