"""Bring-your-own-model import: nn.Module -> torch.fx -> OpGraph -> JSON -> simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pacml.placer.fx.importer import (
    A100_FP32_FLOPS,
    A100_MEMORY_BANDWIDTH_BPS,
    graph_from_module,
    save_module_graph,
)
from simulator.build import SimKnobs, build_feasibility
from simulator.topology import RampTopology
from workloads.errors import WorkloadError
from workloads.graph import OpGraph, TrainingGraph
from workloads.json_format import load_json_graph

F32 = 4  # bytes per fp32 element
BATCH, H, W = 2, 16, 16


class TinyNet(nn.Module):
    """conv(3->8) -> relu -> conv(8->8) + residual -> adaptive avg pool -> flatten -> linear(8->10)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu(self.conv1(x))
        y = self.conv2(h) + h
        return self.fc(self.pool(y).flatten(1))


class Branchy(nn.Module):
    """A folded parameter, an in-place op, torch.cat, view/size and a tuple output."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        self.lin = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        a = torch.relu(x) * self.scale
        b = self.lin(x)
        b.relu_()  # in-place: cat below must come after it although fx records it as a user of lin
        c = torch.cat([a, b], dim=1).view(x.size(0), -1)
        return a.sum(), c


class DataDependent(nn.Module):
    """Python control flow on tensor values: symbolic tracing cannot follow it."""

    def forward(self, x: Tensor) -> Tensor:
        if x.sum() > 0:
            return x * 2
        return x


def _tiny_graph(**kwargs: object) -> OpGraph:
    torch.manual_seed(0)
    return graph_from_module(TinyNet(), torch.randn(BATCH, 3, H, W), name="tinynet", **kwargs)


def _named_edges(graph: OpGraph) -> list[tuple[str, str]]:
    return [(graph.op_ids[s], graph.op_ids[d]) for s, d in graph.edges.tolist()]


def _by_id(graph: OpGraph, values: np.ndarray) -> dict[str, float]:
    return dict(zip(graph.op_ids, values.tolist(), strict=True))


@pytest.fixture(scope="module")
def tiny() -> OpGraph:
    """TinyNet on a (2, 3, 16, 16) input with the default (A100 roofline) estimate."""
    return _tiny_graph()


def test_structure_follows_fx_nodes(tiny: OpGraph) -> None:
    assert tiny.op_ids == ("x", "conv1", "relu", "conv2", "add", "pool", "flatten", "fc")
    assert tiny.labels == ("Input(x)", "Conv2d(conv1)", "relu", "Conv2d(conv2)", "add",
                           "AdaptiveAvgPool2d(pool)", ".flatten()", "Linear(fc)")
    assert _named_edges(tiny) == [
        ("x", "conv1"), ("conv1", "relu"), ("relu", "conv2"), ("relu", "add"),  # residual
        ("conv2", "add"), ("add", "pool"), ("pool", "flatten"), ("flatten", "fc"),
    ]
    assert tiny.op_ids[tiny.loss_index] == "fc"
    assert tiny.source == "torch.fx:TinyNet"


def test_activation_and_parameter_bytes(tiny: OpGraph) -> None:
    feature_map = BATCH * 8 * H * W * F32  # 16384
    assert _by_id(tiny, tiny.activation_bytes) == {
        "x": BATCH * 3 * H * W * F32, "conv1": feature_map, "relu": feature_map,
        "conv2": feature_map, "add": feature_map, "pool": BATCH * 8 * F32,
        "flatten": BATCH * 8 * F32, "fc": BATCH * 10 * F32,
    }
    assert _by_id(tiny, tiny.parameter_bytes) == {
        "x": 0, "conv1": (8 * 3 * 3 * 3 + 8) * F32, "relu": 0, "conv2": (8 * 8 * 3 * 3 + 8) * F32,
        "add": 0, "pool": 0, "flatten": 0, "fc": (8 * 10 + 10) * F32,
    }


def test_roofline_estimate_by_hand(tiny: OpGraph) -> None:
    fwd = _by_id(tiny, tiny.forward_time_s)
    n_conv_out = BATCH * 8 * H * W  # 4096 output elements per conv
    # Conv: 2 * N_out * (C_in / groups) * kh * kw + N_out (bias).
    conv1_flops = 2 * n_conv_out * 3 * 3 * 3 + n_conv_out  # 225_280
    conv2_flops = 2 * n_conv_out * 8 * 3 * 3 + n_conv_out  # 593_920
    # Bytes moved = input activation + parameters + output activation.
    conv1_bytes = BATCH * 3 * H * W * F32 + (8 * 27 + 8) * F32 + n_conv_out * F32  # 23_424
    conv2_bytes = n_conv_out * F32 + (8 * 72 + 8) * F32 + n_conv_out * F32  # 35_104
    # Linear: 2 * N_out * in_features + N_out (bias), N_out = 2 * 10.
    fc_flops = 2 * (BATCH * 10) * 8 + BATCH * 10  # 340
    fc_bytes = BATCH * 8 * F32 + (80 + 10) * F32 + BATCH * 10 * F32  # 504
    flops, bandwidth = 19.5e12, 1.555e12
    assert (flops, bandwidth) == (A100_FP32_FLOPS, A100_MEMORY_BANDWIDTH_BPS)
    assert fwd["conv1"] == pytest.approx(max(conv1_flops / flops, conv1_bytes / bandwidth))
    assert fwd["conv2"] == pytest.approx(max(conv2_flops / flops, conv2_bytes / bandwidth))
    assert fwd["fc"] == pytest.approx(max(fc_flops / flops, fc_bytes / bandwidth))
    # conv2 is compute-bound on an A100, conv1 and fc are memory-bound: both roofline arms run.
    assert conv2_flops / flops > conv2_bytes / bandwidth
    assert conv1_flops / flops < conv1_bytes / bandwidth
    # Elementwise relu: 1 FLOP/element, so bytes (in + out) dominate.
    assert fwd["relu"] == pytest.approx(2 * n_conv_out * F32 / bandwidth)
    assert fwd["x"] == 0.0
    np.testing.assert_allclose(tiny.backward_time_s, 2.0 * tiny.forward_time_s)
    assert np.all(tiny.forward_time_s[1:] > 0)


def test_device_numbers_and_element_size_are_used() -> None:
    slow = _tiny_graph(device_flops=1e9, memory_bandwidth_Bps=1e12, backward_factor=3.0)
    fc = slow.op_ids.index("fc")
    assert slow.forward_time_s[fc] == pytest.approx(340 / 1e9)  # now compute-bound
    np.testing.assert_allclose(slow.backward_time_s, 3.0 * slow.forward_time_s)
    half = _tiny_graph(bytes_per_element=2)
    assert half.activation_bytes[fc] == BATCH * 10 * 2
    assert half.parameter_bytes[fc] == 90 * 2


def test_folded_parameters_inplace_and_tuple_output() -> None:
    graph = graph_from_module(Branchy(), torch.randn(2, 4), name="branchy")
    assert graph.op_ids == ("x", "relu", "mul", "lin", "relu_", "cat", "size", "view", "sum_1")
    assert _named_edges(graph) == [
        ("x", "relu"), ("x", "lin"), ("x", "size"), ("relu", "mul"), ("mul", "cat"),
        ("mul", "sum_1"), ("lin", "relu_"), ("lin", "cat"), ("relu_", "cat"),  # in-place order
        ("cat", "view"), ("size", "view"),
    ]
    # The output tuple is (sum_1, view): the loss op is the last of them in op order.
    assert graph.op_ids[graph.loss_index] == "sum_1"
    params = _by_id(graph, graph.parameter_bytes)
    assert params["mul"] == 4 * F32  # self.scale, folded in from get_attr
    assert params["lin"] == (16 + 4) * F32
    acts = _by_id(graph, graph.activation_bytes)
    assert (acts["cat"], acts["size"], acts["sum_1"]) == (2 * 8 * F32, 0, F32)


def test_json_round_trip_and_training_graph(tiny: OpGraph, tmp_path) -> None:
    torch.manual_seed(0)
    path = save_module_graph(TinyNet(), torch.randn(BATCH, 3, H, W), tmp_path / "tiny.json",
                             name="tinynet")
    loaded = load_json_graph(path)
    assert loaded.name == tiny.name
    assert loaded.op_ids == tiny.op_ids and loaded.labels == tiny.labels
    assert loaded.loss_index == tiny.loss_index
    np.testing.assert_array_equal(loaded.edges, tiny.edges)
    for field in ("forward_time_s", "backward_time_s", "activation_bytes", "parameter_bytes"):
        np.testing.assert_array_equal(getattr(loaded, field), getattr(tiny, field))
    assert loaded.fingerprint == tiny.fingerprint
    tg = TrainingGraph(loaded)
    assert tg.num_ops == 2 * tiny.num_ops
    assert tg.num_edges == 2 * tiny.num_edges + 1


def test_runs_through_the_simulator(tiny: OpGraph) -> None:
    feas = build_feasibility(RampTopology(), SimKnobs(min_op_time_s=1e-9, edge_sizing="activation",
                                                      placement="block", comm_quirks=False))
    tg = TrainingGraph(tiny)
    one = feas.placer.place(tg, 1, 0)
    assert one is not None
    # One server: no communication and no splitting, so the step is the sequential sum.
    assert feas.step_model.step(tg, 1, one).step_time_s == pytest.approx(tg.step_time_s)
    pl = feas.placer.place(tg, 2, 0)
    assert pl is not None
    step = feas.step_model.step(tg, 2, pl).step_time_s
    assert math.isfinite(step) and step > 0
    # Splitting across 2 servers can at best halve each op on the critical path.
    assert step >= tg.critical_path_s / 2 * (1 - 1e-9)


def test_profile_costs_are_measured() -> None:
    graph = graph_from_module(TinyNet(), torch.randn(1, 3, 8, 8), name="tinynet", costs="profile",
                              profile_repeats=3)
    assert graph.op_ids[0] == "x"
    assert graph.forward_time_s[0] == 0.0 and graph.backward_time_s[0] == 0.0
    compute = slice(1, None)
    assert np.all(np.isfinite(graph.forward_time_s)) and np.all(np.isfinite(graph.backward_time_s))
    assert np.all(graph.forward_time_s[compute] > 0)
    # Every TinyNet op is differentiable, so each gets a timed autograd backward.
    assert np.all(graph.backward_time_s[compute] > 0)
    # Sizes do not depend on how costs are obtained.
    estimate = graph_from_module(TinyNet(), torch.randn(1, 3, 8, 8), name="tinynet")
    np.testing.assert_array_equal(graph.activation_bytes, estimate.activation_bytes)
    np.testing.assert_array_equal(graph.edges, estimate.edges)


def test_profile_leaves_the_module_unchanged() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 3, 6, 6)
    x_before = x.clone()
    graph_from_module(model, x, name="seq", costs="profile", profile_repeats=1)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert torch.equal(x, x_before)


def test_untraceable_module_names_torch_fx() -> None:
    with pytest.raises(WorkloadError, match="could not be traced by torch.fx") as info:
        graph_from_module(DataDependent(), torch.randn(3), name="datadep")
    message = str(info.value)
    assert "\n" not in message
    assert "control flow" in message  # the first line of fx's own explanation


def test_bad_example_inputs_name_the_node() -> None:
    with pytest.raises(WorkloadError, match=r"at node 'conv1'.*channels") as info:
        graph_from_module(TinyNet(), torch.randn(BATCH, 1, H, W), name="tinynet")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kwargs", [{"costs": "guess"}, {"device_flops": 0.0},
                                    {"memory_bandwidth_Bps": -1.0}, {"profile_repeats": 0}])
def test_bad_arguments(kwargs: dict[str, object]) -> None:
    with pytest.raises(WorkloadError):
        _tiny_graph(**kwargs)


# --- tracing into modules without a cost rule (issue 14, item 10) ---------------------------

D_MODEL, HEADS, FFN, SEQ = 64, 4, 256, 16


class Encoder(nn.Module):
    """A user model around a 2-layer nn.TransformerEncoder (a torch.nn leaf for the default tracer)."""

    def __init__(self, d_model: int = D_MODEL) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, HEADS, FFN, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.encoder(x)


def _encoder_flops(batch: int, seq: int, d: int, ffn: int, layers: int = 2) -> float:
    """Matmul FLOPs of a post-norm encoder by hand (norms, softmax and adds are left out)."""
    tokens = batch * seq
    projections = 2 * tokens * d * d * 4  # q, k, v and output projections
    attention = 2 * 2 * batch * seq * seq * d  # q @ k^T and weights @ v, all heads together
    feed_forward = 2 * 2 * tokens * d * ffn  # linear1 and linear2
    return layers * (projections + attention + feed_forward)


@pytest.mark.parametrize("wrapped", [True, False])
def test_transformer_encoder_is_decomposed_and_costed(wrapped: bool) -> None:
    torch.manual_seed(0)
    model = Encoder() if wrapped else Encoder().encoder
    x = torch.randn(BATCH, SEQ, D_MODEL)
    # A huge bandwidth makes every op compute-bound, so the total time is FLOPs / device_flops.
    graph = graph_from_module(model, x, name="enc", device_flops=1e12, memory_bandwidth_Bps=1e30)
    labels = " ".join(graph.labels)
    assert graph.num_ops >= 20, graph.labels
    assert labels.count("MultiheadAttention(") == 2 and labels.count("Linear(") == 4
    assert labels.count("LayerNorm(") == 4
    assert not any(lab.startswith("Input(mask") or "assert" in lab for lab in graph.labels)
    expected_s = _encoder_flops(BATCH, SEQ, D_MODEL, FFN) / 1e12
    total_s = float(graph.forward_time_s.sum())
    assert expected_s / 2 < total_s < 2 * expected_s, (total_s, expected_s)
    # The matmuls dominate: the total is at least the hand count and within 10 % above it.
    assert expected_s <= total_s < 1.1 * expected_s
    # It is a chain of ops that the simulator can split across servers.
    assert TrainingGraph(graph).num_ops == 2 * graph.num_ops


def test_attention_cost_rule_by_hand() -> None:
    mha = nn.MultiheadAttention(D_MODEL, HEADS, kdim=32, vdim=48)  # (L, N, E) layout
    query, key = torch.randn(SEQ, BATCH, D_MODEL), torch.randn(10, BATCH, 32)
    value = torch.randn(10, BATCH, 48)

    class Cross(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = mha

        def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            return self.attn(q, k, v, need_weights=False)[0]

    # 1 GFLOP/s: the time in ns is the FLOP count (1 FLOP/s would exceed the graph's 1e5 s bound).
    graph = graph_from_module(Cross(), (query, key, value), name="cross", device_flops=1e9,
                              memory_bandwidth_Bps=1e30)
    q_tok, kv_tok = BATCH * SEQ, BATCH * 10
    flops = (2 * q_tok * D_MODEL * D_MODEL + 2 * kv_tok * 32 * D_MODEL + 2 * kv_tok * 48 * D_MODEL
             + 2 * q_tok * D_MODEL * D_MODEL  # projections
             + D_MODEL * (q_tok + 2 * kv_tok) + D_MODEL * q_tok  # biases
             + 2 * 2 * BATCH * SEQ * 10 * D_MODEL  # scores and weighted sum
             + 4 * BATCH * HEADS * SEQ * 10)  # softmax
    assert _by_id(graph, graph.forward_time_s)["attn"] * 1e9 == pytest.approx(flops)


def test_untraceable_torch_module_falls_back_to_one_op(caplog: pytest.LogCaptureFixture) -> None:
    class Recurrent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(8, 16)
            self.head = nn.Linear(16, 2)

        def forward(self, x: Tensor) -> Tensor:
            return self.head(self.lstm(x)[0])

    with caplog.at_level("WARNING", logger="pacml.placer.fx.importer"):
        graph = graph_from_module(Recurrent(), torch.randn(5, 3, 8), name="rnn")
    assert graph.op_ids == ("x", "lstm", "getitem", "head")
    assert graph.labels[1] == "LSTM(lstm)"
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "lstm (LSTM(lstm))" in warnings[0]


def test_one_warning_lists_ops_without_flops(caplog: pytest.LogCaptureFixture) -> None:
    class Mixed(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            y = torch.einsum("ij,jk->ik", x, x)  # arithmetic without a FLOP rule
            z = torch.cumsum(y, dim=0)  # another one
            return (z.view(-1) + 1).relu()  # view: data movement; add, relu: rules

    with caplog.at_level("WARNING", logger="pacml.placer.fx.importer"):
        graph_from_module(Mixed(), torch.randn(4, 4), name="mixed")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "'mixed'" in warnings[0] and "2 op(s)" in warnings[0]
    assert "einsum" in warnings[0] and "cumsum" in warnings[0] and "view" not in warnings[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="pacml.placer.fx.importer"):
        _tiny_graph()  # every TinyNet op has a rule or only moves data
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_default_names_differ_between_variants_of_one_class(tmp_path) -> None:
    x = torch.randn(BATCH, SEQ, D_MODEL)
    narrow = graph_from_module(Encoder(), x)
    again = graph_from_module(Encoder(), x)  # other weights, same structure
    wide = graph_from_module(Encoder(d_model=128), torch.randn(BATCH, SEQ, 128))
    longer = graph_from_module(Encoder(), torch.randn(BATCH, 2 * SEQ, D_MODEL))
    assert narrow.name.startswith("Encoder-") and len(narrow.name) == len("Encoder-") + 8
    assert narrow.name == again.name
    assert len({narrow.name, wide.name, longer.name}) == 3
    path = save_module_graph(Encoder(d_model=128), torch.randn(BATCH, SEQ, 128),
                             tmp_path / "wide.json")
    assert load_json_graph(path).name == wide.name
