"""Sequential placement of a :class:`~pacml.placer.problem.GroupProblem`, many rollouts at once.

Groups are placed one by one; before each decision every device is priced from the partial
placement as a list scheduler would, and the policy's MLP (numpy, weights from
:meth:`pacml.placer.model.PlacerNet.scorer_weights`) scores it (docs/learned-placer.md, "How it
places"). :class:`Rollout` keeps every decision's features so the PPO update recomputes the same
logits in torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from pacml.placer.pipeline_loads import PipelineLoads, PipelinePlan
from pacml.placer.problem import NUM_DEVICE_FEATURES, GroupProblem
from pacml.placer.slots import earliest_starts, insert

#: Number of per-(decision, device) features (dynamic ones plus the device's static features).
NUM_DYNAMIC_FEATURES = 12
NUM_STEP_FEATURES = NUM_DYNAMIC_FEATURES + NUM_DEVICE_FEATURES
#: Index of the indicator of the device(s) with the earliest finish (the list-scheduling prior).
EFT_FEATURE = 3


@dataclass
class Rollout:
    """``B`` placements of one problem and everything the PPO update needs to re-score them.

    Attributes:
        group_device: ``(B, G)`` device of every group (indexed by group id).
        actions: ``(G, B)`` device chosen at each decision (decision ``k`` places ``order[k]``).
        features: ``(G, B, D, NUM_STEP_FEATURES)`` float32 features of each decision.
        mask: ``(G, B, D)`` devices allowed at each decision.
        logp: ``(G, B)`` log-probability of each choice under the rollout policy.
    """

    group_device: NDArray[np.int64]
    actions: NDArray[np.int64]
    features: NDArray[np.float32]
    mask: NDArray[np.bool_]
    logp: NDArray[np.float32]


@dataclass(frozen=True)
class ScorerWeights:
    """The policy MLP in numpy: ``logit = w3 . relu(W2 relu(static_g + x W1) + b2) + b3 + prior x_3``.

    ``static`` is the per-group part of the first layer (graph embedding and context, bias
    included), ``(G, H)`` in group-id order; ``w1`` maps the step features.
    """

    static: NDArray[np.float32]
    w1: NDArray[np.float32]
    w2: NDArray[np.float32]
    b2: NDArray[np.float32]
    w3: NDArray[np.float32]
    b3: float
    prior: float = 0.0
    insertion: bool = False
    """Earliest finish with insertion into idle gaps (HEFT's policy) instead of after the device's last group."""
    cost_outputs: bool = True
    """The prior's cost adds the transfers to consumers placed earlier to the finish time."""

    def logits(self, group: int, x: NDArray[np.float32]) -> NDArray[np.float32]:
        """``(B, D)`` logits of placing ``group`` given step features ``x`` ``(B, D, F)``."""
        z = np.maximum(x @ self.w1 + self.static[group], 0.0)
        z = np.maximum(z @ self.w2 + self.b2, 0.0)
        return z @ self.w3 + self.b3 + self.prior * x[:, :, EFT_FEATURE]


@dataclass(frozen=True)
class OneShotWeights:
    """A one-shot (GDP-style) policy's output for one problem: every group's logits over the
    devices, computed at once from the graph alone, before any device is chosen.

    ``logits`` is ``(G, D)`` in decision order (``problem.order``). Nothing depends on earlier
    choices, so memory is not masked: a placement that breaks memory is priced infeasible and
    penalised in training, as in GDP. Devices a group cannot run on are masked.
    """

    logits: NDArray[np.float32]


def _decode_oneshot(problem: GroupProblem, weights: OneShotWeights, *, batch: int, greedy: bool,
                    rng: np.random.Generator | None, keep: bool) -> Rollout:
    """:func:`decode` for a :class:`OneShotWeights` policy: every group sampled independently."""
    p, b = problem, batch
    run = p.runnable[p.order]                                               # (G, D)
    run = np.where(run.any(axis=1, keepdims=True), run, True)
    logits = np.where(run, weights.logits, -np.inf)
    logits = logits - logits.max(axis=1, keepdims=True)
    logp_all = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))  # (G, D)
    if greedy:
        actions = np.broadcast_to(logp_all.argmax(axis=1)[:, None], (p.num_groups, b)).copy()
    else:
        cdf = np.exp(logp_all).cumsum(axis=1)                               # (G, D)
        u = rng.random((p.num_groups, b, 1))
        actions = np.minimum((u * cdf[:, None, -1:] > cdf[:, None, :]).sum(axis=2), p.num_devices - 1)
        bad = ~run[np.arange(p.num_groups)[:, None], actions]
        if bad.any():  # never an excluded device, however the float sums round
            actions[bad] = np.broadcast_to(logp_all.argmax(axis=1)[:, None], actions.shape)[bad]
    group_device = np.empty((b, p.num_groups), dtype=np.int64)
    group_device[:, p.order] = actions.T
    logps = np.take_along_axis(logp_all, actions, axis=1).astype(np.float32)
    mask = np.broadcast_to(run[:, None, :], (p.num_groups, b, p.num_devices)).copy() if keep else np.zeros((0,), bool)
    return Rollout(group_device=group_device, actions=actions.astype(np.int64),
                   features=np.zeros((0,), np.float32), mask=mask, logp=logps)


def pipeline_plan(problem: GroupProblem) -> PipelinePlan:
    """The problem's :class:`PipelinePlan` (built once, cached on the problem)."""
    plan = getattr(problem, "_pipeline_plan", None)
    if plan is None:
        plan = PipelinePlan(problem.objective, problem.order)
        problem._pipeline_plan = plan  # type: ignore[attr-defined]
    return plan


def decode(problem: GroupProblem, weights: ScorerWeights | OneShotWeights, *, batch: int, greedy: bool = False,
           rng: np.random.Generator | None = None, keep: bool = True) -> Rollout:
    """Place every group ``batch`` times (sampled, or greedily: the most likely device each time).

    Args:
        problem: The task.
        weights: The policy's scorer (sequential decoder) or its one-shot logits.
        batch: Number of placements (rollouts) made together.
        greedy: Take the most likely device instead of sampling (then every rollout is equal).
        rng: Source of the samples (required unless ``greedy``).
        keep: Keep the features and masks for a PPO update (not needed for inference).
    """
    if not greedy and rng is None:
        raise ValueError("sampling needs an rng")
    if isinstance(weights, OneShotWeights):
        return _decode_oneshot(problem, weights, batch=batch, greedy=greedy, rng=rng, keep=keep)
    p = problem
    n_groups, d, b = p.num_groups, p.num_devices, batch
    rows = np.arange(b)
    dev_of = np.full((b, n_groups), -1, dtype=np.int64)
    finish = np.zeros((b, n_groups))
    avail = np.zeros((b, d))
    compute = np.zeros((b, d))
    comm = np.zeros((b, d))
    mem = np.zeros((b, d))
    count = np.zeros((b, d))
    scale = p.time_scale_s
    cap = p.capacity_bytes
    finite_cap = np.isfinite(cap)
    static_dev = np.broadcast_to(p.device_x, (b, d, NUM_DEVICE_FEATURES))
    features = np.zeros((n_groups, b, d, NUM_STEP_FEATURES), np.float32) if keep else None
    masks = np.zeros((n_groups, b, d), bool) if keep else None
    actions = np.zeros((n_groups, b), np.int64)
    logps = np.zeros((n_groups, b), np.float32)
    x = np.empty((b, d, NUM_STEP_FEATURES), np.float32)
    x[:, :, NUM_DYNAMIC_FEATURES:] = static_dev
    pipe = PipelineLoads(pipeline_plan(p), b) if p.objective.name == "pipeline" else None
    if weights.insertion:
        busy_start = np.zeros((b, d, n_groups))
        busy_end = np.zeros((b, d, n_groups))
        busy_n = np.zeros((b, d), dtype=np.int64)
    for k, grp in enumerate(p.order.tolist()):
        t = p.group_time_s[grp]
        run = p.runnable[grp]
        t_fin = np.where(run, t, 0.0)
        t_min = float(t[run].min()) if run.any() else 0.0
        unit = max(t_min, 1e-3 * scale, 1e-12)
        # Inputs from groups placed earlier: arrival time and transfer cost per candidate device.
        e_in = p.in_edges[grp]
        if len(e_in):
            src = p.edge_src[e_in]
            src_dev = dev_of[:, src]                                          # (B, k)
            c_in = p.edge_cost_s[e_in[None, :], src_dev, :]                   # (B, k, D)
            ready = (finish[:, src][:, :, None] + c_in).max(axis=1)           # (B, D)
            c_in_sum = c_in.sum(axis=1)
            local_in = np.zeros((b, d))
            w = p.edge_weight_s[e_in]                                          # weight of each input
            np.add.at(local_in, (np.repeat(rows, len(e_in)), src_dev.ravel()), np.tile(w, b))
            local_in /= max(float(w.sum()), 1e-30)
        else:
            ready = np.zeros((b, d))
            c_in_sum = np.zeros((b, d))
            local_in = np.zeros((b, d))
        e_out = p.out_edges[grp]
        if len(e_out):
            dst_dev = dev_of[:, p.edge_dst[e_out]]                            # (B, k2)
            c_out = p.edge_cost_s[e_out].transpose(0, 2, 1)[np.arange(len(e_out))[None, :], dst_dev, :]
            c_out_sum = c_out.sum(axis=1)
        else:
            c_out_sum = np.zeros((b, d))
        dur = np.where(run, p.first_pass_s[grp], 0.0)
        start = (earliest_starts(busy_start, busy_end, busy_n, ready, dur) if weights.insertion
                 else np.maximum(avail, ready))
        eft = start + dur
        # Outputs to consumers placed earlier (colour classes, coarsened clusters) delay them:
        # the candidate's cost counts them on top of its own finish time.
        cost = eft + c_out_sum if weights.cost_outputs else eft
        best = np.where(run, cost, np.inf).min(axis=1, keepdims=True)
        gap = np.where(run, cost - best, 0.0)
        added = c_in_sum + c_out_sum
        load_after = compute + comm + t_fin + added
        max_load = (compute + comm).max(axis=1, keepdims=True)
        mem_after = mem + p.group_memory_bytes[grp]
        fits = np.where(finite_cap, mem_after <= cap * (1 + 1e-12), True)
        x[:, :, 0] = np.log(np.where(run, t, 1.0) / max(t_min, 1e-30)).clip(0.0, 5.0) if t_min > 0 else 0.0
        x[:, :, 1] = np.log1p(gap / unit)
        x[:, :, 2] = np.minimum(gap / scale, 5.0)
        x[:, :, 3] = (gap <= 1e-12 * max(float(best.max()), 1e-30)) & run
        x[:, :, 4] = np.log1p(added / unit)
        x[:, :, 5] = np.minimum(added / scale, 5.0)
        x[:, :, 6] = np.minimum((compute + t_fin) / scale, 5.0)
        x[:, :, 7] = np.minimum(np.maximum(load_after - max_load, 0.0) / scale, 5.0)
        x[:, :, 8] = np.where(finite_cap, np.minimum(mem_after / np.where(finite_cap, cap, 1.0), 2.0), 0.0)
        x[:, :, 9] = count == 0
        x[:, :, 10] = local_in
        # Other inputs of the consumers of this group, already placed: where they are (by cost).
        e_sib = p.sibling_edges[grp]
        if len(e_sib):
            sib_dev = dev_of[:, p.edge_src[e_sib]]                            # (B, k3), -1 if not placed
            w = np.where(sib_dev >= 0, p.edge_weight_s[e_sib][None, :], 0.0)
            sib = np.zeros((b, d + 1))
            np.add.at(sib, (np.repeat(rows, len(e_sib)), np.where(sib_dev >= 0, sib_dev, d).ravel()), w.ravel())
            total = w.sum(axis=1, keepdims=True)
            x[:, :, 11] = np.where(total > 0, sib[:, :d] / np.maximum(total, 1e-30), 0.0)
        else:
            x[:, :, 11] = 0.0
        mask = run[None, :] & fits
        if pipe is not None:
            # The pipeline objective's own loads (per-node communication, none on a CPU): the
            # added communication, the device's load after, the rise of the maximum load, and
            # (in place of the earliest finish, which this objective does not price) the
            # device(s) keeping the maximum lowest.
            delta = pipe.deltas(grp, t_fin)
            after = pipe.load[:, None, :] + delta                             # (B, Dc, D)
            new_max = after.max(axis=2)
            cur_max = pipe.load.max(axis=1, keepdims=True)
            diag = np.arange(d)
            added_p = np.maximum(delta.sum(axis=2) - t_fin[None, :], 0.0)
            best_max = np.where(mask, new_max, np.inf).min(axis=1, keepdims=True)
            x[:, :, 3] = mask & (new_max <= best_max * (1 + 1e-12))
            x[:, :, 4] = np.log1p(added_p / unit)
            x[:, :, 5] = np.minimum(added_p / scale, 5.0)
            x[:, :, 6] = np.minimum(after[:, diag, diag] / scale, 5.0)
            x[:, :, 7] = np.minimum(np.maximum(new_max - cur_max, 0.0) / scale, 5.0)
        none = ~mask.any(axis=1)
        if none.any():  # nothing fits: any device able to run it (the objective will price it inf)
            mask[none] = run if run.any() else True
        logits = weights.logits(grp, x)
        logits = np.where(mask, logits, -np.inf)
        logits -= logits.max(axis=1, keepdims=True)
        logz = np.log(np.exp(logits).sum(axis=1, keepdims=True))
        logp_all = logits - logz
        if greedy:
            choice = logp_all.argmax(axis=1)
        else:
            u = rng.random((b, 1))
            cdf = np.exp(logp_all).cumsum(axis=1)
            choice = np.minimum((u * cdf[:, -1:] > cdf).sum(axis=1), d - 1)
            # Never an excluded device, however the float sums round.
            bad = ~mask[rows, choice]
            if bad.any():
                choice[bad] = logp_all[bad].argmax(axis=1)
        if keep:
            features[k] = x
            masks[k] = mask
        actions[k] = choice
        logps[k] = logp_all[rows, choice]
        # Commit.
        if pipe is not None:
            pipe.commit(grp, choice)
        dev_of[:, grp] = choice
        fin = eft[rows, choice]
        finish[:, grp] = fin
        if weights.insertion:
            insert(busy_start, busy_end, busy_n, choice, start[rows, choice], fin)
        else:
            avail[rows, choice] = fin
        compute[rows, choice] += t_fin[choice]
        mem[rows, choice] += p.group_memory_bytes[grp]
        count[rows, choice] += 1
        if len(e_in):
            c_chosen = c_in[rows, :, choice]                                 # (B, k)
            comm[rows, choice] += c_chosen.sum(axis=1)
            np.add.at(comm, (np.repeat(rows, len(e_in)), src_dev.ravel()), c_chosen.ravel())
        if len(e_out):
            c_chosen = c_out[rows, :, choice]
            comm[rows, choice] += c_chosen.sum(axis=1)
            np.add.at(comm, (np.repeat(rows, len(e_out)), dst_dev.ravel()), c_chosen.ravel())
    return Rollout(group_device=dev_of, actions=actions,
                   features=features if keep else np.zeros((0,), np.float32),
                   mask=masks if keep else np.zeros((0,), bool), logp=logps)
