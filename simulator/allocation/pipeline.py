"""Pipeline-parallel jobs (``scenario=pipeline``, ``sim.pipeline``): a job at degree ``k`` holds a
block of ``k`` servers and runs as a pipeline of at most ``k`` stages on them.

The cut comes from a stage placer (``sim.pipeline.stage_placer``: a ``conf/method/`` placer whose
cuts are always contiguous, :data:`STAGE_PLACERS`) run with the ``pipeline`` objective on the
block's servers (:func:`ramp_block_devices`, in the block's server order) and the job's graph cut
into ``M`` micro-batches (:func:`job_compute_graph`, with the pipeline's memory per op); the
iteration time and memory per stage are those of :mod:`simulator.place.pipeline_schedule` (one
cost model). A step of the simulator is one iteration, so ``JCT = steps x iteration time``
(converted from seconds to the simulator's clock). A stage over its server's memory, or a
placement that is not a pipeline, makes the block unplaceable (``no_placement``). The cut
depends on the graph, the degree and the kinds of the block's servers in order (every link of a
block is alike), so it is computed once per such key.
Formulas and keys: docs/pipeline.md ("scenario=pipeline").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from simulator.allocation.first_fit import FirstFitAllocator, Placement
from simulator.allocation.op_placer import method_node
from simulator.config import instantiate_checked
from simulator.errors import ConfigError, one_line
from simulator.partition import Partitioner
from simulator.place.devices import ramp_block_devices
from simulator.place.objectives import PipelineObjective, PlacementError
from simulator.place.pipeline_schedule import (
    PipelineEstimate,
    PipelineSettings,
    in_flight,
    input_nodes,
    micro_batch_graph,
    pipeline_estimate,
    training_graph_bytes,
    with_input_loading,
)
from simulator.place.placer import SingleDevicePlacer
from simulator.step_model import CachedStepModel, StepResult
from simulator.topology import Block, RampTopology, Shape
from workloads.compute_graph import ComputeGraph
from workloads.graph import TrainingGraph

log = logging.getLogger(__name__)

#: Stage placers whose placement is always a pipeline (contiguous stages, :func:`stage_order`):
#: PipeDream's partitioner and the DPs (dp, dp_mixed) split the graph into contiguous stages by construction, and
#: ``single`` puts it on one server. The others (heft, m_etf, round_robin, local_search, ...) often
#: cut a graph so that two servers feed each other, which no pipeline schedule runs (docs/pipeline.md).
STAGE_PLACERS = ("pipedream", "dp", "dp_mixed", "single")


@dataclass(frozen=True)
class PipelineJobSettings(PipelineSettings):
    """``sim.pipeline``: the schedule's settings plus the stage placer (the one place its keys,
    defaults and checks live).

    Attributes:
        stage_placer: The ``conf/method/`` placer that cuts a job's graph: one of :data:`STAGE_PLACERS`.
    """

    stage_placer: str = "pipedream"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.stage_placer not in STAGE_PLACERS:
            raise ConfigError(f"must be one of {', '.join(STAGE_PLACERS)} (the placers whose cuts are always "
                              f"contiguous stages), got {self.stage_placer!r}", field="pipeline.stage_placer")


@dataclass(frozen=True)
class PipelineCut:
    """A job's pipeline on one block (per graph, degree and the block's kinds in order).

    Attributes:
        node_device: Device (index into the block's servers) of every node of the job's
            :class:`ComputeGraph` (forward nodes, then backward).
        estimate: The model's iteration time, stage costs and memory (seconds, bytes), or ``None``
            when the placer's placement is not a pipeline.
        iteration_s: One iteration on the simulator's clock (``inf`` when infeasible).
        feasible: Every stage fits its server and the placement is a pipeline.
        reason: Why not (one line), or ``""``.
    """

    node_device: NDArray[np.int64]
    estimate: PipelineEstimate | None
    iteration_s: float
    feasible: bool
    reason: str


def input_ops(graph: TrainingGraph) -> NDArray[np.int64]:
    """The forward ops that load data: PipeDream's ``Input``, ``Input0``, ... (no predecessor;
    :func:`input_nodes`' forward half)."""
    nodes = input_nodes(ComputeGraph.from_training_graph(graph))
    return nodes[: len(nodes) // 2]


def job_compute_graph(graph: TrainingGraph, settings: PipelineSettings, degree: int) -> ComputeGraph:
    """The graph a stage placer sees for ``graph`` at ``degree``: its training step in seconds
    (:meth:`ComputeGraph.from_training_graph`; :func:`input_ops` take no time when
    ``input_loading=prefetched``) cut into ``M`` micro-batches, with the pipeline's
    memory per node (one memory model): forward op ``i`` carries ``state_factor x P_i + n x A_i / M``
    and backward nodes nothing, ``n`` the most micro-batches any stage holds in flight (GPipe
    ``M``, 1F1B ``min(degree, M)``: stage 0's). The sum over a device is therefore an upper bound of
    its stage's memory in :func:`pipeline_estimate` (exact for the first stage under GPipe, and
    under 1F1B when every server is a stage; a later 1F1B stage holds ``n_i < n`` micro-batches, which no per-op memory can express): a cut the
    placer finds feasible always fits, and only a later stage within ``(n - n_i) x A_i / M`` of its
    server's memory is refused that would have fitted."""
    m = settings.micro_batches
    g = ComputeGraph.from_training_graph(graph)
    g = micro_batch_graph(with_input_loading(g, settings.input_loading), m)  # the rule pacml place shares
    n = int(in_flight(settings.schedule, degree, m)[0]) if degree else m
    params, acts = training_graph_bytes(graph)
    return replace(g, memory_bytes=settings.state_factor * params + n * acts / m)


def pipeline_cut(graph: TrainingGraph, devices_servers: tuple[int, ...], topology: RampTopology,
                 settings: PipelineSettings, placer: Any, seed: int = 0) -> PipelineCut:
    """Run ``placer`` (``place(objective, *, seed)``) with the ``pipeline`` objective on the
    servers ``devices_servers`` (in that order) and price its placement (module docstring)."""
    m = settings.micro_batches
    g = job_compute_graph(graph, settings, len(devices_servers))
    devices = ramp_block_devices(topology, devices_servers, name=f"ramp_block({len(devices_servers)} servers)")
    objective = PipelineObjective(g, devices)
    placement = np.asarray(placer.place(objective, seed=seed).placement, dtype=np.int64)
    params, acts = training_graph_bytes(graph)
    try:
        # Activations are stashed per micro-batch: the profile's mini-batch activations / M.
        est = pipeline_estimate(objective, placement, settings, parameter_bytes=params, activation_bytes=acts / m)
    except PlacementError as exc:
        # A placer that finds no cut within memory may return any placement: say why.
        why = objective.infeasibility(placement)
        reason = f"no cut fits in memory: {why}" if why else one_line(str(exc))
        return PipelineCut(placement, None, float("inf"), False, reason)
    # Seconds to the simulator's clock (the graph's time unit: 1 s in the physical scenario).
    iteration = est.iteration_s / graph.forward.time_unit_s
    return PipelineCut(placement, est, iteration, est.feasible, est.reason)


def sequential_step_s(graph: TrainingGraph, topology: RampTopology, settings: PipelineSettings) -> float:
    """One step of ``graph`` alone on the cluster's fastest single server, on the simulator's clock
    (the JCT target's base): the model's degree-1 iteration (:func:`pipeline_cut`) on one server of
    each kind; the fastest kind whose memory holds the job at degree 1, or, if none does, the
    fastest kind (docs/pipeline.md, "Targets")."""
    kinds = topology.server_kind_index
    single = SingleDevicePlacer()
    cuts = [pipeline_cut(graph, (int(np.flatnonzero(kinds == k)[0]),), topology, settings, single)
            for k in np.unique(kinds).tolist()]
    return min([c.iteration_s for c in cuts if c.feasible] or [c.iteration_s for c in cuts])


def sequential_steps(topology: RampTopology, node: Mapping[str, Any]) -> Callable[[TrainingGraph], float]:
    """:func:`sequential_step_s` for the settings ``sim.pipeline`` (``node``): the workload's
    ``sequential_step`` in ``scenario=pipeline``."""
    settings = pipeline_config(node)
    return lambda graph: sequential_step_s(graph, topology, settings)


class PipelineJobs:
    """Cuts and iteration times of pipeline jobs, cached per ``(graph, degree, kinds in order)``.

    Args:
        topology: The cluster.
        settings: Schedule, micro-batches, state factor.
        stage_placer: The ``sim.pipeline.stage_placer`` name (for logs and the summary).
        placer: Any object with ``place(objective, *, seed) -> PlacerResult``.
        seed: Seed passed to the placer (the allowed stage placers are deterministic: it changes nothing).
    """

    def __init__(self, topology: RampTopology, settings: PipelineSettings, stage_placer: str, placer: Any,
                 seed: int = 0) -> None:
        self.topology = topology
        self.settings = settings
        self.stage_placer = stage_placer
        self.placer = placer
        self.seed = seed
        self._kinds = topology.server_kind_index.tolist()
        self._cuts: dict[tuple[str, int, tuple[int, ...]], PipelineCut] = {}
        self.calls = 0
        """Placer runs (cache misses)."""
        self.wall_s = 0.0
        """Wall time in the placer and the model."""
        self.infeasible = 0
        """Cuts found infeasible (memory, or not a pipeline)."""

    def kinds(self, servers: tuple[int, ...]) -> tuple[int, ...]:
        """Kind index of every server, in order."""
        kinds = self._kinds
        return tuple([kinds[s] for s in servers])

    def cut(self, graph: TrainingGraph, servers: tuple[int, ...]) -> PipelineCut:
        """The job's pipeline on ``servers`` (a block, in its order); cached by the servers' kinds."""
        key = (graph.fingerprint, len(servers), self.kinds(servers))
        found = self._cuts.get(key)
        if found is None:
            t0 = time.perf_counter()
            self.calls += 1
            try:
                found = pipeline_cut(graph, servers, self.topology, self.settings, self.placer, self.seed)
            except ConfigError as exc:  # e.g. dp on a block of two server kinds
                names = "+".join(self.topology.kinds[k] for k in key[2])
                raise ConfigError(f"stage placer {self.stage_placer!r} on a block of {names}: {_message(exc)}",
                                  field="sim.pipeline.stage_placer") from None
            if not found.feasible:
                self.infeasible += 1
                log.debug("%s at degree %d on kinds %s: %s", graph.name, len(servers), key[2], found.reason)
            self._cuts[key] = found
            self.wall_s += time.perf_counter() - t0
        return found

    def cut_of(self, graph: TrainingGraph, degree: int, kinds: tuple[int, ...]) -> PipelineCut:
        """A cut already computed (by :meth:`cut`) for ``graph`` at ``degree`` on ``kinds``."""
        return self._cuts[(graph.fingerprint, degree, kinds)]

    def info(self) -> dict[str, Any]:
        """Counters for ``summary.json``."""
        s = self.settings
        return {"pipeline_stage_placer": self.stage_placer, "pipeline_schedule": s.schedule,
                "pipeline_micro_batches": s.micro_batches, "pipeline_placer_calls": self.calls,
                "pipeline_infeasible_cuts": self.infeasible, "pipeline_placer_wall_s": self.wall_s}


class PipelineAllocator(FirstFitAllocator):
    """Block allocation for pipeline jobs: the first free block of ``degree`` servers (or the one
    given), all of it held by the job; each op runs on the server of its stage. ``None`` when the
    cut does not fit (:class:`PipelineCut`). The placement's signature is the cut's key, so the
    step model finds the cut again."""

    def __init__(self, topology: RampTopology, partitioner: Partitioner, jobs: PipelineJobs) -> None:
        super().__init__(topology, partitioner, "block", None)
        self.jobs = jobs
        self.op_placer_name = f"pipeline:{jobs.stage_placer}"

    def _place_shifted(self, graph: TrainingGraph, degree: int, shape: Shape, origin: int,
                       block: Block | None = None) -> Placement | None:
        if block is None:
            block = self.topology.block_from_server(shape, origin)
        servers = block.servers
        cut = self.jobs.cut(graph, servers)
        if not cut.feasible:
            return None
        n = graph.forward.num_ops
        op_servers = tuple([(servers[d],) for d in cut.node_device[:n].tolist()])
        return Placement(op_servers, tuple(sorted(servers)), block.mask,
                         ("pipeline", self.jobs.kinds(servers)))


class PipelineStepModel(CachedStepModel):
    """One training step of a pipeline job = one iteration of its pipeline (the lookahead of
    :class:`~simulator.feasibility.Feasibility` in ``scenario=pipeline``).

    ``compute_s`` is the stages' compute over the iteration (``M x`` the per-micro-batch compute,
    summed over stages); ``comm_s`` the same for their transfers. ``partitioner`` (no op split)
    gives the records' ``cluster_bytes``.
    """

    def __init__(self, partitioner: Partitioner, jobs: PipelineJobs) -> None:
        super().__init__()
        self.partitioner = partitioner
        self.jobs = jobs

    def price(self, graph: TrainingGraph, degree: int, placement: Placement) -> StepResult:
        """The iteration of ``graph`` at ``degree`` on ``placement`` (a :class:`PipelineAllocator` one)."""
        tag, kinds = placement.signature
        if tag != "pipeline":
            raise ValueError("not a pipeline placement")
        cut = self.jobs.cut_of(graph, degree, kinds)
        est = cut.estimate
        assert est is not None
        m, unit = est.settings.micro_batches, graph.forward.time_unit_s
        st = est.stages
        return StepResult(step_time_s=cut.iteration_s, compute_s=float(m * st.compute_s.sum()) / unit,
                          comm_s=float(m * st.comm_s.sum()) / unit, num_sub_ops=len(cut.node_device),
                          num_deps=int(graph.num_edges))

    def cache_info(self) -> dict[str, Any]:
        """Lookahead counters and the pipeline's (for ``summary.json``)."""
        return {**super().cache_info(), **self.jobs.info()}


def _message(exc: ConfigError) -> str:
    """A :class:`ConfigError`'s message without its ``field '...':`` prefix."""
    text = str(exc)
    prefix = f"field '{exc.field}': "
    return text[len(prefix):] if exc.field and text.startswith(prefix) else text


def pipeline_config(node: Any) -> PipelineJobSettings:
    """The settings of ``sim.pipeline`` (missing keys take :class:`PipelineJobSettings`' defaults).

    Raises:
        ConfigError: Not a mapping, an unknown key or a bad value (field ``sim.pipeline.<key>``).
    """
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True)
    if node is not None and not isinstance(node, Mapping):
        raise ConfigError(f"must be a mapping of pipeline settings or null, got {node!r}", field="sim.pipeline")
    try:
        return PipelineJobSettings.from_config(node)
    except ConfigError as exc:
        raise ConfigError(_message(exc), field=f"sim.{exc.field}") from None
    except TypeError as exc:  # a non-string key
        raise ConfigError(one_line(str(exc)), field="sim.pipeline") from None


def build_pipeline(topology: RampTopology, node: Mapping[str, Any], partitioner: Partitioner
                   ) -> tuple[PipelineAllocator, PipelineStepModel]:
    """The allocator and step model of ``sim.pipeline`` (``partitioner``: no op split).

    Raises:
        ConfigError: Bad settings, or a stage placer that is unknown or cannot be built.
    """
    settings = pipeline_config(node)
    name = settings.stage_placer
    method = method_node(name)
    if "minimise" in method:  # dp_mixed: the cut of the shortest iteration under this schedule and M
        method.minimise, method.schedule, method.micro_batches = "iteration", settings.schedule, settings.micro_batches
    try:
        placer = instantiate_checked(method, "sim.pipeline.stage_placer")
    except OmegaConfBaseException as exc:
        raise ConfigError(f"stage placer {name!r}: {one_line(str(exc))}", field="sim.pipeline.stage_placer") from None
    if not callable(getattr(placer, "place", None)):
        raise ConfigError(f"{OmegaConf.select(method, '_target_')} has no place(objective, *, seed) method",
                          field="sim.pipeline.stage_placer")
    jobs = PipelineJobs(topology, settings, name, placer)
    return PipelineAllocator(topology, partitioner, jobs), PipelineStepModel(partitioner, jobs)
