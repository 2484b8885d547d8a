"""Fuzz the graph loaders: mutated PipeDream, pacml JSON and dnn-partitioning files, loaded in-process
and via the CLI.

Each file is a shipped graph (or one of its forms) with one mutation that makes it invalid by
construction, keeps it valid by construction, or may go either way. The oracle: no exception but
:class:`WorkloadError`; no invalid file accepted and no valid one rejected; every error one line
starting with the file name and naming a line or a field; and, for a sample through ``pacml
graph validate`` / ``pacml sim``, exit status 2 with one ``prog: error: FILE...`` line, or 0. The
generators are shared with the tests' hypothesis sample. Details: docs/development.md ("Graph
fuzzing").

Usage: python benchmarks/fuzz/fuzz_graphs.py [--per-format 2000] [--cli-sample 50] [--sim-sample 6]
       [--seed 0] [--formats pipedream,json,dnn,json2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from workloads.errors import WorkloadError
from workloads.json_format import compute_graph_to_json, graph_to_json
from workloads.loaders import (
    PIPEDREAM_DIR,
    load_compute_graph,
    load_graph,
    shipped_placement_graphs,
)
from workloads.pipedream import load_pipedream

INVALID, VALID, EITHER = "invalid", "valid", "either"
#: Shipped graphs used as seeds (the small ones more often: they keep the run short).
SEED_MODELS = ("alexnet", "vgg16", "gnmt", "squeezenet1_0", "resnet18", "resnet50")
#: Shipped dnn-partitioning graphs used as seeds (the smaller ones; operator graphs have explicit
#: backward nodes without a forward node in their class).
DNN_SEED_GRAPHS = ("bert24_inference", "bert24_training", "bert_l-3_inference", "bert_l-3_training")
#: Formats fuzzed, and the seeds of each.
FORMATS = {"pipedream": SEED_MODELS, "json": SEED_MODELS, "dnn": DNN_SEED_GRAPHS,
           "json2": ("bert24_inference", "bert24_training", "alexnet")}


@dataclass(frozen=True)
class Mutant:
    """One mutated graph file: its bytes, the mutation's name and what the file must be."""

    data: bytes
    mutation: str
    expect: str  # INVALID, VALID or EITHER


# ------------------------------------------------------------------ seeds
@cache
def pipedream_seed(model: str) -> str:
    """The text of a shipped ``graph.txt``."""
    return (PIPEDREAM_DIR / model / "graph.txt").read_text()


@cache
def json_seed_text(model: str) -> str:
    """A shipped graph as a pacml JSON file (as ``pacml-graph convert`` writes it)."""
    return graph_to_json(load_pipedream(PIPEDREAM_DIR / model / "graph.txt"))


# ------------------------------------------------------------------ byte-level mutations (both formats)
def _byte_flips(rng: random.Random, data: bytes) -> Mutant:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        buf[rng.randrange(len(buf))] = rng.randrange(256)
    return Mutant(bytes(buf), "byte_flips", EITHER)


def _truncate(rng: random.Random, data: bytes) -> Mutant:
    return Mutant(data[: rng.randrange(len(data))], "truncate", EITHER)


def _binary_junk(rng: random.Random, data: bytes) -> Mutant:
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 400)))
    return Mutant(b"\xff" + junk, "binary_junk", INVALID)  # 0xff never occurs in UTF-8


def _non_utf8_insert(rng: random.Random, data: bytes) -> Mutant:
    at = rng.randrange(len(data))
    return Mutant(data[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\x80\x80", b"\xfe\xff"]) + data[at:],
                  "non_utf8", INVALID)


def _nul_insert(rng: random.Random, data: bytes) -> Mutant:
    at = rng.randrange(len(data))
    return Mutant(data[:at] + b"\x00" + data[at:], "nul_byte", INVALID)


def _empty(rng: random.Random, data: bytes) -> Mutant:
    return Mutant(rng.choice([b"", b"\n", b"   \n\n", b"\t"]), "empty", INVALID)


BYTE_MUTATIONS: tuple[Callable[[random.Random, bytes], Mutant], ...] = (
    _byte_flips, _truncate, _binary_junk, _non_utf8_insert, _nul_insert, _empty)


# ------------------------------------------------------------------ PipeDream mutations
def _pd_lines(text: str) -> tuple[list[str], list[str]]:
    lines = [ln for ln in text.split("\n") if ln.strip()]
    return [ln for ln in lines if not ln.startswith("\t")], [ln for ln in lines if ln.startswith("\t")]


def _pd_join(nodes: list[str], edges: list[str]) -> bytes:
    return ("\n".join(nodes + edges) + "\n").encode()


_PD_FIELDS = ("forward_compute_time", "backward_compute_time", "activation_size", "parameter_size")
_BAD_NUMBERS = ("abc", "nan", "inf", "-inf", "1e400", "-1", "-0.5", "1_000", "0x10", "", "1.2.3",
                "1e308", "1e16", "[]", "[1; x]", "[1;; 2]", "1e99999", "∞", "1 2")


def _pd_set_field(line: str, field: str, value: str) -> str:
    return re.sub(rf"{field}=(\[[^\]]*\]|[^,\s]+)", lambda _: f"{field}={value}", line, count=1)


def pd_mutation(rng: random.Random, text: str) -> Mutant:
    """One PipeDream-specific mutation of ``text`` (a shipped ``graph.txt``)."""
    nodes, edges = _pd_lines(text)
    i = rng.randrange(len(nodes))
    kind = rng.choice([
        "decimal_comma", "unclosed_list", "bad_number", "missing_field", "duplicate_field",
        "unknown_field", "bad_node_id", "huge_node_id", "duplicate_node", "self_loop",
        "duplicate_edge", "cycle", "unknown_edge_end", "node_after_edges", "edge_garbage",
        "trailing_text", "no_nodes",
        "drop_edge", "crlf", "relabel", "stage_id", "scale_time"])
    node_id = nodes[i].split(" -- ")[0]
    if kind == "decimal_comma":
        field = rng.choice(_PD_FIELDS)
        nodes[i] = _pd_set_field(nodes[i], field, f"{rng.randint(0, 9)},{rng.randint(0, 999)}")
    elif kind == "unclosed_list":
        nodes[i] = _pd_set_field(nodes[i], rng.choice(_PD_FIELDS), rng.choice(["[1; 2", "[1.0", "[", "1; 2]"]))
    elif kind == "bad_number":
        nodes[i] = _pd_set_field(nodes[i], rng.choice(_PD_FIELDS), rng.choice(_BAD_NUMBERS))
    elif kind == "missing_field":
        field = rng.choice(_PD_FIELDS)
        nodes[i] = re.sub(rf",?\s*{field}=(\[[^\]]*\]|[^,\s]+)", "", nodes[i], count=1)
    elif kind == "duplicate_field":
        nodes[i] += f", {rng.choice(_PD_FIELDS)}=1.0"
    elif kind == "unknown_field":
        nodes[i] += rng.choice([", forward_time=1.0", ", foo=2", ", activation_sizes=3"])
    elif kind == "bad_node_id":
        nodes[i] = rng.choice(["nodeX", "Node1", "node-1", "n1", "node1.5", "node 1"]) + nodes[i][len(node_id):]
    elif kind == "huge_node_id":
        nodes[i] = "node" + "9" * rng.choice([19, 400, 5000]) + nodes[i][len(node_id):]
    elif kind == "duplicate_node":
        nodes.insert(rng.randrange(len(nodes) + 1), nodes[i])
    elif kind == "self_loop":
        edges.insert(rng.randrange(len(edges) + 1), f"\t{node_id} -- {node_id}")
    elif kind == "duplicate_edge" and edges:
        edges.insert(rng.randrange(len(edges) + 1), rng.choice(edges))
    elif kind == "cycle" and edges:
        src, dst = rng.choice(edges).strip().split(" -- ")
        edges.append(f"\t{dst} -- {src}")
    elif kind == "unknown_edge_end":
        edges.append(rng.choice([f"\t{node_id} -- node999999", f"\tnode999999 -- {node_id}", f"\t{node_id} -- "]))
    elif kind == "node_after_edges" and edges:
        edges.append(nodes.pop(i))
    elif kind == "edge_garbage":
        edges.insert(rng.randrange(len(edges) + 1), rng.choice(["\tnode1", "\tnode1 -- node2 -- node3", "\t--", "\tx"]))
    elif kind == "trailing_text":
        nodes[i] += rng.choice([" -- junk", " -- stage_id=x", " -- 1"])
    elif kind == "no_nodes":
        nodes = []
        edges = edges[:0]
        return Mutant(b"# nothing but a comment\n" if rng.random() < 0.5 else b"\n\n", kind, INVALID)
    elif kind == "drop_edge" and edges:
        edges.pop(rng.randrange(len(edges)))
        return Mutant(_pd_join(nodes, edges), kind, VALID)
    elif kind == "crlf":
        return Mutant(_pd_join(nodes, edges).replace(b"\n", b"\r\n"), kind, VALID)
    elif kind == "relabel":
        parts = nodes[i].split(" -- ")
        parts[1] = rng.choice(["Übergröße(ß)", "x" * 500, "Conv2d(3, 64) ∘ ReLU", "a=b"])
        nodes[i] = " -- ".join(parts)
        return Mutant(_pd_join(nodes, edges), kind, VALID)
    elif kind == "stage_id":
        nodes[i] += f" -- stage_id={rng.randint(0, 7)}"
        return Mutant(_pd_join(nodes, edges), kind, VALID)
    elif kind == "scale_time":
        nodes[i] = _pd_set_field(nodes[i], "forward_compute_time", f"{rng.uniform(0, 1000):.3f}")
        return Mutant(_pd_join(nodes, edges), kind, VALID)
    else:  # a mutation that needs edges, on a graph without any: fall back to a junk line
        nodes.insert(i, "this is not a node line")
        kind = "junk_line"
    return Mutant(_pd_join(nodes, edges), kind, INVALID)


# ------------------------------------------------------------------ JSON mutations
_WRONG_TYPES: tuple[object, ...] = ([1], [], {"a": 1}, {}, None, True, False, "1.0", "", [[["x"]]])


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


NAN, INF = float("nan"), float("inf")
_JSON_NUMBERS = ("forward_time_s", "backward_time_s", "activation_bytes", "parameter_bytes")
#: Mutations that set one key to a wrong value: kind -> (where, key, value); a tuple of keys or
#: values means one of them, chosen at random.
JSON_SETS = {
    "absurd_float": ("op", _JSON_NUMBERS, (1e308, 1.7e308, 1e200, 5e16)),
    "nan_inf": ("op", _JSON_NUMBERS, (NAN, INF, -INF)),
    "version_true": ("doc", "version", (True, 1.0, 2, 0, "1")),
    "unknown_top_key": ("doc", ("loss", "Name", "edge", "time_unit"), "x"),
    "unknown_op_key": ("op", ("forward_time", "flops", "Id"), 1),
    "bad_time_unit": ("doc", "time_unit_s", (0, -1, 0.0, "s", True, 1e9, None, [1])),
    "bad_format": ("doc", "format", ("pacml", "PACML-GRAPH", "pipedream")),
    "empty_name": ("doc", "name", ("", "   ", "a\nb")),
}


def set_wrong(rng: random.Random, rule: tuple, targets: dict[str, dict]) -> None:
    """Apply one ``*_SETS`` rule: ``targets[where][key] = value``, the value chosen before the key
    (the order of ``target[rng.choice(keys)] = rng.choice(values)``)."""
    where, keys, values = rule
    value = rng.choice(values) if isinstance(values, tuple) else values
    targets[where][rng.choice(keys) if isinstance(keys, tuple) else keys] = value


def json_mutation(rng: random.Random, doc: dict) -> Mutant:
    """One JSON-specific mutation of ``doc`` (a graph document)."""
    doc = json.loads(json.dumps(doc))  # private copy
    ops, edges = doc["ops"], doc["edges"]
    i = rng.randrange(len(ops))
    raw: str | None = None  # set when the mutation needs text json.dumps cannot write
    kind = rng.choice([
        "type_swap_op", "type_swap_top", "type_swap_edge_end", "type_swap_loss", "huge_int",
        "absurd_float", "nan_inf", "negative", "deep_nesting", "version_true", "missing_top",
        "missing_op_field", "unknown_top_key", "unknown_op_key", "duplicate_key", "duplicate_id",
        "duplicate_edge", "self_loop", "cycle", "unknown_edge_end", "bad_edge_shape", "bad_time_unit",
        "empty_ops", "not_an_object", "bad_format", "empty_name",
        "drop_edge", "relabel", "compact", "time_unit_ms", "dict_edges", "no_loss_op"])
    if kind in JSON_SETS:
        set_wrong(rng, JSON_SETS[kind], {"doc": doc, "op": ops[i]})
    elif kind == "type_swap_op":
        op_field = rng.choice((*_JSON_NUMBERS, "id", "label"))
        # A string is a fine label, and a non-empty one a fine id: only swap in what is wrong there.
        wrong = [v for v in _WRONG_TYPES if not (
            (op_field == "label" and isinstance(v, str)) or (op_field == "id" and isinstance(v, str) and v))]
        ops[i][op_field] = rng.choice(wrong)
    elif kind == "type_swap_top":
        key = rng.choice(["name", "format", "version", "ops", "edges", "source", "notes"])
        # null is allowed for the optional free-text keys
        doc[key] = rng.choice([[1], {"a": 1}, 3.5, True] + ([] if key in ("source", "notes") else [None]))
    elif kind == "type_swap_edge_end" and edges:
        edges[rng.randrange(len(edges))][rng.randrange(2)] = rng.choice([["x"], {"id": "x"}, 1, None, True])
    elif kind == "type_swap_loss":
        doc["loss_op"] = rng.choice([[ops[i]["id"]], {"id": ops[i]["id"]}, 3, True, "no_such_op"])
    elif kind == "huge_int":
        ops[i][rng.choice(_JSON_NUMBERS)] = rng.choice([10**400, 10**20, -(10**400)])
        if rng.random() < 0.3:  # longer than Python's int-string limit
            raw = json.dumps(doc).replace('"ops": [', f'"ops": [{{"id": "big", "forward_time_s": {"9" * 5000}}}, ', 1)
    elif kind == "negative":
        ops[i][rng.choice(_JSON_NUMBERS)] = -rng.uniform(1e-9, 10)
    elif kind == "deep_nesting":
        depth = rng.choice([150, 1000, 5000, 100000])
        raw = json.dumps(doc).replace('"name": ', f'"notes": {_deep(depth)}, "name": ', 1)
    elif kind == "missing_top":
        del doc[rng.choice(["format", "version", "name", "ops", "edges"])]
    elif kind == "missing_op_field":
        del ops[i][rng.choice((*_JSON_NUMBERS, "id"))]
    elif kind == "duplicate_key":
        raw = json.dumps(doc).replace('{"format": ', '{"name": "other", "format": ', 1)
    elif kind == "duplicate_id" and len(ops) > 1:
        ops[(i + 1) % len(ops)]["id"] = ops[i]["id"]
    elif kind == "duplicate_edge" and edges:
        edges.insert(rng.randrange(len(edges) + 1), list(rng.choice(edges)))
    elif kind == "self_loop":
        edges.append([ops[i]["id"], ops[i]["id"]])
    elif kind == "cycle" and edges:
        src, dst = rng.choice(edges)
        edges.append([dst, src])
    elif kind == "unknown_edge_end":
        edges.append([ops[i]["id"], "no_such_op"])
    elif kind == "bad_edge_shape":
        edges.append(rng.choice([[ops[i]["id"]], [ops[i]["id"], ops[i]["id"], ops[i]["id"]], "a->b",
                                 {"src": ops[i]["id"]}, {"from": "a", "to": "b"}]))
    elif kind == "empty_ops":
        doc["ops"] = []
    elif kind == "not_an_object":
        raw = json.dumps(rng.choice([[doc], "graph", 3, None]))
    elif kind == "drop_edge" and edges:
        edges.pop(rng.randrange(len(edges)))
        doc.pop("loss_op", None)  # dropping the loss op's in-edge must not strand it
        return Mutant(json.dumps(doc).encode(), kind, VALID)
    elif kind == "relabel":
        ops[i]["label"] = rng.choice(["Übergröße(ß)", "x" * 500, "", "a\nb"])
        return Mutant(json.dumps(doc).encode(), kind, VALID)
    elif kind == "compact":
        return Mutant(json.dumps(doc, separators=(",", ":")).encode(), kind, VALID)
    elif kind == "time_unit_ms":
        doc["time_unit_s"] = 1e-3
        return Mutant(json.dumps(doc, indent=2).encode(), kind, VALID)
    elif kind == "dict_edges":
        doc["edges"] = [{"src": s, "dst": d} for s, d in edges]
        return Mutant(json.dumps(doc, indent=1).encode(), kind, VALID)
    elif kind == "no_loss_op":
        doc.pop("loss_op", None)
        return Mutant(json.dumps(doc).encode(), kind, VALID)
    else:  # needed edges or two ops the seed does not have
        ops[i]["forward_time_s"] = "fast"
        kind = "not_a_number"
    text = raw if raw is not None else json.dumps(doc, indent=rng.choice([None, 2]))
    return Mutant(text.encode(), kind, INVALID)


# ------------------------------------------------------------------ dnn-partitioning mutations
@cache
def dnn_seed_text(graph: str) -> str:
    """The text of a shipped dnn-partitioning file."""
    return shipped_placement_graphs()[graph].read_text()


_DNN_NODE_NUMBERS = ("cpuLatency", "fpgaLatency", "size")
_DNN_TOP = ("maxSizePerFPGA", "maxFPGAs", "maxCPUs", "nodes", "edges")
DNN_SETS = {  # as JSON_SETS
    "bad_number": ("node", _DNN_NODE_NUMBERS, (-1, -0.5, 1e200, 1.7e308, -1e-9)),
    "bad_device_count": ("doc", ("maxFPGAs", "maxCPUs"), (-1, 5000, 1.5, 10**30)),
    "bad_memory": ("doc", "maxSizePerFPGA", (0, -1, 0.0, 1e30)),
    "unknown_top_key": ("doc", ("maxFPGA", "format_", "Nodes", "maxGPUs"), 1),
    "unknown_node_key": ("node", ("latency", "ID", "colourClass", "isBackward"), 1),
    "bad_flag": ("node", ("supportedOnFpga", "isBackwardNode"), (2, -1, "yes", 0.5, 1.0)),
    "bad_name": ("node", "name", ("", "a\nb", 7, None, ["x"])),
}


def dnn_mutation(rng: random.Random, doc: dict) -> Mutant:
    """One dnn-partitioning-specific mutation of ``doc`` (a parsed shipped file)."""
    doc = json.loads(json.dumps(doc))  # private copy
    nodes, edges = doc["nodes"], doc["edges"]
    i = rng.randrange(len(nodes))
    node = nodes[i]
    raw: str | None = None
    kind = rng.choice([
        "type_swap_node", "type_swap_top", "type_swap_edge", "bad_number", "huge_int", "nan_inf",
        "bad_device_count", "bad_memory", "missing_top", "missing_node_field", "missing_edge_field",
        "unknown_top_key", "unknown_node_key", "unknown_edge_key", "duplicate_key", "duplicate_id",
        "duplicate_edge", "self_loop", "cycle", "unknown_edge_end", "empty_nodes", "bad_flag",
        "bad_name", "deep_nesting", "not_an_object",
        "drop_edge", "compact", "indented", "shuffle_nodes", "bool_flags", "drop_optional", "rename",
        "unsupported_node", "extra_node", "duplicate_names"])
    if kind in DNN_SETS:
        set_wrong(rng, DNN_SETS[kind], {"doc": doc, "node": node})
    elif kind == "type_swap_node":
        key = rng.choice(("id", *_DNN_NODE_NUMBERS, "supportedOnFpga", "isBackwardNode", "colorClass", "layerId"))
        # null is a fine colour class (none), and true/false fine flags: only swap in what is wrong there.
        wrong = [v for v in _WRONG_TYPES if not ((v is None and key == "colorClass") or (
            isinstance(v, bool) and key in ("supportedOnFpga", "isBackwardNode")))]
        node[key] = rng.choice(wrong)
    elif kind == "type_swap_top":
        key = rng.choice(_DNN_TOP)
        # 2.5 bytes is a (tiny) valid accelerator memory: a wrong type only there.
        doc[key] = rng.choice([[1], {"a": 1}, "6", True, None] + ([] if key == "maxSizePerFPGA" else [2.5]))
    elif kind == "type_swap_edge" and edges:
        edges[rng.randrange(len(edges))][rng.choice(["sourceId", "destId", "cost", "size"])] = \
            rng.choice([["x"], {"id": 1}, "1", None, True])
    elif kind == "huge_int":
        node[rng.choice(_DNN_NODE_NUMBERS)] = rng.choice([10**400, -(10**400)])
        if rng.random() < 0.3:
            raw = json.dumps(doc).replace('"nodes": [', f'"nodes": [{{"id": 0, "cpuLatency": {"9" * 5000}}}, ', 1)
    elif kind == "nan_inf":
        target = rng.choice(["node", "edge", "top"]) if edges else "node"
        value = rng.choice([float("nan"), float("inf"), float("-inf")])
        if target == "node":
            node[rng.choice(_DNN_NODE_NUMBERS)] = value
        elif target == "edge":
            edges[rng.randrange(len(edges))]["cost"] = value
        else:
            doc["maxSizePerFPGA"] = value
    elif kind == "missing_top":
        del doc[rng.choice(["maxSizePerFPGA", "maxFPGAs", "nodes", "edges"])]
    elif kind == "missing_node_field":
        del node[rng.choice(("id", *_DNN_NODE_NUMBERS))]
    elif kind == "missing_edge_field" and edges:
        del edges[rng.randrange(len(edges))][rng.choice(["sourceId", "destId", "cost"])]
    elif kind == "unknown_edge_key" and edges:
        edges[rng.randrange(len(edges))][rng.choice(["src", "weight", "Cost"])] = 1
    elif kind == "duplicate_key":
        raw = json.dumps(doc).replace('"nodes": [{', '"nodes": [{"id": -5, ', 1)
    elif kind == "duplicate_id" and len(nodes) > 1:
        nodes[(i + 1) % len(nodes)]["id"] = node["id"]
    elif kind == "duplicate_edge" and edges:
        edges.insert(rng.randrange(len(edges) + 1), dict(rng.choice(edges)))
    elif kind == "self_loop":
        edges.append({"sourceId": node["id"], "destId": node["id"], "cost": 0.0})
    elif kind == "cycle" and edges:
        e = rng.choice(edges)
        edges.append({"sourceId": e["destId"], "destId": e["sourceId"], "cost": 0.0})
    elif kind == "unknown_edge_end":
        edges.append({"sourceId": node["id"], "destId": 10**9 + 7, "cost": 0.0})
    elif kind == "empty_nodes":
        doc["nodes"] = []
    elif kind == "deep_nesting":
        raw = json.dumps(doc).replace('"edges": ', f'"junk": {_deep(rng.choice([150, 5000, 100000]))}, "edges": ', 1)
    elif kind == "not_an_object":
        raw = json.dumps(rng.choice([[doc], "graph", 3, None, {"cpus": [], "fpgas": []}]))
    elif kind in ("drop_edge", "compact", "indented", "shuffle_nodes", "bool_flags", "drop_optional", "rename",
                  "unsupported_node", "extra_node", "duplicate_names"):
        indent = None
        if kind == "drop_edge" and edges:
            edges.pop(rng.randrange(len(edges)))
        elif kind == "indented":
            indent = rng.choice([1, 2, 4])
        elif kind == "shuffle_nodes":
            rng.shuffle(nodes)
        elif kind == "bool_flags":
            for n in nodes:
                for key in ("supportedOnFpga", "isBackwardNode"):
                    if key in n:
                        n[key] = bool(n[key])
        elif kind == "drop_optional":
            key = rng.choice(["name", "layerId", "colorClass", "supportedOnFpga", "isBackwardNode", "edge size",
                              "maxCPUs"])
            if key == "maxCPUs":
                doc.pop("maxCPUs", None)
            for item in (edges if key == "edge size" else nodes):
                item.pop("size" if key == "edge size" else key, None)
        elif kind == "rename":
            node["name"] = rng.choice(["Übergröße(ß)", "x" * 500, "layer/with spaces"]) + f"#{node['id']}"
        elif kind == "unsupported_node":
            node["supportedOnFpga"] = 0
        elif kind == "extra_node":
            nodes.append({"id": max(n["id"] for n in nodes) + 1, "cpuLatency": 1.0, "fpgaLatency": 0.1,
                          "size": 10.0, "isBackwardNode": 0, "supportedOnFpga": 1})
        elif kind == "duplicate_names" and len(nodes) > 1:
            nodes[(i + 1) % len(nodes)]["name"] = node.get("name", "same")
            node["name"] = nodes[(i + 1) % len(nodes)]["name"]
        text = json.dumps(doc, indent=indent, separators=(",", ":") if kind == "compact" else None)
        return Mutant(text.encode(), kind, VALID)
    else:  # needed edges or two nodes the seed does not have
        node["cpuLatency"] = "slow"
        kind = "not_a_number"
    text = raw if raw is not None else json.dumps(doc, indent=rng.choice([None, 2]))
    return Mutant(text.encode(), kind, INVALID)


# ------------------------------------------------------------------ pacml JSON version 2 mutations


@cache
def v2_seed_text(graph: str) -> str:
    """A shipped graph as a version-2 pacml JSON file (as ``pacml-graph convert --version 2`` writes it)."""
    return compute_graph_to_json(load_compute_graph(graph))


V2_SETS = {  # as JSON_SETS
    "bad_memory": ("node", "memory_bytes", (-1, None, "8", 1e30, NAN)),
    "bad_backward": ("node", "backward", (0, 1, "true", None)),
    "unknown_node_key": ("node", ("label", "times", "Group", "colorClass"), 1),
    "unknown_top_key": ("doc", ("ops", "device", "kind", "loss_op"), "x"),
    "bad_devices": ("doc", "devices", (
        {"max_accelerators": 0, "accelerator_memory_bytes": 1.0, "max_cpus": 1},
        {"max_accelerators": 2, "accelerator_memory_bytes": 0, "max_cpus": 1},
        {"max_accelerators": 2, "accelerator_memory_bytes": 1.0}, [2], "six",
        {"max_accelerators": True, "accelerator_memory_bytes": 1.0, "max_cpus": 1})),
    "bad_version": ("doc", "version", (True, 2.0, 3, "2", None)),
    "bad_colour": ("node", "colour_class", ("3", 1.5, [3], True)),
    "bad_name": ("doc", "name", ("", " ", "a\nb", None, 3)),
}


def v2_mutation(rng: random.Random, doc: dict) -> Mutant:
    """One mutation of ``doc`` (a version-2 pacml JSON document)."""
    doc = json.loads(json.dumps(doc))
    nodes, edges = doc["nodes"], doc["edges"]
    i = rng.randrange(len(nodes))
    node = nodes[i]
    kinds = doc["kinds"]
    raw: str | None = None
    kind = rng.choice([
        "bad_time", "time_kinds", "bad_memory", "bad_backward", "bad_group", "duplicate_id", "unknown_node_key",
        "missing_node_key", "unknown_top_key", "missing_top", "bad_kinds", "bad_reference", "bad_devices",
        "edge_unknown_end", "self_loop", "duplicate_edge", "cycle", "bad_edge_number", "bad_version",
        "partial_node_id", "bad_colour", "bad_name", "duplicate_key",
        "drop_edge", "compact", "drop_optional", "null_time", "milliseconds", "rename"])
    if kind in V2_SETS:
        set_wrong(rng, V2_SETS[kind], {"doc": doc, "node": node})
    elif kind == "bad_time":
        node["time"][rng.choice(kinds)] = rng.choice([-1, "1", [1], True, float("nan"), float("inf"), 1e300])
    elif kind == "time_kinds":
        if rng.random() < 0.5:
            node["time"].pop(rng.choice(kinds))
        else:
            node["time"]["tpu"] = 1.0
    elif kind == "bad_group":
        node["group"] = rng.choice([-1, len(nodes), 1.0, True, None, "0"])
    elif kind == "duplicate_id" and len(nodes) > 1:
        nodes[(i + 1) % len(nodes)]["id"] = node["id"]
    elif kind == "missing_node_key":
        del node[rng.choice(["id", "time", "memory_bytes", "backward", "group"])]
    elif kind == "missing_top":
        del doc[rng.choice(["format", "version", "name", "kinds", "reference_kind", "nodes", "edges"])]
    elif kind == "bad_kinds":
        doc["kinds"] = rng.choice([[], "gpu", [*kinds, kinds[0]], ["GPU"] + kinds[1:], None])
    elif kind == "bad_reference":
        doc["reference_kind"] = rng.choice(["tpu", None, 1, kinds])
    elif kind == "edge_unknown_end":
        edges.append({"src": node["id"], "dst": "no such node"})
    elif kind == "self_loop":
        edges.append({"src": node["id"], "dst": node["id"]})
    elif kind == "duplicate_edge" and edges:
        edges.append(dict(rng.choice(edges)))
    elif kind == "cycle" and edges:
        e = rng.choice(edges)
        edges.append({"src": e["dst"], "dst": e["src"]})
    elif kind == "bad_edge_number" and edges:
        edges[rng.randrange(len(edges))][rng.choice(["bytes", "cost"])] = rng.choice([-1, "1", [1], True, 1e300])
    elif kind == "partial_node_id" and "node_id" in node:
        del node["node_id"]
    elif kind == "duplicate_key":
        raw = json.dumps(doc).replace('{"format": ', '{"kinds": [], "format": ', 1)
    elif kind in ("drop_edge", "compact", "drop_optional", "null_time", "milliseconds", "rename"):
        if kind == "drop_edge" and edges:
            edges.pop(rng.randrange(len(edges)))
        elif kind == "drop_optional":
            key = rng.choice(["devices", "backward_after_forward", "origin_format", "source", "time_unit_s",
                              "node_id", "colour_class", "bytes", "cost"])
            for item in (edges if key in ("bytes", "cost") else nodes if key in ("node_id", "colour_class") else [doc]):
                item.pop(key, None)
        elif kind == "null_time":
            node["time"][rng.choice(kinds)] = None  # cannot run there (some node still runs on every kind)
        elif kind == "milliseconds":
            doc["time_unit_s"] = 1e-3
            for n in nodes:
                n["time"] = {k: None if v is None else v * 1000 for k, v in n["time"].items()}
        elif kind == "rename":
            new = rng.choice(["Übergröße(ß)", "x" * 300, "with space"]) + f"#{i}"
            old = node["id"]
            node["id"] = new
            for e in edges:
                for end in ("src", "dst"):
                    if e[end] == old:
                        e[end] = new
        text = json.dumps(doc, separators=(",", ":") if kind == "compact" else None)
        return Mutant(text.encode(), kind, VALID)
    else:
        node["memory_bytes"] = "big"
        kind = "not_a_number"
    text = raw if raw is not None else json.dumps(doc, indent=rng.choice([None, 2]))
    return Mutant(text.encode(), kind, INVALID)


# ------------------------------------------------------------------ drivers
def make_mutant(fmt: str, rng: random.Random, model: str) -> Mutant:
    """One mutant of ``model`` in ``fmt`` (a key of :data:`FORMATS`): a byte-level mutation one time
    in three, else a format-specific one."""
    seed_text, mutate = {"pipedream": (pipedream_seed, pd_mutation), "json": (json_seed_text, json_mutation),
                         "dnn": (dnn_seed_text, dnn_mutation), "json2": (v2_seed_text, v2_mutation)}[fmt]
    text = seed_text(model)
    if rng.random() < 1 / 3:
        return rng.choice(BYTE_MUTATIONS)(rng, text.encode())
    return mutate(rng, text if fmt == "pipedream" else json.loads(text))


_NAMES_LINE_OR_KEY = re.compile(r"^[^\n]*?(:\d+: |: field '[^']*': )")


@dataclass
class Outcome:
    """What loading one mutant did."""

    status: str  # accepted, rejected, traceback
    message: str
    problems: tuple[str, ...]  # oracle violations (empty when fine)


def check_file(path: Path, mutant: Mutant, fmt: str = "pipedream") -> Outcome:
    """Load ``path`` in-process and judge the result against the oracle.

    A dnn-partitioning or version-2 mutant is judged by :func:`load_compute_graph` (the format is a computation
    graph); :func:`load_graph` (the cluster simulator's loader) must then refuse it too if it is
    invalid, and may refuse a valid one only with a :class:`WorkloadError` (not every computation
    graph maps to a workload).
    """
    problems: list[str] = []
    try:
        if fmt in ("dnn", "json2"):
            load_compute_graph(str(path))
            with contextlib.suppress(WorkloadError):
                load_graph(path)
        else:
            load_graph(path)
    except WorkloadError as exc:
        message = str(exc)
        if "\n" in message:
            problems.append("multi-line error")
        if not message.startswith(str(path)):
            problems.append("error does not name the file")
        if not _NAMES_LINE_OR_KEY.match(message):
            problems.append("error names neither a line nor a key")
        if mutant.expect == VALID:
            problems.append("valid file rejected")
        return Outcome("rejected", message, tuple(problems))
    except Exception as exc:  # noqa: BLE001 - the point is to catch anything else
        return Outcome("traceback", f"{type(exc).__name__}: {exc}"[:200], ("traceback",))
    if mutant.expect == INVALID:
        problems.append("invalid file accepted")
    return Outcome("accepted", "", tuple(problems))


def mutant_path(folder: Path, fmt: str, k: int) -> Path:
    """Where mutant ``k`` is written. The suffix plays no part in recognising the format: dnn-partitioning
    mutants are named ``.dat``."""
    return folder / f"m{k:05d}.{ {'json': 'json', 'json2': 'json', 'dnn': 'dat'}.get(fmt, 'txt') }"


def run_cli(prog: list[str], path: Path, accepted: bool) -> list[str]:
    """Run a console command (``pacml SUB ...``) on ``path``; return the oracle violations."""
    out = subprocess.run([*prog], capture_output=True, text=True, timeout=120)
    problems = []
    err_lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    if accepted:
        if out.returncode != 0:
            problems.append(f"exit {out.returncode} on an accepted file")
    else:
        if out.returncode != 2:
            problems.append(f"exit {out.returncode}, not 2")
        name = f"pacml {prog[1]}"  # `pacml graph` errors start "pacml graph: error:" (its PROG)
        if len(err_lines) != 1 or not err_lines[0].startswith(f"{name}: error: {path}"):
            problems.append(f"stderr is not one '{name}: error: {path}...' line: {out.stderr[-300:]!r}")
    return problems


def main() -> None:
    """Generate, load and judge the mutants; print the figures (exit 1 on any violation)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-format", type=int, default=2000)
    parser.add_argument("--formats", default="pipedream,json,dnn,json2",
                        help="comma-separated: pipedream, json (version 1), dnn, json2 (pacml JSON version 2)")
    parser.add_argument("--cli-sample", type=int, default=50, help="files per format run through pacml graph")
    parser.add_argument("--sim-sample", type=int, default=6, help="files per format run through pacml sim")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    failures = 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.formats.split(","):
            if fmt not in FORMATS:
                parser.error(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
            folder = Path(tmp) / fmt
            folder.mkdir()
            rng = random.Random(f"{args.seed}-{fmt}")
            counts: Counter[str] = Counter()
            problems: Counter[str] = Counter()
            examples: dict[str, str] = {}
            by_mutation: Counter[str] = Counter()
            outcomes: list[tuple[Path, Outcome]] = []
            for k in range(args.per_format):
                model = rng.choice(FORMATS[fmt])
                mutant = make_mutant(fmt, rng, model)
                path = mutant_path(folder, fmt, k)
                path.write_bytes(mutant.data)
                outcome = check_file(path, mutant, fmt)
                counts[outcome.status] += 1
                by_mutation[mutant.mutation] += 1
                for p in outcome.problems:
                    problems[p] += 1
                    examples.setdefault(p, f"{mutant.mutation}: {outcome.message or 'accepted'}")
                outcomes.append((path, outcome))
            rejected = counts["rejected"]
            print(f"{fmt}: {args.per_format} files ({len(by_mutation)} mutations), accepted {counts['accepted']}, "
                  f"rejected {rejected}, tracebacks {counts['traceback']}, invalid accepted "
                  f"{problems['invalid file accepted']}, valid rejected {problems['valid file rejected']}")
            print(f"  errors: one line {rejected - problems['multi-line error']}/{rejected}, name the file "
                  f"{rejected - problems['error does not name the file']}/{rejected}, name a line or key "
                  f"{rejected - problems['error names neither a line nor a key']}/{rejected}")
            for p, text in examples.items():
                print(f"  PROBLEM {p} (x{problems[p]}), e.g. {text}")
            failures += sum(problems.values())

            # A sample through the console commands (rejected and accepted files alike).
            sample = random.Random(f"{args.seed}-{fmt}-cli").sample(outcomes, min(args.cli_sample, len(outcomes)))
            cli_problems = []
            for path, outcome in sample:
                cli_problems += run_cli([str(bin_dir / "pacml"), "graph", "validate", str(path)], path,
                                        outcome.status == "accepted")
            rejected_sample = [(p, o) for p, o in sample if o.status == "rejected"][: args.sim_sample]
            for path, _ in rejected_sample:
                cli_problems += run_cli([str(bin_dir / "pacml"), "sim", f"workload.graphs={path}", "progress=false",
                                         f"out_dir={Path(tmp) / 'sim_out'}"], path, False)
            print(f"  console: pacml graph validate on {len(sample)} files, pacml sim on {len(rejected_sample)} "
                  f"rejected files: {len(cli_problems)} problems")
            for p in cli_problems[:5]:
                print(f"  PROBLEM {p}")
            failures += len(cli_problems)
    print(f"total problems {failures}; {time.perf_counter() - start:.0f} s")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
