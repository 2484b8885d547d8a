"""benchmarks/pipeline/latency.py (scenario=pipeline's decision latency): one timing per decision,
and the cases' overrides compose (the 512-server mixed cluster is an override, not a conf file)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pacml.agent.env import compose_sim_config
from simulator.build import build_topology

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def latency():
    spec = importlib.util.spec_from_file_location("_latency", ROOT / "benchmarks" / "pipeline" / "latency.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_timing_per_decision(latency) -> None:
    overrides = [*latency.case_overrides("ramp32", 64, "pipedream", "D"), "horizon_s=30"]
    ep = latency.episode(overrides, 100)
    assert len(ep["times_s"]) == 51 and all(t > 0 for t in ep["times_s"])  # a job every 0.6 s for 30 s
    assert ep["placer_calls"] > 0


def test_the_mixed_512_cluster_has_two_kinds(latency) -> None:
    topo = build_topology(compose_sim_config(latency.case_overrides("ramp512_hetero", 0, "dp_mixed", "A")))
    assert topo.num_servers == 512 and topo.kinds == ("gpu", "gpu_half")
    assert (topo.server_kind_index == 1).sum() == 256
