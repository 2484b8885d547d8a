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

* ``format`` / ``version``: required; this module reads version 1 (the integer 1, not ``true``).
* ``name``: required model name.
* ``time_unit_s``: seconds per unit of the op times (optional; default 1.0, i.e. the times are
  seconds, as files written before the field existed always were). The writer always records it:
  a graph put on the paper scenario's clock (one PipeDream profile millisecond per unit) is
  written with ``1e-3``. Loaders for a scenario convert a file's times to the scenario's unit.
* ``ops``: required non-empty list; each op needs ``id`` (unique string), the two times and the
  two sizes (numbers >= 0; a time above ``MAX_OP_TIME_S`` seconds or a size above
  ``MAX_OP_BYTES`` bytes is rejected, see ``workloads.graph``). ``label`` is an optional string.
  Op order matters: it is the order in which ops are split and placed.
* ``edges``: required list of ``[src_id, dst_id]`` pairs (or ``{"src": .., "dst": ..}``);
  the graph must be acyclic.
* ``loss_op``: optional id of the op whose gradient starts the backward pass; default is the
  last op (in list order) with no successor.
* ``source``, ``notes``: optional free text.

Any other key (at the top or in an op), or a key given twice, is an error: a misspelt optional
key would otherwise be silently ignored. Errors name the file, the line, the op and the field
(:class:`WorkloadError`).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from workloads.errors import WorkloadError
from workloads.graph import MAX_OP_BYTES, MAX_OP_TIME_S, TIME_UNIT_RANGE_S, OpGraph, find_cycle
from workloads.io import atomic_write_text, line_of_offset, read_text, show

FORMAT_NAME = "pacml-graph"
FORMAT_VERSION = 1
OP_NUMBER_FIELDS = ("forward_time_s", "backward_time_s", "activation_bytes", "parameter_bytes")
TOP_LEVEL_KEYS = ("format", "version", "name", "time_unit_s", "loss_op", "source", "notes", "ops", "edges")
OP_KEYS = ("id", "label", *OP_NUMBER_FIELDS)
#: Deepest nesting a graph document can need is 4 (document, ops, op, edge); anything far deeper is
#: junk, and would exhaust the parser's recursion.
MAX_NESTING = 100
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: a key given twice is an error (json would keep the last silently)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _DuplicateKey(dup)
    return out


class _Locator:
    """Maps keys and list elements of a JSON document back to line numbers (for error messages).

    Only used once an error is found, so a valid document is never scanned twice.
    """

    def __init__(self, text: str) -> None:
        self.text = text

    def line_of(self, offset: int) -> int:
        return line_of_offset(self.text, offset)

    def key_line(self, key: str) -> int | None:
        m = re.search(re.escape(json.dumps(key)) + r"\s*:", self.text)
        return self.line_of(m.start()) if m else None

    def _skip_value(self, pos: int) -> int:
        """Offset just after the JSON value starting at ``pos`` (the text is valid JSON)."""
        text = self.text
        depth = 0
        i = pos
        while i < len(text):
            ch = text[i]
            if ch == '"':
                i += 1
                while i < len(text) and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
                if depth == 0:
                    return i + 1
            elif ch in "[{":
                depth += 1
            elif ch in "]}":
                if depth == 0:
                    return i
                depth -= 1
                if depth == 0:
                    return i + 1
            elif depth == 0 and ch in ", \t\r\n":
                return i
            i += 1
        return i

    def element_span(self, key: str, k: int) -> tuple[int, int] | None:
        """Offsets of element ``k`` of the top-level list ``key``."""
        m = re.search(re.escape(json.dumps(key)) + r"\s*:\s*\[", self.text)
        if not m:
            return None
        pos = m.end()
        for j in range(k + 1):
            while pos < len(self.text) and self.text[pos] in " \t\r\n,":
                pos += 1
            if pos >= len(self.text) or self.text[pos] == "]":
                return None
            end = self._skip_value(pos)
            if j == k:
                return pos, end
            pos = end
        return None

    def element_line(self, key: str, k: int, inner_key: str | None = None) -> int | None:
        """Line of element ``k`` of list ``key`` (of its ``inner_key`` if it has one), else of ``key``."""
        span = self.element_span(key, k)
        if span is None:
            return self.key_line(key)
        start, end = span
        if inner_key is not None:
            m = re.compile(re.escape(json.dumps(inner_key)) + r"\s*:").search(self.text, start, end)
            if m:
                return self.line_of(m.start())
        # The first token inside a list element (a pretty-printed pair puts '[' on its own line).
        m = re.compile(r"[^\s\[{]").search(self.text, start, end)
        return self.line_of(m.start() if m else start)

    def nesting_line(self) -> int:
        """Line where nesting first exceeds :data:`MAX_NESTING` (outside strings), else 1."""
        depth = 0
        in_string = escaped = False
        for i, ch in enumerate(self.text):
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch in "[{":
                depth += 1
                if depth > MAX_NESTING:
                    return self.line_of(i)
            elif ch in "]}":
                depth -= 1
        return 1


def _number(value: Any, bound: float) -> float | str:
    """``value`` as a float within ``[0, bound]``, or the reason it is not."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"not a number: {show(value)}"
    if isinstance(value, int):  # compare ints exactly: float(10**400) would overflow
        if value < 0:
            return f"negative value {value}"
        if value > bound:
            return f"value {show(value, 24)} above the limit {bound:g}"
        return float(value)
    if math.isnan(value) or math.isinf(value):
        return f"value is {value}"
    if value < 0:
        return f"negative value {value}"
    if value > bound:
        return f"value {value:g} above the limit {bound:g}"
    return value


def _suggest(key: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"


def parse_json_graph(text: str, *, path: str | Path = "<string>") -> OpGraph:
    """Validate and convert the text of a pacml JSON graph into an :class:`OpGraph`.

    Linear in the size of the document: line numbers are looked up only for the error raised.

    Raises:
        WorkloadError: naming the file, line, op and field of the first problem found.
    """
    loc = _Locator(text)

    def fail(message: str, *, field: str | None = None, line: int | None = None) -> WorkloadError:
        return WorkloadError(message, path=path, line=line, field=field)

    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise fail(f"invalid JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from None
    except _DuplicateKey as exc:
        key = str(exc)
        m = list(re.finditer(re.escape(json.dumps(key)) + r"\s*:", text))
        line = loc.line_of(m[1].start()) if len(m) > 1 else None
        raise fail("key given twice in one object", field=key, line=line) from None
    except RecursionError:
        raise fail(f"JSON nested more than {MAX_NESTING} deep", line=loc.nesting_line()) from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's 4300-digit limit
        m = re.search(r"\d{1000,}", text)
        raise fail(f"invalid JSON: {str(exc).split(';')[0]}", line=loc.line_of(m.start()) if m else None) from None

    if not isinstance(doc, dict):
        raise fail("top level must be a JSON object", line=1)
    for key in doc:
        if key not in TOP_LEVEL_KEYS:
            raise fail(f"unknown key{_suggest(key, TOP_LEVEL_KEYS)}", field=key, line=loc.key_line(key))
    for key in ("format", "version", "name", "ops", "edges"):
        if key not in doc:
            raise fail("missing required field", field=key, line=1)
    if doc["format"] != FORMAT_NAME:
        raise fail(f"expected {FORMAT_NAME!r}, got {show(doc['format'])}", field="format", line=loc.key_line("format"))
    version = doc["version"]
    if type(version) is not int or version != FORMAT_VERSION:  # not True, not 1.0
        raise fail(f"unsupported version {show(version)} (this reader supports {FORMAT_VERSION})",
                   field="version", line=loc.key_line("version"))
    if not isinstance(doc["name"], str) or not doc["name"].strip() or _CONTROL.search(doc["name"]):
        raise fail("must be a non-empty string without control characters", field="name", line=loc.key_line("name"))
    for key in ("source", "notes"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise fail(f"must be a string, got {show(doc[key])}", field=key, line=loc.key_line(key))
    # Files written before the field existed are in seconds, as the format always said.
    time_unit_s = doc.get("time_unit_s", 1.0)
    if (isinstance(time_unit_s, bool) or not isinstance(time_unit_s, int | float)
            or not TIME_UNIT_RANGE_S[0] <= time_unit_s <= TIME_UNIT_RANGE_S[1]):
        raise fail(f"must be a number of seconds in [{TIME_UNIT_RANGE_S[0]:g}, {TIME_UNIT_RANGE_S[1]:g}], "
                   f"got {show(time_unit_s)}", field="time_unit_s", line=loc.key_line("time_unit_s"))
    time_unit_s = float(time_unit_s)
    ops = doc["ops"]
    if not isinstance(ops, list) or not ops:
        raise fail("must be a non-empty list of ops", field="ops", line=loc.key_line("ops"))

    bounds = (MAX_OP_TIME_S / time_unit_s, MAX_OP_TIME_S / time_unit_s, MAX_OP_BYTES, MAX_OP_BYTES)
    index: dict[str, int] = {}
    values = np.zeros((len(ops), 4), dtype=np.float64)
    labels: list[str] = []
    known_op_keys = frozenset(OP_KEYS)
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            raise fail(f"ops[{i}] must be an object, got {show(op)}", field="ops", line=loc.element_line("ops", i))
        op_id = op.get("id")
        if not isinstance(op_id, str) or not op_id or _CONTROL.search(op_id):
            raise fail(f"ops[{i}]: op id must be a non-empty string without control characters, got "
                       f"{show(op_id)}", field="id", line=loc.element_line("ops", i, "id"))
        if op_id in index:
            raise fail(f"duplicate op id {op_id!r} (also ops[{index[op_id]}])", field="id",
                       line=loc.element_line("ops", i, "id"))
        if not known_op_keys.issuperset(op):
            key = next(k for k in op if k not in known_op_keys)
            raise fail(f"op {show(op_id)}: unknown key{_suggest(key, OP_KEYS)}", field=key,
                       line=loc.element_line("ops", i, "id"))
        for j, key in enumerate(OP_NUMBER_FIELDS):
            if key not in op:
                raise fail(f"op {show(op_id)}: missing field", field=key, line=loc.element_line("ops", i, "id"))
            value = _number(op[key], bounds[j])
            if isinstance(value, str):
                raise fail(f"op {show(op_id)}: {value}", field=key, line=loc.element_line("ops", i, "id"))
            values[i, j] = value
        label = op.get("label", op_id)
        if not isinstance(label, str):
            raise fail(f"op {show(op_id)}: label must be a string, got {show(label)}", field="label",
                       line=loc.element_line("ops", i, "id"))
        index[op_id] = i
        labels.append(label)

    edges_in = doc["edges"]
    if not isinstance(edges_in, list):
        raise fail("must be a list of [src, dst] pairs", field="edges", line=loc.key_line("edges"))
    edges: list[tuple[int, int]] = []
    seen: dict[tuple[int, int], int] = {}
    for k, edge in enumerate(edges_in):
        if isinstance(edge, dict) and set(edge) == {"src", "dst"}:
            src, dst = edge["src"], edge["dst"]
        elif isinstance(edge, list) and len(edge) == 2:
            src, dst = edge
        else:
            raise fail(f"edges[{k}] must be [src, dst] or {{'src':..,'dst':..}}, got {show(edge)}",
                       field="edges", line=loc.element_line("edges", k))
        for end, node in (("src", src), ("dst", dst)):
            if not isinstance(node, str) or node not in index:
                raise fail(f"edges[{k}] refers to unknown op {show(node)}", field=end,
                           line=loc.element_line("edges", k))
        pair = (index[src], index[dst])
        if pair[0] == pair[1]:
            raise fail(f"edges[{k}] is a self-loop on {src!r}", field="edges", line=loc.element_line("edges", k))
        if pair in seen:
            raise fail(f"duplicate edge {src!r} -> {dst!r} (also edges[{seen[pair]}])", field="edges",
                       line=loc.element_line("edges", k))
        seen[pair] = k
        edges.append(pair)
    cycle = find_cycle(len(ops), edges)
    if cycle is not None:
        ids = list(index)
        # Point at the cycle's last edge in file order: the one that closed it.
        closing = max(seen[(a, b)] for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True))
        raise fail("graph has a cycle: " + " -> ".join(ids[i] for i in [*cycle, cycle[0]]),
                   field="edges", line=loc.element_line("edges", closing))
    edge_arr = np.array(edges, dtype=np.int64).reshape(-1, 2)

    loss_op = doc.get("loss_op")
    if loss_op is not None:
        if not isinstance(loss_op, str) or loss_op not in index:
            raise fail(f"unknown op {show(loss_op)}", field="loss_op", line=loc.key_line("loss_op"))
        loss_index = index[loss_op]
    else:
        has_succ = np.zeros(len(ops), dtype=bool)
        has_succ[edge_arr[:, 0]] = True
        loss_index = int(np.flatnonzero(~has_succ)[-1])
    return OpGraph(
        name=doc["name"], op_ids=tuple(index), labels=tuple(labels),
        forward_time_s=values[:, 0], backward_time_s=values[:, 1],
        activation_bytes=values[:, 2], parameter_bytes=values[:, 3],
        edges=edge_arr, loss_index=loss_index, source=str(path), time_unit_s=time_unit_s,
    )


def load_json_graph(path: str | Path) -> OpGraph:
    """Load and validate a pacml JSON graph file (times in the file's own ``time_unit_s``)."""
    path = Path(path)
    # Control characters outside strings are JSON syntax errors, inside strings json rejects them.
    return parse_json_graph(read_text(path, allow_controls=True), path=path)


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
            "time_unit_s": graph.time_unit_s,
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
