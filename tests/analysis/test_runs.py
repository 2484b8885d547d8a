"""Loading sweeps: one row per finished run; missing or corrupt summaries are warned about and skipped."""

from __future__ import annotations

import ast
import json
import logging
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.runs import (
    RunFileError,
    cluster_num_servers,
    config_columns,
    load_jobs,
    load_run_config,
    load_sweep,
    load_sweep_jobs,
    load_sweep_with_jobs,
)

ROOT = Path(__file__).resolve().parents[2]

JOBS_CSV = """job_id,model,arrival_time_s,beta,sequential_jct_s,max_jct_s,degree,num_servers,servers,outcome,block_reason,jct_s,start_time_s,completion_time_s,speedup,demand_bytes,cluster_bytes,busy_server_s
0,gnmt,0.0,0.5,100.0,50.0,2,2,0-0-0 1-0-0,completed,,50.0,0.0,50.0,2.0,1e9,2e9,100.0
1,gnmt,10.0,0.2,100.0,20.0,0,0,,blocked,rejected,nan,nan,nan,nan,1e9,nan,nan
"""


def write_run(root: Path, name: str, policy: str = "para_max", beta: str = "A", seed: int = 0,
              blocking_rate: float = 0.25, mean_interarrival_s: float = 1000.0,
              overrides: tuple[str, ...] = ()) -> Path:
    """A fake finished run directory like pacml-sim writes."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(
        "cluster:\n  num_comm_groups: 4\n  num_racks_per_group: 4\n  num_servers_per_rack: 2\n"
        f"seed: {seed}\n")
    (run / ".hydra" / "overrides.yaml").write_text(
        "".join(f"- {o}\n" for o in (f"policy={policy}", f"seed={seed}", "progress=false", *overrides)))
    summary = {"blocking_rate": blocking_rate, "num_jobs_arrived": 2, "demand_throughput_Bps": 2.0e7,
               "blocked_by_reason": {"rejected": 1, "no_placement": 0, "jct_target": 0,
                                     "running_at_horizon": 0},
               "seed": seed, "horizon_accounting": "paper",
               "config": {"scenario": "paper", "policy": policy, "beta": beta, "seed": seed,
                          "mean_interarrival_s": mean_interarrival_s, "horizon_s": 1e6}}
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "jobs.csv").write_text(JOBS_CSV)
    return run


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """Three finished runs (one nested a level deeper), one unfinished, one corrupt."""
    write_run(tmp_path, "beta=A,policy=para_max,seed=0", seed=0, blocking_rate=0.2)
    write_run(tmp_path, "beta=A,policy=para_max,seed=1", seed=1, blocking_rate=0.3)
    write_run(tmp_path / "more", "beta=B,policy=random,seed=0", policy="random", beta="B",
              overrides=("policy.degree=4",))
    (write_run(tmp_path, "unfinished", policy="random") / "summary.json").unlink()
    (write_run(tmp_path, "corrupt", policy="random") / "summary.json").write_text('{"blocking_ra')
    (tmp_path / "multirun.yaml").write_text("hydra: {}\n")
    return tmp_path


def test_load_sweep_reads_finished_runs_and_warns_about_the_rest(
        sweep: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="analysis.runs"):
        runs = load_sweep(sweep)
    assert len(runs) == 3
    assert sorted(runs["policy"]) == ["para_max", "para_max", "random"]
    assert runs.loc[runs["policy"] == "para_max", "blocking_rate"].tolist() == [0.2, 0.3]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert any("unfinished" in w and "no summary.json" in w for w in warnings)
    assert any("corrupt" in w and "unreadable summary.json" in w for w in warnings)


def test_load_sweep_flattens_config_reasons_and_nested_overrides(sweep: Path) -> None:
    runs = load_sweep(sweep)
    row = runs[runs["policy"] == "random"].iloc[0]
    assert row["beta"] == "B" and row["scenario"] == "paper" and row["mean_interarrival_s"] == 1000.0
    assert row["horizon_accounting"] == "paper"
    assert row["num_blocked_rejected"] == 1 and row["num_blocked_running_at_horizon"] == 0
    assert row["policy.degree"] == 4
    assert "config" not in runs.columns and "blocked_by_reason" not in runs.columns
    assert "progress" not in runs.columns
    assert config_columns(runs)[-1] == "policy.degree"


def test_load_sweep_of_an_empty_directory_is_empty(tmp_path: Path) -> None:
    runs = load_sweep(tmp_path)
    assert runs.empty and "policy" in runs.columns


def test_load_jobs_and_sweep_jobs(sweep: Path) -> None:
    run = sweep / "beta=A,policy=para_max,seed=0"
    jobs = load_jobs(run)
    assert jobs["outcome"].tolist() == ["completed", "blocked"]
    assert jobs["block_reason"].tolist() == ["", "rejected"]
    assert jobs["servers"].tolist() == ["0-0-0 1-0-0", ""]
    assert pd.isna(jobs.loc[1, "jct_s"])

    tagged = load_sweep_jobs(load_sweep(sweep))
    assert len(tagged) == 6
    # The run's beta distribution name does not overwrite the job's beta value.
    assert set(tagged["beta"]) == {"A", "B"} and set(tagged["job_beta"]) == {0.5, 0.2}
    assert set(tagged["policy"]) == {"para_max", "random"}


def test_run_config_gives_the_cluster_size(sweep: Path) -> None:
    config = load_run_config(sweep / "beta=A,policy=para_max,seed=0")
    assert cluster_num_servers(config) == 32
    assert cluster_num_servers({}) is None
    assert load_run_config(sweep / "nowhere") == {}


def test_analysis_reads_outputs_and_never_imports_the_simulator() -> None:
    for path in sorted((ROOT / "analysis").glob("*.py")):
        tree = ast.parse(path.read_text())
        modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        modules |= {n.module.split(".")[0] for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
        assert not modules & {"simulator", "pacml", "torch"}, path
        text = path.read_text()
        assert "matplotlib.pyplot" not in text and "import pyplot" not in text, path


# A damaged jobs.csv (how it was damaged, what the one-line warning must say after the file name).
BAD_JOBS = {
    "missing": (None, "No such file"),
    "binary": (b"\x00\xff\xfe garbage\n", "not UTF-8"),
    "row cut short": ("\n".join(line[:40] if i == 1 else line for i, line in enumerate(JOBS_CSV.splitlines()))
                      .encode() + b"\n", "jobs.csv:2: 9 fields, the header has 18"),
    "cut mid-number": (JOBS_CSV.encode()[:-12], "truncated (no newline at the end)"),
    "cut at a line": ("\n".join(JOBS_CSV.splitlines()[:2]).encode() + b"\n", "1 jobs, but summary.json counts 2"),
    "text in a number": (JOBS_CSV.replace("50.0,0.0,50.0", "abc,0.0,50.0").encode(), "jobs.csv:2: column 'jct_s'"),
    "unknown outcome": (JOBS_CSV.replace(",completed,", ",maybe,").encode(), "jobs.csv:2: unknown outcome 'maybe'"),
    "no header": (b"", "jobs.csv: truncated"),
    "columns renamed": (JOBS_CSV.replace("outcome", "result").encode(), "jobs.csv:1: missing columns outcome"),
    "unclosed quote": (JOBS_CSV.encode() + b'2,"gnmt,0.0\n', "jobs.csv:4"),
}


@pytest.mark.parametrize("damage", sorted(BAD_JOBS))
def test_a_run_with_a_damaged_jobs_file_is_skipped_with_one_warning_naming_it(
        sweep: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    content, expected = BAD_JOBS[damage]
    bad = sweep / "beta=A,policy=para_max,seed=1"
    if content is None:
        (bad / "jobs.csv").unlink()
    else:
        (bad / "jobs.csv").write_bytes(content)
    with pytest.raises(RunFileError, match=re.escape(expected)):
        load_jobs(bad, expected_jobs=2)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="analysis.runs"):
        runs, jobs = load_sweep_with_jobs(sweep)
    warnings = [r.getMessage() for r in caplog.records if str(bad) in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert str(bad / "jobs.csv") in warnings[0] and expected in warnings[0]
    assert sorted(runs["seed"]) == [0, 0] and set(jobs["run_dir"]) == set(runs["run_dir"])
    assert len(jobs) == 4 and jobs["jct_s"].dtype == float


@pytest.mark.parametrize("text", ["", "[1, 2]", '{"blocking_rate": "0.2"}', '{"blocking_rate": 0.2, "num_jobs_arrived": [2]}',
                                  '{"blocking_rate": 0.2, "config": {"policy": ["a"]}}',
                                  '{"blocking_rate": 0.2, "blocked_by_reason": {"rejected": "x"}}',
                                  '{"blocking_rate": 0.2, "config": 3}', "[" * 100_000])
def test_a_garbled_summary_is_skipped_with_one_warning(
        sweep: Path, text: str, caplog: pytest.LogCaptureFixture) -> None:
    bad = sweep / "beta=A,policy=para_max,seed=1"
    (bad / "summary.json").write_text(text)
    with caplog.at_level(logging.WARNING, logger="analysis.runs"):
        runs = load_sweep(sweep)
    warnings = [r.getMessage() for r in caplog.records if str(bad) in r.getMessage()]
    assert len(warnings) == 1 and "unreadable summary.json" in warnings[0] and "\n" not in warnings[0]
    assert len(runs) == 2


def test_pacml_report_skips_damaged_runs_and_still_writes_the_report(
        sweep: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture) -> None:
    from analysis.report import main

    (sweep / "beta=A,policy=para_max,seed=1" / "jobs.csv").write_bytes(b"\x89PNG\r\n")
    (sweep / "more" / "beta=B,policy=random,seed=0" / "jobs.csv").unlink()
    with caplog.at_level(logging.WARNING):
        main([str(sweep)])  # used to end in a traceback (FileNotFoundError, UnicodeDecodeError)
    assert capsys.readouterr().out.startswith("report: ")
    warned = [r.getMessage() for r in caplog.records if "jobs.csv" in r.getMessage()]
    assert len(warned) == 2 and all(w.startswith("skipping ") and "\n" not in w for w in warned)
    report = (sweep / "report" / "report.md").read_text()
    assert "- Runs: 1 (4 unfinished or unreadable, skipped)" in report
    assert (sweep / "report" / "figures" / "utilisation_para_max.png").is_file()


def test_a_repeated_run_of_one_setting_and_seed_counts_once_with_a_warning_naming_both(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from analysis.runs import group_columns
    from analysis.stats import aggregate

    write_run(tmp_path / "dup", "1", seed=0, blocking_rate=0.2)
    write_run(tmp_path / "dup", "0", seed=0, blocking_rate=0.4)  # first in sorted order: kept
    write_run(tmp_path / "dup", "2", seed=1, blocking_rate=0.6)
    with caplog.at_level(logging.WARNING, logger="analysis.runs"):
        runs = load_sweep(tmp_path)
    assert sorted(runs["blocking_rate"]) == [0.4, 0.6]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(tmp_path / "dup" / "0") in warnings[0] and str(tmp_path / "dup" / "1") in warnings[0]
    stats = aggregate(runs, group_columns(runs), ["blocking_rate"])
    assert stats["n"].tolist() == [2] and stats["mean"].tolist() == [pytest.approx(0.5)]
    kept, jobs = load_sweep_with_jobs(tmp_path)
    assert len(kept) == 2 and set(jobs["run_dir"]) == set(kept["run_dir"])


def test_runs_that_differ_in_a_setting_are_not_repeats(tmp_path: Path) -> None:
    write_run(tmp_path, "a", seed=0, beta="A")
    write_run(tmp_path, "b", seed=0, beta="B")
    write_run(tmp_path, "c", seed=0, beta="A", mean_interarrival_s=500.0)
    assert len(load_sweep(tmp_path)) == 3
