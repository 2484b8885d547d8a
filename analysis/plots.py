"""Figures of a sweep: each function takes run or job tables and returns a matplotlib Figure.

Figures are built with the object-oriented API (``matplotlib.figure.Figure``, rendered by Agg on
save), never through pyplot, so nothing opens a window or keeps global state.
:func:`save_figure` writes a figure as PNG and SVG.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.paper_reference import PAPER_POLICY_LABELS
from analysis.stats import aggregate
from workloads.io import atomic_write

POLICY_ORDER = ("para_max", "para_min", "random", "min_feasible", "min_feasible_4", "sequential", "fixed",
                "pacml", "pacml_beta")
"""Known policies in plotting order; each keeps its colour in every figure."""

POLICY_LABELS = {**PAPER_POLICY_LABELS, "min_feasible": "Min_feasible", "min_feasible_4": "Min_feasible (>=4)",
                 "sequential": "Sequential", "fixed": "Fixed", "pacml_beta": "PAC-ML (per β)"}
"""Our policy name -> legend label (the paper's where it has one)."""

BLOCKING_LABEL = "Blocking rate (fraction of arrived jobs)"
THROUGHPUT_LABEL = "Demand throughput (B/s)"

Reference = Mapping[str, Mapping[str, float]]
"""Reference values by policy, then beta distribution (e.g. the paper's)."""


def policy_label(policy: str) -> str:
    """Legend label of a policy."""
    return POLICY_LABELS.get(policy, policy)


def policy_colour(policy: str) -> str:
    """A fixed colour per known policy (tab10), grey for others."""
    if policy not in POLICY_ORDER:
        return "tab:gray"
    return f"C{POLICY_ORDER.index(policy)}"


def ordered_policies(policies: Iterable[str]) -> list[str]:
    """Distinct policies, known ones in :data:`POLICY_ORDER` first, then by name."""
    rank = {p: i for i, p in enumerate(POLICY_ORDER)}
    return sorted(set(policies), key=lambda p: (rank.get(p, len(rank)), p))


def plot_blocking_vs_load(runs: pd.DataFrame, confidence: float = 0.95) -> Figure:
    """Blocking rate against mean inter-arrival time, one line per policy, one panel per beta.

    The x axis is reversed (log scale) so that load grows to the right; bands are Student-t
    confidence intervals across seeds.

    Args:
        runs: One row per run with ``policy``, ``beta``, ``mean_interarrival_s``, ``blocking_rate``.
        confidence: Coverage of the bands.
    """
    stats = aggregate(runs, ["beta", "policy", "mean_interarrival_s"], ["blocking_rate"], confidence)
    betas = sorted(stats["beta"].dropna().unique())
    fig = Figure(figsize=(4.5 + 3.5 * len(betas), 4.8), layout="constrained")
    axes = fig.subplots(1, len(betas), sharey=True, squeeze=False)[0]
    loads = sorted(stats["mean_interarrival_s"].unique())
    for ax, beta in zip(axes, betas, strict=True):
        panel = stats[stats["beta"] == beta]
        for policy in ordered_policies(panel["policy"]):
            line = panel[panel["policy"] == policy].sort_values("mean_interarrival_s")
            colour = policy_colour(policy)
            ax.plot(line["mean_interarrival_s"], line["mean"], marker="o", color=colour,
                    label=policy_label(policy))
            ax.fill_between(line["mean_interarrival_s"], line["ci_low"], line["ci_high"],
                            color=colour, alpha=0.2, linewidth=0)
        ax.set_xscale("log")
        ax.set_xticks(loads, [f"{x:g}" for x in loads])
        ax.minorticks_off()
        ax.set_xlim(max(loads) * 1.15, min(loads) / 1.15)
        ax.set_ylim(0, 1)
        ax.set_xlabel("Mean inter-arrival time (s, log scale; heavier load →)")
        ax.set_ylabel(BLOCKING_LABEL)
        ax.set_title(f"β {beta}")
        ax.grid(alpha=0.3)
    axes[0].legend(title="Policy", loc="upper left")
    fig.suptitle(f"Blocking rate vs load (mean ± {confidence:.0%} CI over seeds)")
    return fig


def plot_policy_bars(runs: pd.DataFrame, confidence: float = 0.95,
                     reference: Mapping[str, Reference] | None = None,
                     reference_label: str = "paper") -> Figure:
    """Blocking rate and demand throughput per beta distribution, one bar per policy.

    Error bars are Student-t confidence intervals across seeds (none for a single seed).

    Args:
        runs: One row per run with ``policy``, ``beta``, ``blocking_rate``,
            ``demand_throughput_Bps``.
        confidence: Coverage of the error bars.
        reference: Optional values to mark on the bars, by metric column
            (``blocking_rate``, ``demand_throughput_Bps``), then policy, then beta.
        reference_label: Legend label of the reference markers.
    """
    panels = (("blocking_rate", BLOCKING_LABEL), ("demand_throughput_Bps", THROUGHPUT_LABEL))
    stats = aggregate(runs, ["beta", "policy"], [m for m, _ in panels], confidence)
    betas = sorted(stats["beta"].dropna().unique())
    policies = ordered_policies(stats["policy"])
    width = 0.8 / len(policies)
    fig = Figure(figsize=(max(9.0, 1.6 * len(betas) + 0.4 * len(betas) * len(policies)), 7.5),
                 layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True)
    for ax, (metric, ylabel) in zip(axes, panels, strict=True):
        table = stats[stats["metric"] == metric].set_index(["beta", "policy"])
        for i, policy in enumerate(policies):
            x = np.arange(len(betas)) + (i - (len(policies) - 1) / 2) * width
            rows = table.reindex([(b, policy) for b in betas])
            half = np.nan_to_num((rows["ci_high"] - rows["mean"]).to_numpy(), nan=0.0)
            ax.bar(x, rows["mean"], width, yerr=half, capsize=3, color=policy_colour(policy),
                   label=policy_label(policy), error_kw={"elinewidth": 1, "ecolor": "0.3"})
            ref = (reference or {}).get(metric, {}).get(policy, {})
            ref_y = [ref.get(b, math.nan) for b in betas]
            if not all(math.isnan(y) for y in ref_y):
                ax.plot(x, ref_y, linestyle="none", marker="D", markersize=6,
                        markerfacecolor="white", markeredgecolor="black", label=reference_label)
        ax.set_xticks(np.arange(len(betas)), [f"β {b}" for b in betas])
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylim(0, 1)
    axes[-1].set_xlabel("JCT-target distribution")
    _figure_legend(fig, last=reference_label)
    fig.suptitle(f"Blocking rate and throughput per β distribution "
                 f"(mean ± {confidence:.0%} CI over seeds)")
    return fig


PROFILE_TIME_UNITS = "profile time units"
"""Time unit of runs that read profile numbers as seconds (``workload.profile_time_unit_s=1``,
as the paper scenario does): one unit is one PipeDream profile millisecond, not a second."""

# Line styles by drawing order: identical curves drawn over one another stay visible.
_LINESTYLES = ("-", "--", ":", "-.")


def time_unit(runs: pd.DataFrame) -> str:
    """The unit of simulated times in ``runs``: ``"s"`` or :data:`PROFILE_TIME_UNITS`.

    A run is in profile time units when its profile numbers are read as seconds: the paper
    scenario (``workload.profile_time_unit_s: 1.0``), or any run that sets that key to 1 on
    its command line (a ``workload.profile_time_unit_s`` column).

    Args:
        runs: One row per run (:func:`analysis.runs.load_sweep`) with a ``scenario`` column.

    Returns:
        The unit, or a note saying which runs use which unit when they are mixed.
    """
    if runs.empty:
        return "s"
    scenario = runs["scenario"] if "scenario" in runs.columns else pd.Series("", index=runs.index)
    profile = scenario.eq("paper")
    override = "workload.profile_time_unit_s"
    if override in runs.columns:
        given = pd.to_numeric(runs[override], errors="coerce")
        profile = profile.where(given.isna(), given == 1.0)
    if profile.all():
        return PROFILE_TIME_UNITS
    if not profile.any():
        return "s"
    return f"s; {PROFILE_TIME_UNITS} for the paper scenario"


def plot_jct_cdf(jobs: pd.DataFrame, facet: str = "beta", unit: str = "s") -> Figure:
    """Empirical CDF of completed jobs' JCT, one line per policy, one panel per ``facet`` value.

    Policies whose curves are identical (same decisions, same JCTs) would hide each other: each
    policy is drawn in its own line style and a thinner line than the one before, and a policy
    identical to an earlier one in every panel is labelled ``"B (= A)"``; identical curves in
    only some panels are listed in those panels.

    Args:
        jobs: One row per job with ``policy``, ``outcome``, ``jct_s`` (and ``facet``), e.g.
            :func:`analysis.runs.load_sweep_jobs`; jobs of several seeds are pooled.
        facet: Column splitting the panels (ignored if absent).
        unit: Unit of ``jct_s`` for the axis label (:func:`time_unit` of the runs); in the
            paper scenario times are :data:`PROFILE_TIME_UNITS`, not seconds.
    """
    done = jobs[jobs["outcome"] == "completed"]
    fig, panels = _faceted(done, facet)
    policies = ordered_policies(done["policy"])
    curves = [{p: np.sort(panel.loc[panel["policy"] == p, "jct_s"].dropna().to_numpy())
               for p in ordered_policies(panel["policy"])} for _, (_, panel) in panels]
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
    for (ax, (name, _)), panel_curves, panel_twins in zip(panels, curves, twins, strict=True):
        for policy, jct in panel_curves.items():
            if jct.size:
                i = policies.index(policy)
                ax.step(jct, np.arange(1, jct.size + 1) / jct.size, where="post",
                        color=policy_colour(policy), label=labels[policy],
                        linestyle=_LINESTYLES[i % len(_LINESTYLES)],
                        linewidth=max(3.0 - 0.6 * i, 1.0))
        partial = [f"{policy_label(p)} = {policy_label(q[0])}" for p, q in panel_twins.items()
                   if q and p not in named]
        if partial:
            ax.text(0.98, 0.04, "identical: " + "; ".join(partial), transform=ax.transAxes,
                    ha="right", va="bottom", fontsize="small")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel(f"Job completion time ({unit}, log scale)")
        ax.set_ylabel("Fraction of completed jobs")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    _label_outer([ax for ax, _ in panels], ncols=min(2, len(panels)))
    _figure_legend(fig)
    fig.suptitle("JCT of completed jobs (empirical CDF, seeds pooled)")
    return fig


def _identical_to_earlier(curves: Mapping[str, np.ndarray]) -> dict[str, list[str]]:
    """For each policy (in order), the earlier policies with exactly the same sorted JCTs."""
    items = list(curves.items())
    return {policy: [other for other, earlier in items[:i]
                     if jct.size and np.array_equal(earlier, jct)]
            for i, (policy, jct) in enumerate(items)}


def plot_degree_histogram(jobs: pd.DataFrame, facet: str = "beta") -> Figure:
    """Share of jobs per chosen partition degree, one bar per policy, one panel per ``facet`` value.

    Jobs never decided (``outcome == "unresolved"``) are left out; degree 0 is a rejection.

    Args:
        jobs: One row per job with ``policy``, ``outcome``, ``degree`` (and ``facet``).
        facet: Column splitting the panels (ignored if absent).
    """
    decided = jobs[jobs["outcome"] != "unresolved"]
    degrees = sorted(int(d) for d in decided["degree"].unique())
    fig, panels = _faceted(decided, facet)
    for ax, (name, panel) in panels:
        policies = ordered_policies(panel["policy"])
        width = 0.8 / max(len(policies), 1)
        for i, policy in enumerate(policies):
            chosen = panel.loc[panel["policy"] == policy, "degree"]
            share = chosen.value_counts(normalize=True).reindex(degrees, fill_value=0.0)
            x = np.arange(len(degrees)) + (i - (len(policies) - 1) / 2) * width
            ax.bar(x, share.to_numpy(), width, color=policy_colour(policy),
                   label=policy_label(policy))
        ax.set_xticks(np.arange(len(degrees)), [str(d) for d in degrees])
        ax.set_xlabel("Chosen partition degree (0 = rejected)")
        ax.set_ylabel("Fraction of decided jobs")
        ax.set_title(name)
        ax.grid(axis="y", alpha=0.3)
    _label_outer([ax for ax, _ in panels], ncols=min(2, len(panels)))
    _figure_legend(fig)
    fig.suptitle("Partition degree chosen per job (seeds pooled)")
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


def plot_utilisation_timeline(jobs: pd.DataFrame, num_servers: int, title: str = "") -> Figure:
    """One run's cluster utilisation (fraction of servers held) and jobs running over time.

    Args:
        jobs: One run's jobs (:func:`analysis.runs.load_jobs`).
        num_servers: Servers in the cluster.
        title: What run this is (e.g. policy, beta and seed), added to the figure title.
    """
    steps = occupancy_over_time(jobs)
    steps["servers_held"] = steps["servers_held"] / num_servers
    fig = Figure(figsize=(11, 6), layout="constrained")
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
    bottom.set_xlabel("Simulated time (s)")
    fig.suptitle(f"Cluster occupancy over time{': ' + title if title else ''}")
    return fig


def save_figure(fig: Figure, directory: str | Path, name: str,
                formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Write ``fig`` as ``directory/name.<format>`` for each format (atomically).

    Returns:
        The written paths, in ``formats`` order.
    """
    paths = []
    for fmt in formats:
        path = Path(directory) / f"{name}.{fmt}"
        atomic_write(path, lambda fh, fmt=fmt: fig.savefig(fh, format=fmt, dpi=150))
        paths.append(path)
    return paths


def _faceted(frame: pd.DataFrame, facet: str) -> tuple[Figure, list[tuple[Axes, tuple[str, pd.DataFrame]]]]:
    """A figure with one panel per value of ``facet`` (two per row, shared axes), with its rows."""
    if facet in frame.columns and frame[facet].nunique() > 1:
        groups = [(f"β {v}" if facet == "beta" else f"{facet} = {v}", g)
                  for v, g in frame.groupby(facet, sort=True)]
    else:
        groups = [("", frame)]
    ncols = min(2, len(groups))
    nrows = math.ceil(len(groups) / ncols)
    fig = Figure(figsize=(5.5 * ncols + 1.8, 3.6 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False).ravel()
    for ax in axes[len(groups):]:
        ax.set_visible(False)
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
