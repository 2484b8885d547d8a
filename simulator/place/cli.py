"""``pacml place``: put every op of one computation graph on a device, price it, write the results.

Config ``conf/place.yaml``; what a run writes: docs/op-placement.md. A placement that breaks a
device's memory is a result (value ``inf``, reason named); a ``method=file`` placement that does
is bad input (one line, exit status 2).
"""

from __future__ import annotations

import logging
import math
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from simulator.cli import HydraCommand, finished_run, override_keys, preflight, report_user_errors
from simulator.config import (
    CONF_DIR,
    PLACE_KEYS,
    PLACE_PLUGINS,
    instantiate_checked,
    validate_config,
)
from simulator.errors import ConfigError
from simulator.place.devices import DeviceSet, device_set_from_config, ramp_block_devices
from simulator.place.large import big_graph, is_big_graph_name
from simulator.place.objectives import BoundObjective, Evaluation, PlacementError, bind_objective
from simulator.place.pipeline_schedule import with_input_loading
from simulator.place.placer import PlacerResult, SingleDevicePlacer
from workloads.compute_graph import ComputeGraph
from workloads.errors import WorkloadError
from workloads.io import atomic_write_json, clear_stale_temporaries
from workloads.loaders import load_compute_graph

log = logging.getLogger(__name__)

PROG = "pacml place"
#: Device set for graphs that bring none (``devices=auto``).
DEFAULT_PRESET = "gpu4"
#: Groups of the Hydra config recorded as the run's choices.
GROUPS = ("devices", "method")


@dataclass(frozen=True)
class PlaceCommand(HydraCommand):
    """``pacml place``'s config check: keys, the method's arguments, then graph, devices and method built."""

    def validate(self, cfg: DictConfig, overrides: Any) -> DictConfig:
        """Check a composed config (raises our own errors); returns it."""
        cfg = validate_config(cfg, keys=self.keys, plugins=self.plugins, free=("devices",),
                              given=override_keys(overrides))
        prepare(cfg)
        return cfg


#: What ``pacml place``'s config holds, for the one check before any work (simulator/config.py).
COMMAND = PlaceCommand(PROG, "place", keys=dict(PLACE_KEYS), plugins=PLACE_PLUGINS)


# ---------------------------------------------------------------------- building
_GRAPHS: dict[tuple[str, float], ComputeGraph] = {}


def load_graph(spec: str) -> ComputeGraph:
    """The graph ``spec`` names (cached per file and modification time: preflight and run share
    it); a WorkloadError if it is not a shipped name or a readable graph."""
    path = Path(spec).expanduser()
    try:
        key = (spec, path.stat().st_mtime if path.is_file() else 0.0)
    except OSError:
        key = (spec, 0.0)
    if key in _GRAPHS:
        return _GRAPHS[key]
    try:
        graph = big_graph(spec) if is_big_graph_name(spec) and not path.exists() else load_compute_graph(spec)
    except (WorkloadError, ConfigError):
        raise
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"not UTF-8 text (byte {exc.start}): not a graph in a known format", path=spec,
                            field="graph") from None
    except (ValueError, OSError, RecursionError) as exc:  # e.g. a .json that is not JSON
        text = getattr(exc, "strerror", None) or " ".join(str(exc).split()) or type(exc).__name__
        raise WorkloadError(f"cannot read a graph in a known format: {text}", path=spec, field="graph") from None
    if graph.num_nodes == 0:
        raise WorkloadError("the graph has no ops to place", path=spec, field="graph")
    if len(_GRAPHS) > 8:
        _GRAPHS.clear()
    _GRAPHS[key] = graph
    return graph


def _plain(node: Any, field: str) -> Any:
    try:
        return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    except OmegaConfBaseException as exc:
        raise ConfigError(" ".join(str(exc).splitlines()[0].split()), field=field) from None


def _preset(name: str) -> dict[str, Any]:
    path = CONF_DIR / "devices" / f"{name}.yaml"
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    assert isinstance(data, dict)
    return data


def build_devices(node: Any, graph: ComputeGraph) -> DeviceSet:
    """The device set ``devices`` describes for ``graph``; a ConfigError names the key at fault."""
    data = _plain(node, "devices")
    if not isinstance(data, dict):
        raise ConfigError(f"must be a device preset (a config section), got {data!r}", field="devices")
    source = data.get("source")
    if source is None:
        return device_set_from_config(data)
    if source in ("auto", "file"):
        extra = sorted(set(data) - {"source"})
        if extra:
            raise ConfigError(f"devices={source} takes no keys", field=f"devices.{extra[0]}")
        if "max_accelerators" in graph.meta and "accelerator_memory_bytes" in graph.meta:
            return DeviceSet.for_dnn_partitioning(graph.meta)
        if source == "file":
            raise ConfigError(f"graph {graph.name!r} brings no device set (only dnn-partitioning files do): "
                              f"name a preset, e.g. devices={DEFAULT_PRESET}", field="devices")
        return device_set_from_config(_preset(DEFAULT_PRESET), where="devices")
    if source == "ramp_block":
        return _ramp_block(data)
    raise ConfigError(f"unknown device source {source!r} (expected auto, file or ramp_block, or a preset "
                      "with groups and links)", field="devices.source")


def _ramp_block(data: dict[str, Any]) -> DeviceSet:
    """The first first-fit block of ``servers`` servers of cluster preset ``cluster``."""
    extra = sorted(set(data) - {"source", "cluster", "servers"})
    if extra:
        raise ConfigError("unknown key (expected cluster, servers)", field=f"devices.{extra[0]}")
    name = data.get("cluster")
    topology = _cluster_topology(name, "devices.cluster")
    servers = data.get("servers")
    sizes = [n for n in range(1, topology.num_servers + 1) if topology.block_shapes(n)]
    if isinstance(servers, bool) or not isinstance(servers, int) or servers not in sizes:
        raise ConfigError(f"must be a block size of cluster {name} ({', '.join(map(str, sizes))}), got {servers!r}",
                          field="devices.servers")
    block = topology.blocks(servers)[0]
    return ramp_block_devices(topology, block.servers, name=f"ramp_block({name}, {servers} servers)")


def _cluster_topology(name: Any, field: str) -> Any:
    """The topology of cluster preset ``name`` (``conf/cluster/<name>.yaml``); unknown names are
    refused with the list, naming ``field``."""
    presets = sorted(p.stem for p in (CONF_DIR / "cluster").glob("*.yaml"))
    if not isinstance(name, str) or name not in presets:
        raise ConfigError(f"unknown cluster preset {name!r} (available: {', '.join(presets)})", field=field)
    return instantiate_checked(_cluster_preset(name), field)


def cluster_block_device_sets(cluster: str, min_servers: int = 2) -> list[tuple[str, DeviceSet]]:
    """One device set per (block size >= ``min_servers``, mix of server kinds) that cluster preset
    ``cluster`` offers: all the device sets a job's block can be (servers of one kind are
    interchangeable). Names: ``<cluster>/<servers>:<kind>x<count>+...``; an unknown preset is a
    ConfigError (field ``presets``)."""
    topology = _cluster_topology(cluster, "presets")
    out: list[tuple[str, DeviceSet]] = []
    for size in topology.degrees:
        if size < min_servers:
            continue
        seen: set[tuple[tuple[str, int], ...]] = set()
        for block in topology.blocks(size):
            mix = tuple(sorted(Counter(topology.server_kind[s] for s in block.servers).items()))
            if mix in seen:
                continue
            seen.add(mix)
            name = f"{cluster}/{size}:{'+'.join(f'{k}x{n}' for k, n in mix)}"
            out.append((name, ramp_block_devices(topology, block.servers, name=name)))
    return out


def _cluster_preset(name: str, depth: int = 0) -> DictConfig:
    """``conf/cluster/<name>.yaml`` with its defaults list applied (presets extend one another)."""
    node = OmegaConf.load(CONF_DIR / "cluster" / f"{name}.yaml")
    assert isinstance(node, DictConfig)
    defaults = node.pop("defaults", None) or ["_self_"]
    if depth > 8:
        raise ConfigError(f"cluster preset {name!r}: defaults nest too deeply", field="devices.cluster")
    merged = OmegaConf.create({})
    for entry in defaults:
        if entry == "_self_":
            merged = OmegaConf.merge(merged, node)
        elif isinstance(entry, str) and (CONF_DIR / "cluster" / f"{entry}.yaml").is_file():
            merged = OmegaConf.merge(merged, _cluster_preset(entry, depth + 1))
        else:
            raise ConfigError(f"cluster preset {name!r}: cannot read its defaults entry {entry!r}",
                              field="devices.cluster")
    if "_self_" not in defaults:
        merged = OmegaConf.merge(merged, node)
    assert isinstance(merged, DictConfig)
    return merged


@dataclass
class Prepared:
    """Everything a run needs, built from a checked config."""

    graph: ComputeGraph
    devices: DeviceSet
    objective: BoundObjective
    method: Any


def prepare(cfg: DictConfig) -> Prepared:
    """Load the graph, build the devices, bind the objective and build the method, then run the
    method's ``check(objective)`` hook if it has one (``method=file``), before any work."""
    # The data-loading rule scenario=pipeline uses (one implementation); profiled: the graph as loaded.
    graph = with_input_loading(load_graph(str(cfg.graph)), str(cfg.get("input_loading", "profiled")))
    devices = build_devices(cfg.get("devices"), graph)
    try:
        objective = bind_objective(str(cfg.objective), graph, devices)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0]), field="objective") from None
    method = instantiate_checked(cfg.method, "method")
    if not callable(getattr(method, "place", None)):
        raise ConfigError(f"{type(method).__name__} has no place(objective, seed=...) method", field="method._target_")
    hook = getattr(method, "check", None)
    if callable(hook):
        hook(objective)
    return Prepared(graph, devices, objective, method)


# ---------------------------------------------------------------------- running
def _finite(x: float) -> float | None:
    """``x``, or ``None`` for inf / nan (strict JSON)."""
    return float(x) if math.isfinite(x) else None


def _jsonable(value: Any) -> Any:
    """``value`` with numpy scalars and arrays made plain and non-finite floats made ``None``."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return _finite(value)
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)


def _checked_result(result: Any, objective: BoundObjective, method: Any) -> PlacerResult:
    """The method's result, refused in one line if it is not a placement of this graph."""
    name = type(method).__name__
    if not isinstance(result, PlacerResult):
        raise ConfigError(f"{name}.place returned {type(result).__name__}, not a PlacerResult", field="method")
    try:
        p = objective.check(result.placement)
    except PlacementError as exc:
        raise ConfigError(f"{name} returned a bad placement: {exc}", field="method") from None
    g = objective.graph
    split = [i for i, members in enumerate(g.group_members) if len(np.unique(p[members])) > 1]
    if split:
        first = g.node_names[g.group_members[split[0]][0]]
        raise ConfigError(f"{name} split {len(split)} group(s) over several devices (e.g. the group of "
                          f"{first!r}); a placer must keep every group on one device", field="method")
    result.placement = p
    return result


def run_place(cfg: DictConfig, out_dir: str | Path, choices: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the method ``cfg`` names, write ``placement.json``, ``summary.json`` and the chart;
    returns the summary."""
    out = Path(out_dir)
    choices = dict(choices or {})
    prep = prepare(cfg)
    g, devices, objective = prep.graph, prep.devices, prep.objective
    result = _checked_result(prep.method.place(objective, seed=int(cfg.seed)), objective, prep.method)
    ev = objective.evaluate(result.placement)
    if isinstance(prep.method, SingleDevicePlacer):
        single, single_ev = result, ev
    else:  # priced on its own binding, so the method's evaluation count stays its own
        baseline = bind_objective(objective.name, g, devices)
        single = SingleDevicePlacer().place(baseline, seed=int(cfg.seed))
        single_ev = baseline.evaluate(single.placement)
    speedup = single_ev.value_s / ev.value_s if math.isfinite(ev.value_s) and math.isfinite(single_ev.value_s) \
        and ev.value_s > 0 else math.nan
    names = devices.names
    per_device = {name: {"memory_bytes": float(ev.memory_bytes[d]), "capacity_bytes": float(devices.memory_bytes[d]),
                         "compute_s": float(ev.compute_s[d]), "comm_s": float(ev.comm_s[d]),
                         "ops": int((result.placement == d).sum())} for d, name in enumerate(names)}
    method_name = choices.get("method") or getattr(prep.method, "name", type(prep.method).__name__)
    summary: dict[str, Any] = {
        "kind": "placement",
        "graph": str(cfg.graph),
        "graph_name": g.name,
        "num_ops": g.num_nodes,
        "num_groups": g.num_groups,
        "devices": devices.describe(),
        "device_names": list(names),
        "objective": objective.name,
        "method": method_name,
        "method_class": f"{type(prep.method).__module__}.{type(prep.method).__qualname__}",
        "seed": int(cfg.seed),
        "value_s": _finite(ev.value_s),
        "value_ms": _finite(ev.value_s * 1e3),
        "feasible": ev.feasible,
        "reason": ev.reason,
        "single_device": names[int(single.placement[0])],
        "single_device_value_s": _finite(single_ev.value_s),
        "speedup_vs_single": _finite(speedup),
        "per_device": _jsonable(per_device),
        "method_wall_s": result.wall_s,
        "evaluations": result.evaluations,
        "info": _jsonable(result.info),
        "config": {**choices, "graph": str(cfg.graph), "objective": objective.name, "seed": int(cfg.seed)},
        "resolved_config": _comparable(cfg),
    }
    placement = {
        "graph": str(cfg.graph),
        "devices": list(names),
        "objective": objective.name,
        "method": method_name,
        "placement": {g.node_names[i]: names[int(d)] for i, d in enumerate(result.placement)},
        "groups": [[g.node_names[i] for i in members] for members in g.group_members if len(members) > 1],
    }
    atomic_write_json(out / "placement.json", placement)
    if cfg.get("gantt", True):
        summary["gantt"] = write_gantt(out, g, devices, objective, result.placement, ev,
                                       f"{g.name} | {method_name} on {devices.name} | {objective.name}")
    atomic_write_json(out / "summary.json", summary)
    return summary


def _comparable(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config minus the keys that do not change a run's files (for ``skip_finished``)."""
    data = _jsonable(OmegaConf.to_container(cfg, resolve=True))
    for key in ("skip_finished", "out_dir"):
        data.pop(key, None)
    return data


#: The files a run writes through a temporary file (``workloads.io.atomic_write``: ``.{name}.*.tmp``);
#: the chart's own are cleared by :func:`analysis.gantt.save_chart`.
RUN_FILES = ("placement.json", "summary.json")


def write_gantt(out: Path, graph: ComputeGraph, devices: DeviceSet, objective: BoundObjective,
                placement: np.ndarray, ev: Evaluation, title: str) -> list[str]:
    """Draw the run's chart (:mod:`analysis.gantt`, the simulator's one analysis import); file names."""
    # lazy: matplotlib
    from analysis.gantt import Task, Transfer, plot_pipeline_loads, plot_step_gantt, save_chart

    value = f"{ev.value_s * 1e3:.4g} ms" if math.isfinite(ev.value_s) else f"infeasible: {ev.reason}"
    title = f"{title}: {value}"
    if ev.schedule is None:
        fig = plot_pipeline_loads(devices.names, ev.compute_s.tolist(), ev.comm_s.tolist(), title)
    else:
        s = ev.schedule
        nodes = np.flatnonzero(~graph.is_backward) if objective.name == "latency" else np.arange(graph.num_nodes)
        tasks = [Task(int(placement[i]), float(s.start_s[i]), float(s.finish_s[i]), bool(graph.is_backward[i]))
                 for i in nodes.tolist()]
        transfers = [Transfer(int(placement[graph.edges[k, 0]]), int(placement[graph.edges[k, 1]]), t0, t1)
                     for k, t0, t1 in s.transfers]
        fig = plot_step_gantt(devices.names, tasks, transfers, title)
    return [p.name for p in save_chart(fig, out, "gantt")]


def _log_line(s: dict[str, Any], out: Path) -> str:
    value = f"{s['value_ms']:.6g} ms" if s["value_ms"] is not None else f"infeasible ({s['reason']})"
    if s["speedup_vs_single"] is not None:
        speedup = f"speed-up {s['speedup_vs_single']:.3f}x over single device {s['single_device']}"
    elif s["single_device_value_s"] is None:
        speedup = "speed-up n/a (no single device fits the graph)"
    else:
        speedup = f"speed-up n/a (placement infeasible; single device {s['single_device']})"
    evals = s["evaluations"]
    return (f"{s['graph']} | {s['objective']} | {s['method']} on {s['devices'].split(':')[0]}: {value}, "
            f"{speedup}, {evals} evaluation{'' if evals == 1 else 's'} in {s['method_wall_s']:.3g} s -> {out}")


@hydra.main(version_base=None, config_path="pkg://conf", config_name="place")
def _hydra_main(cfg: DictConfig) -> None:
    hc = HydraConfig.get()
    # Checked again here: a sweep's jobs get values preflight checked only with the others' first values.
    report_user_errors(PROG, lambda: COMMAND.validate(cfg, list(hc.overrides.task)))
    out = Path(cfg.out_dir) if cfg.get("out_dir") else Path(hc.runtime.output_dir)
    choices = {k: v for k, v in hc.runtime.choices.items() if k in GROUPS and v is not None}
    clear_stale_temporaries(out, RUN_FILES)  # one folder holds one run
    if cfg.get("skip_finished", True) and finished_run(out, _comparable(cfg)):
        log.info("skipping %s: summary.json already written for this config", out)
        return

    def body() -> None:
        s = run_place(cfg, out, choices)
        if not s["feasible"]:
            log.warning("%s: the placement is infeasible: %s", s["method"], s["reason"])
        log.info("%s", _log_line(s, out))

    report_user_errors(PROG, body)


def main() -> None:
    """Console entry point (``pacml place``)."""
    preflight(COMMAND, sys.argv[1:])
    _hydra_main()


if __name__ == "__main__":
    main()
