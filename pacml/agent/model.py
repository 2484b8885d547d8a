"""The GNN actor-critic: a PyG graph encoder, a global-feature MLP, and a per-action scorer
(docs/policies.md, "Model").

The graph embedding depends only on the graph, so callers compute it once per distinct graph.
Each action is scored by one shared MLP over the trunk and that action's features (what the
degree would do, not its index); invalid actions get ``-1e9`` logits.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GINEConv, global_max_pool, global_mean_pool

from pacml.agent.features import (
    ACTION_FEATURES,
    EDGE_FEATURES,
    GLOBAL_FEATURES,
    NODE_FEATURES,
    GraphFeatures,
)

MASKED_LOGIT = -1e9


def graph_data(feats: GraphFeatures) -> Data:
    """A PyG ``Data`` for one job graph (features as float32 tensors)."""
    return Data(x=torch.from_numpy(feats.nodes.copy()), edge_index=torch.from_numpy(feats.edge_index.copy()),
                edge_attr=torch.from_numpy(feats.edges.copy()))


class GraphEncoder(nn.Module):
    """GINE message passing over a job DAG in both directions (``num_layers`` rounds), with
    mean+max readout: graph embeddings ``(num_graphs, 2 * hidden_channels)``."""

    def __init__(self, in_channels: int = NODE_FEATURES, edge_channels: int = EDGE_FEATURES,
                 hidden_channels: int = 64, num_layers: int = 3) -> None:
        super().__init__()
        self.node_in = nn.Sequential(nn.Linear(in_channels, hidden_channels), nn.ReLU())
        self.edge_in = nn.Linear(edge_channels + 1, hidden_channels)
        self.convs = nn.ModuleList(
            GINEConv(nn.Sequential(nn.Linear(hidden_channels, hidden_channels), nn.ReLU(),
                                   nn.Linear(hidden_channels, hidden_channels)), train_eps=True)
            for _ in range(num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden_channels) for _ in range(num_layers))
        self.out_channels = 2 * hidden_channels

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, batch: Tensor) -> Tensor:
        """Embed every graph of a batch."""
        num_edges = edge_index.shape[1]
        both = torch.cat([edge_index, edge_index.flip(0)], dim=1)
        direction = torch.cat([torch.zeros(num_edges, 1), torch.ones(num_edges, 1)]).to(edge_attr)
        e = self.edge_in(torch.cat([edge_attr.repeat(2, 1), direction], dim=1))
        h = self.node_in(x)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            h = h + torch.relu(norm(conv(h, both, e)))
        return torch.cat([global_mean_pool(h, batch), global_max_pool(h, batch)], dim=1)


class ActorCritic(nn.Module):
    """Masked policy logits and a value from (graph embedding, globals, action features).

    ``forward(graph_emb (B, 2H), globals (B, G), actions (B, A, F), mask (B, A))`` returns
    logits ``(B, A)`` and values ``(B,)``.
    """

    def __init__(self, hidden_channels: int = 64, num_layers: int = 3, global_features: int = GLOBAL_FEATURES,
                 action_features: int = ACTION_FEATURES) -> None:
        super().__init__()
        self.config = {"hidden_channels": hidden_channels, "num_layers": num_layers,
                       "global_features": global_features, "action_features": action_features}
        h = hidden_channels
        self.encoder = GraphEncoder(hidden_channels=h, num_layers=num_layers)
        self.globals_mlp = nn.Sequential(nn.Linear(global_features, h), nn.ReLU())
        self.trunk = nn.Sequential(nn.Linear(self.encoder.out_channels + h, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
        self.actor = nn.Sequential(nn.Linear(h + action_features, h), nn.ReLU(), nn.Linear(h, 1))
        self.critic = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))
        # Small initial actor output: a near-uniform policy over valid actions to start with.
        nn.init.orthogonal_(self.actor[-1].weight, gain=0.01)
        nn.init.zeros_(self.actor[-1].bias)

    def embed(self, graphs: list[Data]) -> Tensor:
        """Embeddings of distinct graphs, ``(len(graphs), 2H)``."""
        batch = Batch.from_data_list(graphs)
        return self.encoder(batch.x, batch.edge_index, batch.edge_attr, batch.batch)

    def forward(self, graph_emb: Tensor, globals_: Tensor, actions: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Masked logits and values."""
        z = self.trunk(torch.cat([graph_emb, self.globals_mlp(globals_)], dim=1))
        num_actions = actions.shape[1]
        per_action = torch.cat([z.unsqueeze(1).expand(-1, num_actions, -1), actions], dim=2)
        logits = self.actor(per_action).squeeze(-1)
        logits = logits.masked_fill(~mask, MASKED_LOGIT)
        return logits, self.critic(z).squeeze(-1)
