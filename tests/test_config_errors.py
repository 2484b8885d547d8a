"""Bad configurations end in one line naming the key, exit 2, for every console command.

In-process: each command's entry checks (``preflight`` for the Hydra commands, ``main(argv)``
for the argparse ones). Plug-ins outside the repository (item 7) run the installed console
script from a temporary directory. A small hypothesis sample runs the fuzzer's grammar
(``benchmarks/fuzz/fuzz_configs.py``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pacml.adaptive.train import command as adaptive_command
from pacml.agent.train import COMMAND as TRAIN
from pacml.critic.distill import command as distill_command
from pacml.placer.cli import COMMAND as TRAIN_PLACER
from simulator.cli import preflight
from simulator.config import RETIRED
from simulator.run import COMMAND as SIM

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def one_line_error(capsys: pytest.CaptureFixture[str], call, prog: str) -> str:
    """Run ``call``; assert exit status 2 and exactly one ``prog: error:`` line; return it."""
    with pytest.raises(SystemExit) as exc:
        call()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    return err.strip()


@pytest.mark.parametrize(("args", "expected"), [
    (["seed=-1"], "field 'seed': must be >= 0, got -1"),
    (["seed=null"], "field 'seed': must be an integer, got None"),
    (["seed=[0]"], "field 'seed': must be an integer, got [0]"),
    (["seed=1.5"], "field 'seed': must be an integer, got 1.5"),
    (["horizon_s=abc"], "field 'horizon_s': must be a finite number or null, got 'abc'"),
    (["horizon_s=1e400"], "field 'horizon_s': must be a finite number or null, got inf"),
    (["workload.num_training_steps=abc"], "field 'workload.num_training_steps': must be an integer"),
    (["sim=null"], "field 'sim': must be a config section, got None"),
    (["workload.graphs=null"], "field 'workload.graphs': must be a string or a list of strings"),
    (["workload.time_scales=[0.5,-1]"], "field 'workload.time_scales': must be > 0"),
    (["workload.time_scales=[0.5]"], "field 'workload.time_scales': need 5 factors in (0, 1e+06] (one per graph"),
    (["workload.time_scales=[1,1,1,1,1e300]"], "field 'workload.time_scales': must be <= 1e+06"),
    (["beta=uniform", "beta.high=2"], "field 'beta.high': must be a number in (0, 1]"),
    (["beta=fixed", "beta.value=1.5"], "field 'beta.value': must be a number in (0, 1]"),
    (["sim.comm_quirks=maybe"], "field 'sim.comm_quirks': must be true or false, got 'maybe'"),
    (["foo=1"], "unknown config key 'foo'"),
    (["cluster.foo=1"], "unknown config key 'cluster.foo' (cluster has: _target_, io_latency_s"),
    (["horizon=1e5"], "unknown config key 'horizon' (did you mean 'horizon_s'?)"),
    (["+foo=1"], "field 'foo': unknown key"),
    (["seed=["], "cannot parse override 'seed=['"),
    (["seed=0,1"], "'seed=0,1' sweeps over several values: add -m"),
    (["-m", "seed=0,-1"], "field 'seed': must be >= 0, got -1"),
    (["policy=para_mx"], "unknown policy 'para_mx' (did you mean 'para_max' or 'para_min'?)"),
    (["cluster=null"], "override 'cluster=null'"),
    (["~seed"], "field 'seed': is missing"),
    (["--foo"], "unrecognized arguments: --foo"),
    (["horizon_s=null"], "field 'horizon_s': is null, but these arrivals never end"),
    (["mean_interarrival_s=1e-3"], "field 'max_arrivals': this episode would have about 1,000,000,001 arrivals"),
    (["cluster.num_comm_groups=16384", "cluster.num_racks_per_group=16384"],
     "field 'max_estimated_memory_gb': this run would need about 269 GB (536,870,912 servers)"),
    (["max_estimated_memory_gb=0.5"], "field 'max_estimated_memory_gb': this run would need about 1 GB"),
    (["policy=lookahead", "horizon_s=5e7"], "field 'max_estimated_hours': this episode would run for about 6"),
    (["max_estimated_hours=0"], "field 'max_estimated_hours': must be > 0, got 0"),
    (["policy=fixed", "policy.degree=1.5"], "field 'policy.degree': must be an integer, got 1.5"),
    (["policy._target_=nope.Missing"], "field 'policy._target_': cannot import 'nope.Missing'"),
    (["policy.foo=2"], "unknown config key 'policy.foo'"),
    (["seed=${nope}"], "field 'seed': Interpolation key 'nope' not found"),
])
def test_pacml_sim_bad_overrides_give_one_line_naming_the_key(capsys: pytest.CaptureFixture[str], args: list[str],
                                                              expected: str) -> None:
    assert expected in one_line_error(capsys, lambda: preflight(SIM, args), "pacml sim")


def test_an_enormous_episode_runs_when_asked_for_on_purpose() -> None:
    cfg = preflight(SIM, ["mean_interarrival_s=1e-3", "horizon_s=200", "max_arrivals=300000"])
    assert cfg is not None and cfg.max_arrivals == 300000


def test_a_run_over_the_estimated_limits_runs_when_asked_for_on_purpose() -> None:
    cfg = preflight(SIM, ["policy=lookahead", "horizon_s=5e7", "max_estimated_hours=null"])
    assert cfg is not None and cfg.max_estimated_hours is None
    cfg = preflight(SIM, ["max_estimated_memory_gb=2"])
    assert cfg is not None and cfg.max_estimated_memory_gb == 2


def test_default_policy_keys_are_dropped_for_a_new_target_but_named_when_given() -> None:
    cfg = preflight(SIM, ["policy._target_=simulator.policies.heuristics.ParaMin"])
    assert cfg is not None and dict(cfg.policy) == {"_target_": "simulator.policies.heuristics.ParaMin",
                                                    "mask": "paper"}


@pytest.mark.parametrize(("cmd", "args", "expected"), [
    (TRAIN, ["ppo.gamma=2"], "field 'ppo.gamma': must be <= 1, got 2"),
    (TRAIN, ["ppo.warmstart=maybe"], "field 'ppo.warmstart': must be one of 'auto' or null"),
    (TRAIN, ["ppo=null"], "field 'ppo': must be a config section, got None"),
    (TRAIN, ["reward.success=abc"], "field 'reward.success': must be a finite number, got 'abc'"),
    (TRAIN, ["resume="], "field 'resume': must not be empty"),
    (TRAIN, ["seed=-1"], "field 'seed': must be >= 0"),
    (TRAIN, ["ppo.condition_jobs=0"], "field 'ppo.condition_jobs': must be >= 1"),
    (TRAIN, ["ppo.val_conditions=true"], "field 'ppo.val_conditions'"),
    (None, ["distill.critic_margins=[-1]"], "field 'distill.critic_margins'"),
    (None, ["distill.episods=3"], "unknown config key 'distill.episods' (did you mean 'distill.episodes'"),
    (None, ["ppo.gamma=0.9"], "unknown config key 'ppo.gamma'"),
])
def test_train_and_distill_bad_overrides_give_one_line(capsys: pytest.CaptureFixture[str], cmd, args: list[str],
                                                       expected: str) -> None:
    cmd = cmd or distill_command()
    assert expected in one_line_error(capsys, lambda: preflight(cmd, args), cmd.prog)


@pytest.mark.parametrize(("args", "expected"), [
    ([], "the following arguments are required: command"),
    (["--time-unit-s", "nan", "info", "resnet18"], "argument --time-unit-s: must be a finite number > 0, got 'nan'"),
    (["--time-unit-s", "-1", "info", "resnet18"], "argument --time-unit-s: must be a finite number > 0"),
    (["frob"], "argument command: invalid choice: 'frob'"),
])
def test_pacml_graph_argument_errors_are_one_line(capsys: pytest.CaptureFixture[str], args: list[str],
                                                  expected: str) -> None:
    from workloads.graph_cli import main

    assert expected in one_line_error(capsys, lambda: main(args), "pacml graph")


def test_pacml_report_argument_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from analysis.report import main

    assert "required: sweep_dir" in one_line_error(capsys, lambda: main([]), "pacml report")
    afile = tmp_path / "a.txt"
    afile.write_text("x")
    assert f"--out: {afile}: exists and is not a directory" in one_line_error(
        capsys, lambda: main([str(tmp_path), "--out", str(afile)]), "pacml report")


# ------------------------------------------------------------------- plug-ins outside the repo
PLUGIN = '''
from simulator.policy import Decision


class WidestFeasible:
    """The widest feasible degree up to cap."""

    def __init__(self, cap: int = 16):
        self.cap = cap

    def reset(self, seed=None):
        pass

    def decide(self, job, state):
        ok = [d for d in state.feasibility.degrees if d <= self.cap and state.feasibility.feasible(d)]
        return Decision(max(ok) if ok else 0)
'''


def run_sim(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The installed ``pacml sim`` in ``cwd`` (no PYTHONPATH), a short episode."""
    env = {"PATH": str(BIN), "HOME": str(cwd)}
    return subprocess.run([str(BIN / "pacml"), "sim", *args, "horizon_s=2e4", "progress=false", "skip_finished=false",
                           f"hydra.run.dir={cwd / 'run'}"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    (tmp_path / "widest.py").write_text(PLUGIN)
    (tmp_path / "myconf" / "policy").mkdir(parents=True)
    (tmp_path / "myconf" / "policy" / "widest.yaml").write_text("_target_: widest.WidestFeasible\ncap: 8\n")
    return tmp_path


def test_a_policy_yaml_in_the_users_folder_is_found_via_searchpath_and_config_dir(plugin_dir: Path) -> None:
    for how in ([f"hydra.searchpath=[file://{plugin_dir / 'myconf'}]"], ["--config-dir", "myconf"]):
        proc = run_sim(plugin_dir, *how, "policy=widest")
        assert proc.returncode == 0, proc.stderr
        assert "widest beta=A" in proc.stdout + proc.stderr  # Hydra's log line
    typo = run_sim(plugin_dir, "--config-dir", "myconf", "policy=widst")
    assert typo.returncode == 2
    assert typo.stderr.startswith("pacml sim: error: unknown policy 'widst' (did you mean 'widest'?)")


def test_a_module_in_the_working_directory_replaces_the_default_policy(plugin_dir: Path) -> None:
    proc = run_sim(plugin_dir, "policy._target_=widest.WidestFeasible", "+policy.cap=4")
    assert proc.returncode == 0, proc.stderr
    # para_max's own keys (max_degree, mask) are not passed to the new class: it says so.
    log = proc.stdout + proc.stderr
    assert "dropping policy.max_degree" in log and "dropping policy.mask" in log
    given = run_sim(plugin_dir, "policy._target_=widest.WidestFeasible", "policy.max_degree=4")
    assert given.returncode == 2
    assert given.stderr == ("pacml sim: error: field 'policy.max_degree': WidestFeasible takes no argument "
                            "'max_degree' (it takes: cap)\n")


# ------------------------------------------------------------------- the fuzzer's grammar
@cache
def fuzz() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_configs", ROOT / "benchmarks" / "fuzz" / "fuzz_configs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_configs"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@cache
def known() -> frozenset[str]:
    return frozenset(fuzz().known_keys())


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command=st.sampled_from(["pacml-sim", "pacml-train", "pacml-graph"]), seed=st.integers(0, 2**32))
def test_generated_command_lines_are_judged_right_and_errors_are_one_line(command: str, seed: int) -> None:
    import random

    f = fuzz()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "notes.txt").write_text("not a graph\n")
        args, atoms = f.generate(command, random.Random(seed), Path(tmp), Path(tmp), set(known()), 0)
        entry = f.hydra_entry(command) if command != "pacml-graph" else f.argparse_entry(command)
        tally = f.Tally()
        tally.add(command, args, atoms, f.run_inprocess(lambda: entry(list(args))))
    assert tally.tracebacks == tally.invalid_accepted == tally.valid_rejected == 0, tally.examples
    assert tally.multi_line == tally.not_naming == tally.bad_status == 0, tally.examples


# ------------------------------------------------------------------- retired options
def _retired_cases() -> list[tuple[str, str]]:
    cases = [(key, f"{prefix}{key}=1") for key in RETIRED for prefix in ("", "+")]
    return [*cases, ("net.order", "net.order=heft")]


@pytest.mark.parametrize(("key", "override"), _retired_cases())
def test_a_retired_option_is_refused_in_one_line_naming_it_retired(capsys: pytest.CaptureFixture[str], key: str,
                                                                  override: str) -> None:
    section = key.split(".")[0]
    cmd, args = {"policy": (SIM, ["policy=pacml"]), "adaptive": (adaptive_command(), []),
                 "distill": (distill_command(), []), "net": (TRAIN_PLACER, [])}[section]
    err = one_line_error(capsys, lambda: preflight(cmd, [*args, override]), cmd.prog)
    assert f"field '{key}': " in err and "was retired: " in err and "unknown" not in err, err
