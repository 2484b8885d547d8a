"""Each figure is non-empty, labelled with units, and saved as PNG and SVG."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from analysis.plots import (
    PROFILE_TIME_UNITS,
    occupancy_over_time,
    per_time,
    plot_blocking_vs_load,
    plot_degree_histogram,
    plot_jct_cdf,
    plot_policy_bars,
    plot_utilisation_timeline,
    run_time_units,
    save_figure,
    time_average,
    time_unit,
)


@pytest.fixture
def runs() -> pd.DataFrame:
    """2 policies x 2 betas x 3 loads x 3 seeds of made-up results."""
    rng = np.random.default_rng(0)
    rows = [{"policy": p, "beta": b, "mean_interarrival_s": load, "seed": s,
             "blocking_rate": min(1.0, 300 / load + rng.uniform(0, 0.05)),
             "demand_throughput_Bps": 2e7 + rng.uniform(0, 1e6)}
            for p in ("para_max", "random") for b in ("A", "C") for load in (500.0, 1000.0, 2000.0)
            for s in (0, 1, 2)]
    return pd.DataFrame(rows)


@pytest.fixture
def jobs() -> pd.DataFrame:
    """Two jobs per policy and beta: one completed at degree 2, one rejected."""
    rows = []
    for policy in ("para_max", "random"):
        for beta in ("A", "C"):
            rows += [{"policy": policy, "beta": beta, "outcome": "completed", "degree": 2,
                      "jct_s": 100.0, "num_servers": 2, "start_time_s": 0.0},
                     {"policy": policy, "beta": beta, "outcome": "blocked", "degree": 0,
                      "jct_s": np.nan, "num_servers": 0, "start_time_s": np.nan}]
    return pd.DataFrame(rows)


def visible_axes(fig: Figure) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


def test_blocking_vs_load(runs: pd.DataFrame) -> None:
    fig = plot_blocking_vs_load(runs)
    axes = visible_axes(fig)
    assert len(axes) == 2  # one panel per beta
    for ax in axes:
        assert ax.get_xlabel().startswith("Mean inter-arrival time (s")
        assert ax.get_ylabel().startswith("Blocking rate")
        assert len(ax.lines) == 2 and len(ax.collections) == 2  # a line and a CI band per policy
        assert ax.get_xscale() == "log" and ax.xaxis_inverted()
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["Para_max (n=3)", "Random (n=3)"]
    assert "Blocking rate vs load" in fig.get_suptitle()
    data = fig.data
    assert len(data) == 12 and set(data["n"]) == {3}  # 2 policies x 2 betas x 3 loads
    assert (data["ci_low"] >= 0).all() and (data["ci_high"] <= 1).all()


def test_blocking_vs_load_legends_hide_no_point(runs: pd.DataFrame) -> None:
    fig = plot_blocking_vs_load(runs)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)  # lays the figure out (constrained layout)
    boxes = [ax.get_window_extent(renderer) for ax in visible_axes(fig)]
    for ax in visible_axes(fig):
        legend = ax.get_legend().get_window_extent(renderer)
        assert not any(legend.overlaps(box) for box in boxes)  # outside every panel
        assert fig.bbox.contains(legend.x0, legend.y0) and fig.bbox.contains(legend.x1, legend.y1)


def test_blocking_vs_load_with_two_seeds_plots_the_points_not_a_band(runs: pd.DataFrame) -> None:
    fig = plot_blocking_vs_load(runs[runs["seed"] < 2])
    for ax in visible_axes(fig):
        # a line per policy, no band, one hollow marker per seed and load (one scatter per policy)
        assert len(ax.lines) == 2 and len(ax.collections) == 2
        assert [len(c.get_offsets()) for c in ax.collections] == [6, 6]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Para_max (n=2)", "Random (n=2)"]
    assert fig.data["ci_low"].isna().all() and set(fig.data["interval"]) == {"none (n < 3)"}


def test_policy_bars_with_reference_markers(runs: pd.DataFrame) -> None:
    reference = {"blocking_rate": {"para_max": {"A": 0.26, "C": 0.27}}}
    fig = plot_policy_bars(runs[runs["mean_interarrival_s"] == 1000.0], reference=reference)
    blocking, throughput = visible_axes(fig)
    assert blocking.get_ylabel().startswith("Blocking rate")
    assert throughput.get_ylabel() == "Demand throughput (B/s)"
    assert throughput.get_xlabel() == "JCT-target distribution"
    assert len(blocking.patches) == 4 and len(throughput.patches) == 4  # 2 policies x 2 betas
    assert [t.get_text() for t in throughput.get_xticklabels()] == ["β A", "β C"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["Para_max (n=3)", "Random (n=3)", "paper"]


def test_policy_bars_of_one_beta_label_the_group_by_it(runs: pd.DataFrame) -> None:
    fig = plot_policy_bars(runs[(runs["mean_interarrival_s"] == 1000.0) & (runs["beta"] == "C")])
    _, throughput = visible_axes(fig)
    assert [t.get_text() for t in throughput.get_xticklabels()] == ["β C"]
    assert throughput.get_xlabel() == "JCT-target distribution"
    fig = plot_policy_bars(runs[runs["mean_interarrival_s"] == 1000.0].drop(columns="beta"))
    _, throughput = visible_axes(fig)
    assert [t.get_text() for t in throughput.get_xticklabels()] == [""] and throughput.get_xlabel() == ""


def test_jct_cdf_one_panel_per_beta(jobs: pd.DataFrame) -> None:
    fig = plot_jct_cdf(jobs)
    axes = visible_axes(fig)
    assert [ax.get_title() for ax in axes] == ["β A", "β C"]
    for ax in axes:
        assert ax.get_xlabel() == "Job completion time (s, log scale)"
        assert ax.get_ylabel() == "Fraction of completed jobs"
        assert len(ax.lines) == 2
        assert ax.lines[0].get_ydata()[-1] == 1.0
    assert fig.legends


def test_degree_histogram_shares_sum_to_one(jobs: pd.DataFrame) -> None:
    fig = plot_degree_histogram(jobs)
    ax = visible_axes(fig)[0]
    assert ax.get_xlabel() == "Chosen partition degree (0 = rejected)"
    assert ax.get_ylabel() == "Fraction of decided jobs"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "2"]
    heights = [p.get_height() for p in ax.patches]
    assert heights == [0.5, 0.5, 0.5, 0.5]  # each policy: half rejected, half at degree 2
    assert fig.legends


def test_occupancy_is_a_step_function_of_held_servers() -> None:
    jobs = pd.DataFrame({"start_time_s": [0.0, 5.0, np.nan], "jct_s": [10.0, 10.0, np.nan],
                         "num_servers": [2, 4, 0]})
    steps = occupancy_over_time(jobs)
    assert steps["time_s"].tolist() == [0.0, 5.0, 10.0, 15.0]
    assert steps["servers_held"].tolist() == [2, 6, 4, 0]
    assert steps["jobs_running"].tolist() == [1, 2, 1, 0]
    # (2*5 + 6*5 + 4*5) / 15 servers
    assert time_average(steps, "servers_held") == pytest.approx(4.0)


def test_utilisation_timeline(jobs: pd.DataFrame) -> None:
    fig = plot_utilisation_timeline(jobs, num_servers=32, title="Para_max, β A, seed 0")
    top, bottom = visible_axes(fig)
    assert top.get_ylabel() == "Servers held (fraction of cluster)"
    assert bottom.get_ylabel() == "Jobs running (count)"
    assert bottom.get_xlabel() == "Simulated time (s)"
    assert max(top.lines[0].get_ydata()) == pytest.approx(8 / 32)  # 4 jobs x 2 servers at once
    assert top.get_legend() and bottom.get_legend()
    assert fig.get_suptitle().endswith("Para_max, β A, seed 0")


def test_utilisation_data_names_its_run_and_counts_jobs_in_whole_numbers(jobs: pd.DataFrame) -> None:
    run = {"policy": "para_max", "beta": "A", "seed": 0, "run_dir": "/x/run0"}
    fig = plot_utilisation_timeline(jobs, num_servers=32, run=run)
    assert list(fig.data.columns) == ["policy", "beta", "seed", "run_dir", "time", "servers_held_fraction",
                                      "jobs_running", "time_unit"]
    assert (fig.data["policy"] == "para_max").all() and (fig.data["seed"] == 0).all()
    _, bottom = visible_axes(fig)
    fig.canvas.draw()
    ticks = [t for t in bottom.get_yticks() if bottom.get_ylim()[0] <= t <= bottom.get_ylim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_save_figure_writes_png_and_svg(tmp_path: Path, runs: pd.DataFrame) -> None:
    paths = save_figure(plot_blocking_vs_load(runs), tmp_path / "figures", "load")
    assert [p.name for p in paths] == ["load.png", "load.svg", "load.csv"]
    assert paths[0].read_bytes().startswith(b"\x89PNG")
    assert "<svg" in paths[1].read_text()
    data = pd.read_csv(paths[2])
    assert list(data.columns[:4]) == ["policy", "beta", "mean_interarrival_s", "metric"]
    assert {"mean", "ci_low", "ci_high", "n", "interval"} <= set(data.columns)
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["load.csv", "load.png", "load.svg"]


def _cdf_jobs(jcts: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"policy": p, "beta": b, "outcome": "completed", "jct_s": j}
                         for (p, b), values in jcts.items() for j in values])


def test_jct_cdf_identical_policies_stay_visible_and_are_named() -> None:
    """min_feasible_4 and pacml make the same decisions: one curve would hide the other."""
    same = [10.0, 20.0, 40.0]
    jobs = _cdf_jobs({("min_feasible_4", "A"): same, ("pacml", "A"): same,
                      ("para_max", "A"): [5.0, 50.0],
                      ("min_feasible_4", "C"): same, ("pacml", "C"): same,
                      ("para_max", "C"): same})  # para_max = the others in beta C only
    fig = plot_jct_cdf(jobs)
    panel_a, panel_c = visible_axes(fig)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["Para_max", "Min_feasible (>=4)", "PAC-ML (= Min_feasible (>=4))"]
    styles = {(line.get_linestyle(), line.get_linewidth()) for line in panel_a.lines}
    assert len(styles) == 3  # each curve its own style and width, so overlaps show both
    assert not panel_a.texts
    (note,) = panel_c.texts  # identical in this panel only
    assert note.get_text() == "identical: Min_feasible (>=4) = Para_max"


def test_jct_cdf_axis_names_the_time_unit() -> None:
    paper = pd.DataFrame({"scenario": ["paper", "paper"]})
    physical = pd.DataFrame({"scenario": ["physical", None]})
    assert time_unit(paper) == PROFILE_TIME_UNITS == "profile time units"
    assert time_unit(physical) == "s"
    assert time_unit(pd.concat([paper, physical])) == "profile time units or s"
    # A command-line override of the profile unit wins over the scenario's.
    overridden = pd.DataFrame({"scenario": ["paper", "physical"],
                               "workload.profile_time_unit_s": [1e-3, 1.0]})
    assert time_unit(overridden) == "s or profile time units"
    assert time_unit(overridden.iloc[[1]]) == PROFILE_TIME_UNITS
    # The run's resolved value (load_sweep's profile_time_unit_s column) decides.
    resolved = pd.DataFrame({"scenario": ["paper", "physical"], "profile_time_unit_s": [1e-3, 1.0]})
    assert list(run_time_units(resolved)) == ["s", PROFILE_TIME_UNITS]
    assert per_time("s") == "B/s" and per_time(PROFILE_TIME_UNITS) == "B per profile time unit"
    jobs = _cdf_jobs({("para_max", "A"): [1.0, 2.0]})
    (ax,) = visible_axes(plot_jct_cdf(jobs, unit=time_unit(paper)))
    assert ax.get_xlabel() == "Job completion time (profile time units, log scale)"
