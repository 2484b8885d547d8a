"""PyTorch models whose torch.fx graphs join the op placer's pre-training corpus.

Each entry of :data:`MODELS` builds a model and its example inputs; :func:`export_graph` traces it
with :func:`pacml.placer.fx.importer.graph_from_module` and deterministic roofline costs (``"estimate"``: A100
fp32 FLOP/s and bandwidth; never wall-clock timing, so every machine exports the same numbers) and
returns the training step as a :class:`~workloads.compute_graph.ComputeGraph`.
``scripts/export_placement_corpus.py`` writes them to ``workloads/data/placement_corpus/`` so that
loading the corpus needs neither torch nor tracing.

Models are built on torch's ``meta`` device: shape propagation then computes shapes only (no
arithmetic, no memory), so a 10,000-op transformer exports in seconds. Attention is written out
head by head (each head a parallel branch of the graph, as a placer sees it in GDP's models) except
in ``encoder``, which uses ``nn.TransformerEncoder`` (one ``nn.MultiheadAttention`` op per layer).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pacml.placer.fx.importer import graph_from_module
from workloads.compute_graph import ComputeGraph
from workloads.graph import TrainingGraph


class _Heads(nn.Module):
    """Multi-head self- (or cross-) attention with one branch per head (q, k, v, scores, context)."""

    def __init__(self, d_model: int, heads: int, *, causal_seq: int = 0) -> None:
        super().__init__()
        self.dh = d_model // heads
        # Causal attention adds -inf above the diagonal (a constant of the sequence length).
        self.register_buffer("mask", torch.triu(torch.full((causal_seq, causal_seq), -math.inf), 1)
                             if causal_seq else None, persistent=False)
        self.q = nn.ModuleList(nn.Linear(d_model, self.dh) for _ in range(heads))
        self.k = nn.ModuleList(nn.Linear(d_model, self.dh) for _ in range(heads))
        self.v = nn.ModuleList(nn.Linear(d_model, self.dh) for _ in range(heads))
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor, memory: Tensor | None = None) -> Tensor:
        src = x if memory is None else memory
        ctx = []
        for q, k, v in zip(self.q, self.k, self.v, strict=True):
            scores = torch.matmul(q(x), k(src).transpose(-2, -1)) / math.sqrt(self.dh)
            if self.mask is not None:
                scores = scores + self.mask
            ctx.append(torch.matmul(torch.softmax(scores, dim=-1), v(src)))
        return self.out(torch.cat(ctx, dim=-1))


class _Block(nn.Module):
    """Post-norm transformer block: attention + residual + LayerNorm, MLP + residual + LayerNorm;
    a decoder block of a seq2seq model adds cross-attention to the encoder's output."""

    def __init__(self, d_model: int, heads: int, *, causal_seq: int = 0, cross: bool = False) -> None:
        super().__init__()
        self.attn = _Heads(d_model, heads, causal_seq=causal_seq)
        self.ln1 = nn.LayerNorm(d_model)
        self.cross = _Heads(d_model, heads) if cross else None
        self.ln_cross = nn.LayerNorm(d_model) if cross else None
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)

    def forward(self, x: Tensor, memory: Tensor | None = None) -> Tensor:
        x = self.ln1(x + self.attn(x))
        if self.cross is not None and self.ln_cross is not None:
            x = self.ln_cross(x + self.cross(x, memory))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class BranchCNN(nn.Module):
    """A small Inception-like CNN: a stem, ``cells`` cells of four branches (1x1; 3x3; 5x5 as two
    3x3; pool + 1x1) concatenated, global pooling and a classifier."""

    def __init__(self, cells: int = 4, width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 7, stride=2, padding=3)
        self.cells = nn.ModuleList()
        for _ in range(cells):
            self.cells.append(nn.ModuleDict({
                "b1": nn.Conv2d(width, width // 4, 1),
                "b3": nn.Conv2d(width, width // 4, 3, padding=1),
                "b5a": nn.Conv2d(width, width // 4, 3, padding=1),
                "b5b": nn.Conv2d(width // 4, width // 4, 3, padding=1),
                "bp": nn.Conv2d(width, width // 4, 1),
                "bn": nn.BatchNorm2d(width),
            }))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.stem(x))
        for c in self.cells:
            y = torch.cat([F.relu(c["b1"](x)), F.relu(c["b3"](x)), F.relu(c["b5b"](F.relu(c["b5a"](x)))),
                           F.relu(c["bp"](F.max_pool2d(x, 3, stride=1, padding=1)))], dim=1)
            x = F.relu(c["bn"](y))
        return self.fc(self.pool(x).flatten(1))


class MLPMixer(nn.Module):
    """MLP-Mixer (Tolstikhin et al., 2021): patch embedding, ``layers`` blocks of token mixing and
    channel mixing MLPs with residuals and LayerNorms, pooling, classifier."""

    def __init__(self, layers: int = 8, dim: int = 512, patches: int = 196, classes: int = 1000) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, dim, 16, stride=16)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "ln1": nn.LayerNorm(dim), "tok1": nn.Linear(patches, 4 * patches // 2),
            "tok2": nn.Linear(4 * patches // 2, patches), "ln2": nn.LayerNorm(dim),
            "ch1": nn.Linear(dim, 4 * dim), "ch2": nn.Linear(4 * dim, dim)}) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.embed(x).flatten(2).transpose(1, 2)
        for b in self.blocks:
            y = b["tok2"](F.gelu(b["tok1"](b["ln1"](x).transpose(1, 2)))).transpose(1, 2)
            x = x + y
            x = x + b["ch2"](F.gelu(b["ch1"](b["ln2"](x))))
        return self.fc(self.ln(x).mean(dim=1))


class ResNetStack(nn.Module):
    """ResNet-ish stack of ``blocks`` bottleneck blocks per stage over 3 stages (used as an unseen
    fx family: residual joins, no wide branching)."""

    def __init__(self, blocks: int = 3, width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 7, stride=2, padding=3)
        self.stages = nn.ModuleList()
        for s in range(3):
            w = width * 2 ** s
            self.stages.append(nn.ModuleList(nn.ModuleDict({
                "c1": nn.Conv2d(w, w // 4, 1), "bn1": nn.BatchNorm2d(w // 4),
                "c2": nn.Conv2d(w // 4, w // 4, 3, padding=1), "bn2": nn.BatchNorm2d(w // 4),
                "c3": nn.Conv2d(w // 4, w, 1), "bn3": nn.BatchNorm2d(w)}) for _ in range(blocks)))
            if s < 2:
                self.stages[-1].append(nn.Conv2d(w, 2 * w, 1, stride=2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width * 4, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.stem(x))
        for stage in self.stages:
            for b in stage:
                if isinstance(b, nn.Conv2d):
                    x = b(x)
                    continue
                y = F.relu(b["bn1"](b["c1"](x)))
                y = F.relu(b["bn2"](b["c2"](y)))
                x = F.relu(x + b["bn3"](b["c3"](y)))
        return self.fc(self.pool(x).flatten(1))


class Encoder(nn.Module):
    """A BERT-like encoder: token embedding, ``nn.TransformerEncoder`` of ``layers`` layers, a
    classifier over the first token."""

    def __init__(self, layers: int = 6, d_model: int = 768, heads: int = 12, vocab: int = 30522) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.fc = nn.Linear(d_model, 2)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.fc(self.encoder(self.embed(tokens))[:, 0])


class GPT(nn.Module):
    """A GPT-like decoder: token + position embeddings, ``layers`` causal blocks with one branch per
    head, a final LayerNorm and the language-model head."""

    def __init__(self, layers: int = 6, d_model: int = 768, heads: int = 12, vocab: int = 32000,
                 seq: int = 512) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(seq, d_model))
        self.blocks = nn.ModuleList(_Block(d_model, heads, causal_seq=seq) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


class Seq2Seq(nn.Module):
    """An LSTM-free seq2seq model: ``layers`` encoder blocks, ``layers`` decoder blocks with
    cross-attention to the encoder's output, a language-model head."""

    def __init__(self, layers: int = 3, d_model: int = 512, heads: int = 8, vocab: int = 32000,
                 seq: int = 256) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(vocab, d_model)
        self.tgt_embed = nn.Embedding(vocab, d_model)
        self.enc = nn.ModuleList(_Block(d_model, heads) for _ in range(layers))
        self.dec = nn.ModuleList(_Block(d_model, heads, causal_seq=seq, cross=True) for _ in range(layers))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        m = self.src_embed(src)
        for b in self.enc:
            m = b(m)
        y = self.tgt_embed(tgt)
        for b in self.dec:
            y = b(y, m)
        return self.head(y)


class ViT(nn.Module):
    """A ViT-like classifier (unseen fx family): patch embedding by a strided conv, ``layers``
    blocks with one branch per head, mean pooling, classifier."""

    def __init__(self, layers: int = 6, d_model: int = 384, heads: int = 6, classes: int = 1000) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, d_model, 16, stride=16)
        self.blocks = nn.ModuleList(_Block(d_model, heads) for _ in range(layers))
        self.fc = nn.Linear(d_model, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.embed(x).flatten(2).transpose(1, 2)
        for b in self.blocks:
            x = b(x)
        return self.fc(x.mean(dim=1))


@dataclass(frozen=True)
class ModelSpec:
    """One corpus model: how to build it and its example inputs (shapes fix every cost).

    Attributes:
        name: Graph name in the corpus (``fx_<model>_<parameters>``).
        build: Returns the module (built on the meta device by :func:`export_graph`).
        inputs: Returns the example inputs (on the meta device).
        split: ``train`` (pre-training), ``unseen`` (the "graphs nobody here has" check) or
            ``scale`` (the 10,000+ op scale test graph, in no training split).
        description: What the model is, for the corpus README.
    """

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], tuple[Tensor, ...]]
    split: str
    description: str


def _image(batch: int, size: int = 224) -> Callable[[], tuple[Tensor, ...]]:
    return lambda: (torch.empty(batch, 3, size, size),)


def _tokens(batch: int, seq: int, count: int = 1) -> Callable[[], tuple[Tensor, ...]]:
    return lambda: tuple(torch.zeros(batch, seq, dtype=torch.long) for _ in range(count))


#: The corpus models, by graph name.
MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec("fx_branch_cnn_c4", lambda: BranchCNN(cells=4, width=128), _image(32), "train",
              "Inception-like CNN, 4 cells of 4 branches, width 128, batch 32 at 224x224"),
    ModelSpec("fx_mixer_l8", lambda: MLPMixer(layers=8, dim=512), _image(64), "train",
              "MLP-Mixer, 8 blocks, 512 channels, 196 patches, batch 64"),
    ModelSpec("fx_encoder_l6", lambda: Encoder(layers=6), _tokens(16, 512), "train",
              "BERT-base-like nn.TransformerEncoder, 6 layers, d=768, 12 heads, batch 16 x 512 tokens"),
    ModelSpec("fx_gpt_l4_h8", lambda: GPT(layers=4, d_model=1024, heads=8, seq=1024), _tokens(4, 1024), "train",
              "GPT-like decoder, 4 blocks, d=1024, 8 heads as branches, batch 4 x 1024 tokens"),
    ModelSpec("fx_seq2seq_l3", lambda: Seq2Seq(layers=3), _tokens(8, 256, count=2), "train",
              "transformer seq2seq, 3 encoder + 3 decoder blocks (cross-attention), d=512, 8 heads, "
              "batch 8 x 256 tokens"),
    ModelSpec("fx_resnet_b3", lambda: ResNetStack(blocks=3), _image(64), "unseen",
              "ResNet-like, 3 stages of 3 bottleneck blocks, batch 64 at 224x224"),
    ModelSpec("fx_vit_l6_h6", lambda: ViT(layers=6), _image(64), "unseen",
              "ViT-S-like, 6 blocks, d=384, 6 heads as branches, batch 64 at 224x224"),
    ModelSpec("fx_gpt_l56_h12", lambda: GPT(layers=56, d_model=768, heads=12, seq=512), _tokens(8, 512),
              "scale", "deep GPT-like decoder, 56 blocks, d=768, 12 heads as branches, batch 8 x 512 "
              "tokens (the 10,000+ op scale test graph)"),
)}


def export_graph(spec: ModelSpec) -> ComputeGraph:
    """Trace ``spec``'s model with deterministic roofline costs; return its training step.

    Forward ops, their backward mirrors (2x forward time) and edge bytes follow
    :meth:`~workloads.compute_graph.ComputeGraph.from_training_graph`.
    """
    with torch.device("meta"):
        module = spec.build()
        inputs = spec.inputs()
    op_graph = graph_from_module(module.train(), inputs, name=spec.name, costs="estimate")
    return ComputeGraph.from_training_graph(TrainingGraph(op_graph))
