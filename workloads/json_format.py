"""The pacml JSON graph format: loader, writer and validator.

Version 1 holds one profiled forward graph (:class:`OpGraph`; the training graph is derived from
it), version 2 a :class:`~workloads.compute_graph.ComputeGraph` as an op placer sees it. Any
unknown or repeated key is an error naming the file, line, op and field (:class:`WorkloadError`).
Field by field: docs/workloads.md ("The pacml JSON graph format").
"""

from __future__ import annotations

import difflib
import json
import math
import re
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from workloads.compute_graph import ComputeGraph
from workloads.errors import WorkloadError
from workloads.graph import MAX_OP_BYTES, MAX_OP_TIME_S, TIME_UNIT_RANGE_S, OpGraph, cycle_error
from workloads.io import atomic_write_text, line_of_offset, read_text, show

FORMAT_NAME = "pacml-graph"
FORMAT_VERSION = 1
#: Version of the computation-graph form (explicit nodes, per-kind times, groups, edge costs).
COMPUTE_FORMAT_VERSION = 2
SUPPORTED_VERSIONS = (FORMAT_VERSION, COMPUTE_FORMAT_VERSION)
OP_NUMBER_FIELDS = ("forward_time_s", "backward_time_s", "activation_bytes", "parameter_bytes")
TOP_LEVEL_KEYS = ("format", "version", "name", "time_unit_s", "loss_op", "source", "notes", "ops", "edges")
OP_KEYS = ("id", "label", *OP_NUMBER_FIELDS)
#: Deepest nesting a graph document can need is 4 (document, ops, op, edge); anything far deeper is
#: junk, and would exhaust the parser's recursion.
MAX_NESTING = 100
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DECODER = json.JSONDecoder()
_BRACKET_OR_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


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


class Locator:
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
            try:
                end = _DECODER.raw_decode(self.text, pos)[1]
            except ValueError:  # the key matched inside a string: no element to point at
                return None
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
        for m in _BRACKET_OR_STRING.finditer(self.text):
            depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(m.group(), 0)
            if depth > MAX_NESTING:
                return self.line_of(m.start())
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


def parse_json_document(text: str, *, path: str | Path = "<string>") -> Any:
    """Parse JSON text strictly: a key given twice, nesting deeper than :data:`MAX_NESTING` or an
    integer literal beyond Python's limit is an error naming the line (the json module would keep
    the last key silently, or raise ``RecursionError``).

    Raises:
        WorkloadError: naming the file and line.
    """
    loc = Locator(text)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"invalid JSON: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno) from None
    except _DuplicateKey as exc:
        key = str(exc)
        m = list(re.finditer(re.escape(json.dumps(key)) + r"\s*:", text))
        line = loc.line_of(m[1].start()) if len(m) > 1 else None
        raise WorkloadError("key given twice in one object", path=path, field=key, line=line) from None
    except RecursionError:
        raise WorkloadError(f"JSON nested more than {MAX_NESTING} deep", path=path,
                            line=loc.nesting_line()) from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's 4300-digit limit
        m = re.search(r"\d{1000,}", text)
        raise WorkloadError(f"invalid JSON: {str(exc).split(';')[0]}", path=path,
                            line=loc.line_of(m.start()) if m else None) from None


def _notes_and_time_unit(doc: dict, loc: Any, fail: Any) -> float:
    """Check the optional ``source`` and ``notes`` (strings) and return ``time_unit_s`` (default 1:
    files written before the field existed are in seconds, as the format always said)."""
    for key in ("source", "notes"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise fail(f"must be a string, got {show(doc[key])}", field=key, line=loc.key_line(key))
    time_unit_s = doc.get("time_unit_s", 1.0)
    if (isinstance(time_unit_s, bool) or not isinstance(time_unit_s, int | float)
            or not TIME_UNIT_RANGE_S[0] <= time_unit_s <= TIME_UNIT_RANGE_S[1]):
        raise fail(f"must be a number of seconds in [{TIME_UNIT_RANGE_S[0]:g}, {TIME_UNIT_RANGE_S[1]:g}], "
                   f"got {show(time_unit_s)}", field="time_unit_s", line=loc.key_line("time_unit_s"))
    return float(time_unit_s)


def _object_document(text: str, path: str | Path, document: Any) -> dict:
    """``document`` (or ``text`` parsed), which must be a JSON object."""
    doc = parse_json_document(text, path=path) if document is None else document
    if not isinstance(doc, dict):
        raise WorkloadError("top level must be a JSON object", path=path, line=1)
    return doc


def json_document_version(doc: Any) -> int | None:
    """The ``version`` of a pacml JSON document if it is one this module reads, else ``None``."""
    if isinstance(doc, dict):
        version = doc.get("version")
        if type(version) is int and version in SUPPORTED_VERSIONS:  # not True, not 1.0
            return version
    return None


def parse_json_graph(text: str, *, path: str | Path = "<string>", document: Any = None) -> OpGraph:
    """Validate and convert the text of a pacml JSON graph (version 1) into an :class:`OpGraph`.

    Linear in the size of the document: line numbers are looked up only for the error raised.
    ``document`` is the already parsed ``text`` (saves parsing it twice).

    Raises:
        WorkloadError: naming the file, line, op and field of the first problem found.
    """
    loc = Locator(text)
    fail = partial(WorkloadError, path=path)  # fail(message, field=, line=)
    doc = _object_document(text, path, document)
    if json_document_version(doc) == COMPUTE_FORMAT_VERSION:
        raise fail("version 2 is a computation graph: read it with workloads.loaders.load_graph or "
                   "load_compute_graph", field="version", line=loc.key_line("version"))
    if "version" in doc and json_document_version(doc) is None:  # before the keys: they depend on it
        raise fail(f"unsupported version {show(doc['version'])} (this reader supports "
                   f"{' and '.join(map(str, SUPPORTED_VERSIONS))})", field="version", line=loc.key_line("version"))
    for key in doc:
        if key not in TOP_LEVEL_KEYS:
            raise fail(f"unknown key{_suggest(key, TOP_LEVEL_KEYS)}", field=key, line=loc.key_line(key))
    for key in ("format", "version", "name", "ops", "edges"):
        if key not in doc:
            raise fail("missing required field", field=key, line=1)
    if doc["format"] != FORMAT_NAME:
        raise fail(f"expected {FORMAT_NAME!r}, got {show(doc['format'])}", field="format", line=loc.key_line("format"))
    if not isinstance(doc["name"], str) or not doc["name"].strip() or _CONTROL.search(doc["name"]):
        raise fail("must be a non-empty string without control characters", field="name", line=loc.key_line("name"))
    time_unit_s = _notes_and_time_unit(doc, loc, fail)
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
        def op_fail(message: str, key: str, i: int = i) -> WorkloadError:
            return fail(message, field=key, line=loc.element_line("ops", i, "id"))

        op_id = op.get("id")
        if not isinstance(op_id, str) or not op_id or _CONTROL.search(op_id):
            raise op_fail(f"ops[{i}]: op id must be a non-empty string without control "
                          f"characters, got {show(op_id)}", "id")
        if op_id in index:
            raise op_fail(f"duplicate op id {op_id!r} (also ops[{index[op_id]}])", "id")
        if not known_op_keys.issuperset(op):
            key = next(k for k in op if k not in known_op_keys)
            raise op_fail(f"op {show(op_id)}: unknown key{_suggest(key, OP_KEYS)}", key)
        for j, key in enumerate(OP_NUMBER_FIELDS):
            if key not in op:
                raise op_fail(f"op {show(op_id)}: missing field", key)
            value = _number(op[key], bounds[j])
            if isinstance(value, str):
                raise op_fail(f"op {show(op_id)}: {value}", key)
            values[i, j] = value
        label = op.get("label", op_id)
        if not isinstance(label, str):
            raise op_fail(f"op {show(op_id)}: label must be a string, got {show(label)}", "label")
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
    if (cycle := cycle_error(len(ops), seen, list(index))) is not None:
        raise fail(cycle[0], field="edges", line=loc.element_line("edges", cycle[1]))
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
    edge_pairs = [[graph.op_ids[s], graph.op_ids[d]] for s, d in graph.edges.tolist()]
    return _document(head, "ops", ops, edge_pairs)


def _document(head: dict[str, Any], items_key: str, items: list[Any], edges: list[Any]) -> str:
    """A graph document laid out for diffs and reading: the header keys, then one op (or node)
    and one edge per line."""
    lines = ["{", *(f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()),
             f'  "{items_key}": [', ",\n".join(f"    {json.dumps(item)}" for item in items), "  ],",
             '  "edges": [', ",\n".join(f"    {json.dumps(edge)}" for edge in edges), "  ]", "}"]
    return "\n".join(lines) + "\n"


def write_json_graph(graph: OpGraph, path: str | Path, *, notes: str | None = None) -> Path:
    """Write ``graph`` to ``path`` atomically in the pacml JSON format; returns the path."""
    return atomic_write_text(path, graph_to_json(graph, notes=notes))


# ---------------------------------------------------------------- version 2: computation graphs
COMPUTE_TOP_LEVEL_KEYS = ("format", "version", "name", "time_unit_s", "kinds", "reference_kind", "devices",
                          "backward_after_forward", "origin_format", "source", "notes", "nodes", "edges")
COMPUTE_NODE_KEYS = ("id", "time", "memory_bytes", "backward", "group", "node_id", "colour_class")
COMPUTE_EDGE_KEYS = ("src", "dst", "bytes", "cost")
DEVICE_KEYS = ("max_accelerators", "accelerator_memory_bytes", "max_cpus")
#: Largest accelerator / CPU count of a file's own device set (as the dnn-partitioning reader).
MAX_DEVICE_COUNT = 4096
_KIND = re.compile(r"[a-z][a-z0-9_]{0,31}")


def parse_compute_graph(text: str, *, path: str | Path = "<string>", document: Any = None) -> ComputeGraph:
    """Validate and convert a version-2 pacml JSON document into a :class:`ComputeGraph`.

    See the module docstring for the fields. ``document`` is the already parsed ``text``.

    Raises:
        WorkloadError: naming the file, line, node or edge index and field of the first problem.
    """
    loc = Locator(text)
    path = str(path)
    fail = partial(WorkloadError, path=path)
    doc = _object_document(text, path, document)
    for key in doc:
        if key not in COMPUTE_TOP_LEVEL_KEYS:
            raise fail(f"unknown key{_suggest(key, COMPUTE_TOP_LEVEL_KEYS)}", field=key, line=loc.key_line(key))
    for key in ("format", "version", "name", "kinds", "reference_kind", "nodes", "edges"):
        if key not in doc:
            raise fail("missing required field", field=key, line=1)
    if doc["format"] != FORMAT_NAME:
        raise fail(f"expected {FORMAT_NAME!r}, got {show(doc['format'])}", field="format", line=loc.key_line("format"))
    if json_document_version(doc) != COMPUTE_FORMAT_VERSION:
        raise fail(f"expected {COMPUTE_FORMAT_VERSION}, got {show(doc['version'])}", field="version",
                   line=loc.key_line("version"))
    for key in ("name", "origin_format"):
        value = doc.get(key, "x")
        if not isinstance(value, str) or not value.strip() or _CONTROL.search(value):
            raise fail("must be a non-empty string without control characters", field=key, line=loc.key_line(key))
    time_unit_s = _notes_and_time_unit(doc, loc, fail)
    kinds = doc["kinds"]
    if (not isinstance(kinds, list) or not kinds or len(set(map(str, kinds))) != len(kinds)
            or not all(isinstance(k, str) and _KIND.fullmatch(k) for k in kinds)):
        raise fail(f"must be a non-empty list of distinct device kinds (lower-case names), got {show(kinds)}",
                   field="kinds", line=loc.key_line("kinds"))
    reference = doc["reference_kind"]
    if reference not in kinds:
        raise fail(f"must be one of the kinds {kinds}, got {show(reference)}", field="reference_kind",
                   line=loc.key_line("reference_kind"))
    meta: dict[str, object] = {"format": doc.get("origin_format", FORMAT_NAME)}
    devices = doc.get("devices")
    if devices is not None:
        if not isinstance(devices, dict) or set(devices) != set(DEVICE_KEYS):
            raise fail(f"must be an object with exactly the keys {', '.join(DEVICE_KEYS)}, got {show(devices)}",
                       field="devices", line=loc.key_line("devices"))
        for key in ("max_accelerators", "max_cpus"):
            value = devices[key]
            low = 1 if key == "max_accelerators" else 0
            if type(value) is not int or not low <= value <= MAX_DEVICE_COUNT:
                raise fail(f"must be an integer in {low}..{MAX_DEVICE_COUNT}, got {show(value)}",
                           field=f"devices.{key}", line=loc.key_line(key))
            meta[key] = value
        mem = _number(devices["accelerator_memory_bytes"], MAX_OP_BYTES)
        if isinstance(mem, str) or mem <= 0:
            raise fail(f"must be a number of bytes in (0, {MAX_OP_BYTES:g}], got "
                       f"{show(devices['accelerator_memory_bytes'])}", field="devices.accelerator_memory_bytes",
                       line=loc.key_line("accelerator_memory_bytes"))
        meta["accelerator_memory_bytes"] = float(mem)
    barrier = doc.get("backward_after_forward", False)
    if not isinstance(barrier, bool):
        raise fail(f"must be true or false, got {show(barrier)}", field="backward_after_forward",
                   line=loc.key_line("backward_after_forward"))

    nodes = doc["nodes"]
    if not isinstance(nodes, list) or not nodes:
        raise fail("must be a non-empty list of nodes", field="nodes", line=loc.key_line("nodes"))
    n = len(nodes)
    time_bound = MAX_OP_TIME_S / time_unit_s
    times = np.zeros((len(kinds), n), dtype=np.float64)
    memory = np.zeros(n, dtype=np.float64)
    backward = np.zeros(n, dtype=bool)
    group = np.zeros(n, dtype=np.int64)
    index: dict[str, int] = {}
    node_ids: list[int] = []
    colour: list[int | None] = []
    has_node_id = has_colour = False
    known_node_keys = frozenset(COMPUTE_NODE_KEYS)
    for i, node in enumerate(nodes):
        def node_fail(message: str, key: str, i: int = i) -> WorkloadError:
            return fail(f"nodes[{i}]: {message}", field=key, line=loc.element_line("nodes", i, key))

        if not isinstance(node, dict):
            raise fail(f"nodes[{i}] must be an object, got {show(node)}", field="nodes",
                       line=loc.element_line("nodes", i))
        if not known_node_keys.issuperset(node):
            key = next(k for k in node if k not in known_node_keys)
            raise node_fail(f"unknown key{_suggest(key, COMPUTE_NODE_KEYS)}", key)
        for key in ("id", "time", "memory_bytes", "backward", "group"):
            if key not in node:
                raise node_fail("missing field", key)
        node_name = node["id"]
        if not isinstance(node_name, str) or not node_name or _CONTROL.search(node_name):
            raise node_fail(f"must be a non-empty string without control characters, got {show(node_name)}", "id")
        if node_name in index:
            raise node_fail(f"duplicate node id {node_name!r} (also nodes[{index[node_name]}])", "id")
        index[node_name] = i
        node_time = node["time"]
        if not isinstance(node_time, dict) or set(node_time) != set(kinds):
            raise node_fail(f"must map exactly the kinds {kinds} to a time (null: cannot run there), "
                            f"got {show(node_time)}", "time")
        for k, kind in enumerate(kinds):
            value = node_time[kind]
            if value is None:
                times[k, i] = math.inf
                continue
            number = _number(value, time_bound)
            if isinstance(number, str):
                raise node_fail(f"kind {kind!r}: {number}", "time")
            times[k, i] = number * time_unit_s
        number = _number(node["memory_bytes"], MAX_OP_BYTES)
        if isinstance(number, str):
            raise node_fail(number, "memory_bytes")
        memory[i] = number
        if not isinstance(node["backward"], bool):
            raise node_fail(f"must be true or false, got {show(node['backward'])}", "backward")
        backward[i] = node["backward"]
        g = node["group"]
        if type(g) is not int or not 0 <= g < n:
            raise node_fail(f"must be an integer in 0..{n - 1}, got {show(g)}", "group")
        group[i] = g
        node_id = node.get("node_id")
        if node_id is not None and type(node_id) is not int:
            raise node_fail(f"must be an integer, got {show(node_id)}", "node_id")
        has_node_id |= node_id is not None
        node_ids.append(node_id)
        c = node.get("colour_class")
        if c is not None and type(c) is not int:
            raise node_fail(f"must be an integer or null, got {show(c)}", "colour_class")
        has_colour |= "colour_class" in node
        colour.append(c)
    used = np.zeros(n, dtype=bool)
    used[group] = True
    gmax = int(group.max())
    if not used[: gmax + 1].all():
        missing = int(np.flatnonzero(~used[: gmax + 1])[0])
        raise fail(f"groups must be numbered 0..G-1 with none left out; group {missing} has no node "
                   f"(largest is {gmax})", field="group", line=loc.key_line("nodes"))
    for k, kind in enumerate(kinds):
        if kind == reference and np.isinf(times[k]).all():
            raise fail(f"no node can run on the reference kind {kind!r}", field="reference_kind",
                       line=loc.key_line("reference_kind"))
    if has_node_id:
        if any(v is None for v in node_ids):
            i = node_ids.index(None)
            raise fail(f"nodes[{i}]: missing field (every node or none has one)", field="node_id",
                       line=loc.element_line("nodes", i))
        if len(set(node_ids)) != n:
            raise fail("node ids must be distinct", field="node_id", line=loc.key_line("nodes"))
        meta["node_ids"] = tuple(node_ids)
    if has_colour:
        meta["colour_class"] = tuple(colour)
    if "backward_after_forward" in doc:
        meta["backward_after_forward"] = barrier

    edges_in = doc["edges"]
    if not isinstance(edges_in, list):
        raise fail("must be a list of edges", field="edges", line=loc.key_line("edges"))
    pairs: list[tuple[int, int]] = []
    edge_bytes = np.full(len(edges_in), np.nan)
    edge_cost_s = np.full(len(edges_in), np.nan)
    seen: dict[tuple[int, int], int] = {}
    for k, edge in enumerate(edges_in):
        def edge_fail(message: str, key: str, k: int = k) -> WorkloadError:
            return fail(f"edges[{k}]: {message}", field=key, line=loc.element_line("edges", k))

        if not isinstance(edge, dict) or not {"src", "dst"} <= set(edge) or not set(edge) <= set(COMPUTE_EDGE_KEYS):
            raise edge_fail(f"must be an object with src, dst and optional bytes, cost; got {show(edge)}", "edges")
        ends = []
        for end in ("src", "dst"):
            if not isinstance(edge[end], str) or edge[end] not in index:
                raise edge_fail(f"unknown node {show(edge[end])}", end)
            ends.append(index[edge[end]])
        pair = (ends[0], ends[1])
        if pair[0] == pair[1]:
            raise edge_fail(f"self-loop on {edge['src']!r}", "edges")
        if pair in seen:
            raise edge_fail(f"duplicate edge {edge['src']!r} -> {edge['dst']!r} (also edges[{seen[pair]}])", "edges")
        seen[pair] = k
        pairs.append(pair)
        for key, bound, out, scale in (("bytes", MAX_OP_BYTES, edge_bytes, 1.0),
                                       ("cost", time_bound, edge_cost_s, time_unit_s)):
            if edge.get(key) is not None:
                number = _number(edge[key], bound)
                if isinstance(number, str):
                    raise edge_fail(number, key)
                out[k] = number * scale
    if (cycle := cycle_error(n, seen, list(index))) is not None:
        raise fail(cycle[0], field="edges", line=loc.element_line("edges", cycle[1]))
    return ComputeGraph(
        name=doc["name"], node_names=tuple(index),
        kind_time_s={kind: times[k] for k, kind in enumerate(kinds)}, reference_kind=reference,
        memory_bytes=memory, is_backward=backward, group=group,
        edges=np.array(pairs, dtype=np.int64).reshape(-1, 2), edge_bytes=edge_bytes, edge_cost_s=edge_cost_s,
        source=path, meta=meta)


def _finite_or_none(value: float) -> float | None:
    return None if not math.isfinite(value) else float(value)


def compute_graph_to_json(graph: ComputeGraph, *, notes: str | None = None) -> str:
    """Serialise a :class:`ComputeGraph` as a version-2 pacml JSON document (one node per line).

    Everything the graph holds comes back from :func:`parse_compute_graph` unchanged (same
    :attr:`~ComputeGraph.fingerprint`): per-kind times in seconds (``null`` for ``inf``), memory,
    backward flags, groups, edge bytes and costs (``null`` for ``nan``), and the file's own device
    set, node ids and colour classes when the graph came from a dnn-partitioning file.

    Raises:
        WorkloadError: If node names are not distinct (a placement names nodes by them).
    """
    if len(set(graph.node_names)) != graph.num_nodes:
        raise WorkloadError("node names must be distinct to be written as node ids", path=graph.source)
    meta = graph.meta
    kinds = list(graph.kind_time_s)
    head: dict[str, object] = {"format": FORMAT_NAME, "version": COMPUTE_FORMAT_VERSION, "name": graph.name,
                               "time_unit_s": 1.0, "kinds": kinds, "reference_kind": graph.reference_kind}
    if all(k in meta for k in DEVICE_KEYS):
        head["devices"] = {"max_accelerators": int(meta["max_accelerators"]),
                           "accelerator_memory_bytes": float(meta["accelerator_memory_bytes"]),
                           "max_cpus": int(meta["max_cpus"])}
    if "backward_after_forward" in meta:
        head["backward_after_forward"] = bool(meta["backward_after_forward"])
    if isinstance(meta.get("format"), str) and meta["format"] != FORMAT_NAME:
        head["origin_format"] = meta["format"]
    head["source"] = graph.source
    if notes:
        head["notes"] = notes
    node_ids = meta.get("node_ids")
    colour = meta.get("colour_class")
    nodes = []
    for i, node_name in enumerate(graph.node_names):
        node: dict[str, object] = {
            "id": node_name, "time": {k: _finite_or_none(graph.kind_time_s[k][i]) for k in kinds},
            "memory_bytes": float(graph.memory_bytes[i]), "backward": bool(graph.is_backward[i]),
            "group": int(graph.group[i])}
        if node_ids is not None:
            node["node_id"] = int(node_ids[i])
        if colour is not None:
            node["colour_class"] = None if colour[i] is None else int(colour[i])
        nodes.append(node)
    edges = []
    for k, (s, d) in enumerate(graph.edges.tolist()):
        edge: dict[str, object] = {"src": graph.node_names[s], "dst": graph.node_names[d]}
        if not math.isnan(graph.edge_bytes[k]):
            edge["bytes"] = float(graph.edge_bytes[k])
        if not math.isnan(graph.edge_cost_s[k]):
            edge["cost"] = float(graph.edge_cost_s[k])
        edges.append(edge)
    return _document(head, "nodes", nodes, edges)


def write_compute_graph(graph: ComputeGraph, path: str | Path, *, notes: str | None = None) -> Path:
    """Write ``graph`` to ``path`` atomically as a version-2 pacml JSON document; returns the path."""
    return atomic_write_text(path, compute_graph_to_json(graph, notes=notes))
