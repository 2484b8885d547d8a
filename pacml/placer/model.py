"""The learned placer's network: a GNN over the group graph and a per-device scorer (PyG).

* Encoder: the static group features, then ``layers`` rounds of message passing over the group
  DAG in both directions (a GraphSAGE mean aggregation from predecessors and one from
  successors, summed with a residual), so an embedding sees ``layers`` hops of its inputs and of
  its consumers. A mean and max pool of the embeddings is the graph's context.
* Scorer: an MLP on ``[embedding of the group, context, step features of the device]``, one
  logit per device, plus a learnable multiple (``prior``, initially 5) of the indicator of the
  device with the earliest finish (under ``pipeline``: with the lowest maximum load after the
  group is placed): untrained, the policy is a list scheduler; the softmax over
  allowed devices is the policy. The first layer splits into a
  per-group part (computed once per placement) and a per-device part (computed per decision).

``use_edges=False`` drops the message passing (features only): the ablation of graph structure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from pacml.placer.decode import EFT_FEATURE, NUM_STEP_FEATURES, ScorerWeights
from pacml.placer.problem import NUM_GROUP_FEATURES, GroupProblem


@dataclass(frozen=True)
class NetConfig:
    """Sizes of :class:`PlacerNet` (saved in checkpoints)."""

    hidden: int = 64
    layers: int = 3
    use_edges: bool = True
    prior: float = 5.0
    #: Earliest finish with insertion into idle gaps (HEFT's policy); False: after the device's last
    #: group (placers trained before 2026-12-05).
    insertion: bool = False
    #: Placement order of the groups: ``rank`` (HEFT's upward rank over the forward pass, the
    #: placers trained before 2026-12-06) or ``full_rank`` (HEFT's own: over the whole step, as
    #: HEFT schedules it; see :func:`pacml.placer.problem.GroupProblem.from_objective`).
    order: str = "rank"
    #: Whether the earliest-finish prior adds the transfers to consumers placed earlier (the
    #: backward pass's gradients, under ``rank``) to a device's finish time; ``False``: the finish
    #: time alone, as HEFT's device rule.
    cost_outputs: bool = True


class PlacerNet(nn.Module):
    """GNN encoder + device scorer (see module docstring)."""

    def __init__(self, config: NetConfig = NetConfig()) -> None:
        super().__init__()
        self.config = config
        h = config.hidden
        self.inp = nn.Sequential(nn.Linear(NUM_GROUP_FEATURES, h), nn.ReLU(), nn.Linear(h, h))
        self.fwd = nn.ModuleList(SAGEConv(h, h, aggr="mean") for _ in range(config.layers))
        self.bwd = nn.ModuleList(SAGEConv(h, h, aggr="mean") for _ in range(config.layers))
        self.norms = nn.ModuleList(nn.LayerNorm(h) for _ in range(config.layers))
        self.static = nn.Linear(3 * h, h)            # [embedding, mean pool, max pool] -> first layer
        self.step = nn.Linear(NUM_STEP_FEATURES, h, bias=False)
        self.hidden = nn.Linear(h, h)
        self.out = nn.Linear(h, 1)
        # A learnable multiple of the prior indicator (step feature 3: the earliest finish; under the
        # pipeline objective, the device keeping the maximum load lowest): an untrained
        # policy is a list scheduler (HEFT's device rule); training learns where to depart from it.
        self.prior = nn.Parameter(torch.tensor(float(config.prior)))

    def embed(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Group embeddings ``(G, hidden)`` from static features and the group graph."""
        h = self.inp(x)
        if self.config.use_edges and edge_index.shape[1]:
            rev = edge_index.flip(0)
            for fwd, bwd, norm in zip(self.fwd, self.bwd, self.norms, strict=True):
                h = norm(h + torch.relu(fwd(h, edge_index) + bwd(h, rev)))
        else:
            for fwd, bwd, norm in zip(self.fwd, self.bwd, self.norms, strict=True):
                # Same depth and parameters without neighbours: a per-group MLP.
                h = norm(h + torch.relu(fwd.lin_r(h) + bwd.lin_r(h)))
        return h

    def static_part(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """``(G, hidden)``: the per-group part of the scorer's first layer (bias included)."""
        h = self.embed(x, edge_index)
        ctx = torch.cat([h.mean(dim=0), h.max(dim=0).values]) if h.shape[0] else torch.zeros(2 * h.shape[1])
        return self.static(torch.cat([h, ctx.expand(h.shape[0], -1)], dim=1))

    def logits(self, static: Tensor, features: Tensor) -> Tensor:
        """Logits ``(..., D)`` from per-decision static rows ``(..., hidden)`` broadcast over devices and
        step features ``(..., D, F)``."""
        z = torch.relu(self.step(features) + static.unsqueeze(-2))
        z = torch.relu(self.hidden(z))
        return self.out(z).squeeze(-1) + self.prior * features[..., EFT_FEATURE]

    def scorer_weights(self, problem: GroupProblem) -> ScorerWeights:
        """The numpy scorer for ``problem`` (no gradients)."""
        with torch.no_grad():
            static = self.static_part(*problem_tensors(problem)).numpy()
            return ScorerWeights(
                static=static.astype(np.float32), w1=self.step.weight.T.numpy().copy(),
                w2=self.hidden.weight.T.numpy().copy(), b2=self.hidden.bias.numpy().copy(),
                w3=self.out.weight[0].numpy().copy(), b3=float(self.out.bias[0]), prior=float(self.prior),
                insertion=bool(self.config.insertion), cost_outputs=bool(self.config.cost_outputs))

    def config_dict(self) -> dict:
        """The constructor's config as a plain dict (for checkpoints)."""
        return asdict(self.config)


def problem_tensors(problem: GroupProblem) -> tuple[Tensor, Tensor]:
    """``(group features, edge index)`` of ``problem`` as tensors (cached on the problem)."""
    cached = getattr(problem, "_tensors", None)
    if cached is None:
        cached = (torch.from_numpy(problem.group_x), torch.from_numpy(problem.edge_index()))
        problem._tensors = cached  # type: ignore[attr-defined]
    return cached
