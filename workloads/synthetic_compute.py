"""Seeded synthetic computation graphs for pre-training an op placer (numpy only).

Four families, ``layered``, ``chain``, ``towers`` and ``transformer``, each in an inference form
and a training form (built through :meth:`~workloads.compute_graph.ComputeGraph.from_training_graph`).
Times are for an A100-like ``gpu`` (a roofline ``max(FLOPs / 19.5e12, bytes / 1.555e12)`` for the
transformer, drawn log-uniformly per op type otherwise, +-10 % noise), clipped to
[:data:`MIN_OP_TIME_S`, :data:`MAX_OP_TIME_S`]; activations to [:data:`MIN_ACTIVATION_BYTES`,
:data:`MAX_ACTIVATION_BYTES`]; backward is :data:`BACKWARD_FACTOR` x forward; ``cpu=True`` adds
kind ``cpu``. A name (``layered_w4_d30_s7_train``) is a complete specification:
:func:`graph_from_name` builds it. Families and magnitudes in detail: docs/learned-placer.md
("Synthetic graphs").
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from workloads.compute_graph import GPU_KIND, ComputeGraph
from workloads.errors import WorkloadError
from workloads.graph import OpGraph, TrainingGraph

#: Kind name of a host CPU (as :data:`simulator.place.devices.CPU_KIND`; repeated to keep
#: ``workloads`` free of simulator imports).
CPU_KIND = "cpu"
#: Bounds of a forward op's time on the reference kind, seconds.
MIN_OP_TIME_S = 1e-5
MAX_OP_TIME_S = 2e-2
#: Bounds of an op's output activation, bytes.
MIN_ACTIVATION_BYTES = 1e4
MAX_ACTIVATION_BYTES = 1e8
#: Backward time per forward time (gradients w.r.t. inputs and weights: about one forward each).
BACKWARD_FACTOR = 2.0
#: Roofline of the reference device (A100 fp32, as ``pacml.placer.fx.importer``'s defaults).
DEVICE_FLOPS = 19.5e12
MEMORY_BANDWIDTH_BPS = 1.555e12
FAMILIES = ("layered", "chain", "towers", "transformer")

# Op types of the drawn families: (log-uniform time range s, has parameters, cpu slowdown range)
_COMPUTE = "compute"  # conv / matmul
_ELEMENTWISE = "elementwise"  # add, relu, norm, pool, concat
_CPU_SLOWDOWN = {_COMPUTE: (20.0, 60.0), _ELEMENTWISE: (4.0, 12.0)}
#: Link bandwidth the drawn activations are sized against (one RAMP transceiver, ``gpu4``).
_REFERENCE_LINK_BPS = 4e11
#: Share of compute ops a host CPU cannot run when ``cpu=True``.
_CPU_UNSUPPORTED_SHARE = 0.2


@dataclasses.dataclass
class _Builder:
    """Forward ops appended one by one; turned into a training graph at the end."""

    rng: np.random.Generator
    names: list[str] = dataclasses.field(default_factory=list)
    kinds: list[str] = dataclasses.field(default_factory=list)
    time_s: list[float] = dataclasses.field(default_factory=list)
    activation_bytes: list[float] = dataclasses.field(default_factory=list)
    parameter_bytes: list[float] = dataclasses.field(default_factory=list)
    edges: list[tuple[int, int]] = dataclasses.field(default_factory=list)

    def op(self, name: str, kind: str, time_s: float, activation_bytes: float, parameter_bytes: float,
           inputs: list[int] | tuple[int, ...] = ()) -> int:
        """Append an op fed by ``inputs``; return its index. Times get +-10 % noise, then clipping."""
        i = len(self.names)
        noise = float(self.rng.uniform(0.9, 1.1))
        self.names.append(name)
        self.kinds.append(kind)
        self.time_s.append(float(np.clip(time_s * noise, MIN_OP_TIME_S, MAX_OP_TIME_S)))
        self.activation_bytes.append(float(np.clip(activation_bytes, MIN_ACTIVATION_BYTES, MAX_ACTIVATION_BYTES)))
        self.parameter_bytes.append(float(parameter_bytes))
        for j in dict.fromkeys(inputs):  # deduplicated, in order
            self.edges.append((int(j), i))
        return i

    def drawn_op(self, name: str, kind: str, scale: dict[str, float], inputs: list[int] | tuple[int, ...] = ()) -> int:
        """An op of a drawn family: time and activation log-uniform around the graph's scale."""
        rng = self.rng
        if kind == _COMPUTE:
            time_s = scale["compute_s"] * float(np.exp(rng.uniform(-1.5, 1.5)))
            params = scale["param_bytes"] * float(np.exp(rng.uniform(-1.5, 1.5)))
        else:
            time_s = scale["elementwise_s"] * float(np.exp(rng.uniform(-1.0, 1.0)))
            params = 0.0
        act = scale["activation_bytes"] * float(np.exp(rng.uniform(-1.0, 1.0)))
        return self.op(name, kind, time_s, act, params, inputs)

    def build(self, name: str, *, training: bool, cpu: bool) -> ComputeGraph:
        """The graph: training form via :class:`TrainingGraph`, or its forward nodes alone."""
        n = len(self.names)
        fwd = np.asarray(self.time_s)
        forward = OpGraph(
            name=name, op_ids=tuple(self.names), labels=tuple(self.kinds), forward_time_s=fwd,
            backward_time_s=fwd * BACKWARD_FACTOR, activation_bytes=np.asarray(self.activation_bytes),
            parameter_bytes=np.asarray(self.parameter_bytes), edges=np.asarray(self.edges, dtype=np.int64),
            loss_index=n - 1, source=f"synthetic:{name}", time_unit_s=1.0)
        graph = ComputeGraph.from_training_graph(TrainingGraph(forward))
        if cpu:
            cpu_fwd = self._cpu_times(fwd)
            times = {GPU_KIND: graph.kind_time_s[GPU_KIND],
                     CPU_KIND: np.concatenate([cpu_fwd, cpu_fwd * BACKWARD_FACTOR])}
            graph = dataclasses.replace(graph, kind_time_s=times)
        if not training:
            graph = graph.forward_only()
        meta = dict(graph.meta)
        meta["synthetic"] = True
        return dataclasses.replace(graph, meta=meta)

    def _cpu_times(self, fwd: NDArray[np.float64]) -> NDArray[np.float64]:
        # A separate stream, so that the GPU graph of a seed is the same with and without cpu=True.
        rng = np.random.default_rng(self.rng.integers(2**63))
        kinds = np.asarray(self.kinds)
        low, high = np.array([_CPU_SLOWDOWN.get(k, _CPU_SLOWDOWN[_ELEMENTWISE]) for k in kinds]).T
        cpu = fwd * np.exp(rng.uniform(np.log(low), np.log(high)))
        unsupported = (kinds == _COMPUTE) & (rng.random(len(kinds)) < _CPU_UNSUPPORTED_SHARE)
        unsupported |= kinds == "attention"  # attention kernels: accelerator only
        cpu[unsupported] = np.inf
        return cpu


def _check_int(value: object, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not low <= value <= high:
        raise WorkloadError(f"must be an integer in [{low}, {high}], got {value!r}", field=name)
    return int(value)


def _suffix(cpu: bool, seed: int, training: bool) -> str:
    return f"{'_cpu' if cpu else ''}_s{seed}_{'train' if training else 'inf'}"


def _drawn_scale(rng: np.random.Generator, num_ops: int) -> dict[str, float]:
    """Per-graph magnitudes: typical compute-op time, element-wise time, activation, parameters.

    Parameters are scaled so that the graph's total lands log-uniformly in 0.2-15 GB whatever its
    size (a small graph of big layers, a big graph of small ones); a training graph charges them
    twice (op and mirror), so with activations the biggest total 40-60 GB and must be split on the
    40 GB accelerators of ``cpu_gpu``, not on the 80 GB ones of ``gpu4``.
    """
    total_params = float(np.exp(rng.uniform(np.log(2e8), np.log(1.5e10))))
    compute_s = float(np.exp(rng.uniform(np.log(2e-4), np.log(5e-3))))
    # Communication-to-computation ratio on a RAMP link (4e11 B/s): the shipped real graphs span
    # about 0.01-0.3, torch.fx exports 0.1-1.7; the activation total is capped at 10 GB so that
    # memory stays within reach of a 4-GPU set.
    ccr = float(np.exp(rng.uniform(np.log(0.02), np.log(1.0))))
    activation = min(ccr * compute_s * _REFERENCE_LINK_BPS, 1e10 / max(1, num_ops))
    return {
        "compute_s": compute_s,
        "elementwise_s": float(np.exp(rng.uniform(np.log(2e-5), np.log(3e-4)))),
        "activation_bytes": activation,
        "param_bytes": total_params / max(1, num_ops // 2),
    }


def layered(width: int, depth: int, *, seed: int = 0, skip: float = 0.2, training: bool = True,
            cpu: bool = False) -> ComputeGraph:
    """A random layered DAG: ``depth`` layers of 1..``width`` ops (a single input op and a single
    output op added), every op fed by 1-3 ops of the previous layer and, with probability ``skip``,
    by one op two or more layers back. Compute and element-wise ops alternate at random (60/40)."""
    width = _check_int(width, "width", 1, 64)
    depth = _check_int(depth, "depth", 1, 1000)
    seed = _check_int(seed, "seed", 0, 2**31 - 1)
    if not 0.0 <= skip <= 1.0:
        raise WorkloadError(f"must be in [0, 1], got {skip!r}", field="skip")
    rng = np.random.default_rng([1, width, depth, seed])
    b = _Builder(rng)
    scale = _drawn_scale(rng, width * depth)
    layers: list[list[int]] = [[b.drawn_op("input", _ELEMENTWISE, scale)]]
    for d in range(depth):
        size = int(rng.integers(max(1, width // 2), width + 1))
        layer = []
        for k in range(size):
            prev = layers[-1]
            inputs = list(rng.choice(prev, size=min(len(prev), int(rng.integers(1, 4))), replace=False))
            if len(layers) > 1 and rng.random() < skip:
                back = layers[int(rng.integers(0, len(layers) - 1))]
                inputs.append(int(rng.choice(back)))
            kind = _COMPUTE if rng.random() < 0.6 else _ELEMENTWISE
            layer.append(b.drawn_op(f"l{d}_{k}", kind, scale, sorted(int(i) for i in inputs)))
        # every op of the previous layer feeds someone (no dangling sinks before the output)
        fed = {s for s, t in b.edges if t in layer}
        for s in layers[-1]:
            if s not in fed:
                b.edges.append((s, int(rng.choice(layer))))
        layers.append(layer)
    b.drawn_op("output", _ELEMENTWISE, scale, layers[-1])
    return b.build(f"layered_w{width}_d{depth}{_suffix(cpu, seed, training)}", training=training, cpu=cpu)


def chain(length: int, *, seed: int = 0, training: bool = True, cpu: bool = False) -> ComputeGraph:
    """A chain of ``length`` ops: compute ops each followed by an element-wise op (an MLP)."""
    length = _check_int(length, "length", 2, 10000)
    seed = _check_int(seed, "seed", 0, 2**31 - 1)
    rng = np.random.default_rng([2, length, seed])
    b = _Builder(rng)
    scale = _drawn_scale(rng, length)
    last = b.drawn_op("input", _ELEMENTWISE, scale)
    for i in range(1, length):
        kind = _COMPUTE if i % 2 else _ELEMENTWISE
        last = b.drawn_op(f"op{i}", kind, scale, [last])
    return b.build(f"chain_n{length}{_suffix(cpu, seed, training)}", training=training, cpu=cpu)


def towers(cells: int, branches: int, *, seed: int = 0, nasnet: bool = False, training: bool = True,
           cpu: bool = False) -> ComputeGraph:
    """Inception-like cells: each cell's input fans out into ``branches`` branches of 1-3 ops
    (compute, element-wise in turn) joined by a concat; with ``nasnet`` every branch after the
    first two also reads the output of the cell before last (NASNet's two cell inputs)."""
    cells = _check_int(cells, "cells", 1, 200)
    branches = _check_int(branches, "branches", 1, 16)
    seed = _check_int(seed, "seed", 0, 2**31 - 1)
    rng = np.random.default_rng([3, cells, branches, int(nasnet), seed])
    b = _Builder(rng)
    scale = _drawn_scale(rng, cells * branches * 2)
    stem = b.drawn_op("stem", _COMPUTE, scale, [b.drawn_op("input", _ELEMENTWISE, scale)])
    before_last, last = stem, stem
    for c in range(cells):
        ends = []
        for k in range(branches):
            prev = [last, before_last] if nasnet and k >= 2 and before_last != last else [last]
            for j in range(int(rng.integers(1, 4))):
                prev = [b.drawn_op(f"c{c}_b{k}_{j}", _COMPUTE if j % 2 == 0 else _ELEMENTWISE, scale, prev)]
            ends.append(prev[0])
        before_last, last = last, b.drawn_op(f"c{c}_concat", _ELEMENTWISE, scale, ends)
    head = b.drawn_op("classifier", _COMPUTE, scale, [last])
    b.drawn_op("loss", _ELEMENTWISE, scale, [head])
    family = "nasnet" if nasnet else "towers"
    return b.build(f"{family}_c{cells}_b{branches}{_suffix(cpu, seed, training)}", training=training, cpu=cpu)


def _roofline_s(flops: float, bytes_moved: float) -> float:
    return max(flops / DEVICE_FLOPS, bytes_moved / MEMORY_BANDWIDTH_BPS)


def transformer(layers: int, heads: int, *, seed: int = 0, training: bool = True, cpu: bool = False) -> ComputeGraph:
    """``layers`` transformer blocks with ``heads`` parallel attention heads (see module
    docstring). The seed draws the hidden size (512-2048), sequence length (256-2048) and batch
    (1-8); times are fp32 roofline estimates of each op, parameters fp32 weights."""
    layers = _check_int(layers, "layers", 1, 500)
    heads = _check_int(heads, "heads", 1, 64)
    seed = _check_int(seed, "seed", 0, 2**31 - 1)
    rng = np.random.default_rng([4, layers, heads, seed])
    b = _Builder(rng)
    d = int(rng.choice([512, 768, 1024, 1536, 2048]))
    d -= d % heads
    seq = int(rng.choice([256, 512, 1024, 2048]))
    tokens = seq * int(rng.choice([1, 2, 4, 8]))
    batch = tokens // seq
    dh = d // heads
    f4 = 4.0  # bytes per fp32 element
    act = tokens * d * f4

    def linear(name: str, d_in: int, d_out: int, inputs: list[int]) -> int:
        w = d_in * d_out * f4
        return b.op(name, _COMPUTE, _roofline_s(2.0 * tokens * d_in * d_out, tokens * (d_in + d_out) * f4 + w),
                    tokens * d_out * f4, w + d_out * f4, inputs)

    def elementwise(name: str, flops_per_element: float, inputs: list[int], width: int = d) -> int:
        n = tokens * width
        return b.op(name, _ELEMENTWISE, _roofline_s(flops_per_element * n, (len(inputs) + 1) * n * f4),
                    n * f4, 0.0, inputs)

    vocab = 32000
    x = b.op("embedding", _ELEMENTWISE, _roofline_s(0.0, 2 * act), act, vocab * d * f4, [])
    for layer in range(layers):
        p = f"l{layer}"
        ctx = []
        for h in range(heads):
            q = linear(f"{p}_h{h}_q", d, dh, [x])
            k = linear(f"{p}_h{h}_k", d, dh, [x])
            v = linear(f"{p}_h{h}_v", d, dh, [x])
            scores_bytes = batch * seq * seq * f4
            score_s = _roofline_s(2.0 * batch * seq * seq * dh + 4.0 * batch * seq * seq,
                                  2 * tokens * dh * f4 + scores_bytes)
            s = b.op(f"{p}_h{h}_scores", "attention", score_s, scores_bytes, 0.0, [q, k])
            ctx_s = _roofline_s(2.0 * batch * seq * seq * dh, scores_bytes + 2 * tokens * dh * f4)
            ctx.append(b.op(f"{p}_h{h}_context", _COMPUTE, ctx_s, tokens * dh * f4, 0.0, [s, v]))
        cat = elementwise(f"{p}_concat", 0.0, ctx)
        out = linear(f"{p}_attn_out", d, d, [cat])
        res = elementwise(f"{p}_add1", 1.0, [x, out])
        ln1 = b.op(f"{p}_ln1", _ELEMENTWISE, _roofline_s(6.0 * tokens * d, 2 * act), act, 2 * d * f4, [res])
        fc1 = linear(f"{p}_fc1", d, 4 * d, [ln1])
        gelu = elementwise(f"{p}_gelu", 4.0, [fc1], width=4 * d)
        fc2 = linear(f"{p}_fc2", 4 * d, d, [gelu])
        res2 = elementwise(f"{p}_add2", 1.0, [ln1, fc2])
        x = b.op(f"{p}_ln2", _ELEMENTWISE, _roofline_s(6.0 * tokens * d, 2 * act), act, 2 * d * f4, [res2])
    logits = b.op("lm_head", _COMPUTE, _roofline_s(2.0 * tokens * d * vocab, tokens * vocab * f4),
                  tokens * vocab * f4, vocab * d * f4, [x])
    b.op("loss", _ELEMENTWISE, _roofline_s(4.0 * tokens * vocab, tokens * vocab * f4), tokens * f4, 0.0, [logits])
    return b.build(f"transformer_l{layers}_h{heads}{_suffix(cpu, seed, training)}", training=training, cpu=cpu)


_NAME = re.compile(
    r"(?P<family>layered|chain|towers|nasnet|transformer)_(?P<params>(?:[a-z]\d+_)+?)(?P<cpu>cpu_)?"
    r"s(?P<seed>\d+)_(?P<form>train|inf)")
_PARAMS: dict[str, tuple[str, ...]] = {
    "layered": ("w", "d"), "chain": ("n",), "towers": ("c", "b"), "nasnet": ("c", "b"), "transformer": ("l", "h")}


def graph_from_name(name: str) -> ComputeGraph:
    """The synthetic graph ``name`` describes (the inverse of the generators' naming), e.g.
    ``layered_w4_d30_s7_train``, ``nasnet_c6_b5_cpu_s1_inf``.

    Raises:
        WorkloadError: If ``name`` is not a synthetic graph name, or a parameter is out of range.
    """
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None:
        raise WorkloadError(f"{name!r} is not a synthetic graph name (e.g. layered_w4_d30_s7_train, "
                            f"chain_n50_cpu_s0_inf; families: {', '.join(_PARAMS)})", field="name")
    family = m["family"]
    values = dict(re.findall(r"([a-z])(\d+)_", m["params"]))
    if tuple(values) != _PARAMS[family]:
        raise WorkloadError(f"{family} takes parameters {', '.join(_PARAMS[family])}, got {name!r}", field="name")
    args = [int(v) for v in values.values()]
    kw = {"seed": int(m["seed"]), "training": m["form"] == "train", "cpu": bool(m["cpu"])}
    makers: dict[str, Callable[..., ComputeGraph]] = {
        "layered": layered, "chain": chain, "towers": towers, "transformer": transformer,
        "nasnet": lambda c, br, **k: towers(c, br, nasnet=True, **k)}
    graph = makers[family](*args, **kw)
    if graph.name != name:  # e.g. a leading zero in a number: not the canonical name
        raise WorkloadError(f"{name!r} is not canonical; the graph is named {graph.name!r}", field="name")
    return graph


def random_name(rng: np.random.Generator, *, families: tuple[str, ...] = (*FAMILIES, "nasnet"),
                seeds: tuple[int, int] = (0, 10_000), max_nodes: int = 2500) -> str:
    """Draw one synthetic graph name (family, parameters, CPU flag, seed in ``[seeds[0], seeds[1])``,
    form) from ``rng``.

    Sizes range from about 10 to about 2,000 nodes (training form: twice the forward ops);
    ``max_nodes`` (at least 50) bounds them: parameters are redrawn until an estimate of the node
    count fits (the estimate is close; the exact count is the built graph's).
    """
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 50:
        raise WorkloadError(f"must be an integer >= 50, got {max_nodes!r}", field="max_nodes")
    unknown = sorted(set(families) - set(_PARAMS))
    if unknown or not families:
        raise WorkloadError(f"unknown family {unknown[0] if unknown else '(none)'!r} "
                            f"(expected some of {', '.join(_PARAMS)})", field="families")
    while True:
        family = str(rng.choice(list(families)))
        training = bool(rng.random() < 0.6)
        cpu = bool(rng.random() < 0.4)
        seed = int(rng.integers(*seeds))
        if family == "layered":
            w, dp = int(rng.integers(2, 17)), int(rng.integers(4, 81))
            params, ops = f"w{w}_d{dp}", int(0.75 * w * dp) + 2
        elif family == "chain":
            n = int(rng.integers(10, 500))
            params, ops = f"n{n}", n
        elif family in ("towers", "nasnet"):
            c, br = int(rng.integers(2, 25)), int(rng.integers(2, 9))
            params, ops = f"c{c}_b{br}", c * (2 * br + 1) + 4
        else:
            l_, h = int(rng.integers(1, 13)), int(rng.choice([2, 4, 8, 12, 16]))
            params, ops = f"l{l_}_h{h}", l_ * (5 * h + 9) + 3
        nodes = 2 * ops if training else ops
        if nodes <= max_nodes:
            return f"{family}_{params}_{'cpu_' if cpu else ''}s{seed}_{'train' if training else 'inf'}"
