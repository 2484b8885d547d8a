"""The adaptive agent's rule selector: condition features, rules as actions, and the selector
(an MLP, or a nearest-neighbour lookup of the teacher search's answers) that scores each rule
for the observed condition; see docs/policies.md#the-adaptive-agent-policypacml.

Decisions run the selector in numpy (no torch at decision time).
"""

from __future__ import annotations

import io
import json
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pacml.runfiles import archive_problem
from simulator.cluster import ClusterState
from simulator.errors import ConfigError
from simulator.feasibility import FeasibilityTable
from simulator.policies.heuristics import min_feasible_degree
from simulator.topology import RampTopology
from workloads.io import atomic_write
from workloads.jobs import JobSpec

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
            float(len(self._seq) < 8),  # the estimates are still poor
        ], dtype=np.float32)]).astype(np.float32)


# ---------------------------------------------------------------------------- the selector (numpy)
@dataclass
class NeighbourTable:
    """A nearest-neighbour selector: the teacher search's own answers, looked up (k-NN).

    For a condition, the ``k`` training condition samples nearest to it (each feature in units of
    its spread over the samples; features constant there are left out), among the training
    conditions on a cluster with the same rules, vote with their conditions' measured regret per
    rule; the lowest mean regret wins. Clusters whose rule set no training condition had fall back
    to the MLP.

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
            scaling; 0 leaves a feature out). ``None``: all 1.
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
            from scipy.spatial import cKDTree  # lazy: scipy.spatial (0.2 s)

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
                x = np.maximum(x, 0.0)
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
    arrays["meta"] = np.frombuffer(json.dumps({"format": ADAPTIVE_FORMAT, "version": ADAPTIVE_VERSION,
                                               "num_layers": len(weights.layers), **meta}).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return atomic_write(path, lambda fh: fh.write(buf.getvalue()))


def load_adaptive(path: str | Path) -> tuple[SelectorWeights, dict[str, Any]]:
    """Read a checkpoint written by :func:`save_adaptive`."""
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
