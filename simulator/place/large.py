"""Big computation graphs (10,000-100,000 ops) for op placement at scale, built in seconds (numpy only).

``<pipedream model>_x<k>``, ``<pipedream model>_stack<L>`` and ``transformer<L>``, loadable by
name (:func:`big_graph`); see docs/op-placement.md ("Big graphs").
"""

from __future__ import annotations

import re

import numpy as np

from simulator.partition import Partitioner
from workloads.compute_graph import GPU_KIND, ComputeGraph
from workloads.errors import WorkloadError
from workloads.graph import OpGraph, TrainingGraph
from workloads.loaders import PIPEDREAM_DIR, load_graph, shipped_models

#: Physical scenario's SiP-ML quantum (``conf/scenario/physical.yaml``: 10 us).
MIN_OP_TIME_S = 1e-5
#: Heads of a ``transformer<L>`` layer.
TRANSFORMER_HEADS = 16
#: Model width, tokens per step and bytes per element of a ``transformer<L>`` layer.
TRANSFORMER_D_MODEL, TRANSFORMER_TOKENS, BYTES_PER_ELEMENT = 1024, 4096, 2
#: Sustained throughput that turns FLOPs into seconds (an A100 at a realistic share of peak).
GPU_FLOPS = 1.0e14

_PATTERN = re.compile(r"^(?:(?P<model>[a-z0-9_]+?)_(?:x(?P<k>\d+)|stack(?P<copies>\d+))|transformer(?P<layers>\d+))$")
#: Largest node count a named big graph may have (a typo such as ``_x16000`` fails fast).
MAX_NODES = 500_000


def _training_graph(model: str) -> TrainingGraph:
    if model not in shipped_models():
        raise WorkloadError(f"unknown PipeDream model {model!r} (shipped: {', '.join(shipped_models())})",
                            field="graph")
    return TrainingGraph(load_graph(PIPEDREAM_DIR / model / "graph.txt", time_unit_s=1e-3))


def partitioned_graph(model: str | TrainingGraph, degree: int, *, min_op_time_s: float = MIN_OP_TIME_S) -> ComputeGraph:
    """A training graph split ``degree`` ways by the cluster simulator's partitioner (module docstring)."""
    tg = _training_graph(model) if isinstance(model, str) else model
    if degree < 1:
        raise WorkloadError(f"a partition degree must be >= 1, got {degree}", field="graph")
    pg = Partitioner(min_op_time_s, "activation").partition(tg, degree)
    n_fwd_sub = int(pg.offset[tg.num_forward_ops])
    unit = tg.forward.time_unit_s
    real = ~pg.dep_is_sync
    origin = pg.sub_origin
    local = np.arange(pg.num_sub_ops) - pg.offset[origin]
    op_ids = tuple(tg.forward.op_ids) + tuple(f"{op}/backward" for op in tg.forward.op_ids)
    names = tuple(f"{op_ids[o]}#{k}" for o, k in zip(origin.tolist(), local.tolist(), strict=True))
    # Backward sub-op k of op n+j sits at n_fwd_sub + (forward sub-op k of op j): same group.
    group = np.arange(pg.num_sub_ops) % n_fwd_sub
    return ComputeGraph(
        name=f"{tg.name}_x{degree}", node_names=names, kind_time_s={GPU_KIND: pg.sub_time_s * unit},
        reference_kind=GPU_KIND, memory_bytes=pg.sub_memory_bytes, is_backward=origin >= tg.num_forward_ops,
        group=group, edges=np.stack([pg.dep_src[real], pg.dep_dst[real]], axis=1), edge_bytes=pg.dep_bytes[real],
        edge_cost_s=np.full(int(real.sum()), np.nan), source=tg.forward.source,
        meta={"forward_ops": n_fwd_sub, "partition_degree": degree})


def stack_op_graph(graph: OpGraph, copies: int, *, name: str | None = None) -> OpGraph:
    """``copies`` copies of a forward graph chained end to end: copy ``i``'s loss op feeds copy
    ``i+1``'s first source op (topologically first op without an in-edge)."""
    if copies < 1:
        raise WorkloadError(f"a stack needs >= 1 copies, got {copies}", field="graph")
    n = graph.num_ops
    has_pred = np.zeros(n, dtype=bool)
    has_pred[graph.edges[:, 1]] = True
    first = int(np.flatnonzero(~has_pred)[0])
    shift = (np.arange(copies) * n)[:, None, None]
    edges = (graph.edges[None, :, :] + shift).reshape(-1, 2)
    links = np.stack([np.arange(copies - 1) * n + graph.loss_index, np.arange(1, copies) * n + first], axis=1)
    tile = lambda a: np.tile(np.asarray(a), copies)  # noqa: E731
    return OpGraph(
        name=name or f"{graph.name}_stack{copies}",
        op_ids=tuple(f"{i}:{op}" for i in range(copies) for op in graph.op_ids),
        labels=tuple(graph.labels) * copies, forward_time_s=tile(graph.forward_time_s),
        backward_time_s=tile(graph.backward_time_s), activation_bytes=tile(graph.activation_bytes),
        parameter_bytes=tile(graph.parameter_bytes), edges=np.concatenate([edges, links]).astype(np.int64),
        loss_index=(copies - 1) * n + graph.loss_index, source=graph.source, time_unit_s=graph.time_unit_s)


def transformer_op_graph(layers: int, *, heads: int = TRANSFORMER_HEADS) -> OpGraph:
    """The forward graph of ``layers`` transformer layers, one node per head's q, k, v and attention.

    Per layer: ``ln1 -> (q_h, k_h, v_h -> attn_h) x heads -> proj -> add1 (+ residual) -> ln2 -> ff1
    -> gelu -> ff2 -> add2 (+ residual)``, ``add2`` feeding the next layer; a final ``loss`` op.
    """
    if layers < 1 or heads < 1:
        raise WorkloadError(f"a transformer needs >= 1 layers and heads, got {layers} and {heads}", field="graph")
    d, tokens, b = TRANSFORMER_D_MODEL, TRANSFORMER_TOKENS, BYTES_PER_ELEMENT
    dh = d // heads
    act = tokens * d * b  # one (tokens x d) fp16 tensor
    # (label, forward FLOPs, output bytes, parameter bytes) per op kind.
    kinds = {
        "ln": (5 * tokens * d, act, 2 * d * b), "qkv": (2 * tokens * d * dh, tokens * dh * b, d * dh * b),
        "attn": (4 * tokens * tokens * dh / 8, tokens * dh * b, 0),  # /8: tokens attend within 512-token sequences
        "proj": (2 * tokens * d * d, act, d * d * b), "add": (tokens * d, act, 0),
        "ff1": (8 * tokens * d * d, 4 * act, 4 * d * d * b), "gelu": (4 * tokens * 4 * d, 4 * act, 0),
        "ff2": (8 * tokens * d * d, act, 4 * d * d * b), "loss": (tokens * d, 4, 0)}
    labels: list[str] = []
    edges: list[tuple[int, int]] = []

    def op(kind: str, *preds: int) -> int:
        labels.append(kind)
        i = len(labels) - 1
        edges.extend((p, i) for p in preds)
        return i

    x = op("ln")  # the embedding's normalisation stands in for the input
    for _ in range(layers):
        h = op("ln", x)
        attn = []
        for _ in range(heads):
            q, k, v = op("qkv", h), op("qkv", h), op("qkv", h)
            attn.append(op("attn", q, k, v))
        add1 = op("add", x, op("proj", *attn))
        ff = op("ff2", op("gelu", op("ff1", op("ln", add1))))
        x = op("add", add1, ff)
    loss = op("loss", x)
    table = np.array([kinds[k] for k in labels], dtype=np.float64)
    fwd_s = table[:, 0] / GPU_FLOPS
    return OpGraph(
        name=f"transformer{layers}", op_ids=tuple(f"op{i}" for i in range(len(labels))), labels=tuple(labels),
        forward_time_s=fwd_s, backward_time_s=2 * fwd_s, activation_bytes=table[:, 1], parameter_bytes=table[:, 2],
        edges=np.asarray(edges, dtype=np.int64), loss_index=loss, source=f"transformer{layers}", time_unit_s=1.0)


def transformer_graph(layers: int, *, heads: int = TRANSFORMER_HEADS) -> ComputeGraph:
    """:func:`transformer_op_graph` as a training graph (forward ops and their backward mirrors)."""
    return ComputeGraph.from_training_graph(TrainingGraph(transformer_op_graph(layers, heads=heads)))


def is_big_graph_name(spec: str) -> bool:
    """Whether ``spec`` has the form of a big-graph name (``<model>_x<k>``, ``<model>_stack<L>``, ``transformer<L>``)."""
    m = _PATTERN.match(spec)
    return bool(m) and (m.group("layers") is not None or m.group("model") in shipped_models())


def big_graph(spec: str) -> ComputeGraph:
    """The big graph a name gives; a WorkloadError if it is not one or has over :data:`MAX_NODES` nodes."""
    m = _PATTERN.match(spec)
    if not m:
        raise WorkloadError(f"{spec!r} is not a big-graph name (<model>_x<k>, <model>_stack<L>, transformer<L>)",
                            field="graph")
    if m.group("layers") is not None:
        layers = int(m.group("layers"))
        if not 1 <= layers * (3 * TRANSFORMER_HEADS + TRANSFORMER_HEADS + 8) * 2 <= MAX_NODES:
            raise WorkloadError(f"transformer{layers}: layers must be in 1..{MAX_NODES // 144}", field="graph")
        return transformer_graph(layers)
    model = m.group("model")
    tg = _training_graph(model)
    if m.group("k") is not None:
        k = int(m.group("k"))
        if not 1 <= k * tg.num_ops <= MAX_NODES:
            raise WorkloadError(f"{spec}: the degree must be in 1..{MAX_NODES // tg.num_ops}", field="graph")
        return partitioned_graph(tg, k)
    copies = int(m.group("copies"))
    if not 1 <= copies * tg.num_ops <= MAX_NODES:
        raise WorkloadError(f"{spec}: the copies must be in 1..{MAX_NODES // tg.num_ops}", field="graph")
    return ComputeGraph.from_training_graph(TrainingGraph(stack_op_graph(tg.forward, copies)))
