"""The learned placer's network: a GNN over the group graph and a per-device scorer (PyG).

Encoder: static group features, then ``layers`` rounds of GraphSAGE mean aggregation from
predecessors and successors (summed, residual), mean and max pooled as the graph context.
Scorer: an MLP on ``[group embedding, context, device step features]`` plus ``prior`` x the
earliest-finish indicator; its first layer splits into a per-group and a per-device part.
``use_edges=False`` drops the message passing; ``decoder="oneshot"`` is GDP's design. See
docs/learned-placer.md ("How it places").
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from pacml.placer.decode import EFT_FEATURE, NUM_STEP_FEATURES, OneShotWeights, ScorerWeights
from pacml.placer.problem import NUM_DEVICE_FEATURES, NUM_GROUP_FEATURES, GroupProblem
from pacml.placer.settings import DECODERS, NetConfig
from simulator.errors import ConfigError


class PlacerNet(nn.Module):
    """GNN encoder + device scorer (see module docstring)."""

    def __init__(self, config: NetConfig = NetConfig()) -> None:  # noqa: B008 - frozen dataclass
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
        if config.decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, got {config.decoder!r}")
        if config.decoder == "oneshot":
            if h % config.heads:
                raise ValueError(f"hidden ({h}) must be a multiple of heads ({config.heads})")
            # GDP: attention over the op sequence, then a per-(group, device) scorer. Devices enter
            # by their features and their slot (index in the set): without the slot, equal devices
            # would get equal logits for every group and work could never be split between them.
            self.attend = nn.TransformerEncoderLayer(h, config.heads, dim_feedforward=2 * h, dropout=0.0,
                                                     batch_first=True)
            self.device_in = nn.Linear(NUM_DEVICE_FEATURES, h)
            self.slot = nn.Embedding(config.max_devices, h)

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

    def oneshot_logits(self, problem: GroupProblem) -> Tensor:
        """``(G, D)`` logits of every group (in ``problem.order``) on every device, at once."""
        static = self.static_part(*problem_tensors(problem))
        seq = static[torch.from_numpy(problem.order)] + _positions(problem.num_groups, static.shape[1])
        seq = self.attend(seq.unsqueeze(0))[0]                                           # (G, hidden)
        d = problem.num_devices
        if d > self.config.max_devices:
            raise ConfigError(f"this one-shot placer has {self.config.max_devices} device slots; the device set has {d} "
                              "devices", field="devices")
        dev = self.device_in(torch.from_numpy(problem.device_x)) + self.slot(torch.arange(d))  # (D, hidden)
        z = torch.relu(seq.unsqueeze(1) + dev.unsqueeze(0))
        return self.out(torch.relu(self.hidden(z))).squeeze(-1)

    def scorer_weights(self, problem: GroupProblem) -> ScorerWeights | OneShotWeights:
        """The numpy scorer for ``problem`` (no gradients); the one-shot decoder's logits."""
        if self.config.decoder == "oneshot":
            with torch.no_grad():
                return OneShotWeights(logits=self.oneshot_logits(problem).numpy().astype(np.float32))
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


def _positions(n: int, width: int) -> Tensor:
    """Sinusoidal encodings ``(n, width)`` of positions 0..n-1 in the placement order (as a
    Transformer's): they tell equal groups apart, which a one-shot policy needs to split them."""
    pos = torch.arange(n, dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    out = torch.zeros(n, width)
    out[:, 0::2] = torch.sin(pos * freq)
    out[:, 1::2] = torch.cos(pos * freq[: width // 2])
    return out


def problem_tensors(problem: GroupProblem) -> tuple[Tensor, Tensor]:
    """``(group features, edge index)`` of ``problem`` as tensors (cached on the problem)."""
    cached = getattr(problem, "_tensors", None)
    if cached is None:
        cached = (torch.from_numpy(problem.group_x), torch.from_numpy(problem.edge_index()))
        problem._tensors = cached  # type: ignore[attr-defined]
    return cached
