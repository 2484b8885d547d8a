"""The pacml JSON graph format (version 1): loader, writer and validator.

A graph file holds one profiled *forward* graph; the training graph (mirrored backward ops
and the join edge) is derived from it. Times are seconds, sizes bytes::

    {
      "format": "pacml-graph",
      "version": 1,
      "name": "resnet18",
      "loss_op": "node71",
      "ops": [
        {"id": "node1", "label": "Input", "forward_time_s": 0.47, "backward_time_s": 0.0,
         "activation_bytes": 19267584, "parameter_bytes": 0},
        ...
      ],
      "edges": [["node1", "node2"], ...]
    }

* ``format`` / ``version``: required; this module reads version 1.
* ``name``: required model name.
* ``ops``: required non-empty list; each op needs ``id`` (unique string), the two times and the
  two sizes (finite, >= 0). ``label`` is optional. Op order matters: it is the order in which
  ops are split and placed.
* ``edges``: required list of ``[src_id, dst_id]`` pairs (or ``{"src": .., "dst": ..}``);
  the graph must be acyclic.
* ``loss_op``: optional id of the op whose gradient starts the backward pass; default is the
  last op (in list order) with no successor.
* ``source``, ``notes``: optional free text.

Errors name the file, the line, the op and the field (:class:`WorkloadError`).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from workloads.errors import WorkloadError
from workloads.graph import OpGraph, topological_order
from workloads.io import atomic_write_text

FORMAT_NAME = "pacml-graph"
FORMAT_VERSION = 1
OP_NUMBER_FIELDS = ("forward_time_s", "backward_time_s", "activation_bytes", "parameter_bytes")


class _Locator:
    """Maps ops and edges of a JSON document back to line numbers (for error messages)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_of(self, offset: int) -> int:
        lo, hi = 0, len(self._line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def op_line(self, op_id: Any, occurrence: int = 0) -> int | None:
        if not isinstance(op_id, str):
            return None
        matches = list(re.finditer(r'"id"\s*:\s*' + re.escape(json.dumps(op_id)), self.text))
        return self.line_of(matches[min(occurrence, len(matches) - 1)].start()) if matches else None

    def key_line(self, key: str) -> int | None:
        m = re.search(re.escape(json.dumps(key)) + r"\s*:", self.text)
        return self.line_of(m.start()) if m else None

    def edge_line(self, src: Any, dst: Any) -> int | None:
        if not (isinstance(src, str) and isinstance(dst, str)):
            return None
        pat = (r"\[\s*" + re.escape(json.dumps(src)) + r"\s*,\s*" + re.escape(json.dumps(dst)) + r"\s*\]"
               r"|\"src\"\s*:\s*" + re.escape(json.dumps(src)))
        m = re.search(pat, self.text)
        # Report the line of the source id (a pretty-printed pair puts '[' on its own line).
        return self.line_of(self.text.index('"', m.start())) if m else None


def parse_json_graph(text: str, *, path: str | Path = "<string>") -> OpGraph:
    """Validate and convert the text of a pacml JSON graph into an :class:`OpGraph`.

    Raises:
        WorkloadError: naming the file, line, op and field of the first problem found.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno) from None
    loc = _Locator(text)

    def fail(message: str, *, field: str | None = None, line: int | None = None) -> WorkloadError:
        return WorkloadError(message, path=path, line=line, field=field)

    if not isinstance(doc, dict):
        raise fail("top level must be a JSON object", line=1)
    for key in ("format", "version", "name", "ops", "edges"):
        if key not in doc:
            raise fail("missing required field", field=key, line=1)
    if doc["format"] != FORMAT_NAME:
        raise fail(f"expected {FORMAT_NAME!r}, got {doc['format']!r}", field="format", line=loc.key_line("format"))
    if doc["version"] != FORMAT_VERSION:
        raise fail(f"unsupported version {doc['version']!r} (this reader supports {FORMAT_VERSION})",
                   field="version", line=loc.key_line("version"))
    if not isinstance(doc["name"], str) or not doc["name"]:
        raise fail("must be a non-empty string", field="name", line=loc.key_line("name"))
    ops = doc["ops"]
    if not isinstance(ops, list) or not ops:
        raise fail("must be a non-empty list of ops", field="ops", line=loc.key_line("ops"))

    index: dict[str, int] = {}
    values = np.zeros((len(ops), 4), dtype=np.float64)
    labels: list[str] = []
    for i, op in enumerate(ops):
        where = f"ops[{i}]"
        if not isinstance(op, dict):
            raise fail(f"{where} must be an object", field="ops", line=loc.key_line("ops"))
        op_id = op.get("id")
        line = loc.op_line(op_id)
        if not isinstance(op_id, str) or not op_id:
            raise fail(f"{where}: op id must be a non-empty string", field="id", line=line)
        if op_id in index:
            raise fail(f"duplicate op id {op_id!r}", field="id", line=loc.op_line(op_id, occurrence=1))
        for j, key in enumerate(OP_NUMBER_FIELDS):
            if key not in op:
                raise fail(f"op {op_id!r}: missing field", field=key, line=line)
            value = op[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise fail(f"op {op_id!r}: not a number: {value!r}", field=key, line=line)
            if math.isnan(value) or math.isinf(value):
                raise fail(f"op {op_id!r}: value is {value}", field=key, line=line)
            if value < 0:
                raise fail(f"op {op_id!r}: negative value {value}", field=key, line=line)
            values[i, j] = float(value)
        index[op_id] = i
        labels.append(str(op.get("label", op_id)))

    edges_in = doc["edges"]
    if not isinstance(edges_in, list):
        raise fail("must be a list of [src, dst] pairs", field="edges", line=loc.key_line("edges"))
    edges: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    for k, edge in enumerate(edges_in):
        if isinstance(edge, dict):
            src, dst = edge.get("src"), edge.get("dst")
        elif isinstance(edge, list) and len(edge) == 2:
            src, dst = edge
        else:
            raise fail(f"edges[{k}] must be [src, dst] or {{'src':..,'dst':..}}, got {edge!r}",
                       field="edges", line=loc.key_line("edges"))
        line = loc.edge_line(src, dst) or loc.key_line("edges")
        for end, node in (("src", src), ("dst", dst)):
            if node not in index:
                raise fail(f"edges[{k}] refers to unknown op {node!r}", field=end, line=line)
        pair = (index[src], index[dst])
        if pair[0] == pair[1]:
            raise fail(f"edges[{k}] is a self-loop on {src!r}", field="edges", line=line)
        if pair in seen:
            raise fail(f"duplicate edge {src!r} -> {dst!r}", field="edges", line=line)
        seen.add(pair)
        edges.append(pair)
    edge_arr = np.array(edges, dtype=np.int64).reshape(-1, 2)
    try:
        topological_order(len(ops), edge_arr)
    except ValueError:
        from workloads.pipedream import _cycle_message

        raise fail(_cycle_message(list(index), edges), field="edges", line=loc.key_line("edges")) from None

    if "loss_op" in doc and doc["loss_op"] is not None:
        if doc["loss_op"] not in index:
            raise fail(f"unknown op {doc['loss_op']!r}", field="loss_op", line=loc.key_line("loss_op"))
        loss_index = index[doc["loss_op"]]
    else:
        has_succ = {s for s, _ in edges}
        loss_index = max(i for i in range(len(ops)) if i not in has_succ)
    return OpGraph(
        name=doc["name"], op_ids=tuple(index), labels=tuple(labels),
        forward_time_s=values[:, 0], backward_time_s=values[:, 1],
        activation_bytes=values[:, 2], parameter_bytes=values[:, 3],
        edges=edge_arr, loss_index=loss_index, source=str(path),
    )


def load_json_graph(path: str | Path) -> OpGraph:
    """Load and validate a pacml JSON graph file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise WorkloadError(f"cannot read graph file: {exc.strerror}", path=path) from None
    return parse_json_graph(text, path=path)


def graph_to_json(graph: OpGraph, *, notes: str | None = None) -> str:
    """Serialise a graph in the pacml JSON format (one op per line, diff-friendly)."""
    ops = [
        {
            "id": op_id, "label": label,
            "forward_time_s": float(graph.forward_time_s[i]),
            "backward_time_s": float(graph.backward_time_s[i]),
            "activation_bytes": float(graph.activation_bytes[i]),
            "parameter_bytes": float(graph.parameter_bytes[i]),
        }
        for i, (op_id, label) in enumerate(zip(graph.op_ids, graph.labels, strict=True))
    ]
    head = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "name": graph.name,
            "loss_op": graph.op_ids[graph.loss_index], "source": graph.source}
    if notes:
        head["notes"] = notes
    lines = ["{"]
    lines += [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    lines.append('  "ops": [')
    lines.append(",\n".join(f"    {json.dumps(op)}" for op in ops))
    lines.append("  ],")
    lines.append('  "edges": [')
    lines.append(",\n".join(f"    [{json.dumps(graph.op_ids[s])}, {json.dumps(graph.op_ids[d])}]"
                            for s, d in graph.edges.tolist()))
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_json_graph(graph: OpGraph, path: str | Path, *, notes: str | None = None) -> Path:
    """Write ``graph`` to ``path`` atomically in the pacml JSON format; returns the path."""
    path = Path(path)
    atomic_write_text(path, graph_to_json(graph, notes=notes))
    return path
