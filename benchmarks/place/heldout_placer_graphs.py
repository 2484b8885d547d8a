"""Held-out graphs for the learned op placers: new torch.fx exports and their dnn-partitioning forms,
none of which any placer trained, validated or was developed on.

Four model classes written for this check only (a U-Net, a wide Inception-style net, a
parallel-block transformer, a mixture-of-experts MLP; branching bounded so ``method=dp`` stays
exact), traced by :func:`pacml.placer.fx.importer.graph_from_module` (``costs="estimate"``) and
written, byte-identical on every run, under ``benchmarks/data/placer_heldout/`` as
``fx/<name>.json`` (pacml JSON v2 training step) and ``dnn/<name>_<form>_<links>.json``
(dnn-partitioning format; ``train`` / ``inf``; ``fast`` / ``slow`` links). The models and link
regimes in detail: docs/experiments.md ("Held-out graphs for the learned placer").

Usage: python benchmarks/place/heldout_placer_graphs.py   (writes the files; needs torch, ~10 s)
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from workloads.compute_graph import ComputeGraph  # noqa: E402
from workloads.io import atomic_write_text  # noqa: E402

OUT = ROOT / "benchmarks" / "data" / "placer_heldout"
#: Milliseconds per byte of an edge in the format's two link regimes (the shipped files' ratios).
LINK_MS_PER_BYTE = {"fast": 1.0 / 2**31, "slow": 1e3 / 2**31}
#: Accelerators per link regime (the shipped LayerGraphs have 6, the OperatorGraphs 3).
ACCELERATORS = {"fast": 6, "slow": 3}
#: A CPU runs an op in this many times the accelerator's time (median of the LayerGraphs).
CPU_SLOWDOWN = 10.0
#: Bytes per accelerator (``maxSizePerFPGA`` of every shipped file).
ACCELERATOR_BYTES = 17185374208


@dataclass(frozen=True)
class HeldOutSpec:
    """One held-out model: its graph name, builder and example inputs (shapes fix every cost)."""

    name: str
    build: object
    inputs: object
    description: str


def _models():
    """The held-out model classes (torch is imported only when exporting)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class UNet(nn.Module):
        """A U-Net: ``depth`` levels of two 3x3 convs and a 2x2 max-pool, a bottleneck, and a
        decoder that upsamples, concatenates the level's skip and applies two 3x3 convs."""

        def __init__(self, depth: int = 3, width: int = 32, classes: int = 4) -> None:
            super().__init__()
            self.down = nn.ModuleList()
            c_in, w = 3, width
            for _ in range(depth):
                self.down.append(nn.ModuleList([nn.Conv2d(c_in, w, 3, padding=1), nn.Conv2d(w, w, 3, padding=1)]))
                c_in, w = w, 2 * w
            self.mid = nn.ModuleList([nn.Conv2d(c_in, w, 3, padding=1), nn.Conv2d(w, w, 3, padding=1)])
            self.up = nn.ModuleList()
            for _ in range(depth):
                self.up.append(nn.ModuleList([nn.Conv2d(w, w // 2, 1), nn.Conv2d(w, w // 2, 3, padding=1),
                                              nn.Conv2d(w // 2, w // 2, 3, padding=1)]))
                w //= 2
            self.head = nn.Conv2d(w, classes, 1)

        def forward(self, x):
            skips = []
            for c1, c2 in self.down:
                x = F.relu(c2(F.relu(c1(x))))
                skips.append(x)
                x = F.max_pool2d(x, 2)
            x = F.relu(self.mid[1](F.relu(self.mid[0](x))))
            for (reduce, c1, c2), skip in zip(self.up, reversed(skips), strict=True):
                x = reduce(F.interpolate(x, scale_factor=2.0, mode="nearest"))
                x = F.relu(c2(F.relu(c1(torch.cat([x, skip], dim=1)))))
            return self.head(x)

    class WideInception(nn.Module):
        """Cells of six branches (1x1; 3x3; 5x5 as two 3x3; 7x7 as 1x7 + 7x1; dilated 3x3;
        avg-pool + 1x1) concatenated, with a residual 1x1 around each cell."""

        def __init__(self, cells: int = 3, width: int = 96, classes: int = 100) -> None:
            super().__init__()
            b = width // 6
            self.stem = nn.Conv2d(3, width, 5, stride=4, padding=2)
            self.cells = nn.ModuleList(nn.ModuleDict({
                "b1": nn.Conv2d(width, b, 1), "b3": nn.Conv2d(width, b, 3, padding=1),
                "b5a": nn.Conv2d(width, b, 3, padding=1), "b5b": nn.Conv2d(b, b, 3, padding=1),
                "b7a": nn.Conv2d(width, b, (1, 7), padding=(0, 3)), "b7b": nn.Conv2d(b, b, (7, 1), padding=(3, 0)),
                "bd": nn.Conv2d(width, b, 3, padding=2, dilation=2), "bp": nn.Conv2d(width, b, 1),
                "res": nn.Conv2d(width, width, 1)}) for _ in range(cells))
            self.fc = nn.Linear(width, classes)

        def forward(self, x):
            x = F.relu(self.stem(x))
            for c in self.cells:
                y = torch.cat([F.relu(c["b1"](x)), F.relu(c["b3"](x)), F.relu(c["b5b"](F.relu(c["b5a"](x)))),
                               F.relu(c["b7b"](F.relu(c["b7a"](x)))), F.relu(c["bd"](x)),
                               F.relu(c["bp"](F.avg_pool2d(x, 3, stride=1, padding=1)))], dim=1)
                x = F.relu(y + c["res"](x))
            return self.fc(x.mean(dim=(2, 3)))

    class ParallelTransformer(nn.Module):
        """Pre-norm blocks whose attention (one branch per head) and MLP run side by side on the
        same normalised input and are summed into the residual (GPT-J / PaLM style)."""

        def __init__(self, layers: int = 3, d_model: int = 512, heads: int = 4, vocab: int = 8000,
                     seq: int = 256) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d_model)
            self.dh = d_model // heads
            self.blocks = nn.ModuleList(nn.ModuleDict({
                "ln": nn.LayerNorm(d_model),
                "q": nn.ModuleList(nn.Linear(d_model, self.dh) for _ in range(heads)),
                "k": nn.ModuleList(nn.Linear(d_model, self.dh) for _ in range(heads)),
                "v": nn.ModuleList(nn.Linear(d_model, self.dh) for _ in range(heads)),
                "o": nn.Linear(d_model, d_model), "fc1": nn.Linear(d_model, 4 * d_model),
                "fc2": nn.Linear(4 * d_model, d_model)}) for _ in range(layers))
            self.ln = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab)

        def forward(self, tokens):
            x = self.embed(tokens)
            for b in self.blocks:
                h = b["ln"](x)
                ctx = [torch.matmul(torch.softmax(torch.matmul(q(h), k(h).transpose(-2, -1)) / self.dh ** 0.5, dim=-1),
                                    v(h)) for q, k, v in zip(b["q"], b["k"], b["v"], strict=True)]
                x = x + b["o"](torch.cat(ctx, dim=-1)) + b["fc2"](F.gelu(b["fc1"](h)))
            return self.head(self.ln(x))

    class MoEMLP(nn.Module):
        """An MLP of ``layers`` mixture-of-experts layers: a softmax router and ``experts`` expert
        MLPs as parallel branches, each scaled by its gate and summed (dense gating)."""

        def __init__(self, layers: int = 3, dim: int = 1024, experts: int = 6, hidden: int = 2048,
                     classes: int = 1000) -> None:
            super().__init__()
            self.inp = nn.Linear(784, dim)
            self.layers = nn.ModuleList(nn.ModuleDict({
                "ln": nn.LayerNorm(dim), "router": nn.Linear(dim, experts),
                "up": nn.ModuleList(nn.Linear(dim, hidden) for _ in range(experts)),
                "down": nn.ModuleList(nn.Linear(hidden, dim) for _ in range(experts))}) for _ in range(layers))
            self.out = nn.Linear(dim, classes)

        def forward(self, x):
            x = self.inp(x)
            for layer in self.layers:
                h = layer["ln"](x)
                gate = torch.softmax(layer["router"](h), dim=-1)
                outs = [down(F.gelu(up(h))) * gate[:, i:i + 1]
                        for i, (up, down) in enumerate(zip(layer["up"], layer["down"], strict=True))]
                y = outs[0]
                for o in outs[1:]:
                    y = y + o
                x = x + y
            return self.out(x)

    return UNet, WideInception, ParallelTransformer, MoEMLP


def specs() -> list[HeldOutSpec]:
    """The four held-out models with their example inputs."""
    import torch

    unet, wide, par, moe = _models()
    return [
        HeldOutSpec("ho_unet_d3", lambda: unet(depth=3, width=32), lambda: (torch.empty(16, 3, 128, 128),),
                    "U-Net, 3 levels, width 32, batch 16 at 128x128"),
        HeldOutSpec("ho_wide_inception_c3", lambda: wide(cells=3, width=96), lambda: (torch.empty(32, 3, 224, 224),),
                    "Inception-style net, 3 cells of 6 branches + residual 1x1, width 96, batch 32 at 224x224"),
        HeldOutSpec("ho_partransformer_l3_d512_h2", lambda: par(layers=3, d_model=512, heads=2),
                    lambda: (torch.zeros(8, 256, dtype=torch.long),),
                    "parallel-block pre-norm transformer, 3 blocks, d=512, 2 heads as branches, batch 8 x 256"),
        HeldOutSpec("ho_moe_l3_e3", lambda: moe(layers=3, experts=3), lambda: (torch.empty(256, 784),),
                    "mixture-of-experts MLP, 3 layers of 3 dense-gated experts, d=1024, batch 256"),
    ]


def export(spec: HeldOutSpec) -> ComputeGraph:
    """Trace one held-out model on the meta device (roofline costs); its training step."""
    import torch

    from pacml.placer.fx.importer import graph_from_module
    from workloads.graph import TrainingGraph

    with torch.device("meta"):
        module = spec.build()
        inputs = spec.inputs()
    op_graph = graph_from_module(module.train(), inputs, name=spec.name, costs="estimate")
    return ComputeGraph.from_training_graph(TrainingGraph(op_graph))


def to_dnn_partitioning(graph: ComputeGraph, links: str) -> dict:
    """``graph`` as a dnn-partitioning document: accelerator time = the graph's reference kind,
    CPU time = :data:`CPU_SLOWDOWN` x that, one colour class per group, edge cost = its bytes at
    the regime's :data:`LINK_MS_PER_BYTE`."""
    acc_ms = np.asarray(graph.kind_time_s[graph.reference_kind]) * 1e3
    nodes = [{"id": i, "name": graph.node_names[i], "supportedOnFpga": True,
              "cpuLatency": float(CPU_SLOWDOWN * acc_ms[i]), "fpgaLatency": float(acc_ms[i]),
              "isBackwardNode": bool(graph.is_backward[i]), "colorClass": int(graph.group[i]),
              "size": float(graph.memory_bytes[i])} for i in range(graph.num_nodes)]
    edges = [{"sourceId": int(s), "destId": int(d), "cost": float(b * LINK_MS_PER_BYTE[links]), "size": float(b)}
             for (s, d), b in zip(graph.edges.tolist(), graph.edge_bytes.tolist(), strict=True)]
    return {"maxSizePerFPGA": ACCELERATOR_BYTES, "maxFPGAs": ACCELERATORS[links], "maxCPUs": 1,
            "nodes": nodes, "edges": edges}


def main() -> int:
    """Export every held-out model in both forms."""
    import dataclasses

    from workloads.json_format import write_compute_graph

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for spec in specs():
        graph = export(spec)
        path = write_compute_graph(graph, OUT / "fx" / f"{spec.name}.json",
                                   notes=f"{spec.description}; held-out check of issue 43 (roofline costs)")
        logging.info("%s: %d nodes, %d edges -> %s", spec.name, graph.num_nodes, graph.num_edges, path)
        for form, g in (("train", graph), ("inf", dataclasses.replace(graph.forward_only(), name=spec.name))):
            for links in LINK_MS_PER_BYTE:
                doc = to_dnn_partitioning(g, links)
                p = atomic_write_text(OUT / "dnn" / f"{spec.name}_{form}_{links}.json", json.dumps(doc, indent=1) + "\n")
                logging.info("  %s: %d nodes -> %s", form, len(doc["nodes"]), p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
