"""pacml-sim end to end: a run writes its files; bad input gives one clear line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SIM = [sys.executable, "-c", "from simulator.run import main; main()"]


def run_sim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*SIM, *args, "progress=false", f"hydra.run.dir={cwd / 'run'}"], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_a_run_writes_jobs_and_summary_beside_its_config(tmp_path: Path) -> None:
    proc = run_sim("scenario=paper", "policy=para_min", "beta=D", "seed=1", "horizon_s=1e5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["num_jobs_arrived"] == 101
    assert summary["config"]["policy"] == "para_min" and summary["config"]["beta"] == "D"
    lines = (run / "jobs.csv").read_text().splitlines()
    assert lines[0].startswith("job_id,model,arrival_time_s,beta")
    assert len(lines) == 102
    assert (run / ".hydra" / "config.yaml").is_file()
    # Re-running the same config in the same directory skips the finished run.
    mtime = (run / "summary.json").stat().st_mtime_ns
    again = run_sim("scenario=paper", "policy=para_min", "beta=D", "seed=1", "horizon_s=1e5", cwd=tmp_path)
    assert again.returncode == 0 and (run / "summary.json").stat().st_mtime_ns == mtime
    # A different config in the same directory runs again.
    changed = run_sim("scenario=paper", "policy=para_min", "beta=D", "seed=1", "horizon_s=2e5", cwd=tmp_path)
    assert changed.returncode == 0
    assert json.loads((run / "summary.json").read_text())["num_jobs_arrived"] == 201


@pytest.mark.parametrize(("args", "expected"), [
    (["policy=nope"], "unknown policy 'nope' (available: fixed, lookahead, min_feasible"),
    (["cluster.num_racks_per_group=0"], "cluster.num_racks_per_group': must be an integer >= 1"),
    (["arrivals=poisson", "arrivals.rate_per_s=-1", "arrivals.mean_interval_s=null"],
     "arrivals.rate_per_s': must be a finite number > 0, got -1"),
    (["mean_interarrival_s=-5"], "mean_interarrival_s': must be > 0, got -5"),
    (["policy=fixed", "policy.degree=3"], "policy.degree=3 is not offered on this cluster"),
    (["cluster=ramp65536", "policy=fixed", "policy.degree=1023"],
     "policy.degree=1023 is not offered on this cluster (308 degrees from 1 to 1024; nearest: 1014 or 1024)"),
])
def test_bad_input_gives_one_clear_line(tmp_path: Path, args: list[str], expected: str) -> None:
    proc = run_sim(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("pacml-sim: error: ")
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_malformed_graph_file_names_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "graph.txt"
    bad.write_text("node1 -- Linear -- forward_compute_time=1.0, backward_compute_time=x, "
                   "activation_size=1, parameter_size=1\n")
    proc = run_sim(f"workload.graphs={bad}", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"pacml-sim: error: {bad}:1: field 'backward_compute_time': not a number: 'x'"
