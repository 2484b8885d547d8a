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
    (["policy=nope"], "unknown policy 'nope' (available: fixed, foresight, lookahead, min_feasible"),
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
    assert proc.stderr.startswith("pacml sim: error: ")
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_malformed_graph_file_names_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "graph.txt"
    bad.write_text("node1 -- Linear -- forward_compute_time=1.0, backward_compute_time=x, "
                   "activation_size=1, parameter_size=1\n")
    proc = run_sim(f"workload.graphs={bad}", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"pacml sim: error: {bad}:1: field 'backward_compute_time': not a number: 'x'"


# ------------------------------------------------ a user's policy that breaks the interface
USER_POLICIES = '''from simulator.policy import Decision


class ReturnsInt:
    def reset(self, seed=None):
        pass

    def decide(self, job, state):
        return 4


class NoReset:
    def decide(self, job, state):
        return Decision(0)


class Raises:
    def reset(self, seed=None):
        pass

    def decide(self, job, state):
        table = {}
        return Decision(table["degree"])


class BadDegree:
    def reset(self, seed=None):
        pass

    def decide(self, job, state):
        return Decision(3)


class FailsToStart:
    def __init__(self):
        raise RuntimeError("no licence")

    def reset(self, seed=None):
        pass

    def decide(self, job, state):
        return Decision(0)
'''


@pytest.mark.parametrize(("cls", "expected"), [
    ("ReturnsInt", "mypolicies.py:8: mypolicies.ReturnsInt.decide returned 4 (int) for job 0, not a Decision: "
                   "a policy needs reset(seed=None) and decide(job, state) returning a Decision"),
    ("NoReset", "mypolicies.py:12: policy mypolicies.NoReset has no reset() method: a policy needs reset("),
    ("Raises", "mypolicies.py:23: mypolicies.Raises.decide raised KeyError: 'degree' (job 0)"),
    ("BadDegree", "mypolicies.py:30: mypolicies.BadDegree.decide: job 0: degree 3 is not 0 or one of (1, 2, 4"),
    ("FailsToStart", "Error in call to target 'mypolicies.FailsToStart': RuntimeError: no licence "
                     "(at mypolicies.py:36)"),
])
def test_a_user_policy_breaking_the_interface_is_one_line_naming_its_file_and_line(
        tmp_path: Path, cls: str, expected: str) -> None:
    (tmp_path / "mypolicies.py").write_text(USER_POLICIES)
    proc = run_sim(f"policy._target_=mypolicies.{cls}", "horizon_s=50", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert errors[0].startswith("pacml sim: error: ") and expected in errors[0], errors[0]


def test_a_user_policy_error_inside_a_sweep_keeps_its_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "mypolicies.py").write_text(USER_POLICIES)
    proc = subprocess.run([*SIM, "-m", "policy._target_=mypolicies.Raises", "seed=0,1", "horizon_s=50",
                           "progress=false", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == (
        "pacml sim: error: mypolicies.py:23: mypolicies.Raises.decide raised KeyError: 'degree' (job 0)")


def test_a_rerun_sweep_skips_finished_runs_and_clears_what_a_killed_run_left(tmp_path: Path) -> None:
    """Finished = summary.json written for the same resolved config. A killed run leaves no summary.json
    but may leave temporary files (SIGKILL cannot be cleaned up after): the re-run redoes that run
    only, and no temporary file stays behind, in the finished runs' folders either."""
    sweep = tmp_path / "sweep"
    cmd = [*SIM, "-m", "policy=para_max,para_min", "seed=0", "horizon_s=2e4", "progress=false",
           f"hydra.sweep.dir={sweep}"]
    first = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    done, killed = sweep / "horizon_s=20000.0,policy=para_max,seed=0", sweep / "horizon_s=20000.0,policy=para_min,seed=0"
    mtime = (done / "summary.json").stat().st_mtime_ns
    (killed / "summary.json").unlink()
    (killed / "jobs.csv").rename(killed / ".jobs.csv.k1ll3d.tmp")
    for folder in (done, killed):
        (folder / ".summary.json.abc123.tmp").write_bytes(b"")
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert (done / "summary.json").stat().st_mtime_ns == mtime  # skipped
    assert "skipping" in again.stdout and str(done) in again.stdout
    assert json.loads((killed / "summary.json").read_text())["config"]["policy"] == "para_min"  # redone
    assert sorted(p.name for p in sweep.rglob("*.tmp")) == []


def test_a_chart_write_clears_the_temporary_file_a_killed_writer_left(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from analysis.gantt import save_chart

    stale = [tmp_path / ".gantt.png.x1y2z3.tmp", tmp_path / ".gantt.svg.q9.tmp"]
    for path in stale:
        path.write_bytes(b"")
    other = tmp_path / ".other.png.q9.tmp"  # not this chart's: left alone
    other.write_bytes(b"")
    fig = plt.figure()
    assert [p.name for p in save_chart(fig, tmp_path, "gantt")] == ["gantt.png", "gantt.svg"]
    plt.close(fig)
    assert not any(p.exists() for p in stale) and other.exists()


def test_a_paper_run_says_its_time_unit_in_the_log_and_summary(tmp_path: Path) -> None:
    """scenario=paper reads profile numbers as seconds (workload.profile_time_unit_s=1): its times are
    profile time units, and the log line and summary.json say so, not B/s."""
    from simulator.run import time_unit

    proc = run_sim("scenario=paper", "policy=para_min", "beta=D", "seed=1", "horizon_s=1e5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in (proc.stdout + proc.stderr).splitlines() if "| blocking" in x)
    assert " B per profile time unit, " in line and "B/s" not in line
    assert "| para_min beta=D seed=1 horizon_s=1e5 | blocking" in line  # names every swept key
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["time_unit"] == "profile time units"
    assert time_unit({"workload": {"profile_time_unit_s": 1e-3}}) == "s"
    assert time_unit({}) == "s"
    assert time_unit({"workload": {"profile_time_unit_s": 2e-3}}) == "simulated s (a profile ms read as 0.002 s)"


def test_the_log_line_names_the_overrides_its_run_folder_names() -> None:
    """Two runs of a sweep over sim.op_placer or cluster get different log lines, as their folders;
    keys already in the line and the folder name's excluded keys are left out."""
    from simulator.run import other_overrides

    overrides = ["policy=para_max", "sim.op_placer=dp", "beta=A", "seed=0", "cluster=ramp256",
                 "progress=false", "scenario=paper", "policy._target_=x.Y", "+extra=1"]
    assert other_overrides(overrides, ["progress"]) == "+extra=1,cluster=ramp256,sim.op_placer=dp"
    assert other_overrides(["beta=A", "seed=0"]) == ""


def test_a_policy_target_with_a_policy_sweep_is_refused_before_any_run(tmp_path: Path) -> None:
    """policy._target_ overrides every swept policy's class: the sweep would run one class twice."""
    proc = subprocess.run([*SIM, "-m", "policy=para_max,min_feasible", "policy._target_=x.Y", "progress=false",
                           f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("pacml sim: error: policy._target_=x.Y with more than one policy= value "
                           "(policy=para_max,min_feasible) would run the same class under each policy name: "
                           "give one policy= value or drop policy._target_\n")
    assert not (tmp_path / "sweep").exists()
