"""Assemble simulator components from a (Hydra) config (the groups of ``conf/`` and the ``sim``
knobs); every builder unwraps Hydra's instantiation errors (:func:`instantiate_checked`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from simulator.allocation.first_fit import FirstFitAllocator
from simulator.allocation.op_placer import build_block_op_placer
from simulator.allocation.pipeline import build_pipeline, sequential_steps
from simulator.comm import RampCommModel
from simulator.config import MAX_TIME_SCALE, import_target, instantiate_checked
from simulator.errors import ConfigError
from simulator.feasibility import DEFAULT_HETERO_BLOCK_SEARCH, Feasibility
from simulator.partition import Partitioner
from simulator.records import RecordSink
from simulator.simulation import Simulation
from simulator.step_model import StepModel
from simulator.topology import RampTopology
from workloads.jobs import Workload
from workloads.loaders import load_graph_set, resolve_graph_paths


@dataclass(frozen=True)
class SimKnobs:
    """Step-model and placement knobs (the ``sim`` config section; each key is described in
    ``conf/sim.yaml`` and docs/simulator.md)."""

    min_op_time_s: float = 0.01
    edge_sizing: str = "paper"
    placement: str = "op_first_fit"
    comm_quirks: bool = True
    op_placer: str = "first_fit"
    split_ops: bool = True
    hetero_block_search: int = DEFAULT_HETERO_BLOCK_SEARCH
    pipeline: Mapping[str, Any] | None = None


def build_topology(cfg: DictConfig | Mapping[str, Any]) -> RampTopology:
    """The cluster from ``cfg.cluster``."""
    return instantiate_checked(cfg["cluster"], "cluster")


def build_feasibility(topology: RampTopology, knobs: SimKnobs | Mapping[str, Any]) -> Feasibility:
    """Partitioner, placer, comm model and lookahead behind one feasibility function."""
    if not isinstance(knobs, SimKnobs):
        data = OmegaConf.to_container(knobs, resolve=True) if isinstance(knobs, DictConfig) else dict(knobs)
        unknown = set(data) - set(SimKnobs.__dataclass_fields__)
        if unknown:
            raise ConfigError(f"unknown keys {sorted(unknown)}", field="sim")
        knobs = SimKnobs(**data)  # type: ignore[arg-type]
    if not isinstance(knobs.split_ops, bool):
        raise ConfigError(f"must be true or false, got {knobs.split_ops!r}", field="sim.split_ops")
    if not knobs.split_ops and knobs.placement != "block":
        raise ConfigError(f"split_ops=false needs sim.placement=block (sim.placement={knobs.placement} is the "
                          "original's rule, where unsplit ops chain onto one server anywhere)", field="sim.split_ops")
    try:
        # Block placement keeps a job inside one block of its degree, so its split ops need
        # symmetric blocks inside that block's shape; op-level first fit may use any block.
        sizes = topology.block_split_sizes if knobs.placement == "block" else topology.split_sizes
        partitioner = Partitioner(knobs.min_op_time_s, knobs.edge_sizing,  # type: ignore[arg-type]
                                  split_sizes=sizes, split_ops=knobs.split_ops)
        if knobs.placement not in ("op_first_fit", "block"):
            raise ValueError(f"placement mode must be 'op_first_fit' or 'block', got {knobs.placement!r}")
        if knobs.pipeline is not None:
            return _pipeline_feasibility(topology, knobs, partitioner)
        op_placer = build_block_op_placer(knobs.op_placer, topology, partitioner, knobs.placement)
        placer = FirstFitAllocator(topology, partitioner, knobs.placement, op_placer)  # type: ignore[arg-type]
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(str(exc), field="sim") from None
    comm = RampCommModel(topology, double_bandwidth_division=knobs.comm_quirks,
                         rack_index_only=knobs.comm_quirks)
    return Feasibility(topology, placer, StepModel(partitioner, comm), knobs.hetero_block_search)


def _pipeline_feasibility(topology: RampTopology, knobs: SimKnobs, partitioner: Partitioner) -> Feasibility:
    """:func:`build_feasibility` for ``sim.pipeline`` (pipeline jobs; the step model is the pipeline's)."""
    for key, value, want in (("placement", knobs.placement, "block"), ("split_ops", knobs.split_ops, False),
                             ("op_placer", knobs.op_placer, "first_fit")):
        if value != want:
            raise ConfigError(f"a pipeline job holds a block and runs whole ops on its stages: needs sim.{key}="
                              f"{str(want).lower()}, got {value!r}", field=f"sim.{key}")
    placer, step_model = build_pipeline(topology, knobs.pipeline, partitioner)
    return Feasibility(topology, placer, step_model, knobs.hetero_block_search)  # type: ignore[arg-type]


def _time_scales(wl: Any, num_graphs: int) -> list[float] | None:
    """``workload.time_scales``, checked against the number of graphs (``None`` if unset)."""
    scales = wl.get("time_scales")
    if scales is None:
        return None
    if isinstance(scales, str | bytes) or not isinstance(scales, Sequence | ListConfig):
        raise ConfigError(f"must be a list of factors, got {scales!r}", field="workload.time_scales")
    scales = list(scales)
    if len(scales) != num_graphs or not all(
            isinstance(f, int | float) and not isinstance(f, bool) and 0 < f <= MAX_TIME_SCALE for f in scales):
        raise ConfigError(f"need {num_graphs} factors in (0, {MAX_TIME_SCALE:g}] (one per graph, in order), "
                          f"got {scales}", field="workload.time_scales")
    return scales


def build_workload(cfg: DictConfig | Mapping[str, Any]) -> Workload:
    """The job stream from ``cfg.workload``, ``cfg.arrivals`` and ``cfg.beta``."""
    wl = cfg["workload"]
    graphs = wl["graphs"]
    if not isinstance(graphs, str):
        graphs = list(graphs)
    unit = float(wl.get("profile_time_unit_s", 1e-3))
    if not unit > 0:
        raise ConfigError(f"must be > 0, got {unit}", field="workload.profile_time_unit_s")
    graph_set = load_graph_set(graphs, time_unit_s=unit)
    scales = _time_scales(wl, len(graph_set))
    if scales is not None:
        # A scaled copy is another graph (its own name and fingerprint, so no cache mixes the two).
        graph_set = tuple(g if f == 1 else replace(g.scaled(float(f)), name=f"{g.name}x{float(f):g}")
                          for g, f in zip(graph_set, scales, strict=True))
    weights = wl.get("weights")
    # scenario=pipeline: targets on the cluster's fastest single server (docs/pipeline.md, "Targets").
    pipeline = (cfg.get("sim") or {}).get("pipeline")
    return Workload(graph_set, instantiate_checked(cfg["arrivals"], "arrivals"), instantiate_checked(cfg["beta"], "beta"),
                    num_training_steps=wl.get("num_training_steps", 50),
                    weights=None if weights is None else list(weights),
                    sequential_step=None if pipeline is None else sequential_steps(build_topology(cfg), pipeline))


def build_simulation(cfg: DictConfig | Mapping[str, Any], *, seed: int | None = None,
                     feasibility: Feasibility | None = None, workload: Workload | None = None,
                     sink: RecordSink | None = None) -> Simulation:
    """A ready-to-run :class:`Simulation` (components may be passed in to share caches; ``sink``
    receives the records, default in memory)."""
    if feasibility is None:
        feasibility = build_feasibility(build_topology(cfg), cfg.get("sim", {}))
    if workload is None:
        workload = build_workload(cfg)
    horizon = cfg.get("horizon_s")
    return Simulation(workload, feasibility, seed=int(cfg["seed"] if seed is None else seed),
                      horizon_s=None if horizon is None else float(horizon),
                      horizon_accounting=cfg.get("horizon_accounting", "drain"), sink=sink)


def check_buildable(cfg: DictConfig) -> None:
    """Build the cheap parts of ``cfg`` (no graph, no policy) so that their own range checks run
    before any work; a policy class may define ``check_config(node, topology)``. Raises
    :class:`ConfigError` / ``WorkloadError``."""
    topology = build_topology(cfg)
    build_feasibility(topology, cfg.get("sim", {}))
    instantiate_checked(cfg["arrivals"], "arrivals")
    instantiate_checked(cfg["beta"], "beta")
    workload = cfg.get("workload")
    if workload is not None and workload.get("time_scales") is not None:
        graphs = workload["graphs"]
        _time_scales(workload, len(resolve_graph_paths(graphs if isinstance(graphs, str) else list(graphs))))
    policy = cfg.get("policy")
    if isinstance(policy, DictConfig) and "_target_" in policy:
        hook = getattr(import_target(policy["_target_"], "policy._target_"), "check_config", None)
        if callable(hook):
            node = OmegaConf.to_container(policy, resolve=True)
            assert isinstance(node, dict)
            hook(node, topology)


def build_policy(cfg: DictConfig | Mapping[str, Any]) -> Any:
    """The policy plug-in from ``cfg.policy`` (``hydra.utils.instantiate``)."""
    return instantiate_checked(cfg["policy"], "policy")
