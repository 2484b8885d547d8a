"""Op placers inside a job's allocated RAMP block (``sim.placement=block``, ``sim.op_placer=<method>``).

The bridge between job allocation and op placement (:mod:`simulator.place`): the job's
partitioned graph becomes a :class:`ComputeGraph`, the block's servers a device set, and any
``conf/method/`` placer optimises the ``step`` objective. The rules: docs/simulator.md ("Op
placers inside a block: the rules").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from simulator.allocation.first_fit import Placement, placement_signature, put_bounded
from simulator.allocation.free_blocks import FreeBlockIndex
from simulator.config import instantiate_checked
from simulator.errors import ConfigError, one_line
from simulator.partition import Partitioner
from simulator.place.devices import ramp_block_devices
from simulator.place.objectives import StepObjective
from simulator.topology import RampTopology
from workloads.compute_graph import ComputeGraph
from workloads.graph import TrainingGraph

log = logging.getLogger(__name__)

#: ``sim.op_placer`` value that keeps first fit (no op placer).
FIRST_FIT = "first_fit"
#: Where ``sim.op_placer=<name>`` is looked up.
METHOD_DIR = Path(__file__).resolve().parents[2] / "conf" / "method"


@dataclass(eq=False)
class PinnedStepObjective(StepObjective):
    """The ``step`` objective with some nodes pinned: node ``i`` may run only where
    ``allowed[i, d]`` (elsewhere its compute time is ``inf``, i.e. infeasible).

    Attributes:
        allowed: ``(N, D)`` boolean mask (``None``: no pin).
    """

    allowed: NDArray[np.bool_] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.allowed is not None:
            self.time_s = np.where(self.allowed, self.time_s, np.inf)
            # The compiled kernel reads time_s from its packed arguments: pack them again.
            self._kernel_args = self._pack_kernel_args()


class _JobGraph:
    """The partitioned graph of one (graph, degree) as a :class:`ComputeGraph` (built once)."""

    def __init__(self, graph: TrainingGraph, degree: int, partitioner: Partitioner,
                 kind_speed: Mapping[str, float]) -> None:
        pg = partitioner.partition(graph, degree)
        n = graph.num_forward_ops
        splits = pg.splits.astype(np.int64)
        offset = pg.offset
        num_fwd = int(offset[n])
        sub = np.arange(pg.num_sub_ops)
        is_bwd = pg.sub_origin >= n
        # Sub-op i of backward op n+j pairs with sub-op i of forward op j (one server for both).
        group = sub.copy()
        group[is_bwd] = sub[is_bwd] - offset[n:][pg.sub_origin[is_bwd] - n] + offset[:n][pg.sub_origin[is_bwd] - n]
        real = ~pg.dep_is_sync
        ids = graph.forward.op_ids
        names = tuple(f"{ids[o % n]}{'/backward' if o >= n else ''}#{int(i - offset[o])}"
                      for i, o in enumerate(pg.sub_origin.tolist()))
        # Every kind of the cluster lists its own times, so a device's speed is never applied twice.
        times = {kind: pg.sub_time_s / speed for kind, speed in kind_speed.items()}
        self.graph = ComputeGraph(
            name=f"{graph.name}@{degree}", node_names=names, kind_time_s=times,
            reference_kind=max(kind_speed, key=kind_speed.__getitem__), memory_bytes=pg.sub_memory_bytes,
            is_backward=is_bwd, group=group, edges=np.stack([pg.dep_src[real], pg.dep_dst[real]], axis=1),
            edge_bytes=pg.dep_bytes[real], edge_cost_s=np.full(int(real.sum()), np.nan),
            source=graph.forward.source,
            meta={"forward_ops": n, "degree": degree, "splits": tuple(splits.tolist())})
        self.splits = splits
        self.offset = offset
        self.num_fwd_sub_ops = num_fwd
        #: Forward sub-ops of full-width ops (fixed; the job's block has ``degree`` servers).
        self.fixed_fwd = np.flatnonzero(splits[pg.sub_origin[:num_fwd]] >= degree)
        self.group = group


class BlockOpPlacer:
    """Places a job's ops inside its block with a ``simulator.place`` placer (see module docstring).

    Args:
        name: The ``sim.op_placer`` value (for logs and the summary).
        placer: Any object with ``place(objective, *, seed) -> PlacerResult``.
        partitioner: The simulator's partitioner (same split counts as first fit).
        seed: Seed passed to the placer (placements are deterministic for a seed).
    """

    MAX_CACHE_ENTRIES = 100_000

    def __init__(self, name: str, placer: Any, topology: RampTopology, partitioner: Partitioner,
                 seed: int = 0) -> None:
        self.name = name
        self.placer = placer
        self.topology = topology
        self.partitioner = partitioner
        self.seed = seed
        self._graphs: dict[tuple[str, int], _JobGraph] = {}
        self._cache: dict[tuple, tuple[tuple[int, ...], ...]] = {}
        self.calls = 0  # placer runs (cache misses)
        self.cache_hits = 0  # placements answered from the cache
        self.wall_s = 0.0  # wall time spent in the placer (building objectives included)
        self.pins_restored = 0  # fixed sub-ops a placer moved and that were put back
        self.first_fit_fallbacks = 0
        """Placements replaced by first fit (a group split or a server over memory)."""
        self.moved_ops = 0
        """Free (unsplit or narrower) ops put elsewhere than first fit put them (over placer runs)."""
        self.snapped_sub_ops = 0  # sub-ops of narrower ops moved to make their op a symmetric block
        self._sub_blocks: dict[tuple[int, tuple[int, ...]], tuple[tuple[int, ...], ...]] = {}

    def _job_graph(self, graph: TrainingGraph, degree: int) -> _JobGraph:
        key = (graph.fingerprint, degree)
        jg = self._graphs.get(key)
        if jg is None:
            jg = self._graphs[key] = _JobGraph(graph, degree, self.partitioner, self.topology.kind_speed)
        return jg

    def refine(self, graph: TrainingGraph, degree: int, first_fit: Placement,
               block_servers: tuple[int, ...]) -> Placement:
        """The placer's placement of ``graph`` at ``degree`` in the block ``block_servers``, given
        first fit's placement there (which fixes the split ops)."""
        jg = self._job_graph(graph, degree)
        local = {s: i for i, s in enumerate(block_servers)}
        # First fit's placement relative to the block: it fixes the full-width ops and is the fallback.
        ff_local = tuple(tuple(local[s] for s in servers) for servers in first_fit.op_servers)
        kinds = tuple(int(self.topology.server_kind_index[s]) for s in block_servers)
        key = (graph.fingerprint, degree, ff_local, kinds)
        found = self._cache.get(key)
        if found is None:
            found = self._run(jg, block_servers, ff_local)
            put_bounded(self._cache, key, found, self.MAX_CACHE_ENTRIES)
        else:
            self.cache_hits += 1
        op_servers = tuple(tuple(block_servers[d] for d in devs) for devs in found)
        if op_servers == first_fit.op_servers:
            return first_fit
        held = sorted({s for servers in op_servers for s in servers})
        mask = sum(1 << s for s in held)
        kinds = self.topology.server_kind_index if self.topology.heterogeneous else None
        return Placement(op_servers, tuple(held), mask, placement_signature(op_servers, self.topology.coords, kinds))

    def _run(self, jg: _JobGraph, block_servers: tuple[int, ...],
             ff_local: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
        """Run the placer; return each op's devices (indices into the block)."""
        t0 = time.perf_counter()
        self.calls += 1
        g = jg.graph
        num_dev = len(block_servers)
        # Device of every forward sub-op under first fit, and the pins of the split ones.
        ff_dev = np.fromiter((d for devs in ff_local for d in devs), dtype=np.int64, count=jg.num_fwd_sub_ops)
        pin = np.full(g.num_groups, -1, dtype=np.int64)
        pin[jg.fixed_fwd] = ff_dev[jg.fixed_fwd]
        allowed = np.ones((g.num_nodes, num_dev), dtype=bool)
        node_pin = pin[jg.group]
        pinned = np.flatnonzero(node_pin >= 0)
        allowed[pinned] = False
        allowed[pinned, node_pin[pinned]] = True
        devices = ramp_block_devices(self.topology, block_servers, name=f"ramp_block({num_dev} servers)")
        objective = PinnedStepObjective(g, devices, allowed=allowed)
        result = self.placer.place(objective, seed=self.seed)
        placement = np.asarray(result.placement, dtype=np.int64)
        out = self._decode(jg, objective, placement, pin, ff_dev, ff_local, block_servers)
        self.wall_s += time.perf_counter() - t0
        return out

    def _decode(self, jg: _JobGraph, objective: PinnedStepObjective, placement: NDArray[np.int64],
                pin: NDArray[np.int64], ff_dev: NDArray[np.int64], ff_local: tuple[tuple[int, ...], ...],
                block_servers: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        g = jg.graph
        n_dev = objective.devices.num_devices
        if placement.shape != (g.num_nodes,) or (placement.size and (placement.min() < 0 or placement.max() >= n_dev)):
            log.warning("op placer %s returned a malformed placement; first fit kept", self.name)
            self.first_fit_fallbacks += 1
            return ff_local
        fwd = placement[:jg.num_fwd_sub_ops].copy()
        # Backward sub-ops must share their forward twin's server (one group).
        bwd_nodes = np.arange(jg.num_fwd_sub_ops, g.num_nodes)
        if (placement[bwd_nodes] != fwd[jg.group[bwd_nodes]]).any():
            self.first_fit_fallbacks += 1
            return ff_local
        moved = (pin >= 0) & (fwd != pin)
        if moved.any():
            self.pins_restored += int(moved.sum())
            fwd[moved] = pin[moved]
        splits = jg.splits.tolist()
        out: list[tuple[int, ...]] = []
        for op, n in enumerate(splits):
            want = tuple(fwd[jg.offset[op]:jg.offset[op + 1]].tolist())
            if 1 < n < len(block_servers):
                got = self._snap(want, self.sub_blocks(n, block_servers))
                self.snapped_sub_ops += sum(a != b for a, b in zip(want, got, strict=True))
                fwd[jg.offset[op]:jg.offset[op + 1]] = got
                want = got
            out.append(want)
        if not objective.feasible(fwd[jg.group]):  # over a server's memory
            self.first_fit_fallbacks += 1
            return ff_local
        self.moved_ops += sum(a != b for a, b in zip(out, ff_local, strict=True))
        return tuple(out)

    def sub_blocks(self, n: int, block_servers: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """Symmetric blocks of ``n`` servers inside the job's block, as indices into it, in first-fit order."""
        key = (n, block_servers)
        found = self._sub_blocks.get(key)
        if found is None:
            local = {s: i for i, s in enumerate(block_servers)}
            inside = sum(1 << s for s in block_servers)  # searched, not filtered from every block
            found = tuple(tuple(local[s] for s in b.servers) for b in FreeBlockIndex(self.topology, inside).blocks(n))
            put_bounded(self._sub_blocks, key, found, self.MAX_CACHE_ENTRIES)
        return found

    @staticmethod
    def _snap(want: tuple[int, ...], candidates: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
        """The candidate block holding most of the wanted devices (first on ties), each sub-op on its
        wanted device where that is in the block and free, else on the block's next free one."""
        wanted = set(want)
        best = max(candidates, key=lambda c: len(wanted.intersection(c)))  # max keeps the first on ties
        taken: set[int] = set()
        got: list[int | None] = []
        for d in want:
            keep = d in best and d not in taken
            got.append(d if keep else None)
            if keep:
                taken.add(d)
        rest = iter(d for d in best if d not in taken)
        return tuple(d if d is not None else next(rest) for d in got)

    def info(self) -> dict[str, Any]:
        """Counters for ``summary.json``."""
        return {"op_placer": self.name, "op_placer_calls": self.calls, "op_placer_cache_hits": self.cache_hits,
                "op_placer_wall_s": self.wall_s, "op_placer_moved_ops": self.moved_ops,
                "op_placer_pins_restored": self.pins_restored, "op_placer_snapped_sub_ops": self.snapped_sub_ops,
                "op_placer_first_fit_fallbacks": self.first_fit_fallbacks}


# ---------------------------------------------------------------------- config
def available_op_placers() -> list[str]:
    """Names ``sim.op_placer`` accepts: ``first_fit`` and every ``conf/method/*.yaml``."""
    return [FIRST_FIT, *sorted(p.stem for p in METHOD_DIR.glob("*.yaml"))]


def method_node(name: str) -> DictConfig:
    """The config node of ``sim.op_placer=<name>``: ``conf/method/<name>.yaml`` or a YAML file.

    Raises:
        ConfigError: Naming ``sim.op_placer`` for an unknown name or a file without ``_target_``.
    """
    field = "sim.op_placer"
    if not isinstance(name, str) or not name:
        raise ConfigError(f"must be a placer name, got {name!r}", field=field)
    path = Path(name) if name.endswith((".yaml", ".yml")) else METHOD_DIR / f"{name}.yaml"
    if not path.is_file():
        names = available_op_placers()
        raise ConfigError(f"unknown op placer {name!r} (available: {', '.join(names)}, or a method .yaml file)",
                          field=field)
    try:
        node = OmegaConf.load(path)
    except Exception as exc:  # noqa: BLE001 - a YAML syntax error in the user's file
        raise ConfigError(f"{path}: {str(exc).splitlines()[0]}", field=field) from None
    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise ConfigError(f"{path}: has no _target_ (the placer class)", field=field)
    if node.get("defaults") is not None:
        with open_dict(node):
            del node["defaults"]
    return node


def build_block_op_placer(name: str, topology: RampTopology, partitioner: Partitioner,
                          placement_mode: str) -> BlockOpPlacer | None:
    """The op placer ``sim.op_placer`` names (``None`` for ``first_fit``).

    Raises:
        ConfigError: For an op placer with ``sim.placement=op_first_fit`` (the paper's rule
            stays the original's), an unknown name or a placer that cannot be built.
    """
    if name == FIRST_FIT:
        return None
    node = method_node(name)
    if placement_mode != "block":
        raise ConfigError(f"op placer {name!r} needs sim.placement=block (sim.placement={placement_mode} is the "
                          "original's first-fit rule; use sim.op_placer=first_fit)", field="sim.op_placer")
    try:
        placer = instantiate_checked(node, "sim.op_placer")
    except OmegaConfBaseException as exc:  # e.g. a mandatory '???' value the method file leaves open
        raise ConfigError(f"op placer {name!r}: {one_line(str(exc))}", field="sim.op_placer") from None
    if not callable(getattr(placer, "place", None)):
        raise ConfigError(f"{node['_target_']} has no place(objective, *, seed) method", field="sim.op_placer")
    return BlockOpPlacer(name, placer, topology, partitioner)
