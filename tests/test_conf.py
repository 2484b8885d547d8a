"""Every option of every config group composes, and every swappable object instantiates."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from simulator.build import build_feasibility, build_policy, build_topology, build_workload
from tests.conftest import CONF_DIR

GROUPS = ("cluster", "workload", "arrivals", "beta", "policy", "scenario")


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


@pytest.mark.parametrize(("group", "option"), [(g, o) for g in GROUPS for o in _options(g)])
def test_every_option_composes_and_instantiates(group: str, option: str) -> None:
    extra = {("arrivals", "trace"): ["workload=all"],
             ("policy", "pacml_critic"): ["beta=D"]}.get((group, option), [])  # a shipped critic
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(config_name="sim", overrides=[f"{group}={option}", *extra])
    topology = build_topology(cfg)
    build_feasibility(topology, cfg.sim)
    build_workload(cfg)
    build_policy(cfg)


def test_paper_scenario_sets_the_original_units_and_rules() -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(config_name="sim", overrides=["scenario=paper"])
    assert cfg.workload.profile_time_unit_s == 1.0
    assert cfg.mean_interarrival_s == 1000.0 and cfg.horizon_s == 1e6
    assert cfg.horizon_accounting == "paper"
    assert cfg.sim.placement == "op_first_fit" and cfg.sim.edge_sizing == "paper" and cfg.sim.comm_quirks


def test_command_line_group_choice_beats_the_scenario() -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(config_name="sim", overrides=["scenario=paper", "cluster=ramp512", "arrivals=poisson"])
    assert build_topology(cfg).num_servers == 512
    assert cfg.arrivals.mean_interval_s == 1000.0
