"""The adaptive PAC-ML agent (``policy=pacml``): the rule selector's pick, corrected online by shadow clusters.

Its settings are checked in three frozen dataclasses; the condition critics load torch, so they
are imported only when configured.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pacml.adaptive.conditions import PAPER_SERVERS
from pacml.adaptive.selector import (
    CONDITION_FEATURES,
    WINDOW,
    ConditionTracker,
    Rule,
    SelectorWeights,
    load_adaptive,
    rule_candidates,
    rule_features,
)
from pacml.shipped import resolve_checkpoint
from simulator.cluster import ClusterState
from simulator.errors import ConfigError
from simulator.feasibility import FeasibilityTable
from simulator.policies.heuristics import first_feasible_block, horizon_left_s, placed_decision
from simulator.policies.lookahead import RolloutCluster
from simulator.policy import Decision
from simulator.topology import RampTopology
from workloads.jobs import JobSpec

log = logging.getLogger(__name__)


class ShadowCluster:
    """A copy of the cluster (an exact :class:`~simulator.policies.lookahead.RolloutCluster`,
    started empty) fed the arriving jobs and deciding each with one fixed rule, placed as the agent
    places (:func:`start_rule`). Arrivals do not depend on decisions, so it sees exactly the stream
    the rule would have met; ``blocked`` counts the jobs the rule blocked on arrival.
    """

    def __init__(self, rule: Rule, state: ClusterState, block_search: int = 0) -> None:
        self.rule = rule
        self.block_search = block_search
        self._cluster = RolloutCluster(state.feasibility.engine)
        self.blocked = 0
        self.decided = 0
        #: Whether the last job stepped was blocked.
        self.last_blocked = False

    def step(self, job: JobSpec) -> None:
        """Decide ``job`` (the real cluster's arriving job) with the rule."""
        self.decided += 1
        self.last_blocked = not start_rule_on(self._cluster, job, self.rule, self.block_search)
        self.blocked += self.last_blocked


def start_rule_on(cluster: RolloutCluster, job: JobSpec, rule: Rule, block_search: int = 0) -> bool:
    """:func:`start_rule` of ``job`` (its completions due first released); ``min_feasible`` placed
    by the scenario's placer takes the table-free path
    (:meth:`~simulator.policies.lookahead.RolloutCluster.start_min_feasible`, the same answer)."""
    if rule.kind == "min_feasible" and not block_search:
        return cluster.start_min_feasible(job, rule.k)
    return start_rule(cluster, cluster.table(job), rule, block_search)


def start_rule(cluster: RolloutCluster, table: FeasibilityTable, rule: Rule, block_search: int = 0) -> bool:
    """Start ``table``'s job on a :class:`~simulator.policies.lookahead.RolloutCluster` with
    ``rule``'s degree, placed as :func:`~simulator.policies.heuristics.placed_decision` places it
    (``block_search`` > 0: in the first feasible of the first N free blocks, else the scenario's
    placer); ``False``: blocked."""
    degree = rule.degree_for(table)
    block = first_feasible_block(table, degree, block_search) if block_search else None
    return cluster.start(table, degree, block)


# ---------------------------------------------------------------------------- the agent's settings
def _finite_nonneg(value: Any) -> bool:
    """Whether a setting is a finite number >= 0 (not a bool)."""
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and value >= 0)


def _knob(kind: str, low: int = 0) -> Any:
    """A settings field checked by :meth:`_Knobs.__post_init__`: ``bool``, ``int`` (>= ``low``),
    ``number`` (finite, >= 0), ``names`` (a list of strings); a trailing ``?`` also allows null."""
    return field(metadata={"kind": kind, "low": low})


class _Knobs:
    """Checks every field against its :func:`_knob` kind; a bad value is a one-line error naming
    its ``policy.`` key."""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            value, kind, low = getattr(self, f.name), f.metadata["kind"], f.metadata["low"]
            if kind.endswith("?") and value is None:
                continue
            base, null = kind.rstrip("?"), " or null" if kind.endswith("?") else ""
            if base == "bool" and not isinstance(value, bool):
                raise ConfigError(f"must be true or false, got {value!r}", field=f"policy.{f.name}")
            if base == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ConfigError(f"must be an integer >= {low}{null}, got {value!r}", field=f"policy.{f.name}")
            if base == "number" and not _finite_nonneg(value):
                raise ConfigError(f"must be a finite number >= 0{null}, got {value!r}", field=f"policy.{f.name}")
            if base == "names":
                if isinstance(value, str) or not all(isinstance(c, str) for c in value):
                    raise ConfigError(f"must be a list of critic names or paths, got {value!r}",
                                      field=f"policy.{f.name}")
                object.__setattr__(self, f.name, tuple(value))


@dataclass(frozen=True)
class SelectorKnobs(_Knobs):
    """Which rule the selector's scores pick, job after job (``PacMLPolicy``'s Args say how)."""

    selector_margin: float = _knob("number")
    lookup_after_window: bool = _knob("bool")
    hold_until_window: bool = _knob("bool")
    hold_from_job: int = _knob("int", 1)


@dataclass(frozen=True)
class ShadowKnobs(_Knobs):
    """The shadow clusters that correct the selector online."""

    shadow_rules: int = _knob("int")
    shadow_warmup: int = _knob("int")
    shadow_margin: int = _knob("int")
    shadow_z: float = _knob("number")
    shadow_all_above_servers: int | None = _knob("int?", 1)
    shadow_novelty: float | None = _knob("number?")
    shadow_familiar_z: float | None = _knob("number?")
    shadow_novel_margin: int | None = _knob("int?")
    shadow_warmup_scales: bool = _knob("bool")
    shadow_blocks: bool = _knob("bool")


@dataclass(frozen=True)
class DecisionKnobs(_Knobs):
    """How the followed rule's degree becomes the decision: placement, guard, fallback, critics."""

    block_search: int = _knob("int")
    horizon_guard: bool = _knob("bool")
    feasible_fallback: bool = _knob("bool")
    condition_critics: tuple[str, ...] | None = _knob("names?")
    condition_critic_radius: float = _knob("number")


class PacMLPolicy:
    """The adaptive degree agent: follow the rule the selector scores best for the condition seen
    so far, corrected online by shadow clusters (see docs/policies.md#the-adaptive-agent-policypacml;
    why each setting: docs/policies.md#the-adaptive-agents-settings).

    Args:
        checkpoint: ``adaptive.npz`` file, a run directory holding one, or a shipped name.
        weights: In-memory weights instead of a file (training-time evaluation).
        shadow_rules: How many of the selector's best rules (on the first job) get a
            :class:`ShadowCluster` (0: none, the selector alone).
        shadow_warmup: Jobs decided before the shadows may overrule the selector.
        shadow_margin: Fewest blocked jobs by which a shadow must lead to be followed.
        shadow_z: Standard deviations by which it must lead (paired McNemar test over the jobs
            exactly one of the two blocked).
        shadow_all_above_servers: Clusters with more servers shadow every rule, with a warm-up of
            ``shadow_warmup x servers / 32`` jobs (``None``: never).
        selector_margin: Once the condition comes from a whole window, keep the followed rule
            until another scores more than this better (blocking rate; 0: each job's best).
        shadow_novelty: Mean novelty (:meth:`SelectorWeights.novelty`) up to which a condition is
            familiar (``shadow_familiar_z`` applies) rather than novel (``shadow_novel_margin``);
            ``None``: no condition is told apart.
        shadow_familiar_z: ``shadow_z`` on familiar conditions (``None``: shadows never overrule).
        shadow_novel_margin: ``shadow_margin`` on novel conditions (``None``: ``shadow_margin``).
        shadow_warmup_scales: Scale the warm-up by servers / 32 on every cluster of more than 32
            servers (false: only above ``shadow_all_above_servers``).
        lookup_after_window: A nearest-neighbour selector's lookup decides only once the window is
            whole; before that its MLP does.
        block_search: 0: the scenario's placer places the rule's degree; N: the first of the first
            N free blocks where the job meets its target
            (:func:`simulator.policies.heuristics.first_feasible_block`).
        shadow_blocks: The shadows place as the agent does (``block_search``); false: the
            scenario's placer.
        hold_until_window: Keep the pick of job ``hold_from_job`` until the window is whole.
        hold_from_job: The job (counted from 1) whose pick is held; earlier jobs take their own.
        condition_critics: Per-beta deviation critics (names or paths), each applied only on its
            own training condition (:class:`pacml.adaptive.condition_critics.ConditionCritic`).
        condition_critic_radius: How close (feature spreads) a condition must be to a critic's.
        horizon_guard: A job that would still run at the horizon takes the smallest feasible
            degree at which it ends in time, or is rejected
            (:func:`~simulator.policies.heuristics.placed_decision`).
        feasible_fallback: Where the rule's degree cannot be taken, the largest feasible below it.
    """

    def __init__(self, checkpoint: str | Path | None = None, weights: SelectorWeights | None = None,
                 shadow_rules: int = 8, shadow_warmup: int = WINDOW, shadow_margin: int = 10,
                 shadow_z: float = 1.0, shadow_all_above_servers: int | None = 256,
                 selector_margin: float = 0.01,
                 shadow_novelty: float | None = 0.45, shadow_familiar_z: float | None = 1.0,
                 shadow_novel_margin: int | None = 3, shadow_warmup_scales: bool = True,
                 lookup_after_window: bool = True, hold_until_window: bool = True, hold_from_job: int = 8,
                 block_search: int = 64, shadow_blocks: bool = True, horizon_guard: bool = True,
                 condition_critics: Sequence[str] | None = ("paper_betaD_critic",),
                 condition_critic_radius: float = 0.4, feasible_fallback: bool = True) -> None:
        #: The settings, checked, in three groups (the keys of conf/policy/pacml_adaptive.yaml).
        self.selector = SelectorKnobs(selector_margin, lookup_after_window, hold_until_window, hold_from_job)
        self.shadow = ShadowKnobs(shadow_rules, shadow_warmup, shadow_margin, shadow_z, shadow_all_above_servers,
                                  shadow_novelty, shadow_familiar_z, shadow_novel_margin, shadow_warmup_scales,
                                  shadow_blocks)
        self.decision = DecisionKnobs(block_search, horizon_guard, feasible_fallback, condition_critics,
                                      condition_critic_radius)
        if weights is None:
            if checkpoint is None:
                raise ConfigError("set policy.checkpoint=PATH", field="policy.checkpoint")
            weights, self.meta = load_adaptive(resolve_checkpoint(checkpoint, "adaptive.npz", "adaptive", "policy.checkpoint"))
        else:
            self.meta = {}
        if self.decision.condition_critics and weights.reference is None:
            raise ConfigError(f"{checkpoint} holds no reference conditions (saved before them), so its "
                              "condition critics cannot be placed: set policy.condition_critics=null",
                              field="policy.condition_critics")
        if shadow_novelty is not None and weights.reference is None:
            raise ConfigError(f"{checkpoint} holds no reference conditions (retrain or refit it with "
                              "pacml train-adaptive), so policy.shadow_novelty cannot be used: set it to null",
                              field="policy.shadow_novelty")
        trained = self.meta.get("train_config", {}).get("block_search")
        if trained is not None and trained != block_search:  # its labels ranked rules placed otherwise
            log.warning("%s was trained on rules placed with block_search=%d; it runs with policy.block_search=%d",
                        checkpoint, trained, block_search)
        self.weights = weights
        # The window the selector was trained with (checkpoints before the option: 64).
        self.tracker = ConditionTracker(int(self.meta.get("train_config", {}).get("window", WINDOW)))
        self._rules: dict[int, tuple[list[Rule], NDArray[np.float32]]] = {}
        # The critics load torch (seconds): only once every plain setting above has been checked.
        self._condition_critics: list[Any] = []
        if self.decision.condition_critics:
            from pacml.adaptive.condition_critics import ConditionCritic  # lazy: torch

            spread = weights.reference.std(axis=0)
            self._condition_critics = [ConditionCritic(name, spread, condition_critic_radius)
                                       for name in self.decision.condition_critics]
        self.reset()

    @classmethod
    def check_config(cls, node: dict[str, Any], topology: Any) -> None:
        """Preflight (``simulator.build.check_buildable``): the checkpoint and critic files exist and every
        plain setting passes ``__init__``'s checks, without reading the arrays or importing torch for
        the critics, so a bad value fails in a second."""
        args = {k: v for k, v in node.items() if not k.startswith("_")}
        if args.get("checkpoint") is not None:
            resolve_checkpoint(args["checkpoint"], "adaptive.npz", "adaptive", "policy.checkpoint")
        names = args.get("condition_critics")
        if names is not None and (isinstance(names, str) or not all(isinstance(c, str) for c in names)):
            raise ConfigError(f"must be a list of critic names or paths, got {names!r}",
                              field="policy.condition_critics")
        for name in names or ():
            resolve_checkpoint(name, "critic.pt", "critic", "policy.condition_critics")
        stand_in = SelectorWeights([], np.zeros((1, CONDITION_FEATURES), dtype=np.float32))
        cls(**{**args, "checkpoint": args.get("checkpoint") or "checkpoint", "weights": stand_in,
               "condition_critics": None})

    def reset(self, seed: int | None = None) -> None:
        """A new episode: forget the arrivals seen and the shadows."""
        self.tracker.reset()
        #: Mean novelty of the episode's conditions so far (with ``shadow_novelty`` set).
        self.novelty = 0.0
        self._novelty_n = 0
        self._picked: int | None = None
        self._first: int | None = None
        #: Decisions the condition critics changed in the current episode, and those they saw.
        self.condition_critic_changed = 0
        self.condition_critic_seen = 0
        #: Rule used for each decision of the current episode (labels), for analysis.
        self.chosen: list[str] = []
        #: The condition features the last decision's rule was picked from.
        self.last_condition: NDArray[np.float32] | None = None
        #: Shadow clusters of the current episode (empty without shadows or before the first job).
        self.shadows: list[ShadowCluster] = []
        self._following: int | None = None  # index of the shadow followed
        # _discordant[i, j]: jobs exactly one of shadows i and j blocked.
        self._discordant = np.zeros((0, 0), dtype=np.int64)
        #: Jobs before the shadows may overrule the selector, on this episode's cluster.
        self.warmup_jobs = self.shadow.shadow_warmup

    def _rule_table(self, topology: RampTopology) -> tuple[list[Rule], NDArray[np.float32]]:
        key = id(topology)
        got = self._rules.get(key)
        if got is None:
            rules = rule_candidates(topology)
            got = self._rules[key] = (rules, np.stack([rule_features(r, topology) for r in rules]))
        return got

    def _scores(self, job: JobSpec, state: ClusterState) -> tuple[list[Rule], NDArray[np.float64]]:
        self.tracker.observe(job)
        rules, feats = self._rule_table(state.topology)
        self.last_condition = self.tracker.features(state.topology)
        scores = self.weights.scores(self.last_condition, feats,
                                     lookup=self.tracker.full or not self.selector.lookup_after_window)
        return rules, scores

    def _pick(self, scores: NDArray[np.float64]) -> int:
        """The best-scoring rule, unless the one picked last scores within ``selector_margin`` of it;
        with ``hold_until_window``, the pick of job ``hold_from_job`` while the window is partial."""
        best = int(np.argmax(scores))
        holding = self._first is not None or self.tracker.seen >= self.selector.hold_from_job
        if self.selector.hold_until_window and not self.tracker.full and holding:
            if self._first is None:
                self._first = best
            # The held rule is the one a whole-window condition must beat by the margin.
            self._picked = self._first
            return self._first
        if self.selector.selector_margin == 0.0 or not self.tracker.full:
            # Each job's argmax (ties: the first); also while the condition comes from a partial
            # window, whose estimate is too poor to hold on to.
            self._picked = None
            return best
        if self._picked is not None and scores[best] - scores[self._picked] <= self.selector.selector_margin:
            return self._picked
        self._picked = best
        return best

    def _familiar(self) -> bool:
        """Whether the condition is close to the selector's training data (``shadow_novelty``);
        updates the episode's mean novelty with the current job's condition. Only conditions
        estimated from a whole window count (the first jobs' estimates are far from anything)."""
        if self.shadow.shadow_novelty is None:
            return False
        assert self.last_condition is not None
        novelty = self.weights.novelty(self.last_condition)
        if not self.tracker.full:
            self.novelty = novelty  # provisional: the first whole-window job replaces it
        else:
            self._novelty_n += 1
            self.novelty += (novelty - self.novelty) / self._novelty_n
        return self.novelty <= self.shadow.shadow_novelty

    def _leads(self, a: int, b: int, familiar: bool = False) -> bool:
        """Whether shadow ``a`` has blocked clearly fewer jobs than shadow ``b`` (indices)."""
        z = self.shadow.shadow_familiar_z if familiar else self.shadow.shadow_z
        if z is None:
            return False
        novel = self.shadow.shadow_novelty is not None and not familiar
        margin = self.shadow.shadow_novel_margin if novel and self.shadow.shadow_novel_margin is not None else self.shadow.shadow_margin
        gap = self.shadows[b].blocked - self.shadows[a].blocked
        return gap > margin and gap > z * math.sqrt(self._discordant[a, b])

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """The degree the followed rule gives the job (0 rejects)."""
        rules, scores = self._scores(job, state)
        rule = rules[self._pick(scores)]
        if self.shadow.shadow_rules:
            if not self.shadows:
                servers = state.topology.num_servers
                big = self.shadow.shadow_all_above_servers is not None and servers > self.shadow.shadow_all_above_servers
                order = np.argsort(-scores, kind="stable")[:len(rules) if big else self.shadow.shadow_rules]
                self.shadows = [ShadowCluster(rules[int(i)], state, self.decision.block_search if self.shadow.shadow_blocks else 0)
                                for i in sorted(order)]
                self._discordant = np.zeros((len(self.shadows), len(self.shadows)), dtype=np.int64)
                scaled = big or (self.shadow.shadow_warmup_scales and servers > PAPER_SERVERS)
                self.warmup_jobs = (math.ceil(self.shadow.shadow_warmup * servers / PAPER_SERVERS) if scaled
                                else self.shadow.shadow_warmup)
            for shadow in self.shadows:
                shadow.step(job)
            flags = np.fromiter((s.last_blocked for s in self.shadows), bool, len(self.shadows))
            if flags.any() and not flags.all():
                self._discordant += flags[:, None] != flags[None, :]
            familiar = self._familiar()  # every job: the novelty is the episode's mean
            if self.shadows[0].decided > self.warmup_jobs:
                leader = min(range(len(self.shadows)), key=lambda i: self.shadows[i].blocked)
                current = self._following
                if current is None:  # an unshadowed pick is followed as is
                    current = next((i for i, s in enumerate(self.shadows) if s.rule == rule), None)
                if current is not None and self._leads(leader, current, familiar):
                    self._following = leader
            # On a familiar condition without shadow_familiar_z the selector decides, even if a
            # shadow took the lead while the condition still looked novel.
            if self._following is not None and not (familiar and self.shadow.shadow_familiar_z is None):
                rule = self.shadows[self._following].rule
        self.chosen.append(rule.label)
        degree = rule.degree(state)
        if self.decision.feasible_fallback and degree and not self._placeable(state.feasibility, degree):
            # para_max's paper mask counts free servers only: its degree may not fit or meet the target.
            degree = max((d for d in state.feasibility.degrees if d < degree and self._placeable(state.feasibility, d)),
                         default=degree)
        if self._condition_critics and self.tracker.full:
            assert self.last_condition is not None
            log_seq_s = self.tracker.log_mean_sequential_s()
            for specialist in self._condition_critics:
                if specialist.applies(self.last_condition, log_seq_s, state):
                    self.condition_critic_seen += 1
                    changed = specialist.degree(job, state, degree)
                    self.condition_critic_changed += changed != degree
                    degree = changed
                    break
        return placed_decision(state.feasibility, degree, self.decision.block_search,
                               horizon_left_s(state) if self.decision.horizon_guard else None)

    def _placeable(self, table: FeasibilityTable, degree: int) -> bool:
        """Whether the job is accepted at ``degree`` as this agent places it."""
        return table.feasible(degree) or (self.decision.block_search > 0
                                          and first_feasible_block(table, degree, self.decision.block_search) is not None)
