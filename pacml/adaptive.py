"""One degree agent across conditions: a learned *rule selector* (issue: PAC-ML that adapts).

Why this design. The shipped per-beta agents learned to copy the ``min_feasible(k)`` rule they were
warm-started from, and the best ``k`` changes with the load, the arrival process, the cluster's
shape and the job mix (the best rule's blocking is often half the wrong rule's). So the first
thing one agent across conditions has to learn is *which rule this condition calls for*, from
what it can observe. This agent does exactly that:

* **Condition features** (:class:`ConditionTracker`): the cluster's size and shape (log2), and,
  from a window of the last :data:`WINDOW` arrivals the policy has seen, the offered load (arrival
  rate x mean sequential JCT / servers), the burstiness of arrivals (coefficient of variation of
  the gaps), the targets (mean, spread and low quantile of beta) and the job mix (mean and spread
  of log sequential JCT / gap). None of them depends on the cluster's size except through the
  explicit size features, and none on the policy's own past decisions.
* **Rules as actions** (:func:`rule_candidates`): ``para_max`` (the paper's cap of 16 and, on a
  bigger cluster, the cluster's own cap) and ``min_feasible(k)`` for every degree ``k`` the cluster
  offers, each described by size-independent features (``log2 k``, ``k`` / servers, ``k`` /
  max degree, kind).
* **Selector** (:class:`Selector`): one MLP scores (condition, rule) pairs; the policy takes the
  best-scoring rule for the current condition and the degree that rule gives the arriving job.
  It is trained to minimise the *expected regret* ``sum_r p(r) (blocking(r) - blocking(best))``
  measured by simulation on many randomised training conditions (:func:`sample_condition`,
  :func:`teacher_search`), so near-ties cost nothing and a wrong pick is weighted by what it
  costs.

The network is tiny; decisions run it in numpy (no torch at decision time), so a decision costs
the rule's own feasibility queries plus a few microseconds.
"""

from __future__ import annotations

import io
import logging
import math
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from pacml.runfiles import archive_problem
from simulator.cluster import ClusterState
from simulator.feasibility import FeasibilityTable
from simulator.policies.heuristics import (
    first_feasible_block,
    horizon_left_s,
    min_feasible_degree,
    placed_decision,
)
from simulator.policy import Decision
from simulator.topology import RampTopology
from workloads.io import atomic_write
from workloads.jobs import JobSpec

if TYPE_CHECKING:
    from simulator.policies.lookahead import RolloutCluster

log = logging.getLogger(__name__)

ADAPTIVE_FORMAT = "pacml-adaptive"
ADAPTIVE_VERSION = 1
#: Recent arrivals the condition features are estimated from.
WINDOW = 64
CONDITION_FEATURES = 16
RULE_FEATURES = 6
#: The paper's para_max cap (spec §13).
PARA_MAX_CAP = 16


@dataclass(frozen=True)
class Rule:
    """A degree rule: ``para_max`` (largest degree the paper's mask allows, up to ``k``) or
    ``min_feasible`` (smallest feasible degree >= ``k``, else the largest feasible one below)."""

    kind: str
    k: int

    @property
    def label(self) -> str:
        """Short name, e.g. ``min_feasible(6)`` or ``para_max(16)``."""
        return f"{self.kind}({self.k})"

    def degree(self, state: ClusterState) -> int:
        """The degree this rule gives the arriving job (0 rejects)."""
        return self.degree_for(state.feasibility)

    def degree_for(self, table: FeasibilityTable) -> int:
        """The degree this rule gives ``table``'s job (0 rejects)."""
        if self.kind == "min_feasible":
            return min_feasible_degree(table, self.k)
        mask = table.mask("paper")
        return max((d for d in table.degrees if d <= self.k and mask[d]), default=0)


def rule_candidates(topology: RampTopology) -> list[Rule]:
    """Every rule offered on ``topology``: para_max (cap 16, and the cluster's cap when larger),
    then ``min_feasible(k)`` for every degree ``k`` the cluster offers."""
    top = max(topology.degrees)
    rules = [Rule("para_max", min(PARA_MAX_CAP, top))]
    if top > PARA_MAX_CAP:
        rules.append(Rule("para_max", top))
    rules += [Rule("min_feasible", k) for k in topology.degrees]
    return rules


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0


def rule_features(rule: Rule, topology: RampTopology) -> NDArray[np.float32]:
    """Size-independent description of a rule on a cluster, ``(RULE_FEATURES,)``."""
    top = max(topology.degrees)
    return np.array([
        float(rule.kind == "para_max"),
        _log2(rule.k) / 6.0,
        rule.k / topology.num_servers,
        _log2(rule.k) / max(_log2(top), 1.0),
        float(rule.k == top),
        float(rule.k == min(PARA_MAX_CAP, top)),
    ], dtype=np.float32)


def cluster_features(topology: RampTopology) -> NDArray[np.float32]:
    """The cluster's size and shape: log2 of servers, of groups, racks and servers per rack, and
    of the largest degree, scaled to about [0, 1]."""
    c, r, s = topology.shape
    return np.array([_log2(topology.num_servers) / 16.0, _log2(c) / 6.0, _log2(r) / 6.0, _log2(s) / 6.0,
                     _log2(max(topology.degrees)) / 10.0], dtype=np.float32)


class ConditionTracker:
    """Estimates the condition (load, arrivals, targets, job mix) from the arrivals seen so far.

    Only the arriving jobs are used (times, sequential JCTs, targets), never the policy's own
    decisions, so the estimate is the same whichever rule is followed.
    """

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self.reset()

    def reset(self) -> None:
        """Forget everything (a new episode)."""
        self._times: deque[float] = deque(maxlen=self.window + 1)
        self._seq: deque[float] = deque(maxlen=self.window)
        self._beta: deque[float] = deque(maxlen=self.window)

    @property
    def seen(self) -> int:
        """Arrivals observed this episode (counted up to the window)."""
        return len(self._seq)

    @property
    def full(self) -> bool:
        """Whether the features come from a whole window of arrivals."""
        return len(self._times) >= self.window

    def observe(self, job: JobSpec) -> None:
        """Record an arriving job (call once per job, before :meth:`features`)."""
        self._times.append(job.arrival_time_s)
        self._seq.append(job.sequential_jct_s)
        self._beta.append(job.beta)

    def log_mean_sequential_s(self) -> float:
        """log10 of the window's mean sequential JCT in seconds (the time scale the features leave out)."""
        seq = np.fromiter(self._seq, float)
        return math.log10(max(float(seq.mean()), 1e-12)) if seq.size else 0.0

    def features(self, topology: RampTopology) -> NDArray[np.float32]:
        """``(CONDITION_FEATURES,)``: cluster, then load, burstiness, targets (mean, spread, 20/50/80th
        percentiles), mix, window fill."""
        times = np.fromiter(self._times, float)
        gaps = np.diff(times)
        gaps = gaps[gaps >= 0]
        seq = np.fromiter(self._seq, float)
        beta = np.fromiter(self._beta, float)
        if gaps.size and gaps.mean() > 0:
            gap = float(gaps.mean())
            cv = float(gaps.std() / gap)
        else:
            gap, cv = float("nan"), 0.0
        if math.isfinite(gap) and seq.size:
            load = float(seq.mean()) / gap / topology.num_servers
            rel = np.log10(np.maximum(seq, 1e-12) / gap)
            mix_mean, mix_std = float(rel.mean()), float(rel.std())
        else:  # one arrival: no rate yet
            load, mix_mean, mix_std = 0.0, 0.0, 0.0
        return np.concatenate([cluster_features(topology), np.array([
            math.log10(load) / 2.0 if load > 0 else -2.0,
            min(cv, 3.0),
            float(beta.mean()) if beta.size else 0.5,
            float(beta.std()) if beta.size else 0.0,
            float(np.quantile(beta, 0.2)) if beta.size else 0.5,
            float(np.quantile(beta, 0.5)) if beta.size else 0.5,
            float(np.quantile(beta, 0.8)) if beta.size else 0.5,
            mix_mean / 2.0,
            mix_std,
            min(len(self._seq) / self.window, 1.0),
            float(job_count_flag(len(self._seq))),
        ], dtype=np.float32)]).astype(np.float32)


def job_count_flag(n: int) -> bool:
    """Whether fewer than 8 arrivals were seen (the estimates are still poor)."""
    return n < 8


# ---------------------------------------------------------------------------- the selector (numpy)
def _finite_nonneg(value: Any) -> bool:
    """Whether a setting is a finite number >= 0 (not a bool)."""
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and value >= 0)


def _relu(x: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.maximum(x, 0.0)


@dataclass
class NeighbourTable:
    """A nearest-neighbour selector: the teacher search's own answers, looked up (k-NN).

    For a condition, the ``k`` training condition samples nearest to it (each feature in units of
    its spread over the samples; features constant there are left out), among the training
    conditions on a cluster with the same rules, vote with their conditions' measured regret per
    rule; the lowest mean regret wins. The MLP smooths its answers across the sharp boundaries
    where the best rule jumps with the load and the targets; the lookup does not, and leaves half
    the MLP's held-out regret on the same search. In simulation it still loses to the MLP: over
    the first jobs its pick flips between near-tied rules, and mixing rules blocks more than either
    alone, so training builds it only on request. Clusters whose rule set no
    training condition had fall back to the MLP.

    Attributes:
        rows: ``(N, CONDITION_FEATURES)`` condition samples of the training conditions.
        condition: ``(N,)`` index of each row's training condition.
        regret: ``(M, R)`` each condition's regret per rule slot (mean blocking minus the best
            rule's), ``nan`` past its rule count.
        group: ``(M,)`` index into ``rule_sets`` of each condition's rules.
        rule_sets: ``(G, R, RULE_FEATURES)`` rule features of each distinct rule set, zero padded.
        rule_counts: ``(G,)`` rules in each set.
        k: Neighbours that vote.
        weights: ``(CONDITION_FEATURES,)`` multiplier of each feature's distance (after the spread
            scaling; 0 leaves a feature out). ``None``: all 1, as in tables saved before them.
            Training tunes them on its held-out conditions (:func:`tune_neighbour_weights`).
    """

    rows: NDArray[np.float32]
    condition: NDArray[np.int32]
    regret: NDArray[np.float32]
    group: NDArray[np.int32]
    rule_sets: NDArray[np.float32]
    rule_counts: NDArray[np.int32]
    k: int
    weights: NDArray[np.float32] | None = None

    @classmethod
    def build(cls, conditions: Sequence[tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.float64]]],
              k: int) -> NeighbourTable:
        """From ``(condition samples, rule features, mean blocking per rule)`` of each training condition."""
        width = max(len(b) for _, _, b in conditions)
        sets: list[NDArray[np.float32]] = []
        rows, owner, regret, group = [], [], np.full((len(conditions), width), np.nan, np.float32), []
        for i, (samples, rule_feats, blocking) in enumerate(conditions):
            regret[i, :len(blocking)] = blocking - blocking.min()
            g = next((j for j, s in enumerate(sets) if s.shape == rule_feats.shape and np.array_equal(s, rule_feats)),
                     None)
            if g is None:
                g = len(sets)
                sets.append(np.asarray(rule_feats, np.float32))
            group.append(g)
            rows.append(samples)
            owner.append(np.full(len(samples), i, np.int32))
        rule_sets = np.zeros((len(sets), width, RULE_FEATURES), np.float32)
        for j, s in enumerate(sets):
            rule_sets[j, :len(s)] = s
        # Half precision, as saved: the samples are noisy estimates to begin with, and the lookup
        # must be the same before and after a save.
        return cls(np.concatenate(rows).astype(np.float16).astype(np.float32), np.concatenate(owner), regret,
                   np.asarray(group, np.int32), rule_sets, np.asarray([len(s) for s in sets], np.int32), int(k))

    def _index(self, rules: NDArray[np.float32]) -> Any:
        """The k-d tree over the samples of conditions with exactly ``rules`` (``None``: no such condition)."""
        cache = self.__dict__.setdefault("_trees", {})
        key = rules.astype(np.float32).tobytes()
        if key not in cache:
            from scipy.spatial import cKDTree

            if "_scale" not in self.__dict__:  # one scaling for every rule set
                spread = self.rows.astype(np.float64).std(axis=0)
                weights = np.ones(CONDITION_FEATURES) if self.weights is None else self.weights.astype(np.float64)
                keep = (spread > 1e-6) & (weights > 0)
                # Distances in units of spread / weight: dividing by it is scaling and weighting at once.
                self.__dict__["_scale"] = (keep, np.where(keep, spread / np.where(keep, weights, 1.0), 1.0))
            keep, spread = self.__dict__["_scale"]
            g = next((j for j in range(len(self.rule_counts)) if self.rule_counts[j] == len(rules)
                      and np.array_equal(self.rule_sets[j, :len(rules)], rules.astype(np.float32))), None)
            if g is None:
                cache[key] = None
            else:
                mine = np.flatnonzero(self.group[self.condition] == g)
                scaled = self.rows[mine][:, keep].astype(np.float64) / spread[keep]
                cache[key] = (cKDTree(scaled), self.condition[mine], keep, spread[keep])
        return cache[key]

    def regrets(self, cond: NDArray[np.float32], rules: NDArray[np.float32]) -> NDArray[np.float64] | None:
        """Predicted regret of every rule (rows of ``rules``) under ``cond`` (``(R,)``; or ``(n, R)``
        for ``(n, CONDITION_FEATURES)`` conditions); ``None`` if no training condition had these rules."""
        index = self._index(rules)
        if index is None:
            return None
        tree, owner, keep, spread = index
        k = min(self.k, tree.n)
        query = np.asarray(cond, np.float64)
        if query.ndim == 2:  # a batch (training's evaluation): one tree query for all of it
            _, near = tree.query(query[:, keep] / spread, k=k)
            near = near.reshape(len(query), k)
            return self.regret[owner[near], :len(rules)].astype(np.float64).mean(axis=1)
        _, near = tree.query(query[keep] / spread, k=k)
        near = np.atleast_1d(near)
        return self.regret[owner[near], :len(rules)].astype(np.float64).mean(axis=0)


@dataclass
class SelectorWeights:
    """Weights of the selector MLP (numpy), ``score = w3 . relu(W2 relu(W1 [cond, rule] + b1) + b2) + b3``."""

    layers: list[tuple[NDArray[np.float64], NDArray[np.float64]]]
    #: Condition-feature rows of the training conditions (a sample), for :meth:`novelty`; ``None``
    #: in checkpoints saved before it existed.
    reference: NDArray[np.float32] | None = None
    #: A nearest-neighbour lookup that decides instead of the MLP where it knows the cluster's
    #: rules (``None``: the MLP always, as every selector before it).
    neighbours: NeighbourTable | None = None

    def scores(self, cond: NDArray[np.float32], rules: NDArray[np.float32],
               lookup: bool = True) -> NDArray[np.float64]:
        """Score of every rule (rows of ``rules``) under condition ``cond``: minus the neighbours'
        regret where :attr:`neighbours` covers the cluster (and ``lookup``), else the MLP's."""
        if lookup and self.neighbours is not None:
            regret = self.neighbours.regrets(cond, rules)
            if regret is not None:
                return -regret
        return self.mlp_scores(cond, rules)

    def mlp_scores(self, cond: NDArray[np.float32], rules: NDArray[np.float32]) -> NDArray[np.float64]:
        """The MLP's score of every rule (rows of ``rules``) under condition ``cond``."""
        x = np.concatenate([np.broadcast_to(cond, (len(rules), len(cond))), rules], axis=1).astype(np.float64)
        for i, (w, b) in enumerate(self.layers):
            x = x @ w.T + b
            if i < len(self.layers) - 1:
                x = _relu(x)
        return x[:, 0]

    def novelty(self, cond: NDArray[np.float32]) -> float:
        """Distance from ``cond`` to the nearest training condition, each feature in units of its
        spread over the training conditions (features constant in training are left out)."""
        if self.reference is None:
            raise ValueError("this selector has no reference conditions (saved before they existed)")
        cache = self.__dict__.get("_scaled")
        if cache is None:
            spread = self.reference.std(axis=0).astype(np.float64)
            keep = spread > 1e-6
            scaled = self.reference[:, keep].astype(np.float64) / spread[keep]
            cache = self.__dict__["_scaled"] = (keep, spread[keep], scaled)
        keep, spread, scaled = cache
        diff = scaled - np.asarray(cond, dtype=np.float64)[keep] / spread
        return float(np.sqrt(np.einsum("ij,ij->i", diff, diff).min()))


def save_adaptive(path: str | Path, weights: SelectorWeights, meta: dict[str, Any]) -> Path:
    """Write an adaptive-agent checkpoint atomically (numpy arrays in a torch-free pickle-free npz)."""
    arrays = {f"w{i}": w for i, (w, _) in enumerate(weights.layers)}
    arrays |= {f"b{i}": b for i, (_, b) in enumerate(weights.layers)}
    if weights.reference is not None:
        arrays["reference"] = weights.reference
    table = weights.neighbours
    if table is not None:
        arrays |= {"nn_rows": table.rows.astype(np.float16), "nn_condition": table.condition,
                   "nn_regret": table.regret, "nn_group": table.group, "nn_rule_sets": table.rule_sets,
                   "nn_rule_counts": table.rule_counts, "nn_k": np.asarray(table.k)}
        if table.weights is not None:
            arrays["nn_weights"] = table.weights.astype(np.float32)
    import json

    arrays["meta"] = np.frombuffer(json.dumps({"format": ADAPTIVE_FORMAT, "version": ADAPTIVE_VERSION,
                                               "num_layers": len(weights.layers), **meta}).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return atomic_write(path, lambda fh: fh.write(buf.getvalue()))


def load_adaptive(path: str | Path) -> tuple[SelectorWeights, dict[str, Any]]:
    """Read a checkpoint written by :func:`save_adaptive`."""
    import json

    from simulator.errors import ConfigError

    try:  # np.load of a file that is no .npz archive would suggest allow_pickle: never for a checkpoint
        if problem := archive_problem(path, "an .npz"):
            raise ValueError(problem)
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            n = int(meta["num_layers"])
            layers = [(data[f"w{i}"].astype(np.float64), data[f"b{i}"].astype(np.float64)) for i in range(n)]
            reference = data["reference"].astype(np.float32) if "reference" in data.files else None
            neighbours = None
            if "nn_rows" in data.files:
                neighbours = NeighbourTable(data["nn_rows"].astype(np.float32), data["nn_condition"].astype(np.int32),
                                            data["nn_regret"].astype(np.float32), data["nn_group"].astype(np.int32),
                                            data["nn_rule_sets"].astype(np.float32),
                                            data["nn_rule_counts"].astype(np.int32), int(data["nn_k"]),
                                            data["nn_weights"].astype(np.float32) if "nn_weights" in data.files
                                            else None)
    except OSError as exc:
        raise ConfigError(f"cannot read adaptive checkpoint {path}: {exc.strerror or exc}",
                          field="policy.checkpoint") from None
    except KeyError as exc:
        raise ConfigError(f"cannot read adaptive checkpoint {path}: no array or field {exc}",
                          field="policy.checkpoint") from None
    except Exception as exc:  # noqa: BLE001 - zip, zlib, json and numpy raise many types for a damaged archive
        text = " ".join(str(exc).split())
        if "allow_pickle" in text:  # an archive member that is not a plain array
            text = "an array holds Python objects (not loaded)"
        raise ConfigError(f"cannot read adaptive checkpoint {path}: {text[:200] or type(exc).__name__}",
                          field="policy.checkpoint") from None
    if meta.get("format") != ADAPTIVE_FORMAT:
        raise ConfigError(f"{path} is not a pacml adaptive checkpoint", field="policy.checkpoint")
    inputs = layers[0][0].shape[1] if layers else 0
    if inputs != CONDITION_FEATURES + RULE_FEATURES:
        raise ConfigError(f"{path} takes {inputs} input features, this version computes "
                          f"{CONDITION_FEATURES + RULE_FEATURES}: retrain it (pacml train-adaptive)",
                          field="policy.checkpoint")
    if neighbours is not None and not _table_ok(neighbours):
        raise ConfigError(f"{path}: its nearest-neighbour table is inconsistent (nn_* arrays)",
                          field="policy.checkpoint")
    return SelectorWeights(layers, reference, neighbours), meta


def _table_ok(t: NeighbourTable) -> bool:
    """Whether a loaded table's arrays fit together (a hand-edited or foreign file may not)."""
    n_cond, n_sets = len(t.regret), len(t.rule_sets)
    return (t.rows.ndim == 2 and t.rows.shape[1] == CONDITION_FEATURES and t.condition.shape == (len(t.rows),)
            and len(t.rows) > 0 and t.k >= 1 and t.group.shape == (n_cond,) and t.rule_counts.shape == (n_sets,)
            and t.rule_sets.ndim == 3 and t.rule_sets.shape[2] == RULE_FEATURES
            and t.regret.ndim == 2 and t.regret.shape[1] == t.rule_sets.shape[1]
            and bool(np.all((t.condition >= 0) & (t.condition < n_cond)))
            and bool(np.all((t.group >= 0) & (t.group < n_sets)))
            and bool(np.all((t.rule_counts >= 1) & (t.rule_counts <= t.regret.shape[1])))
            and (t.weights is None or (t.weights.shape == (CONDITION_FEATURES,)
                                       and bool(np.all(np.isfinite(t.weights) & (t.weights >= 0)))
                                       and bool(np.any(t.weights > 0)))))


class ShadowCluster:
    """A copy of the cluster that decides every job the policy sees with one fixed rule.

    It is a :class:`~simulator.policies.lookahead.RolloutCluster` (exact with respect to the
    simulator, sharing the real cluster's lookahead caches), started empty and fed the arriving
    jobs as the real cluster shows them to the policy. Arrivals do not depend on decisions, so it
    sees exactly the stream the rule would have met. ``blocked`` counts the jobs the rule blocked
    on arrival (no feasible degree, or a target the degree misses). With ``block_search`` > 0 the
    rule's degree goes to its first feasible block, as the agent places it (:func:`start_rule`).
    """

    def __init__(self, rule: Rule, state: ClusterState, block_search: int = 0) -> None:
        from simulator.policies.lookahead import RolloutCluster

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
def _knob(kind: str, low: int = 0) -> Any:
    """A settings field checked by :meth:`_Knobs.__post_init__`: ``bool``, ``int`` (>= ``low``),
    ``number`` (finite, >= 0), ``names`` (a list of strings); a trailing ``?`` also allows null."""
    return field(metadata={"kind": kind, "low": low})


class _Knobs:
    """Checks every field against its :func:`_knob` kind; a bad value is a one-line error naming
    its ``policy.`` key."""

    def __post_init__(self) -> None:
        from simulator.errors import ConfigError

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
    """Which rule the selector's scores pick, job after job (``AdaptivePolicy``'s Args say how)."""

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


class AdaptivePolicy:
    """The adaptive degree agent: pick the rule the selector scores best for the condition seen so
    far, and decide the job with it; optionally correct the selector online with shadow clusters.

    With ``shadow_rules > 0`` the agent also runs a :class:`ShadowCluster` for each of the
    ``shadow_rules`` rules the selector scores best on the first job (every rule when the cluster
    offers no more, or has more than ``shadow_all_above_servers`` servers). It follows the
    selector until, after ``shadow_warmup`` jobs, some shadow has blocked clearly fewer jobs than
    the shadow of the rule it follows: more than ``shadow_margin`` jobs fewer (with
    ``shadow_novelty``, ``shadow_novel_margin`` on novel conditions), and ``shadow_z`` standard
    deviations fewer in a paired (McNemar) test over the
    jobs exactly one of the two blocked (the shadows see the same jobs, so only those differ).
    From then on it follows the shadows' leader, switching again only on the same evidence. The
    selector is a prior learned offline; the shadows are the condition's own evidence, measured
    on the jobs that arrived. The warm-up matters: from an empty cluster every rule blocks
    little, and the rule that blocks least over the first jobs is often not the one that blocks
    least once the cluster is full.

    Args:
        checkpoint: ``adaptive.npz`` file, a run directory holding one, or a shipped name.
        weights: In-memory weights instead of a file (training-time evaluation).
        shadow_rules: How many rules get a shadow cluster (0: none, the selector alone).
        shadow_warmup: Jobs decided before the shadows may overrule the selector.
        shadow_margin: Fewest blocked jobs by which a shadow must lead to be followed.
        shadow_z: Standard deviations by which it must lead (paired test).
        shadow_all_above_servers: Clusters with more servers than this shadow every rule they offer, and the warm-up grows with the
            cluster: ``shadow_warmup x servers / 32`` jobs (``None``: the selector's best shadows on
            every cluster, and the warm-up as ``shadow_warmup_scales`` says). At the paper's load per
            server a cluster N times the paper's 32 servers takes N times the arrivals to fill, and
            the selector's labels there come from training episodes that ended before it filled, so
            its best-scored rules need not include the best one (on 512 servers its best 8 leave out
            ``min_feasible(8)``). Placed in blocks, a late switch costs little on such a cluster.
        selector_margin: Once the condition comes from a whole window of arrivals, the rule followed
            is kept until another scores more than this much better (the neighbour selector's
            scores are minus predicted regret, so this is in blocking rate; 0: each job's
            best-scoring rule). Near a boundary between rules the noisy condition estimate flips the
            pick from job to job, and blocking is path dependent: mixing ``min_feasible(4)`` and
            ``(6)`` jobs can block more than either rule alone.
        shadow_novelty: A condition is *familiar* while it is at most this far from the selector's
            training conditions (:meth:`SelectorWeights.novelty`, averaged over the episode's jobs
            so far); on familiar conditions ``shadow_familiar_z`` applies, on the others
            ``shadow_novel_margin``. Near its training data the selector is right more often than
            the shadows, whose evidence starts from an empty cluster; far from it (other
            scenarios, unseen graphs) the shadows are. ``None``: no condition is told apart.
        shadow_familiar_z: With ``shadow_novelty`` set, the standard deviations by which a shadow
            must lead to overrule the selector on a familiar condition (``None``: it never does).
        shadow_novel_margin: With ``shadow_novelty`` set, the fewest blocked jobs by which a shadow
            must lead on a condition that is not familiar (``None``: ``shadow_margin`` there too;
            without ``shadow_novelty`` no condition is told apart, and this has no effect). The
            margin is the evidence the shadows need against the selector's prior, and far from
            its training data that prior is worth less: on the unseen graphs a shadow of the best
            rule gains on the selector's pick by about 6.5 jobs per 100, so a margin of 10 costs
            some 150 jobs of the wrong rule.
        shadow_warmup_scales: The warm-up grows with the cluster on every cluster of more than 32
            servers, ``shadow_warmup x servers / 32`` jobs, as it does above
            ``shadow_all_above_servers`` (false: only there). A cluster twice the paper's takes
            twice the arrivals to fill, and until it is full rules of small degrees lead by
            blocking little; on the 64-server RAMP those leads carried switches right after a
            64-job warm-up that the rest of the episode did not repay.
        lookup_after_window: With a nearest-neighbour selector, the lookup decides only once the
            condition comes from a whole window of arrivals; before that the MLP does. The lookup
            is more accurate on whole-window conditions, but on the first jobs' partial-window
            estimates it mixes near-tied rules, and that mix blocks more than either rule alone.
        block_search: 0: the scenario's placer places the rule's degree; N: the first of the first
            N free blocks of that degree in which the job meets its target
            (:func:`simulator.policies.heuristics.first_feasible_block`).
        shadow_blocks: The shadow clusters place their rules' degrees as the agent does
            (``block_search``); false: with the scenario's placer.
        hold_until_window: Keep the rule picked on the episode's first job until the condition
            comes from a whole window of arrivals; then leave it only for a rule that scores more
            than ``selector_margin`` better (with margin 0, each job's best). The
            first job's condition knows the cluster and a target but no load, so its pick is the
            rule best on average over the loads trained on; the partial-window estimates that
            follow are noisy enough to flip the pick between near-tied rules, whose mix blocks
            more than either rule alone.
        hold_from_job: With ``hold_until_window``, the job (counted from 1) whose pick is held;
            the jobs before it take each job's own pick. The first job's condition has no arrival
            rate at all, so its pick follows that one job's target; a few arrivals later the
            estimate is rough but informed, and the nearly empty cluster makes early flips cheap.
        condition_critics: Per-beta deviation critics (``pacml distill``; names or paths), each
            applied only where the observed condition is its training condition
            (:class:`pacml.critic.ConditionCritic`): the first that applies may change the rule's
            degree. ``None``: none.
        condition_critic_radius: How close (feature spreads) a condition must be to a critic's.
        horizon_guard: With the paper's accounting, a job that would still run at the horizon
            (and so count as blocked) takes the smallest feasible degree at which it ends in
            time, or is rejected (:func:`~simulator.policies.heuristics.placed_decision`).
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
        from simulator.errors import ConfigError

        #: The settings, checked, in three groups (the keys of conf/policy/pacml_adaptive.yaml).
        self.selector = SelectorKnobs(selector_margin, lookup_after_window, hold_until_window, hold_from_job)
        self.shadow = ShadowKnobs(shadow_rules, shadow_warmup, shadow_margin, shadow_z, shadow_all_above_servers,
                                  shadow_novelty, shadow_familiar_z, shadow_novel_margin, shadow_warmup_scales,
                                  shadow_blocks)
        self.decision = DecisionKnobs(block_search, horizon_guard, feasible_fallback, condition_critics,
                                      condition_critic_radius)
        if weights is None:
            from pacml.shipped import resolve_checkpoint

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
        #: Decisions the condition critics changed in the current episode, and those they saw.
        self.condition_critic_changed = 0
        self.condition_critic_seen = 0
        self._first: int | None = None
        self._picked: int | None = None
        #: Mean novelty of the episode's conditions so far (with ``shadow_novelty`` set).
        self.novelty = 0.0
        self._novelty_n = 0
        self.weights = weights
        # The window the selector was trained with (checkpoints before the option: 64).
        self.tracker = ConditionTracker(int(self.meta.get("train_config", {}).get("window", WINDOW)))
        self._rules: dict[int, tuple[list[Rule], NDArray[np.float32]]] = {}
        # The critics load torch (seconds): only once every plain setting above has been checked.
        self._condition_critics: list[Any] = []
        if self.decision.condition_critics:
            from pacml.critic import ConditionCritic

            spread = weights.reference.std(axis=0)
            self._condition_critics = [ConditionCritic(name, spread, condition_critic_radius)
                                       for name in self.decision.condition_critics]
        #: The rule the last decision followed, and the condition features it was picked from.
        self.last_rule: Rule | None = None
        self.last_condition: NDArray[np.float32] | None = None
        #: Rule used for each decision of the current episode (labels), for analysis.
        self.chosen: list[str] = []
        #: Shadow clusters of the current episode (empty without shadows or before the first job).
        self.shadows: list[ShadowCluster] = []
        self._following: int | None = None  # index of the shadow followed
        #: Jobs before the shadows may overrule the selector, on this episode's cluster.
        self.warmup_jobs = self.shadow.shadow_warmup
        # _discordant[i, j]: jobs exactly one of shadows i and j blocked.
        self._discordant = np.zeros((0, 0), dtype=np.int64)

    @classmethod
    def check_config(cls, node: dict[str, Any], topology: Any) -> None:
        """Preflight (``simulator.build.check_buildable``): the checkpoint and critic files exist and every
        plain setting passes ``__init__``'s checks, without reading the arrays or importing torch for
        the critics, so a bad value fails in a second."""
        from pacml.shipped import resolve_checkpoint
        from simulator.errors import ConfigError

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
        self.novelty = 0.0
        self._novelty_n = 0
        self._picked = None
        self._first = None
        self.condition_critic_changed = 0
        self.condition_critic_seen = 0
        self.chosen = []
        self.last_rule = None
        self.last_condition = None
        self.shadows = []
        self._following = None
        self._discordant = np.zeros((0, 0), dtype=np.int64)
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

    def select(self, job: JobSpec, state: ClusterState) -> Rule:
        """Observe the job and return the rule the selector picks for the condition."""
        rules, scores = self._scores(job, state)
        return rules[self._pick(scores)]

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
            # Each job's argmax (ties: the first), as before the option; and while the condition
            # comes from a partial window, whose estimate is too poor to hold on to (before
            # job hold_from_job too).
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
        self.last_rule = rule
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


# ---------------------------------------------------------------------------- training conditions
#: Cluster shapes (groups, racks, servers per rack) and their largest degree, sampled in training:
#: the paper's 32-server RAMP, 64, 128, 256 and 512 servers in several shapes.
TRAIN_CLUSTERS: tuple[tuple[int, int, int, int], ...] = (
    (4, 4, 2, 16), (4, 4, 4, 16), (2, 4, 4, 16), (4, 4, 8, 16), (8, 4, 4, 16), (4, 8, 8, 32),
    (8, 8, 4, 32), (8, 8, 8, 64),
)
#: How often each cluster is drawn: the paper's RAMP most (its conditions differ most between
#: rules), and the 64- and 512-server RAMPs of the presets more than the other shapes.
TRAIN_CLUSTER_WEIGHTS = (0.35, 0.15, 0.05, 0.075, 0.05, 0.075, 0.05, 0.2)
#: Target distributions drawn: the paper's four, then uniform and fixed targets.
TRAIN_BETAS = ("A", "B", "C", "D", "uniform", "fixed")
TRAIN_BETA_WEIGHTS = (0.2, 0.2, 0.2, 0.2, 0.1, 0.1)
#: Graphs training conditions draw their mixes from: the paper's five plus NASNet. DenseNet-121,
#: Inception-v3, ResNet-50 and ResNeXt-50 are kept out (the unseen-graph condition).
TRAIN_GRAPHS = ("alexnet", "gnmt", "resnet18", "squeezenet1_0", "vgg16", "nasnetamobile")
PAPER_INTERARRIVAL_S = 1000.0
PAPER_SERVERS = 32


#: Load factors (times the paper's load per server) of the dense "core" conditions: the paper's
#: RAMP between 0.4x and 2.5x, where the best rule jumps (min_feasible(4-6) at 1x, para_max at 1.3x).
CORE_FACTORS = (0.4, 2.5)


#: Mean inter-arrival time of each scenario family at the paper's load, in its own units.
SCENARIO_INTERARRIVAL_S = {"paper": PAPER_INTERARRIVAL_S, "physical": 1.0}


#: Range of the factors that resize a training mix's graphs (``size_spread_frac``): log-uniform.
SIZE_SCALE_RANGE = (0.4, 1.6)


def cluster_overrides(shape: tuple[int, int, int, int]) -> list[str]:
    """Hydra overrides of a RAMP cluster shape of :data:`TRAIN_CLUSTERS` (groups, racks, servers
    per rack, largest degree), as :func:`sample_condition` writes them."""
    c, r, s, top = shape
    return [f"cluster.num_comm_groups={c}", f"cluster.num_racks_per_group={r}",
            f"cluster.num_servers_per_rack={s}", f"cluster.max_degree={top}"]


def sample_condition(rng: np.random.Generator, jobs_per_episode: int = 500, core_frac: float = 0.0,
                     scenario: str = "paper", size_spread_frac: float = 0.0,
                     spread_rng: np.random.Generator | None = None) -> list[str]:
    """Hydra overrides of one random training condition of ``scenario``'s family (``paper``:
    the original's units; ``physical``: milliseconds, block placement).

    The episode has ``jobs_per_episode`` arrivals.

    With probability ``core_frac`` the condition is a *core* one: the paper's RAMP, fixed (60 %)
    or Poisson arrivals at 0.4x-2.5x the paper's load, the paper's five graphs in 70 % of them.
    There the best rule changes sharply with the load, so the broad draw alone samples it too
    thinly. ``core_frac=0`` draws exactly what it drew before the option existed.

    With probability ``size_spread_frac`` (drawn from ``spread_rng``, so every other draw stays the
    same) a condition that is not a core one resizes each graph of its mix by a factor drawn
    log-uniformly from :data:`SIZE_SCALE_RANGE` (``workload.time_scales``). In the paper's units
    the training graphs scale perfectly with the degree and never bind memory, so a job is its
    sequential time and target, and the shipped graphs' sizes leave a gap: mixes of near-equal
    sizes (spread 0.02-0.04 in log10) or with GNMT's short jobs (0.4). Between them the best rule
    differs at the same load.
    """
    core = core_frac > 0 and rng.random() < core_frac
    if core:
        c, r, s, top = TRAIN_CLUSTERS[0]
        factor = float(np.exp(rng.uniform(math.log(CORE_FACTORS[0]), math.log(CORE_FACTORS[1]))))
    else:
        c, r, s, top = TRAIN_CLUSTERS[int(rng.choice(len(TRAIN_CLUSTERS), p=TRAIN_CLUSTER_WEIGHTS))]
        factor = float(np.exp(rng.uniform(math.log(0.25), math.log(4.0))))
    servers = c * r * s
    gap = SCENARIO_INTERARRIVAL_S[scenario] * PAPER_SERVERS / servers * factor
    jobs = jobs_per_episode
    beta = f"beta={TRAIN_BETAS[int(rng.choice(len(TRAIN_BETAS), p=TRAIN_BETA_WEIGHTS))]}"
    over = [f"scenario={scenario}", beta, *cluster_overrides((c, r, s, top)),
            f"arrivals={'poisson' if rng.random() < (0.4 if core else 0.5) else 'fixed'}",
            f"mean_interarrival_s={gap:.6g}", f"horizon_s={gap * jobs:.6g}"]
    if beta == "beta=fixed":
        over.append(f"beta.value={float(rng.choice([0.2, 0.3, 0.4, 0.5, 0.7, 1.0]))}")
    if rng.random() < (0.7 if core else 0.3):
        graphs = list(TRAIN_GRAPHS[:5])
    else:
        size = int(rng.integers(2, len(TRAIN_GRAPHS) + 1))
        graphs = sorted(rng.choice(TRAIN_GRAPHS, size=size, replace=False).tolist())
    over.append(f"workload.graphs=[{','.join(graphs)}]")
    if size_spread_frac > 0 and not core:
        if spread_rng is None:
            raise ValueError("size_spread_frac > 0 needs spread_rng")
        if spread_rng.random() < size_spread_frac:
            low, high = (math.log(x) for x in SIZE_SCALE_RANGE)
            scales = np.exp(spread_rng.uniform(low, high, size=len(graphs)))
            over.append(f"workload.time_scales=[{','.join(f'{x:.3f}' for x in scales)}]")
    return over


class ClusterConditions:
    """Random training conditions of :func:`sample_condition` on one cluster shape: the condition
    sampler of a PPO run over conditions (``pacml train ppo.random_conditions=true``, the issue's
    "PPO from scratch" ablation). The draws of :func:`sample_condition` on other clusters are
    rejected, so the conditions follow the adaptive agent's training distribution given the
    cluster: loads 0.25x-4x, fixed and Poisson arrivals, beta A-D, uniform and fixed targets, and
    mixes of the training graphs. Core conditions (0.4x-2.5x the paper's load) are drawn on the
    paper's RAMP only, so there they are about three quarters of the draws (with
    ``core_frac=0.5``), elsewhere none. A condition replaces the run's own settings except the
    cluster (its scenario family's defaults plus the condition's overrides).

    Args:
        cluster: The run's ``cluster`` config (``num_comm_groups``, ``num_racks_per_group``,
            ``num_servers_per_rack``, ``max_degree``): one of :data:`TRAIN_CLUSTERS`.
        jobs_per_episode: Arrivals of each episode.
        core_frac: Share of core conditions, as in the adaptive agent's teacher search.
        scenario: The scenario family (``paper`` or ``physical``), as :func:`sample_condition`.
    """

    def __init__(self, cluster: Any, jobs_per_episode: int = 500, core_frac: float = 0.5,
                 scenario: str = "paper") -> None:
        from simulator.errors import ConfigError

        try:
            shape = tuple(int(cluster[k]) for k in ("num_comm_groups", "num_racks_per_group",
                                                    "num_servers_per_rack", "max_degree"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"a RAMP cluster config is needed for random conditions ({exc})",
                              field="cluster") from exc
        if shape not in TRAIN_CLUSTERS:
            raise ConfigError(f"random conditions are drawn on the adaptive agent's training clusters "
                              f"{list(TRAIN_CLUSTERS)} (groups, racks, servers per rack, max degree), not {shape}",
                              field="cluster")
        if isinstance(jobs_per_episode, bool) or not (isinstance(jobs_per_episode, int) and jobs_per_episode >= 1):
            raise ConfigError(f"must be an integer >= 1, got {jobs_per_episode!r}", field="ppo.condition_jobs")
        if scenario not in SCENARIO_INTERARRIVAL_S:
            raise ConfigError(f"random conditions exist for the scenario families {sorted(SCENARIO_INTERARRIVAL_S)}, "
                              f"not {scenario!r}", field="scenario")
        self.scenario = scenario
        self.shape = shape
        self.jobs_per_episode = jobs_per_episode
        self.core_frac = core_frac
        self._cluster = cluster_overrides(shape)

    def __call__(self, rng: np.random.Generator) -> list[str]:
        """One condition's overrides (the scenario's defaults plus this cluster)."""
        while True:
            over = sample_condition(rng, self.jobs_per_episode, self.core_frac, self.scenario)
            if all(c in over for c in self._cluster):
                return over


def teacher_search(overrides: Sequence[str], seeds: Sequence[int], samples_per_episode: int = 24,
                   window: int = WINDOW, block_search: int = 0) -> dict[str, Any]:
    """Every rule of :func:`rule_candidates` on ``seeds`` of one condition.

    One simulation per seed, decided by the first rule; every rule (the first one too) runs on a
    :class:`~simulator.policies.lookahead.RolloutCluster` fed the same arrivals (they do not
    depend on decisions), as the shadow clusters do. The first rule's copy must block exactly
    what its simulation blocked, counted with the simulation's end-of-horizon accounting; if it
    ever does not, the condition is simulated rule by rule instead (:func:`teacher_search_full`).
    Both give the same numbers (``tests/test_adaptive.py``); this one costs about a quarter.
    ``block_search`` > 0: every rule places its degree as the agent with that setting does
    (:func:`start_rule`).

    Returns the rules' labels and features, their blocking rates ``(rules, seeds)`` and condition
    features sampled along the episodes (the same for every rule: they depend only on arrivals),
    estimated from the last ``window`` arrivals.
    """
    from simulator.policies.lookahead import RolloutCluster

    new_sim, topology, rules = _teacher_setup(overrides)
    blocking = np.zeros((len(rules), len(seeds)))
    end = np.zeros((len(rules), len(seeds)))
    conds: list[NDArray[np.float32]] = []
    horizon_s = None
    for j, seed in enumerate(seeds):
        sim = new_sim(int(seed))
        horizon_s = sim.horizon_s
        tracker = ConditionTracker(window)
        copies: list[RolloutCluster] = []
        blocked = np.zeros(len(rules), dtype=np.int64)
        while (job := sim.next_job()) is not None:
            state = sim.state()
            if not copies:
                copies = [RolloutCluster(state.feasibility.engine) for _ in rules]
            tracker.observe(job)
            conds.append(tracker.features(topology))
            for i, rule in enumerate(rules):
                blocked[i] += not start_rule_on(copies[i], job, rule, block_search)
            sim.apply(placed_decision(state.feasibility, rules[0].degree(state), block_search))
        summary = sim.finalize().summary
        if sim.accounting == "paper" and sim.horizon_s is not None:  # running at the horizon counts as blocked
            at_end = np.array([c.running_after(sim.horizon_s) for c in copies], dtype=np.int64)
            blocked += at_end
            end[:, j] = at_end / summary["num_jobs_arrived"]
        if int(blocked[0]) != summary["num_jobs_blocked"]:
            log.warning("teacher search: the rollout copy of %s blocked %d jobs, its simulation %d (%s, seed %d);"
                        " simulating every rule", rules[0].label, blocked[0], summary["num_jobs_blocked"],
                        " ".join(overrides), seed)
            return teacher_search_full(overrides, seeds, samples_per_episode, window, block_search)
        blocking[:, j] = blocked / summary["num_jobs_arrived"]
    return _teacher_result(overrides, seeds, rules, topology, blocking, conds, samples_per_episode, end, horizon_s)


def teacher_search_full(overrides: Sequence[str], seeds: Sequence[int], samples_per_episode: int = 24,
                        window: int = WINDOW, block_search: int = 0) -> dict[str, Any]:
    """:func:`teacher_search` by one full simulation per rule and seed (the reference; slower)."""
    new_sim, topology, rules = _teacher_setup(overrides)
    blocking = np.zeros((len(rules), len(seeds)))
    end = np.zeros((len(rules), len(seeds)))
    conds: list[NDArray[np.float32]] = []
    horizon_s = None
    for j, seed in enumerate(seeds):
        for i, rule in enumerate(rules):
            tracker = ConditionTracker(window) if i == 0 else None
            sim = new_sim(int(seed))
            horizon_s = sim.horizon_s
            while (job := sim.next_job()) is not None:
                state = sim.state()
                if tracker is not None:
                    tracker.observe(job)
                    conds.append(tracker.features(topology))
                sim.apply(placed_decision(state.feasibility, rule.degree(state), block_search))
            summary = sim.finalize().summary
            blocking[i, j] = summary["blocking_rate"]
            end[i, j] = summary["blocked_by_reason"]["running_at_horizon"] / summary["num_jobs_arrived"]
    return _teacher_result(overrides, seeds, rules, topology, blocking, conds, samples_per_episode, end, horizon_s)


def oracle_rule(overrides: Sequence[str], seeds: Sequence[int], block_search: int = 0) -> dict[str, Any]:
    """The best rule of one condition on ``seeds`` (lowest mean blocking), from one
    :func:`teacher_search`: ``rule`` (its label), ``per_seed`` (its blocking per seed) and
    ``rules`` (every rule's mean). ``block_search``: the rules placed as that setting places them."""
    res = teacher_search([*overrides, "progress=false"], seeds, samples_per_episode=1, block_search=block_search)
    mean = res["blocking"].mean(axis=1)
    best = int(np.argmin(mean))
    return {"rule": res["rules"][best], "per_seed": res["blocking"][best].tolist(),
            "rules": dict(zip(res["rules"], mean.tolist(), strict=True))}


def _teacher_setup(overrides: Sequence[str]) -> tuple[Any, RampTopology, list[Rule]]:
    """A condition's simulation factory (``seed -> Simulation``, sharing one feasibility engine and
    workload), its topology and its rules."""
    from pacml.agent.env import compose_sim_config
    from simulator.build import build_feasibility, build_simulation, build_topology, build_workload

    cfg = compose_sim_config([*overrides, "progress=false"])
    topology = build_topology(cfg)
    feas = build_feasibility(topology, cfg.get("sim", {}))
    workload = build_workload(cfg)
    return (lambda seed: build_simulation(cfg, seed=seed, feasibility=feas, workload=workload),
            topology, rule_candidates(topology))


def _teacher_result(overrides: Sequence[str], seeds: Sequence[int], rules: list[Rule], topology: RampTopology,
                    blocking: NDArray[np.float64], conds: list[NDArray[np.float32]],
                    samples_per_episode: int, end: NDArray[np.float64], horizon_s: float | None) -> dict[str, Any]:
    # A stable seed (str hash() is salted per process, which made the kept samples differ by run).
    rng = np.random.default_rng(zlib.crc32("\x1f".join(overrides).encode()))
    cond = np.stack(conds)
    keep = rng.choice(len(cond), size=min(samples_per_episode * len(seeds), len(cond)), replace=False)
    return {"overrides": list(overrides), "seeds": [int(s) for s in seeds], "rules": [r.label for r in rules],
            "rule_features": np.stack([rule_features(r, topology) for r in rules]),
            "blocking": blocking, "end_blocking": end, "horizon_s": horizon_s, "conditions": cond[np.sort(keep)]}
