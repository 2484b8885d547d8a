"""Experiment presets and pacml-report end to end: parallel sweeps, resume, SLURM path, reports."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from analysis.report import build_report, main
from pacml.agent.env import compose_sim_config
from simulator.build import build_policy, check_buildable
from tests.analysis.test_runs import write_run
from tests.conftest import CONF_DIR

SIM = [sys.executable, "-c", "from simulator.run import main; main()"]
REPORT = [sys.executable, "-c", "from analysis.report import main; main()"]
# A tiny paper_main: 2 policies x 2 seeds, 51 jobs each.
TINY = ["experiment=paper_main", "policy=para_max,para_min", "beta=C", "seed=0,1", "horizon_s=5e4"]


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def compose_experiment(name: str) -> object:
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose(config_name="sim", overrides=[f"experiment={name}"], return_hydra_config=True)


def test_paper_main_sweeps_the_papers_grid_in_parallel_processes() -> None:
    cfg = compose_experiment("paper_main")
    assert dict(cfg.hydra.sweeper.params) == {
        "policy": "para_max,para_min,random,min_feasible,min_feasible_4,pacml,pacml_beta", "beta": "A,B,C,D", "seed": "0,1,2"}
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher")
    assert cfg.hydra.launcher.n_jobs == -1 and cfg.hydra.launcher.prefer == "processes"
    assert cfg.progress is False and cfg.skip_finished is True
    assert cfg.hydra.runtime.choices.scenario == "paper"
    assert cfg.mean_interarrival_s == 1000.0 and cfg.horizon_s == 1e6


def test_load_sweep_covers_five_loads_for_four_policies() -> None:
    cfg = compose_experiment("load_sweep")
    params = cfg.hydra.sweeper.params
    assert [float(x) for x in params.mean_interarrival_s.split(",")] == [250, 500, 1000, 2000, 4000]
    assert params.policy == "para_max,para_min,random,min_feasible" and params.seed == "0,1,2"
    assert params.beta == "C"
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher") and cfg.progress is False



def test_pipeline_hetero_builds_every_swept_combination() -> None:
    """Reported seeds only (>= 100), and every swept policy and stage placer builds on every swept
    cluster, each at its own load (one bad pair would stop the whole sweep)."""
    cfg = compose_experiment("pipeline_hetero")
    params = cfg.hydra.sweeper.params
    assert cfg.hydra.runtime.choices.scenario == "pipeline" and min(map(int, params.seed.split(","))) >= 100
    for cluster, placer in itertools.product(params["+pipeline_cluster"].split(","),
                                             params["sim.pipeline.stage_placer"].split(",")):
        sim = compose_sim_config(["experiment=pipeline_hetero", f"+pipeline_cluster={cluster}",
                                  f"sim.pipeline.stage_placer={placer}"])
        assert ("server_kinds" in sim.cluster) == (cluster != "ramp32")
        check_buildable(sim)
    for policy in params.policy.split(","):
        build_policy(compose_sim_config(["experiment=pipeline_hetero", f"policy={policy}"]))

@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """A 4-run paper_main sweep through the joblib launcher."""
    root = tmp_path_factory.mktemp("sweep")
    sweep = root / "tiny"
    return sweep, run([*SIM, "-m", *TINY, f"hydra.sweep.dir={sweep}"], cwd=root)


def test_sweep_names_runs_by_swept_keys_and_resumes(tiny_sweep: tuple[Path, subprocess.CompletedProcess]) -> None:
    sweep, first = tiny_sweep
    names = sorted(p.name for p in sweep.iterdir() if p.is_dir() and (p / "summary.json").is_file())
    assert names == [f"beta=C,horizon_s=50000.0,policy={p},seed={s}"
                     for p in ("para_max", "para_min") for s in (0, 1)]
    assert "Joblib.Parallel" in first.stdout + first.stderr
    mtimes = {n: (sweep / n / "summary.json").stat().st_mtime_ns for n in names}
    again = run([*SIM, "-m", *TINY, f"hydra.sweep.dir={sweep}"], cwd=sweep.parent)
    assert (again.stdout + again.stderr).count("skipping") == 4
    assert mtimes == {n: (sweep / n / "summary.json").stat().st_mtime_ns for n in names}


def test_pacml_report_end_to_end(tiny_sweep: tuple[Path, subprocess.CompletedProcess], tmp_path: Path) -> None:
    sweep, _ = tiny_sweep
    out = tmp_path / "report"
    proc = run([*REPORT, str(sweep), "--out", str(out)], cwd=tmp_path)
    assert proc.stdout.strip() == f"report: {out / 'report.md'}"
    text = (out / "report.md").read_text()
    assert "## Summary" in text and "| Para_max | C | 2 |" in text
    # horizon_s=5e4 is not the paper's setup: no comparison table, no reference markers.
    assert "No run matches the paper's setup" in text
    figures = {p.name for p in (out / "figures").iterdir()}
    for name in ("policy_bars", "jct_cdf", "degree_histogram", "utilisation_para_max",
                 "utilisation_para_min"):
        assert {f"{name}.png", f"{name}.svg"} <= figures
        assert f"figures/{name}.png" in text
    assert "blocking_vs_load.png" not in figures  # one load only
    assert (out / "report.html").read_text().count("<table>") == 1
    assert {p.name for p in (out / "tables").iterdir()} == {"runs.csv", "summary.csv"}


def test_report_of_several_loads_in_the_papers_setup(tmp_path: Path) -> None:
    for load in (500.0, 1000.0):
        for seed in (0, 1):
            write_run(tmp_path, f"load={load},seed={seed}", beta="C", seed=seed,
                      mean_interarrival_s=load, blocking_rate=0.1 + 100 / load + seed / 100)
    report = build_report(tmp_path)
    assert report == tmp_path / "report" / "report.md"
    text = report.read_text()
    assert "![blocking_vs_load](figures/blocking_vs_load.png)" in text
    # Two seeds: the mean and n, no interval.
    assert "| Para_max | C | 1000 | 2 | 0.205 |" in text
    # Only the paper's load (1000) is compared with the paper: (0.2, 0.21) -> mean 0.205.
    assert text.count("| C | Para_max | 2 | 0.205 | 0.2674 |") == 1
    assert "| C | PAC-ML (per β) | 0 | not run | 0.1247 |" in text
    assert (tmp_path / "report" / "tables" / "paper_comparison.csv").is_file()


@pytest.mark.parametrize("make_input", ["missing", "empty", "file"])
def test_bad_input_gives_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             make_input: str) -> None:
    target = tmp_path / make_input
    if make_input == "empty":
        target.mkdir()
    elif make_input == "file":
        target.write_text("not a sweep")
    with pytest.raises(SystemExit) as exc:
        main([str(target)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pacml report: error: ")
    assert str(target) in err


def test_console_script_bad_input(tmp_path: Path) -> None:
    proc = subprocess.run([*REPORT, str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == f"pacml report: error: not a directory: {tmp_path / 'nope'}\n"


def test_sweep_through_submitit_local(tmp_path: Path) -> None:
    """The SLURM path (hydra/launcher=submitit_slurm) with the local executor instead."""
    sweep = tmp_path / "submitit"
    run([*SIM, "-m", "experiment=paper_main", "hydra/launcher=submitit_local", "policy=para_max,para_min",
         "beta=A", "seed=0", "horizon_s=2e4", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert sorted(p.parent.name for p in sweep.glob("*/summary.json")) == [
        f"beta=A,horizon_s=20000.0,policy={p},seed=0" for p in ("para_max", "para_min")]
    assert (sweep / ".submitit").is_dir()  # jobs went through submitit


def test_a_path_in_an_override_names_one_run_directory(tmp_path: Path) -> None:
    """``policy.checkpoint=a/b/policy.pt`` must not nest the run three directories deep."""
    sweep = tmp_path / "paths"
    ckpt = "pacml/checkpoints/paper_betaC/policy.pt"
    root = Path(__file__).resolve().parents[1]
    run([*SIM, "-m", "policy=pacml_beta", f"policy.checkpoint={root / ckpt}", "beta=C", "seed=0,1", "horizon_s=2e4",
         "progress=false", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    runs = sorted(p.parent for p in sweep.rglob("summary.json"))
    assert [r.parent for r in runs] == [sweep, sweep]
    assert runs[0].name.startswith("beta=C,horizon_s=20000.0,policy.checkpoint=%2F")
    assert runs[0].name.endswith("%2Fpolicy.pt,policy=pacml_beta,seed=0")
