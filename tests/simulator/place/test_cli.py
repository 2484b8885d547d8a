"""pacml-place: runs write placement.json, summary.json and a Gantt chart; pacml-report reads a
placement sweep; bad input ends in one line and exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig

from simulator.cli import preflight
from simulator.errors import ConfigError
from simulator.place.cli import COMMAND, build_devices, load_graph, run_place
from simulator.place.from_file import FilePlacer
from simulator.place.objectives import bind_objective
from simulator.place.placer import PlacerResult, RandomPlacer
from simulator.topology import RampTopology
from workloads.errors import WorkloadError

PLACE = [sys.executable, "-c", "from simulator.place.cli import main; main()"]


class TimeLimitedPlacer:
    """Stands in for the MIP's config (``method.time_limit_s``) until it is on main."""

    name = "mip_stand_in"

    def __init__(self, time_limit_s: float = 60.0) -> None:
        if not time_limit_s > 0:
            raise ConfigError(f"must be > 0 seconds, got {time_limit_s!r}", field="method.time_limit_s")
        self.time_limit_s = time_limit_s

    def place(self, objective, *, seed: int = 0) -> PlacerResult:
        """Everything on device 0."""
        return PlacerResult(np.zeros(objective.graph.num_nodes, dtype=np.int64))


class SplittingPlacer:
    """A buggy placer: puts an op and its backward mirror on different devices."""

    name = "splitting"

    def place(self, objective, *, seed: int = 0) -> PlacerResult:
        """Node i on device i mod D (mirrors land elsewhere)."""
        return PlacerResult(np.arange(objective.graph.num_nodes, dtype=np.int64) % objective.devices.num_devices)


def checked(*args: str, config_dir: Path | None = None) -> DictConfig:
    extra = [f"--config-dir={config_dir}"] if config_dir else []
    cfg = preflight(COMMAND, [*extra, *args])
    assert cfg is not None
    return cfg


def rejected(capsys: pytest.CaptureFixture[str], *args: str, config_dir: Path | None = None) -> str:
    with pytest.raises(SystemExit) as exc:
        checked(*args, config_dir=config_dir)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pacml place: error: "), err
    assert "Traceback" not in err
    return err


def test_a_run_writes_placement_summary_and_gantt(tmp_path: Path) -> None:
    cfg = checked("graph=resnet18", "devices=hetero", "method=random", "seed=3")
    s = run_place(cfg, tmp_path, {"devices": "hetero", "method": "random"})
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary == json.loads(json.dumps(s))  # strict JSON (no Infinity) and what run_place returned
    graph = load_graph("resnet18")
    objective = bind_objective("step", graph, build_devices(cfg.devices, graph))
    p = RandomPlacer().place(objective, seed=3).placement
    assert summary["value_s"] == pytest.approx(objective.value(p), rel=1e-12)
    assert summary["value_ms"] == pytest.approx(summary["value_s"] * 1e3)
    assert summary["speedup_vs_single"] == pytest.approx(summary["single_device_value_s"] / summary["value_s"])
    assert summary["feasible"] and summary["reason"] == ""
    assert set(summary["per_device"]) == set(summary["device_names"]) and len(summary["device_names"]) == 8
    assert sum(d["ops"] for d in summary["per_device"].values()) == graph.num_nodes
    assert summary["devices"].startswith("hetero:") and summary["method"] == "random"
    placement = json.loads((tmp_path / "placement.json").read_text())
    names = summary["device_names"]
    assert placement["placement"] == {graph.node_names[i]: names[d] for i, d in enumerate(p)}
    assert all(len({placement["placement"][n] for n in group}) == 1 for group in placement["groups"])
    assert summary["gantt"] == ["gantt.png", "gantt.svg"]
    assert (tmp_path / "gantt.png").read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in (tmp_path / "gantt.svg").read_text()[:2000]


def test_pipeline_on_a_dnn_partitioning_file_uses_its_own_devices(tmp_path: Path) -> None:
    cfg = checked("graph=bert24_training", "objective=pipeline", "method=single", "gantt=false")
    s = run_place(cfg, tmp_path, {"devices": "auto", "method": "single"})
    # reference_maxload.md: BERT-24 training, everything on one accelerator: 217.813 ms.
    assert s["device_names"][0] == "cpu" and s["device_names"][1] == "acc0"
    assert s["value_ms"] == pytest.approx(217.813, rel=1e-6)
    assert s["speedup_vs_single"] == pytest.approx(1.0)
    assert "gantt" not in s and not (tmp_path / "gantt.png").exists()


def test_a_method_that_breaks_memory_is_a_result_with_its_reason(tmp_path: Path) -> None:
    cfg = checked("graph=resnet18", "devices=gpu4", "devices.groups=[{kind: gpu, count: 2, memory_bytes: 1e6}]",
                  "method=single", "gantt=false")
    s = run_place(cfg, tmp_path, {})
    assert s["value_s"] is None and not s["feasible"] and s["speedup_vs_single"] is None
    assert "holds 1,000,000 bytes" in s["reason"]


def test_method_file_reprices_a_written_placement_and_ramp_block(tmp_path: Path) -> None:
    first = run_place(checked("graph=resnet18", "devices=ramp_block", "method=round_robin", "gantt=false"),
                      tmp_path / "a", {})
    ramp32 = RampTopology(4, 4, 2)  # conf/cluster/ramp32.yaml: its first first-fit block of 4
    assert first["device_names"] == [f"server{s}" for s in ramp32.blocks(4)[0].servers]
    again = run_place(checked("graph=resnet18", "devices=ramp_block", "method=file",
                              f"method.path={tmp_path / 'a' / 'placement.json'}", "gantt=false"), tmp_path / "b", {})
    assert again["value_s"] == first["value_s"] and again["evaluations"] == 1


def test_a_placer_that_splits_a_group_is_refused(tmp_path: Path) -> None:
    cfg = checked("graph=resnet18", "method._target_=tests.simulator.place.test_cli.SplittingPlacer", "gantt=false")
    with pytest.raises(ConfigError, match="split .* group"):
        run_place(cfg, tmp_path, {})


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=400))
def test_file_placer_reads_back_any_group_placement(tmp_path_factory, draws: list[int]) -> None:
    graph = load_graph("resnet18")
    objective = bind_objective("latency", graph, build_devices({"source": "auto"}, graph))
    groups = np.resize(np.array(draws, dtype=np.int64), graph.num_groups)
    p = groups[graph.group]
    path = tmp_path_factory.mktemp("p") / "p.json"
    names = objective.devices.names
    path.write_text(json.dumps({graph.node_names[i]: names[d] for i, d in enumerate(p)}))
    result = FilePlacer(str(path)).place(objective)
    assert (result.placement == p).all() and result.evaluations == 1


@pytest.mark.parametrize(("args", "expected"), [
    (["devices=nope"], "unknown devices 'nope' (available: auto,"),
    (["method=nope"], "unknown method 'nope'"),
    (["objective=throughput"], "field 'objective': must be one of 'step', 'latency', 'pipeline'"),
    (["graph=/nonexistent/g.json"], "is not a file, a directory or a shipped graph"),
    (["devices=file"], "brings no device set"),
    (["devices=ramp_block", "devices.servers=5"], "field 'devices.servers': must be a block size"),
    (["devices=gpu4", "devices.groups=[{kind: gpu, count: 0}]"], "devices.groups[0].count"),
    (["method=file"], "method.path"),
    (["method=file", "method.path=/nonexistent/p.json"], "no such placement file"),
    (["seed=-1"], "field 'seed'"),
    (["gantt=1"], "field 'gantt'"),
    (["method.foo=1"], "method.foo"),
])
def test_bad_input_gives_one_clear_line(capsys: pytest.CaptureFixture[str], args: list[str], expected: str) -> None:
    assert expected in rejected(capsys, *args)


def test_graph_files_in_unknown_formats(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("just some notes\n")
    (tmp_path / "broken.json").write_text('{"nodes": [1,\n')
    (tmp_path / "other.json").write_text('{"hello": "world"}\n')
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    for name in ("notes.txt", "broken.json", "other.json", "binary.json"):
        err = rejected(capsys, f"graph={tmp_path / name}")
        assert str(tmp_path / name) in err


def test_bad_placement_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    graph = load_graph("resnet18")
    good = dict.fromkeys(graph.node_names, "gpu0")
    cases = {
        "missing_op.json": ({**good, "no_such_op": "gpu0"}, "has no op 'no_such_op'"),
        "missing_device.json": ({**good, graph.node_names[0]: "gpu7"}, "no device 'gpu7'"),
        "incomplete.json": (dict.fromkeys(graph.node_names[1:], "gpu0"), "ops have no device"),
        "split.json": ({**good, graph.node_names[graph.group_members[0][-1]]: "gpu1"}, "form one group"),
        "list.json": ([1, 2], "expected a JSON object"),
    }
    for name, (doc, expected) in cases.items():
        (tmp_path / name).write_text(json.dumps(doc, indent=1))
        err = rejected(capsys, "graph=resnet18", "devices=gpu4", "method=file", f"method.path={tmp_path / name}")
        assert expected in err and str(tmp_path / name) in err, err
    (tmp_path / "garbled.json").write_text('{"a":\n')
    assert "garbled.json:2: not JSON" in rejected(capsys, "method=file", f"method.path={tmp_path / 'garbled.json'}")
    # Memory overflow in a given placement is bad input, naming the device and the bytes.
    (tmp_path / "fits.json").write_text(json.dumps(good))
    err = rejected(capsys, "graph=resnet18", "devices=gpu4", "devices.groups=[{kind: gpu, count: 4, memory_bytes: 1e6}]",
                   "method=file", f"method.path={tmp_path / 'fits.json'}")
    assert "device 'gpu0' needs" in err and "holds 1,000,000 bytes" in err


def test_a_zero_time_limit_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "method").mkdir()
    (tmp_path / "method" / "mip_stand_in.yaml").write_text(
        "_target_: tests.simulator.place.test_cli.TimeLimitedPlacer\ntime_limit_s: 60.0\n")
    checked("method=mip_stand_in", config_dir=tmp_path)
    err = rejected(capsys, "method=mip_stand_in", "method.time_limit_s=0", config_dir=tmp_path)
    assert "field 'method.time_limit_s': must be > 0 seconds, got 0" in err
    assert "method.time_limit_s" in rejected(capsys, "method=mip_stand_in", "method.time_limit_s=abc",
                                             config_dir=tmp_path)


def test_validate_wraps_graph_reader_errors() -> None:
    with pytest.raises(WorkloadError, match="not a file, a directory or a shipped graph"):
        load_graph("no_such_graph")


def test_sweep_then_report(tmp_path: Path) -> None:
    proc = subprocess.run([*PLACE, "-m", "graph=resnet18", "method=single,round_robin",
                           "objective=latency", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    runs = sorted(p.parent.name.removesuffix(",objective=latency")
                  for p in (tmp_path / "sweep").glob("*/summary.json"))
    assert runs == ["graph=resnet18,method=round_robin", "graph=resnet18,method=single"]
    assert proc.stdout.count("speed-up") == 2  # one log line per run
    from analysis.report import main as report

    report([str(tmp_path / "sweep"), "--out", str(tmp_path / "report")])
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| resnet18 | auto=gpu4 | latency | round_robin | 1 |" in text
    assert "vs single" in text and "vs round_robin" in text
    assert "(../sweep/graph=resnet18,method=single,objective=latency/gantt.png)" in text
    for ext in ("png", "svg"):
        assert (tmp_path / "report" / "figures" / f"placement_speedups.{ext}").stat().st_size > 0
    table = (tmp_path / "report" / "tables" / "placement_summary.csv").read_text()
    assert "speedup_vs_single" in table.splitlines()[0]


def test_report_keeps_runs_with_other_method_or_device_settings_apart(tmp_path):
    """Runs differing in method.* or devices.* overrides are different rows, not seeds of one."""
    from analysis.runs import _group_overrides

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text(
        "- graph=gnmt\n- method=anneal\n- method.max_evaluations=50\n- devices.servers=8\n")
    assert _group_overrides(run, "method") == "[max_evaluations=50]"
    assert _group_overrides(run, "devices") == "[servers=8]"
    assert _group_overrides(tmp_path / "none", "method") == ""
