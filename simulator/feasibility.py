"""The one feasibility function, shared by every policy and by the RL action mask.

For a job and the servers other jobs hold, :class:`FeasibilityTable` answers per degree, lazily
and cached: enough servers (the original's mask, spec §8.3), placement, JCT, meets target,
feasible. On a cluster of several server kinds a degree may also go to one of the first
``hetero_block_search`` free blocks (:meth:`FeasibilityTable.chosen_block`; docs/simulator.md).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from simulator.allocation.first_fit import FirstFitAllocator, Placement, put_bounded
from simulator.errors import ConfigError
from simulator.step_model import StepModel, StepResult
from simulator.topology import Block, RampTopology, Shape
from workloads.graph import TrainingGraph
from workloads.jobs import JobSpec

#: Relative slack on the JCT test: a JCT equal to its target up to float rounding is accepted
#: (quirk §15.10).
JCT_TOLERANCE = 1e-9

MaskKind = Literal["paper", "placeable", "feasible"]

#: Free blocks a degree's feasibility looks at on a cluster of several server kinds
#: (``sim.hetero_block_search``): more than any degree has on the 32-server RAMP.
DEFAULT_HETERO_BLOCK_SEARCH = 128


def meets_target(jct_s: float, max_jct_s: float) -> bool:
    """The acceptance test: ``jct <= beta x sequential JCT`` (up to float rounding)."""
    return jct_s <= max_jct_s * (1 + JCT_TOLERANCE)


def min_feasible_order(degrees: Sequence[int], limit: int, min_degree: int) -> Iterator[int]:
    """The degrees ``MinFeasible(min_degree)`` tests, in its order: ascending from ``min_degree``,
    then descending below it, none above ``limit``."""
    for d in degrees:
        if d > limit:
            break
        if d >= min_degree:
            yield d
    for d in reversed(degrees):
        if d < min_degree and d <= limit:
            yield d


class Feasibility:
    """Builds :class:`FeasibilityTable` s from a placer and a step model.

    Args:
        placer: The op placer.
        step_model: The lookahead.
        hetero_block_search: ``sim.hetero_block_search`` (ignored on a cluster of one kind).

    Raises:
        ConfigError: (field ``sim.hetero_block_search``) the bound is not an integer >= 0.
    """

    def __init__(self, topology: RampTopology, placer: FirstFitAllocator, step_model: StepModel,
                 hetero_block_search: int = DEFAULT_HETERO_BLOCK_SEARCH) -> None:
        if isinstance(hetero_block_search, bool) or not isinstance(hetero_block_search, int) or hetero_block_search < 0:
            raise ConfigError(f"must be an integer >= 0, got {hetero_block_search!r}", field="sim.hetero_block_search")
        self.topology = topology
        self.placer = placer
        self.step_model = step_model
        self.hetero_block_search = hetero_block_search
        #: Free blocks a degree's feasibility searches (0 on a cluster of one kind: first fit only).
        self.block_search_bound = hetero_block_search if topology.heterogeneous else 0
        self._kind_list: list[int] | None = topology.server_kind_index.tolist() if self.block_search_bound else None
        self._class_steps: dict[tuple, float | None] = {}
        self._class_best: dict[tuple[str, int], list] = {}  # some_class_may_meet's state
        self._classes: dict[int, list[Block]] = {}
        self._block_classes: dict[tuple, tuple] = {}  # (shape, origin server) -> block_class
        self._chosen_steps: dict[tuple, tuple[int, float] | None] = {}
        # Its keys hold an occupancy mask (8 KB at 65,536 servers): bounded by ~256 MB of them too.
        self._chosen_entries = min(self.PLACED_STEP_ENTRIES, 2**28 // (topology.num_servers // 8 + 256))
        self._shape_steps: dict[tuple[str, int], list] = {}
        self._placed_steps: dict[tuple[str, int, int], tuple[int, float] | None] = {}

    PLACED_STEP_ENTRIES = 200_000
    """Entries :meth:`placed_step` keeps before it starts afresh (bounded memory)."""

    def placed_step(self, graph: TrainingGraph, degree: int, occupied_mask: int) -> tuple[int, float] | None:
        """``(server mask, step time in s)`` of the placer's placement of ``graph`` at ``degree``
        given the servers other jobs hold, or ``None``: one lookup cached by occupancy (rollouts
        ask the same ones over and over, each from a new table)."""
        key = (graph.fingerprint, degree, occupied_mask)
        found = self._placed_steps.get(key, False)
        if found is False:
            placement = self.placer.place(graph, degree, occupied_mask)
            found = (None if placement is None
                     else (placement.mask, self.step_model.step(graph, degree, placement).step_time_s))
            put_bounded(self._placed_steps, key, found, self.PLACED_STEP_ENTRIES)
        return found

    def max_placeable_degree(self, num_free_servers: int) -> int:
        """No degree above this can be placed with ``num_free_servers`` free (under op-level first
        fit a job may use fewer servers than its degree, so every degree stays possible)."""
        if self.placer.mode == "block":
            return num_free_servers
        return max(self.topology.degrees, default=self.topology.num_servers)

    def min_feasible_start(self, job: JobSpec, occupied_mask: int, min_degree: int) -> tuple[int, int, float] | None:
        """``(degree, server mask, JCT in s)`` that :func:`~simulator.policies.heuristics.min_feasible_degree`
        gives ``job`` on this occupancy, or ``None`` (it rejects): a :class:`FeasibilityTable`'s
        answer through :meth:`placed_step`."""
        steps, max_jct_s = job.num_training_steps, job.max_jct_s
        limit = self.max_placeable_degree(self.topology.num_servers - occupied_mask.bit_count())
        prefilter = self.jct_depends_on_shape_only
        graph = job.graph

        def meets(step_s: float) -> bool:
            return meets_target(step_s * steps, max_jct_s)

        def feasible(degree: int) -> tuple[int, float] | None:
            if prefilter and not self.some_shape_may_meet(graph, degree, meets):
                return None
            found = self.placed_step(graph, degree, occupied_mask)
            if found is not None and meets(found[1]):
                return found
            if not self.block_search_bound:
                return None
            # Several server kinds: the block FeasibilityTable.chosen_block would give (cached by
            # occupancy and target, as placed_step is: rollouts ask the same ones over and over).
            key = (graph.fingerprint, degree, occupied_mask, steps, max_jct_s)
            chosen = self._chosen_steps.get(key, False)
            if chosen is False:
                chosen = None
                block = self.first_block_meeting(graph, degree, occupied_mask, meets,
                                                 lambda: self.placer.free_blocks(degree, occupied_mask))
                if block is not None:
                    placement = self.placer.place(graph, degree, occupied_mask, block)
                    step_s = self.block_step_s(graph, degree, block, occupied_mask)
                    assert placement is not None and step_s is not None
                    chosen = (placement.mask, step_s)
                put_bounded(self._chosen_steps, key, chosen, self._chosen_entries)
            return chosen

        for d in min_feasible_order(self.topology.degrees, limit, min_degree):
            if (found := feasible(d)) is not None:
                return d, found[0], found[1] * steps
        return None

    @cached_property
    def degree_set(self) -> frozenset[int]:
        """:attr:`degrees` as a set (a membership test per query; ~300 degrees at 65,536 servers)."""
        return frozenset(self.topology.degrees)

    @cached_property
    def degree_array(self) -> NDArray[np.int64]:
        """:attr:`degrees` as an array."""
        return np.array(self.topology.degrees, dtype=np.int64)

    @property
    def jct_depends_on_shape_only(self) -> bool:
        """Whether a job's JCT at a degree depends only on its block's shape: mode ``block`` with
        first fit (placements are shifted per shape) on a cluster of one GPU kind."""
        return (self.placer.mode == "block" and self.placer.shifts_placements
                and not self.topology.heterogeneous)

    def some_shape_may_meet(self, graph: TrainingGraph, degree: int, meets: Callable[[float], bool]) -> bool:
        """Whether a block of some shape of ``degree`` gives a step time that ``meets`` accepts.

        Shapes are looked ahead lazily in first-fit order (:meth:`_some_may_meet`). Only meaningful
        when :attr:`jct_depends_on_shape_only`: then ``False`` means no placement at ``degree`` is
        accepted.
        """
        def shape_step_s(shape: Shape) -> float | None:
            placement = self.placer.place_in_block(graph, degree, self.topology.block_at(shape, (0, 0, 0)))
            return None if placement is None else self.step_model.step(graph, degree, placement).step_time_s

        return self._some_may_meet(self._shape_steps, graph, degree, meets, self.topology.search_shapes(degree),
                                   shape_step_s)

    @staticmethod
    def _some_may_meet(states: dict[tuple[str, int], list], graph: TrainingGraph, degree: int,
                       meets: Callable[[float], bool], candidates: Sequence[Any],
                       step_s: Callable[[Any], float | None]) -> bool:
        """Whether the step time of one of ``candidates`` (looked at lazily, in order) is accepted by
        ``meets``; the best step time so far and the candidates done are kept in ``states`` per
        graph and degree, so a hopeless degree costs each candidate's lookahead once per episode."""
        key = (graph.fingerprint, degree)
        state = states.get(key)
        if state is None:
            state = states[key] = [math.inf, 0]  # best step time, candidates looked at
        if meets(state[0]):
            return True
        while state[1] < len(candidates):
            found = step_s(candidates[state[1]])
            state[1] += 1
            if found is not None:
                state[0] = min(state[0], found)
                if meets(state[0]):
                    return True
        return False

    @property
    def degrees(self) -> tuple[int, ...]:
        """The non-zero degrees of the action set."""
        return self.topology.degrees

    def block_class(self, block: Block) -> tuple | None:
        """A key equal for free blocks in which a job times identically: the block's shape and the
        kinds of its servers in placement order; ``None`` when no block is searched (one kind)."""
        if self._kind_list is None:
            return None
        where = (block.shape, block.servers[0])
        found = self._block_classes.get(where)
        if found is None:
            kinds = self._kind_list
            found = (block.shape, tuple([kinds[s] for s in block.servers]))
            put_bounded(self._block_classes, where, found, self.PLACED_STEP_ENTRIES)
        return found

    def block_step_s(self, graph: TrainingGraph, degree: int, block: Block, occupied_mask: int) -> float | None:
        """Step time in s of ``graph`` at ``degree`` placed inside the free ``block`` (``None``: it
        does not fit), cached per :meth:`block_class`."""
        key = self.block_class(block)
        if key is not None:
            key = (graph.fingerprint, degree, key)
            found = self._class_steps.get(key, False)
            if found is not False:
                return found
        placement = self.placer.place(graph, degree, occupied_mask, block)
        step_s = None if placement is None else self.step_model.step(graph, degree, placement).step_time_s
        if key is not None:
            put_bounded(self._class_steps, key, step_s, self.PLACED_STEP_ENTRIES)
        return step_s

    def first_block_meeting(self, graph: TrainingGraph, degree: int, occupied_mask: int,
                            meets: Callable[[float], bool], blocks: Callable[[], Sequence[Block]]) -> Block | None:
        """The first of the first :attr:`block_search_bound` of ``blocks()`` (free blocks of
        ``degree`` in first-fit order) whose step time ``meets`` accepts, or ``None``; each block
        class is judged once."""
        if not self.some_class_may_meet(graph, degree, meets):
            return None
        judged: set[tuple] = set()
        for block in itertools.islice(blocks(), self.block_search_bound):
            key = self.block_class(block)
            if key is not None:
                if key in judged:
                    continue
                judged.add(key)
            step_s = self.block_step_s(graph, degree, block, occupied_mask)
            if step_s is not None and meets(step_s):
                return block
        return None

    def some_class_may_meet(self, graph: TrainingGraph, degree: int, meets: Callable[[float], bool]) -> bool:
        """Whether a block of some class (:meth:`block_class`) of ``degree`` gives a step time that
        ``meets`` accepts; ``False`` means no block of the degree does (exact: a block times as its
        class)."""
        return self._some_may_meet(self._class_best, graph, degree, meets, self._class_blocks(degree),
                                   lambda block: self.block_step_s(graph, degree, block, 0))

    def _class_blocks(self, degree: int) -> list[Block]:
        """One block of every class of ``degree``, in first-fit order (cached): kinds are set per
        rack index, so the blocks at origins ``(0, j, 0)`` cover every class."""
        found = self._classes.get(degree)
        if found is None:
            topo = self.topology
            found, seen = [], set()
            for shape in topo.search_shapes(degree):
                ni, nj, nk = topo.origin_ranges(shape)
                for j in range(nj if ni and nk else 0):
                    block = topo.block_at(shape, (0, j, 0))
                    cls = self.block_class(block)
                    if cls not in seen:
                        seen.add(cls)
                        found.append(block)
            self._classes[degree] = found
        return found

    def table(self, job: JobSpec, occupied_mask: int) -> FeasibilityTable:
        """Feasibility of ``job`` given the servers other jobs hold."""
        return FeasibilityTable(self, job, occupied_mask)


class FeasibilityTable:
    """Per-degree feasibility of one job on one cluster occupancy (lazy, cached)."""

    def __init__(self, engine: Feasibility, job: JobSpec, occupied_mask: int) -> None:
        self.engine = engine
        self.job = job
        self.occupied_mask = occupied_mask
        self.num_free_servers = engine.topology.num_servers - occupied_mask.bit_count()
        self._placements: dict[tuple[int, int | None], Placement | None] = {}
        self._steps: dict[tuple[int, int | None], StepResult | None] = {}
        self._search_bound = engine.block_search_bound
        self._chosen: dict[int, Block | None] = {}

    @property
    def degrees(self) -> tuple[int, ...]:
        """The non-zero degrees of the action set."""
        return self.engine.degrees

    def _check(self, degree: int) -> None:
        if degree not in self.engine.degree_set:
            raise ValueError(f"degree {degree} is not in the action set {self.engine.degrees}")

    @property
    def max_placeable_degree(self) -> int:
        """No degree above this can be placed now (:meth:`Feasibility.max_placeable_degree`)."""
        return self.engine.max_placeable_degree(self.num_free_servers)

    def enough_servers(self, degree: int) -> bool:
        """The original's mask: ``degree`` is offered and ``<=`` the free servers (spec §8.3)."""
        return degree in self.engine.degree_set and degree <= self.num_free_servers

    def chosen_block(self, degree: int) -> Block | None:
        """The block a job placed at ``degree`` without a named block goes to: ``None`` (the
        placer's own placement) on a cluster of one kind or when that placement meets the target,
        else :meth:`Feasibility.first_block_meeting`'s block (cached per degree)."""
        if not self._search_bound:
            return None
        if degree in self._chosen:
            return self._chosen[degree]
        self._check(degree)
        found = None
        if not self._meets(degree, None):
            found = self.engine.first_block_meeting(self.job.graph, degree, self.occupied_mask, self._step_meets,
                                                    lambda: self.free_blocks(degree))
        self._chosen[degree] = found
        return found

    def placement(self, degree: int, block: Block | None = None) -> Placement | None:
        """The placement at ``degree`` inside ``block``, or without one the placement the job gets
        (first fit's, or the block :meth:`chosen_block` finds); ``None`` if it cannot be placed."""
        return self._placement(degree, self.chosen_block(degree) if block is None else block)

    def _placement(self, degree: int, block: Block | None) -> Placement | None:
        """First-fit placement at ``degree`` (inside ``block`` if given), or ``None``."""
        self._check(degree)
        key = (degree, None if block is None else block.mask)
        if key not in self._placements:
            self._placements[key] = self.engine.placer.place(self.job.graph, degree, self.occupied_mask, block)
        return self._placements[key]

    def step(self, degree: int, block: Block | None = None) -> StepResult | None:
        """Lookahead of the placement at ``degree`` (``None`` if it cannot be placed)."""
        return self._step(degree, self.chosen_block(degree) if block is None else block)

    def _step(self, degree: int, block: Block | None) -> StepResult | None:
        key = (degree, None if block is None else block.mask)
        if key not in self._steps:
            placement = self._placement(degree, block)
            self._steps[key] = None if placement is None else self.engine.step_model.step(
                self.job.graph, degree, placement)
        return self._steps[key]

    def jct_s(self, degree: int, block: Block | None = None) -> float | None:
        """Simulated JCT at ``degree`` (``None`` if it cannot be placed)."""
        step = self.step(degree, block)
        return None if step is None else step.step_time_s * self.job.num_training_steps

    def meets_target(self, degree: int, block: Block | None = None) -> bool:
        """Placeable and ``JCT <= beta x sequential JCT`` (a degree whose fastest shape misses the
        target is refused without a search, when :attr:`Feasibility.jct_depends_on_shape_only`)."""
        return self._meets(degree, self.chosen_block(degree) if block is None else block)

    def _step_meets(self, step_s: float) -> bool:
        return meets_target(step_s * self.job.num_training_steps, self.job.max_jct_s)

    def _meets(self, degree: int, block: Block | None) -> bool:
        engine = self.engine
        if ((degree, None if block is None else block.mask) not in self._steps and engine.jct_depends_on_shape_only
                and not engine.some_shape_may_meet(self.job.graph, degree, self._step_meets)):
            return False
        step = self._step(degree, block)  # exactly this placement (``None``: first fit's)
        return step is not None and self._step_meets(step.step_time_s)

    def feasible(self, degree: int, block: Block | None = None) -> bool:
        """The job would be accepted at ``degree`` (placed now and meeting its target)."""
        return self.meets_target(degree, block)

    def num_free_blocks(self, degree: int) -> int:
        """How many blocks of ``degree`` servers are free of other jobs (counted, not listed)."""
        self._check(degree)
        return self.engine.placer.num_free_blocks(degree, self.occupied_mask)

    def num_free_blocks_of(self, degrees: Sequence[int]) -> list[int]:
        """:meth:`num_free_blocks` of every degree in ``degrees`` (one compiled pass for all)."""
        for d in degrees:
            self._check(d)
        return self.engine.placer.num_free_blocks_of(degrees, self.occupied_mask)

    def free_blocks(self, degree: int) -> Sequence[Block]:
        """Candidate blocks of ``degree`` servers free of other jobs, in first-fit order (for learned
        placement; a lazy sequence: slice it rather than read every block of a big cluster)."""
        self._check(degree)
        return self.engine.placer.free_blocks(degree, self.occupied_mask)

    def mask(self, kind: MaskKind = "feasible", max_degree: int | None = None) -> NDArray[np.bool_]:
        """Boolean mask over actions ``0..max_degree`` (index = degree; 0 = reject, always valid):
        ``paper`` :meth:`enough_servers`, ``placeable`` or ``feasible``."""
        top = max(self.engine.degrees) if max_degree is None else max_degree
        out = np.zeros(top + 1, dtype=bool)
        out[0] = True
        if kind == "paper":  # every offered degree up to the free servers: one vectorised test
            degrees = self.engine.degree_array
            out[degrees[degrees <= min(top, self.num_free_servers)]] = True
            return out
        test = {"paper": self.enough_servers,
                "placeable": lambda d: self.placement(d) is not None,
                "feasible": self.feasible}[kind]
        for d in self.engine.degrees:
            if d <= top and test(d):
                out[d] = True
        return out
