"""Bring your own model: turn a PyTorch ``nn.Module`` into a profiled :class:`OpGraph`.

The module is traced with ``torch.fx`` (into every module without a cost rule) and its example
inputs are pushed through ``ShapeProp`` for shapes and dtypes. One op per kept fx node, in fx
order; edges follow fx data dependencies (plus in-place writes to later readers). Costs are for
the batch in ``example_inputs``:

* ``"estimate"``: a roofline, forward_time_s = max(FLOPs / device_flops, bytes_moved /
  memory_bandwidth_Bps), backward = ``backward_factor`` x forward (defaults: A100 40 GB, fp32);
* ``"profile"``: each node timed on this host's CPU by a ``torch.fx.Interpreter``.

Tracing, graph, FLOP rules and profiling in detail: docs/workloads.md ("torch.fx import: the
rules"). Untraceable models raise a :class:`WorkloadError` naming torch.fx.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import logging
import math
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn
from torch.fx import GraphModule, Interpreter, Node
from torch.fx._symbolic_trace import _assert_is_none
from torch.fx.node import map_aggregate
from torch.fx.passes.shape_prop import ShapeProp, TensorMetadata, _extract_tensor_metadata

from workloads.errors import WorkloadError
from workloads.graph import OpGraph
from workloads.json_format import write_json_graph

logger = logging.getLogger(__name__)

A100_FP32_FLOPS = 19.5e12
"""Default ``device_flops``: A100 dense fp32 (non-tensor-core) peak, FLOP/s."""
A100_MEMORY_BANDWIDTH_BPS = 1.555e12
"""Default ``memory_bandwidth_Bps``: A100 40 GB HBM2 bandwidth, bytes/s."""

_KEPT_KINDS = ("placeholder", "call_module", "call_function", "call_method")
_COMPUTE_KINDS = ("call_module", "call_function", "call_method")

# FLOPs per output element of elementwise ops, by normalised name (see _op_name).
_CHEAP_ELEMENTWISE = frozenset({
    "add", "sub", "mul", "div", "truediv", "floordiv", "mod", "neg", "abs", "pow", "sqrt",
    "rsqrt", "square", "reciprocal", "relu", "relu6", "leaky_relu", "hardtanh", "clamp", "clip",
    "threshold", "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
    "feature_alpha_dropout", "hardsigmoid", "hardswish", "prelu", "rrelu", "where", "maximum",
    "minimum", "masked_fill", "lt", "le", "gt", "ge", "eq", "ne", "sign", "floor", "ceil", "round",
})
_TRANSCENDENTAL = frozenset({
    "sigmoid", "tanh", "gelu", "silu", "mish", "elu", "selu", "celu", "softplus", "softsign",
    "logsigmoid", "tanhshrink", "softmax", "log_softmax", "softmin", "exp", "log", "log1p",
    "expm1", "erf", "sin", "cos",
})
_TRANSCENDENTAL_FLOPS_PER_ELEMENT = 4.0
# Activation/dropout module class names, lower-cased, match these underscore-free names.
_CHEAP_MODULE_KEYS = frozenset(k.replace("_", "") for k in _CHEAP_ELEMENTWISE)
_TRANSCENDENTAL_MODULE_KEYS = frozenset(k.replace("_", "") for k in _TRANSCENDENTAL)
_REDUCTIONS = frozenset({
    "sum", "mean", "amax", "amin", "max", "min", "prod", "std", "var", "norm", "logsumexp",
    "argmax", "argmin", "any", "all",
})
_MATMULS = frozenset({"matmul", "mm", "bmm"})
_ADD_MATMULS = frozenset({"addmm", "baddbmm"})
_FUNCTIONAL_NORMS = frozenset({"batch_norm", "layer_norm", "group_norm", "instance_norm"})
_NORM_FLOPS_PER_ELEMENT = 4.0
_AFFINE_FLOPS_PER_ELEMENT = 2.0
_POOLS = frozenset({"max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d",
                    "avg_pool3d", "lp_pool1d", "lp_pool2d"})
_ADAPTIVE_POOLS = frozenset({"adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
                             "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d"})
_CONVS = frozenset({"conv1d", "conv2d", "conv3d"})
# Python's in-place operators as traced by fx (``x += y`` -> operator.iadd).
_INPLACE_OPERATORS = {"iadd": "add", "isub": "sub", "imul": "mul", "itruediv": "truediv",
                      "ifloordiv": "floordiv", "imod": "mod", "ipow": "pow"}
# Ops that only move, reshape or select data: bytes-only by design, so not worth a warning.
_DATA_MOVEMENT = frozenset({
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "permute", "transpose",
    "t", "contiguous", "getitem", "getattr", "size", "dim", "cat", "concat", "concatenate",
    "stack", "split", "chunk", "unbind", "expand", "expand_as", "unsqueeze", "squeeze",
    "narrow", "select", "index_select", "gather", "take", "embedding", "clone", "detach", "to",
    "type", "type_as", "float", "half", "double", "bfloat16", "int", "long", "bool", "repeat",
    "repeat_interleave", "tile", "roll", "flip", "pad", "movedim", "swapaxes", "swapdims",
    "zeros", "ones", "zeros_like", "ones_like", "full", "full_like", "empty", "empty_like",
    "new_zeros", "new_ones", "new_full", "new_empty", "arange", "masked_select", "identity",
})
# Longest op list a warning spells out; the rest is counted.
_WARN_LIST_MAX = 20


def graph_from_module(
    module: nn.Module,
    example_inputs: tuple[Tensor, ...] | Tensor,
    *,
    name: str | None = None,
    costs: Literal["estimate", "profile"] = "estimate",
    device_flops: float = A100_FP32_FLOPS,
    memory_bandwidth_Bps: float = A100_MEMORY_BANDWIDTH_BPS,
    bytes_per_element: int | None = None,
    backward_factor: float = 2.0,
    profile_repeats: int = 5,
) -> OpGraph:
    """Trace ``module`` with torch.fx and return its forward graph with per-op costs.

    Args:
        module: The model; it is deep-copied, never modified.
        example_inputs: Inputs for one forward call (a tensor or a tuple of positional args);
            their shapes fix every activation size and so every cost.
        name: Model name of the graph; ``None``: :func:`default_graph_name` (class name + a
            hash of the structure and input shapes).
        costs: ``"estimate"`` (FLOP/byte roofline) or ``"profile"`` (timed on this CPU).
        device_flops: Peak FLOP/s for ``"estimate"`` (default: A100 fp32, 19.5e12).
        memory_bandwidth_Bps: Memory bandwidth in bytes/s for ``"estimate"`` (default: A100,
            1.555e12).
        bytes_per_element: Override every tensor's element size (e.g. 2 to size an fp16 run
            from an fp32 model); ``None`` uses each tensor's own dtype.
        backward_factor: Backward time as a multiple of forward time (``"estimate"``, and the
            ``"profile"`` fallback).
        profile_repeats: Timed runs per node for ``"profile"`` (the median is kept).

    Returns:
        The forward :class:`OpGraph` (op order = fx node order).

    Raises:
        WorkloadError: The module cannot be traced by torch.fx, the example inputs do not run
            through it, or an argument is out of range.
    """
    _check_args(costs, device_flops, memory_bandwidth_Bps, bytes_per_element, backward_factor,
                profile_repeats)
    inputs = (example_inputs,) if isinstance(example_inputs, Tensor) else tuple(example_inputs)
    if name is None:
        name = default_graph_name(module, inputs)
    source = f"torch.fx:{type(module).__qualname__}"
    # Shape propagation (and profiling) runs the model: BatchNorm statistics and in-place ops
    # would otherwise change the caller's module and inputs.
    try:
        module = copy.deepcopy(module)
    except Exception as exc:  # e.g. a module holding a lock or an open file
        logger.warning("could not copy module %r (%s); shape propagation will run on it as is",
                       name, _first_line(exc))
    inputs = tuple(_clone(x) for x in inputs)
    gm = _trace(module, name, len(inputs))
    prop = _ShapeProp(gm)
    try:
        with torch.no_grad():
            prop.propagate(*inputs)
    except Exception as exc:  # any failure of the user's model is reported alike
        where = f" at node {prop.current.name!r}" if prop.current is not None else ""
        raise WorkloadError(
            f"module {name!r} failed on the example inputs{where}: {_first_line(exc)}"
        ) from exc

    nodes = [n for n in gm.graph.nodes if n.op in _KEPT_KINDS]
    if not nodes:
        raise WorkloadError(f"module {name!r} has no inputs or operations to turn into ops")
    index = {n: i for i, n in enumerate(nodes)}
    elem = _element_sizer(bytes_per_element)

    activation = np.array([_output_bytes(n, elem) for n in nodes], dtype=np.float64)
    params = np.array([_parameter_bytes(gm, n, elem) for n in nodes], dtype=np.float64)
    if costs == "estimate":
        forward = np.array([
            0.0 if n.op == "placeholder" else
            _roofline_s(gm, n, elem, device_flops, memory_bandwidth_Bps) for n in nodes
        ], dtype=np.float64)
        backward = forward * backward_factor
        _warn_unruled(gm, nodes, name)
    else:
        forward, backward = _profile(gm, nodes, inputs, name, backward_factor, profile_repeats)

    return OpGraph(
        name=name,
        op_ids=tuple(n.name for n in nodes),
        labels=tuple(_label(gm, n) for n in nodes),
        forward_time_s=forward,
        backward_time_s=backward,
        activation_bytes=activation,
        parameter_bytes=params,
        edges=np.array(_edges(gm, nodes, index), dtype=np.int64).reshape(-1, 2),
        loss_index=_loss_index(gm, index),
        source=source,
        time_unit_s=1.0,  # estimated and profiled costs are seconds
    )


def save_module_graph(
    module: nn.Module,
    example_inputs: tuple[Tensor, ...] | Tensor,
    path: str | Path,
    **kwargs: Any,
) -> Path:
    """Build the graph of ``module`` (:func:`graph_from_module`, given ``kwargs``) and write it
    atomically as JSON to ``path``; returns the path written."""
    graph = graph_from_module(module, example_inputs, **kwargs)
    return write_json_graph(graph, path, notes=f"built from {type(module).__qualname__} by "
                                               f"pacml.placer.fx.importer (costs={kwargs.get('costs', 'estimate')})")


# --- tracing and structure -------------------------------------------------------------


def _check_args(costs: str, device_flops: float, bandwidth_Bps: float,
                bytes_per_element: int | None, backward_factor: float, repeats: int) -> None:
    if costs not in ("estimate", "profile"):
        raise WorkloadError(f"costs must be 'estimate' or 'profile', got {costs!r}")
    for label, value in (("device_flops", device_flops), ("memory_bandwidth_Bps", bandwidth_Bps)):
        if not (math.isfinite(value) and value > 0):
            raise WorkloadError(f"{label} must be a positive number, got {value!r}")
    if bytes_per_element is not None and bytes_per_element <= 0:
        raise WorkloadError(f"bytes_per_element must be positive, got {bytes_per_element!r}")
    if not (math.isfinite(backward_factor) and backward_factor >= 0):
        raise WorkloadError(f"backward_factor must be >= 0, got {backward_factor!r}")
    if repeats < 1:
        raise WorkloadError(f"profile_repeats must be >= 1, got {repeats!r}")


def _first_line(exc: BaseException) -> str:
    """First line of the root cause: fx wraps errors in messages that embed tracebacks."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


class _ShapeProp(ShapeProp):
    """ShapeProp that names the failing node instead of printing a traceback to stderr.

    Records ``tensor_meta`` and ``type`` in each node's meta exactly as ``ShapeProp`` does.
    """

    current: Node | None = None

    def run_node(self, n: Node) -> Any:
        self.current = n
        result = Interpreter.run_node(self, n)
        found_tensor = False

        def extract(obj: Any) -> Any:
            nonlocal found_tensor
            if isinstance(obj, Tensor):
                found_tensor = True
                return _extract_tensor_metadata(obj)
            return obj

        meta = map_aggregate(result, extract)
        if found_tensor:
            n.meta["tensor_meta"] = meta
        n.meta["type"] = type(result)
        return result


def _encoder_layer_forward(layer: nn.TransformerEncoderLayer, src: Any, src_mask: Any = None,
                           src_key_padding_mask: Any = None, is_causal: bool = False) -> Any:
    """``TransformerEncoderLayer.forward`` without its fast-path checks (torch's slow path)."""
    x = src
    if layer.norm_first:
        x = x + layer._sa_block(layer.norm1(x), src_mask, src_key_padding_mask,
                                is_causal=is_causal)
        return x + layer._ff_block(layer.norm2(x))
    x = layer.norm1(x + layer._sa_block(x, src_mask, src_key_padding_mask, is_causal=is_causal))
    return layer.norm2(x + layer._ff_block(x))


def _encoder_forward(encoder: nn.TransformerEncoder, src: Any, mask: Any = None,
                     src_key_padding_mask: Any = None, is_causal: bool | None = None) -> Any:
    """``TransformerEncoder.forward`` without its fast-path and nested-tensor checks."""
    out = src
    for layer in encoder.layers:
        out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                    is_causal=bool(is_causal))
    return encoder.norm(out) if encoder.norm is not None else out


def _decoder_forward(decoder: nn.TransformerDecoder, tgt: Any, memory: Any, tgt_mask: Any = None,
                     memory_mask: Any = None, tgt_key_padding_mask: Any = None,
                     memory_key_padding_mask: Any = None, tgt_is_causal: bool | None = None,
                     memory_is_causal: bool = False) -> Any:
    """``TransformerDecoder.forward`` without its causal-mask detection."""
    out = tgt
    for layer in decoder.layers:
        out = layer(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                    tgt_key_padding_mask=tgt_key_padding_mask,
                    memory_key_padding_mask=memory_key_padding_mask,
                    tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
    return decoder.norm(out) if decoder.norm is not None else out


def _transformer_forward(model: nn.Transformer, src: Any, tgt: Any, src_mask: Any = None,
                         tgt_mask: Any = None, memory_mask: Any = None,
                         src_key_padding_mask: Any = None, tgt_key_padding_mask: Any = None,
                         memory_key_padding_mask: Any = None, src_is_causal: bool | None = None,
                         tgt_is_causal: bool | None = None,
                         memory_is_causal: bool = False) -> Any:
    """``Transformer.forward`` without its shape checks (shape propagation still runs them)."""
    memory = model.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                           is_causal=src_is_causal)
    return model.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                         tgt_key_padding_mask=tgt_key_padding_mask,
                         memory_key_padding_mask=memory_key_padding_mask,
                         tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)


# torch.nn modules whose forward cannot be symbolically traced, but whose slow path can.
_TRACEABLE_FORWARDS: dict[type, Callable[..., Any]] = {
    nn.Transformer: _transformer_forward,
    nn.TransformerEncoder: _encoder_forward,
    nn.TransformerEncoderLayer: _encoder_layer_forward,
    nn.TransformerDecoder: _decoder_forward,
}


def _is_torch_module(mod: nn.Module) -> bool:
    return type(mod).__module__.startswith("torch.nn")


# Module types with a FLOP rule of their own (:func:`_module_flops`).
_CONV_MODULES = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_CONV_T_MODULES = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
_NORM_MODULES = (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm, nn.GroupNorm, nn.LayerNorm)
_POOL_MODULES = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d, nn.LPPool1d,
                 nn.LPPool2d)
_ADAPTIVE_POOL_MODULES = (nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d, nn.AdaptiveAvgPool1d,
                          nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d)


def _has_cost_rule(mod: nn.Module) -> bool:
    """True for the module types that :func:`_module_flops` costs as one op."""
    if isinstance(mod, (nn.MultiheadAttention, nn.Linear, *_CONV_MODULES, *_CONV_T_MODULES, *_NORM_MODULES,
                        *_POOL_MODULES, *_ADAPTIVE_POOL_MODULES)):
        return True
    key = type(mod).__name__.lower()
    return key in _CHEAP_MODULE_KEYS or key in _TRANSCENDENTAL_MODULE_KEYS


class _CostTracer(torch.fx.Tracer):
    """fx tracer whose leaves are exactly the ``torch.nn`` modules with a cost rule.

    Every other module is traced into; a ``torch.nn`` module whose forward cannot be traced
    is rolled back and kept as one (rule-less) op, as the default tracer would have kept it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.opaque: set[str] = set()

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if module_qualified_name in self.opaque:
            return True
        return _is_torch_module(m) and _has_cost_rule(m)

    def call_module(self, m: nn.Module, forward: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
        override = _TRACEABLE_FORWARDS.get(type(m))
        if override is not None:
            forward = functools.partial(override, m)
        qualified = self.path_of_module(m)
        if not _is_torch_module(m) or self.is_leaf_module(m, qualified):
            return super().call_module(m, forward, args, kwargs)
        last = next(reversed(self.graph.nodes), None)
        stack, calls = dict(self.module_stack), dict(self.num_calls)
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception as exc:  # fx raises TraceError, RuntimeError, TypeError...
            logger.debug("cannot trace into %s (%s); keeping it as one op", qualified,
                         _first_line(exc))
            # Undo the partial trace: erase its nodes (users first) and its module-stack
            # entries, which Tracer.call_module does not pop when forward raises.
            doomed = []
            for node in reversed(self.graph.nodes):
                if node is last:
                    break
                doomed.append(node)
            for node in doomed:
                self.graph.erase_node(node)
            self.module_stack.clear()
            self.module_stack.update(stack)
            self.num_calls.clear()
            self.num_calls.update(calls)
            self.opaque.add(qualified)
            return super().call_module(m, forward, args, kwargs)


def _trace(module: nn.Module, name: str, num_inputs: int) -> GraphModule:
    cls = type(module)
    override = _TRACEABLE_FORWARDS.get(cls)
    concrete: dict[str, Any] | None = None
    if override is not None:
        # The tracer calls the root's class forward directly (not through call_module), so
        # the root gets a subclass with the traceable forward while it is traced; optional
        # arguments not given as example inputs keep their defaults instead of becoming
        # symbolic inputs (a symbolic is_causal cannot be tested).
        module.__class__ = type(cls.__name__, (cls,), {"forward": override})
        optional = list(inspect.signature(override).parameters.values())[1 + num_inputs:]
        concrete = {p.name: p.default for p in optional}
    tracer = _CostTracer()
    try:
        graph = tracer.trace(module, concrete_args=concrete)
    except Exception as exc:  # fx raises TraceError, TypeError, NotImplementedError...
        raise WorkloadError(
            f"module {name!r} could not be traced by torch.fx ({_first_line(exc)})"
        ) from exc
    finally:
        module.__class__ = cls
    if concrete:
        # fx still records each concrete argument as an input plus a check that it keeps its
        # default; neither is an op of the model.
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is _assert_is_none:
                graph.erase_node(node)
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for node in placeholders[num_inputs:]:
            if not node.users:
                graph.erase_node(node)
    return GraphModule(module, graph, cls.__name__)


def default_graph_name(module: nn.Module, example_inputs: tuple[Tensor, ...] | Tensor) -> str:
    """The class name + 8 hex digits of a hash of the module's structure and input shapes.

    Two variants of one class (other widths, depths or input sizes) get different names;
    the same module and inputs always get the same name (no weights or values enter it).
    """
    inputs = (example_inputs,) if isinstance(example_inputs, Tensor) else tuple(example_inputs)
    parts = [type(module).__qualname__, repr(module)]
    parts += [f"{k}:{tuple(t.shape)}:{t.dtype}" for k, t in module.state_dict().items()
              if isinstance(t, Tensor)]
    parts += [f"in:{tuple(x.shape)}:{x.dtype}" if isinstance(x, Tensor) else f"in:{x!r}"
              for x in inputs]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:8]
    return f"{type(module).__name__}-{digest}"


def _clone(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, Tensor) else value


def _attr(gm: GraphModule, target: str) -> Any:
    return functools.reduce(getattr, target.split("."), gm)


def _op_name(node: Node) -> str:
    """Normalised name of what a node runs: ``F.relu``, ``torch.relu_`` and ``.relu()`` are all ``relu``."""
    raw = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if node.op == "call_function" and raw in _INPLACE_OPERATORS:
        return _INPLACE_OPERATORS[raw]
    return raw.strip("_")


def _is_inplace(gm: GraphModule, node: Node) -> bool:
    if node.op == "call_module":
        return bool(getattr(gm.get_submodule(node.target), "inplace", False))
    raw = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if node.op == "call_function" and raw in _INPLACE_OPERATORS:
        return True
    return (raw.endswith("_") and not raw.startswith("__")) or node.kwargs.get("inplace") is True


def _label(gm: GraphModule, node: Node) -> str:
    if node.op == "placeholder":
        return f"Input({node.target})"
    if node.op == "call_module":
        return f"{type(gm.get_submodule(node.target)).__name__}({node.target})"
    if node.op == "call_method":
        return f".{node.target}()"
    return getattr(node.target, "__name__", str(node.target))


def _edges(gm: GraphModule, nodes: list[Node], index: dict[Node, int]) -> list[tuple[int, int]]:
    seen: set[tuple[int, int]] = set()
    edges: list[tuple[int, int]] = []

    def add(src: Node, dst: Node) -> None:
        pair = (index[src], index[dst])
        if pair[0] != pair[1] and pair not in seen:
            seen.add(pair)
            edges.append(pair)

    for node in nodes:
        # get_attr inputs are folded into this op, so only kept producers make edges.
        for src in node.all_input_nodes:
            if src in index:
                add(src, node)
    for node in nodes:
        if node.op in _COMPUTE_KINDS and _is_inplace(gm, node) and node.args \
                and isinstance(node.args[0], Node):
            for reader in node.args[0].users:
                if reader in index and index[reader] > index[node]:
                    add(node, reader)
    edges.sort()
    return edges


def _loss_index(gm: GraphModule, index: dict[Node, int]) -> int:
    feeding = [index[n] for out in gm.graph.nodes if out.op == "output"
               for n in out.all_input_nodes if n in index]
    return max(feeding) if feeding else len(index) - 1


# --- sizes -----------------------------------------------------------------------------


def _element_sizer(bytes_per_element: int | None) -> Callable[[torch.dtype], int]:
    if bytes_per_element is not None:
        return lambda _dtype: bytes_per_element
    return lambda dtype: dtype.itemsize


def _metas(value: Any) -> Iterator[TensorMetadata]:
    """Every TensorMetadata in a node's (possibly nested tuple/list/dict) meta."""
    if isinstance(value, TensorMetadata):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _metas(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _metas(item)


def _numel(meta: TensorMetadata) -> int:
    return math.prod(meta.shape)


def _output_bytes(node: Node, elem: Callable[[torch.dtype], int]) -> float:
    return float(sum(_numel(m) * elem(m.dtype) for m in _metas(node.meta.get("tensor_meta"))))


def _tensor_meta(arg: Any) -> TensorMetadata | None:
    """The single-tensor metadata of a node argument, if it is one."""
    meta = arg.meta.get("tensor_meta") if isinstance(arg, Node) else None
    return meta if isinstance(meta, TensorMetadata) else None


def _parameter_bytes(gm: GraphModule, node: Node, elem: Callable[[torch.dtype], int]) -> float:
    total = 0
    if node.op == "call_module":
        total += sum(p.numel() * elem(p.dtype) for p in gm.get_submodule(node.target).parameters())
    for src in node.all_input_nodes:
        if src.op == "get_attr":
            value = _attr(gm, src.target)
            if isinstance(value, nn.Parameter):
                total += value.numel() * elem(value.dtype)
    return float(total)


# --- roofline estimate -----------------------------------------------------------------


def _roofline_s(gm: GraphModule, node: Node, elem: Callable[[torch.dtype], int],
                device_flops: float, bandwidth_Bps: float) -> float:
    moved = _output_bytes(node, elem) + sum(_output_bytes(src, elem) for src in node.all_input_nodes)
    if node.op == "call_module":
        sub = gm.get_submodule(node.target)
        moved += sum(t.numel() * elem(t.dtype) for t in (*sub.parameters(), *sub.buffers()))
    return max((_flops(gm, node) or 0.0) / device_flops, moved / bandwidth_Bps)


def _warn_unruled(gm: GraphModule, nodes: list[Node], name: str) -> None:
    """One warning listing the compute ops that no FLOP rule covers (costed by bytes only)."""
    unruled = [f"{n.name} ({_label(gm, n)})" for n in nodes if n.op in _COMPUTE_KINDS
               and _flops(gm, n) is None
               and (n.op == "call_module" or _op_name(n) not in _DATA_MOVEMENT)]
    if unruled:
        shown = ", ".join(unruled[:_WARN_LIST_MAX])
        more = f" and {len(unruled) - _WARN_LIST_MAX} more" if len(unruled) > _WARN_LIST_MAX else ""
        logger.warning("graph %r: %d op(s) match no FLOP rule and are costed by bytes moved "
                       "only (their times are lower bounds): %s%s", name, len(unruled), shown,
                       more)


def _arg(node: Node, position: int, keyword: str) -> Any:
    if len(node.args) > position:
        return node.args[position]
    return node.kwargs.get(keyword)


def _kernel_elements(kernel: Any, spatial_dims: int) -> int:
    if isinstance(kernel, int):
        return kernel ** max(spatial_dims, 1)
    return math.prod(kernel)


def _flops(gm: GraphModule, node: Node) -> float | None:
    """Forward FLOPs of one node by the formulas of the module docstring.

    ``None`` when no rule covers the node (it is then costed by bytes only, like a 0).
    """
    metas = list(_metas(node.meta.get("tensor_meta")))
    if not metas:
        return 0.0
    n_out = float(sum(_numel(m) for m in metas))
    first = _tensor_meta(node.args[0]) if node.args else None
    n_in = float(_numel(first)) if first is not None else 0.0
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        if isinstance(mod, nn.MultiheadAttention):
            return _attention_flops(mod, node)
        return _module_flops(mod, n_out, n_in, metas[0])
    name = _op_name(node)
    if name == "linear" or name in _CONVS:
        weight = _tensor_meta(_arg(node, 1, "weight"))
        if weight is None:
            return 0.0
        has_bias = _arg(node, 2, "bias") is not None
        # linear: weight (out, in); conv: weight (C_out, C_in/groups, *kernel).
        return 2.0 * n_out * math.prod(weight.shape[1:]) + (n_out if has_bias else 0.0)
    if name in _MATMULS or name in _ADD_MATMULS:
        a = first if name in _MATMULS else _tensor_meta(_arg(node, 1, "mat1" if name == "addmm" else "batch1"))
        if a is None or not a.shape:
            return 0.0
        return 2.0 * n_out * a.shape[-1] + (n_out if name in _ADD_MATMULS else 0.0)
    if name in _FUNCTIONAL_NORMS:
        return (_NORM_FLOPS_PER_ELEMENT + _AFFINE_FLOPS_PER_ELEMENT) * n_out
    if name in _POOLS:
        kernel = _arg(node, 1, "kernel_size")
        return n_out * _kernel_elements(kernel, len(metas[0].shape) - 2) if kernel is not None else 0.0
    if name in _ADAPTIVE_POOLS or name in _REDUCTIONS:
        return n_in
    if name in _CHEAP_ELEMENTWISE:
        return n_out
    if name in _TRANSCENDENTAL:
        return _TRANSCENDENTAL_FLOPS_PER_ELEMENT * n_out
    return None


def _attention_flops(mod: nn.MultiheadAttention, node: Node) -> float | None:
    """FLOPs of ``nn.MultiheadAttention`` (see the module docstring)."""
    query = _tensor_meta(_arg(node, 0, "query"))
    key = _tensor_meta(_arg(node, 1, "key"))
    if query is None or key is None or len(query.shape) not in (2, 3):
        return None
    if len(query.shape) == 2:  # unbatched (L, E)
        batch, q_len, kv_len = 1, query.shape[0], key.shape[0]
    elif mod.batch_first:  # (N, L, E)
        batch, q_len, kv_len = query.shape[0], query.shape[1], key.shape[1]
    else:  # (L, N, E)
        batch, q_len, kv_len = query.shape[1], query.shape[0], key.shape[0]
    embed = mod.embed_dim
    q_tokens, kv_tokens = float(batch * q_len), float(batch * kv_len)
    projections = 2.0 * embed * (q_tokens * embed + kv_tokens * mod.kdim + kv_tokens * mod.vdim
                                 + q_tokens * embed)
    if mod.in_proj_bias is not None:
        projections += embed * (q_tokens + 2.0 * kv_tokens)
    if mod.out_proj.bias is not None:
        projections += embed * q_tokens
    scores_and_sum = 2.0 * 2.0 * batch * q_len * kv_len * embed
    softmax = _TRANSCENDENTAL_FLOPS_PER_ELEMENT * batch * mod.num_heads * q_len * kv_len
    return projections + scores_and_sum + softmax


def _module_flops(mod: nn.Module, n_out: float, n_in: float,
                  out: TensorMetadata) -> float | None:
    bias = n_out if getattr(mod, "bias", None) is not None else 0.0
    if isinstance(mod, nn.Linear):
        return 2.0 * n_out * mod.in_features + bias
    if isinstance(mod, _CONV_MODULES):
        return 2.0 * n_out * (mod.in_channels // mod.groups) * math.prod(mod.kernel_size) + bias
    if isinstance(mod, _CONV_T_MODULES):
        return 2.0 * n_in * (mod.out_channels // mod.groups) * math.prod(mod.kernel_size) + bias
    if isinstance(mod, _NORM_MODULES):
        affine = mod.elementwise_affine if isinstance(mod, nn.LayerNorm) else bool(getattr(mod, "affine", False))
        return (_NORM_FLOPS_PER_ELEMENT + (_AFFINE_FLOPS_PER_ELEMENT if affine else 0.0)) * n_out
    if isinstance(mod, _POOL_MODULES):
        return n_out * _kernel_elements(mod.kernel_size, len(out.shape) - 2)
    if isinstance(mod, _ADAPTIVE_POOL_MODULES):
        return n_in
    # Activation modules share their functional names: nn.LeakyReLU ~ leaky_relu.
    key = type(mod).__name__.lower()
    if key in _CHEAP_MODULE_KEYS:
        return n_out
    if key in _TRANSCENDENTAL_MODULE_KEYS:
        return _TRANSCENDENTAL_FLOPS_PER_ELEMENT * n_out
    return None


# --- CPU profile -----------------------------------------------------------------------


def _tensors(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


class _TimingInterpreter(Interpreter):
    """Runs the graph node by node, timing each node's forward and (isolated) backward."""

    def __init__(self, gm: GraphModule, backward_factor: float) -> None:
        super().__init__(gm)
        self.backward_factor = backward_factor
        self.forward_s: dict[Node, float] = {}
        self.backward_s: dict[Node, float] = {}
        self.current: Node | None = None

    def run_node(self, n: Node) -> Any:
        self.current = n
        if n.op not in _COMPUTE_KINDS:
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        inplace = _is_inplace(self.module, n)
        leaves: list[Tensor] = []

        def isolate(value: Any) -> Any:
            # Detach so this node's backward stops at its own inputs; an in-place op may not
            # mutate a leaf that requires grad, so it gets a (non-leaf) clone instead.
            if not isinstance(value, Tensor) or isinstance(value, nn.Parameter):
                return value
            if not (value.is_floating_point() or value.is_complex()):
                return value.detach()
            leaf = value.detach().requires_grad_()
            leaves.append(leaf)
            return leaf.clone() if inplace else leaf

        args = map_aggregate(args, isolate)
        kwargs = map_aggregate(kwargs, isolate)
        weights = [t for t in _tensors((args, kwargs)) if isinstance(t, nn.Parameter)]
        if n.op == "call_module":
            weights += list(self.module.get_submodule(n.target).parameters())
        wrt = [t for t in leaves + weights if t.requires_grad]

        start = time.perf_counter()
        out = getattr(self, n.op)(n.target, args, kwargs)
        self.forward_s[n] = time.perf_counter() - start

        outs = [t for t in _tensors(out) if t.requires_grad]
        self.backward_s[n] = 0.0
        if outs and wrt:
            grads = [torch.ones_like(t) for t in outs]
            try:
                start = time.perf_counter()
                torch.autograd.grad(outs, wrt, grads, allow_unused=True)
                self.backward_s[n] = time.perf_counter() - start
            except RuntimeError as exc:
                logger.debug("autograd failed on node %s (%s); using backward_factor", n.name,
                             _first_line(exc))
                self.backward_s[n] = self.backward_factor * self.forward_s[n]
        return out


def _profile(gm: GraphModule, nodes: list[Node], inputs: tuple[Any, ...], name: str,
             backward_factor: float, repeats: int) -> tuple[np.ndarray, np.ndarray]:
    fwd: dict[Node, list[float]] = {n: [] for n in nodes}
    bwd: dict[Node, list[float]] = {n: [] for n in nodes}
    for run in range(repeats + 1):
        interp = _TimingInterpreter(gm, backward_factor)
        try:
            with torch.enable_grad():
                interp.run(*(_clone(x) for x in inputs))
        except Exception as exc:  # any failure of the user's model is reported alike
            where = f" at node {interp.current.name!r}" if interp.current is not None else ""
            raise WorkloadError(f"profiling module {name!r} failed{where}: "
                                f"{_first_line(exc)}") from exc
        if run == 0:
            continue  # warm-up: allocator, kernel selection and lazy init
        for n in nodes:
            fwd[n].append(interp.forward_s.get(n, 0.0))
            bwd[n].append(interp.backward_s.get(n, 0.0))
    forward = np.array([statistics.median(fwd[n]) for n in nodes], dtype=np.float64)
    backward = np.array([statistics.median(bwd[n]) for n in nodes], dtype=np.float64)
    return forward, backward

