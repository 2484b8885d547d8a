"""pacml-report never mixes settings: figures split by every config value that differs, their data
is written beside them, policies keep their own names and styles, links survive odd run folders."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from analysis.plots import POLICY_ORDER, plot_blocking_vs_load, policy_styles
from analysis.report import build_report, graph_names, paper_comparison
from analysis.runs import group_columns, load_sweep
from simulator.run import COMMAND, policy_name, run_config
from tests.conftest import CONF_DIR

SIM = [sys.executable, "-c", "from simulator.run import main; main()"]
CLUSTERS = ("ramp32", "ramp64")
POLICIES = ("para_max", "para_min")
LOADS = (500.0, 1000.0)
SEEDS = (0, 1)


@pytest.fixture(scope="module")
def cluster_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 clusters x 2 policies x 2 loads x 2 seeds of the paper scenario, 21-41 jobs each, run
    in-process the way ``pacml-sim -m`` runs them (composed, checked, written with the
    .hydra files a sweep leaves)."""
    sweep = tmp_path_factory.mktemp("clusters")
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        for cluster in CLUSTERS:
            for policy in POLICIES:
                for load in LOADS:
                    for seed in SEEDS:
                        overrides = [f"cluster={cluster}", f"policy={policy}", f"mean_interarrival_s={load}",
                                     f"seed={seed}", "horizon_s=20000", "progress=false"]
                        cfg = COMMAND.validate(compose(config_name="sim", overrides=overrides), overrides)
                        out = sweep / ",".join(sorted(overrides[:4]))
                        (out / ".hydra").mkdir(parents=True)
                        OmegaConf.save(cfg, out / ".hydra" / "config.yaml")
                        (out / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
                        run_config(cfg, out, {"scenario": "paper", "cluster": cluster, "policy": policy,
                                              "beta": "A", "workload": "paper", "arrivals": "fixed"})
    return sweep


def test_no_plotted_point_mixes_clusters(cluster_sweep: Path, tmp_path: Path) -> None:
    build_report(cluster_sweep, tmp_path)
    runs = pd.read_csv(tmp_path / "tables" / "runs.csv")
    assert len(runs) == 16
    figures = tmp_path / "figures"
    # Runs figures: each point is the mean over the two seeds of one cluster, policy and load.
    for name, metrics in (("blocking_vs_load", ["blocking_rate"]),
                          ("policy_bars", ["blocking_rate", "demand_throughput_Bps"])):
        data = pd.read_csv(figures / f"{name}.csv")
        assert set(data["cluster"]) == set(CLUSTERS) and set(data["metric"]) == set(metrics)
        assert (data["n"] == len(SEEDS)).all() and data["ci_low"].isna().all()  # 2 seeds: no interval
        keys = ["cluster", "policy", "mean_interarrival_s"]
        assert not data.duplicated([*keys, "metric"]).any()
        for row in data.to_dict("records"):
            same = runs[(runs["cluster"] == row["cluster"]) & (runs["policy"] == row["policy"])
                        & (runs["mean_interarrival_s"] == row["mean_interarrival_s"])]
            assert len(same) == len(SEEDS)
            assert row["mean"] == pytest.approx(same[row["metric"]].mean(), rel=1e-12)
    # The two clusters really differ (so a point that averaged them would show).
    bars = pd.read_csv(figures / "policy_bars.csv").query("metric == 'blocking_rate' and policy == 'para_max'")
    assert bars.set_index("cluster")["mean"].diff().abs().iloc[-1] > 0.05
    # Job figures pool the jobs of the two seeds of one cluster and policy, never more.
    at_load = runs[runs["mean_interarrival_s"] == 1000.0]
    for name in ("jct_cdf", "degree_histogram"):
        data = pd.read_csv(figures / f"{name}.csv")
        assert set(data["cluster"]) == set(CLUSTERS) and (data["n_runs"] == len(SEEDS)).all()
        assert (data["mean_interarrival_s"] == 1000.0).all()  # held fixed, written on every row
        for (cluster, policy), rows in data.groupby(["cluster", "policy"]):
            same = at_load[(at_load["cluster"] == cluster) & (at_load["policy"] == policy)]
            expected = same["num_jobs_completed"].sum() if name == "jct_cdf" else \
                (same["num_jobs_arrived"] - same["num_jobs_unresolved"]).sum()
            assert set(rows["n_jobs"]) == {expected}
    text = (tmp_path / "report.md").read_text()
    assert "- Differing between runs (each value its own row, curve or panel; never averaged): " \
           "policy (para_max, para_min), cluster (ramp32, ramp64), mean_interarrival_s (500, 1000)" in text
    for name in ("blocking_vs_load", "policy_bars", "jct_cdf", "degree_histogram", "utilisation_para_max"):
        assert (figures / f"{name}.csv").is_file() and f"(figures/{name}.csv)" in text
    assert not list(figures.glob(".*.tmp"))  # atomic writes leave no temporary files
    # tables/summary.csv says what its intervals are, as the figure data does, with the same n.
    summary = pd.read_csv(tmp_path / "tables" / "summary.csv")
    assert set(summary["interval"]) == {"none (n < 3)"} and (summary["n"] == len(SEEDS)).all()
    bars_all = pd.read_csv(figures / "policy_bars.csv")
    both = bars_all.merge(summary, on=["cluster", "policy", "mean_interarrival_s", "metric"], suffixes=("", "_t"))
    assert len(both) == len(bars_all) and (both["n"] == both["n_t"]).all()
    assert (both["interval"] == both["interval_t"]).all()
    # The occupancy data names its run: policy, the differing settings, seed and folder.
    occupancy = pd.read_csv(figures / "utilisation_para_max.csv")
    assert {"policy", "cluster", "mean_interarrival_s", "seed", "run_dir"} <= set(occupancy.columns)
    run = runs[runs["run_dir"] == occupancy["run_dir"].iloc[0]].iloc[0]
    assert occupancy["run_dir"].nunique() == 1 and (occupancy["policy"] == "para_max").all()
    assert (occupancy["cluster"] == run["cluster"]).all() and (occupancy["seed"] == run["seed"]).all()


def test_settings_are_every_resolved_value_that_differs(cluster_sweep: Path) -> None:
    runs = load_sweep(cluster_sweep)
    # cluster.num_servers_per_rack differs too, but the cluster column already tells it;
    # arrivals.interval_s follows the load, policy._target_ the policy.
    assert group_columns(runs) == ["policy", "beta", "cluster", "mean_interarrival_s"]
    assert runs.groupby(group_columns(runs)).size().eq(len(SEEDS)).all()
    assert {"cluster.num_servers_per_rack", "arrivals.interval_s"} <= set(runs.columns)
    assert set(runs["profile_time_unit_s"]) == {1.0}


def test_an_override_without_a_column_of_its_own_still_splits_the_runs(tmp_path: Path) -> None:
    """Two runs that differ only in a resolved value (no command-line record of it) are two settings."""
    for i, (servers, blocking) in enumerate(((2, 0.5), (4, 0.1))):
        run = tmp_path / f"run{i}"
        run.mkdir()
        summary = {"blocking_rate": blocking, "num_jobs_arrived": 0,
                   "config": {"scenario": "paper", "policy": "para_max", "beta": "A", "seed": 0,
                              "mean_interarrival_s": 1000.0, "horizon_s": 1e4},
                   "resolved_config": {"cluster": {"num_servers_per_rack": servers}, "seed": 0}}
        (run / "summary.json").write_text(json.dumps(summary))
    runs = load_sweep(tmp_path)
    assert group_columns(runs) == ["policy", "beta", "cluster.num_servers_per_rack"]
    fig = plot_blocking_vs_load(runs)
    assert [ax.get_title() for ax in fig.axes if ax.get_visible()] == [
        "cluster.num_servers_per_rack=2", "cluster.num_servers_per_rack=4"]
    assert list(fig.data["mean"]) == [0.5, 0.1]


def test_a_target_policy_is_named_by_its_class(tmp_path: Path) -> None:
    """``policy._target_=mypolicy.Mine`` is 'Mine' in the log, run folder, summary.json and report."""
    (tmp_path / "mypolicy.py").write_text(
        "from simulator.policies.heuristics import ParaMin\n\n\nclass Mine(ParaMin):\n    pass\n")
    proc = subprocess.run([*SIM, "policy._target_=mypolicy.Mine", "horizon_s=5000", "progress=false"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "outputs" / "sim").iterdir()
    assert run.name.endswith("_Mine_betaA_seed0")
    assert json.loads((run / "summary.json").read_text())["config"]["policy"] == "Mine"
    assert "| Mine beta=A seed=0 horizon_s=5000 |" in proc.stderr + proc.stdout  # other overrides follow the seed
    text = build_report(tmp_path / "outputs").read_text()
    assert "- Policies: Mine\n" in text and "Para_max" not in text


def test_policy_name_rule() -> None:
    assert policy_name("para_max", ["policy._target_=pkg.mod.MyPolicy", "seed=1"]) == "MyPolicy"
    assert policy_name("para_max", ["+policy._target_='mine.Cls'"]) == "Cls"
    assert policy_name("min_feasible", ["policy.block_search=64"]) == "min_feasible"
    assert policy_name("min_feasible", []) == "min_feasible"


def test_every_policy_has_its_own_colour_and_marker() -> None:
    custom = ["Mine", "lookahead", "pacml_critic", *(f"user{i}" for i in range(20))]
    styles = policy_styles([*POLICY_ORDER, *custom])
    pairs = [(s.colour, s.marker) for s in styles.values()]
    assert len(set(pairs)) == len(pairs) == len(POLICY_ORDER) + len(custom)
    assert len({s.colour for p, s in styles.items() if p in POLICY_ORDER}) == len(POLICY_ORDER)
    greys = {"#7f7f7f", "tab:gray", "tab:grey", "grey", "gray", "C7"}
    assert not greys & {s.colour for s in styles.values()}
    assert styles["pacml"].colour == "#000000"
    # A custom policy never takes a known policy's colour, alone or beside them.
    known = {s.colour for p, s in styles.items() if p in POLICY_ORDER}
    assert policy_styles(["Mine"])["Mine"].colour not in known


def test_placement_report_escapes_links_and_names_graphs(tmp_path: Path) -> None:
    """A run of graph=/data/nets/my net.json lives in 'graph=%2Fdata%2Fnets%2Fmy net.json,...':
    the link must keep its %2F (as %252F) and the table show 'my net', not the path."""
    sweep = tmp_path / "sweep"
    graph = "/data/nets/my net.json"
    run = sweep / "graph=%2Fdata%2Fnets%2Fmy net.json,method=single"
    run.mkdir(parents=True)
    (run / "gantt.png").write_bytes(b"\x89PNG")
    (run / "summary.json").write_text(json.dumps({
        "kind": "placement", "graph": graph, "graph_name": "my net", "devices": "gpu4: 4 devices",
        "objective": "latency", "method": "single", "seed": 0, "value_s": 0.002, "feasible": True,
        "reason": "", "single_device": "gpu0", "single_device_value_s": 0.002, "speedup_vs_single": 1.0,
        "method_wall_s": 0.01, "evaluations": 1, "gantt": ["gantt.png"],
        "config": {"devices": "gpu4", "graph": graph}}))
    text = build_report(sweep, tmp_path / "report").read_text()
    link = "(../sweep/graph=%252Fdata%252Fnets%252Fmy%20net.json,method=single/gantt.png)"
    assert link in text
    assert "| my net | gpu4 | latency | single | 1 |" in text
    assert "- Graphs: my net (from `/data/nets/my net.json`)" in text
    # The link resolves to the chart: undo the URL encoding once, relative to the report.
    from urllib.parse import unquote
    assert ((tmp_path / "report") / unquote(link[1:-1])).resolve() == (run / "gantt.png").resolve()
    assert (tmp_path / "report" / "figures" / "placement_speedups.csv").is_file()


def test_graph_names_are_names_not_paths() -> None:
    graphs = pd.Series(["resnet18", "/x/nets/a.json", "/data/pipedream/gnmt/graph.txt", "/p/b.json", "/q/b.json",
                        "/r/c.json"])
    recorded = pd.Series(["resnet18", "", "", "", "", "my_c"])
    assert graph_names(graphs, recorded) == {
        "resnet18": "resnet18", "/x/nets/a.json": "a", "/data/pipedream/gnmt/graph.txt": "gnmt",
        "/p/b.json": "/p/b.json", "/q/b.json": "/q/b.json",  # one name, two graphs: the paths keep them apart
        "/r/c.json": "my_c"}


def test_figures_of_one_load_of_several_name_it_as_shown_not_held_fixed(
        cluster_sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import analysis.report as report

    titles: dict[str, str] = {}
    real_save = report.save_figure

    def save(fig, directory, name, *args, **kwargs):  # noqa: ANN001, ANN202 - a spy on save_figure
        titles[name] = " ".join(fig.get_suptitle().split())
        return real_save(fig, directory, name, *args, **kwargs)

    monkeypatch.setattr(report, "save_figure", save)
    build_report(cluster_sweep, tmp_path)
    for name in ("policy_bars", "jct_cdf", "degree_histogram"):
        title = titles[name]
        assert "shown at mean_interarrival_s=1000 (one of 500, 1000 swept)" in title, title
        held = title.split("held fixed:", 1)[1] if "held fixed:" in title else ""
        assert "mean_interarrival_s" not in held, title
        assert "cluster" not in held and "policy=" not in held  # swept keys are never held fixed
    assert "shown at" not in titles["blocking_vs_load"]
    text = (tmp_path / "report.md").read_text()
    assert "at mean inter-arrival time 1000 profile time units (one of the 2 swept)" in text


def test_a_load_that_follows_the_cluster_is_no_load_axis(cluster_sweep: Path, tmp_path: Path) -> None:
    """Each cluster at its own load (experiment=pipeline_hetero): every figure shows both clusters
    (no load is picked), and there is no load curve of one point per cluster."""
    sweep = tmp_path / "sweep"
    for run in cluster_sweep.iterdir():
        if "cluster=ramp32,mean_interarrival_s=500.0" in run.name or "cluster=ramp64,mean_interarrival_s=1000.0" in run.name:
            shutil.copytree(run, sweep / run.name)
    build_report(sweep, tmp_path / "report")
    figures = tmp_path / "report" / "figures"
    bars = pd.read_csv(figures / "policy_bars.csv")
    assert set(zip(bars["cluster"], bars["mean_interarrival_s"], strict=True)) == {("ramp32", 500.0), ("ramp64", 1000.0)}
    assert not (figures / "blocking_vs_load.csv").exists()
    assert set(pd.read_csv(figures / "jct_cdf.csv")["cluster"]) == {"ramp32", "ramp64"}


def _paper_setup_runs(root: Path, runs: dict[str, float]) -> None:
    """One summary.json per (policy -> blocking rate), beta A seed 0, in the paper's setup."""
    for policy, blocking in runs.items():
        run = root / policy
        run.mkdir()
        summary = {"blocking_rate": blocking, "demand_throughput_Bps": 2.5e7, "num_jobs_arrived": 0,
                   "config": {"scenario": "paper", "cluster": "ramp32", "workload": "paper",
                              "arrivals": "fixed", "policy": policy, "beta": "A", "seed": 0,
                              "mean_interarrival_s": 1000.0, "horizon_s": 1e6}}
        (run / "summary.json").write_text(json.dumps(summary))
        (run / "jobs.csv").write_text("job_id,model,arrival_time_s,beta,degree,num_servers,servers,outcome,"
                                      "block_reason,jct_s,start_time_s\n")


def test_the_papers_pacml_numbers_sit_beside_the_per_beta_agents_not_the_adaptive_one(tmp_path: Path) -> None:
    """The paper's PAC-ML (one GNN + PPO agent per beta) is policy=pacml_beta; policy=pacml, our
    adaptive agent with block placement, is not the paper's method and gets no paper number."""
    _paper_setup_runs(tmp_path, {"para_max": 0.26, "pacml": 0.186, "pacml_beta": 0.23})
    rows = paper_comparison(load_sweep(tmp_path)).set_index("policy")
    assert rows.loc["pacml_beta", "paper_blocking"] == 0.2209
    assert rows.loc["pacml_beta", "paper_throughput_Bps"] == 2.470e7
    assert pd.isna(rows.loc["pacml", "paper_blocking"]) and pd.isna(rows.loc["pacml", "paper_throughput_Bps"])
    assert rows.loc["pacml", "n"] == 1  # still listed: ours, beside no paper number
    text = build_report(tmp_path, tmp_path / "report").read_text()
    table = text.split("## Ours vs the paper")[1].split("## Figures")[0]
    lines = {line.split(" | ")[1]: line for line in table.splitlines() if line.startswith("| A |")}
    assert lines["PAC-ML (per β)"].split(" | ")[3:5] == ["0.230", "0.2209"]
    assert lines["PAC-ML adaptive (ours, not the paper's method)"].split(" | ")[3:5] == ["0.186", "–"]
    assert "was not run" not in table


def test_the_comparison_says_when_the_papers_agent_was_not_run(tmp_path: Path) -> None:
    """A sweep without pacml_beta compares the paper's PAC-ML with nothing, and says so."""
    _paper_setup_runs(tmp_path, {"para_max": 0.26, "pacml": 0.186})
    text = build_report(tmp_path, tmp_path / "report").read_text()
    table = text.split("## Ours vs the paper")[1].split("## Figures")[0]
    (row,) = [line for line in table.splitlines() if line.startswith("| A | PAC-ML (per β) |")]
    assert row.split(" | ")[2:5] == ["0", "not run", "0.2209"]
    assert "The paper's agent, PAC-ML (per β) (`policy=pacml_beta`), was not run in this sweep" in table
