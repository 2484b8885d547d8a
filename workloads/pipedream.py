"""Loader for PipeDream profiler ``graph.txt`` files (spec §2.2), read strictly so that no bad
value is silently read as something else.

Syntax and rules: docs/workloads.md ("Graph formats"). Times are milliseconds in the profiles;
``time_unit_s`` converts them. Every error names the file, line and field.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from workloads.errors import WorkloadError
from workloads.graph import MAX_OP_BYTES, MAX_OP_TIME_S, OpGraph, cycle_error
from workloads.io import read_text, show

#: Unit of PipeDream profile times, in seconds (the profiler reports milliseconds).
PIPEDREAM_TIME_UNIT_S = 1e-3

_FIELDS = ("forward_compute_time", "backward_compute_time", "activation_size", "parameter_size")
#: Largest accepted raw value per field (profile milliseconds for times, bytes for sizes).
_BOUNDS = {"forward_compute_time": MAX_OP_TIME_S / PIPEDREAM_TIME_UNIT_S,
           "backward_compute_time": MAX_OP_TIME_S / PIPEDREAM_TIME_UNIT_S,
           "activation_size": MAX_OP_BYTES, "parameter_size": MAX_OP_BYTES}
# A plain decimal number: no '1_000', 'inf', 'nan' or hex, which float() would also take.
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,4})?")
# node ids are node<integer>; more than 18 digits cannot be a real profile (and int() of
# thousands of digits is refused by Python).
_NODE_ID = re.compile(r"node\d{1,18}")
_KEY = re.compile(r"[A-Za-z_]\w*")
# The usual node line in one match (a fast path: 50,000-op graphs load in well under a second).
# Anything else (lists, stage ids, signs, errors) goes through the strict field-by-field parser.
_UNSIGNED = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,4})?"
_PLAIN_NODE = re.compile(
    rf"(node\d{{1,18}}) -- (.*?) -- forward_compute_time=({_UNSIGNED}), backward_compute_time=({_UNSIGNED}), "
    rf"activation_size=({_UNSIGNED}), parameter_size=({_UNSIGNED})")


def _number(text: str, *, path: Path, line: int, field: str) -> float:
    """One field value: a number, or a ``[a; b; ...]`` list of numbers (summed)."""
    text = text.strip()
    if text.startswith("[") or text.endswith("]"):
        if not (text.startswith("[") and text.endswith("]")):
            raise WorkloadError(f"unclosed list {show(text)}", path=path, line=line, field=field)
        parts = [p.strip() for p in text[1:-1].split(";")]
        if not all(_NUMBER.fullmatch(p) for p in parts):
            raise WorkloadError(f"not a list of numbers separated by ';': {show(text)}", path=path,
                                line=line, field=field)
        value = sum(float(p) for p in parts)
    elif _NUMBER.fullmatch(text):
        value = float(text)
    else:
        raise WorkloadError(f"not a number: {show(text)}", path=path, line=line, field=field)
    if value < 0:
        raise WorkloadError(f"negative value {value}", path=path, line=line, field=field)
    if not value <= _BOUNDS[field]:  # also catches inf from 1e999
        raise WorkloadError(f"value {value:g} above the limit {_BOUNDS[field]:g} (clearly not a profile)",
                            path=path, line=line, field=field)
    return value


def _fields(meta: str, *, path: Path, line: int) -> dict[str, str]:
    """Split ``key=value, key=value, ...`` strictly: every piece must be one known key's value."""
    out: dict[str, str] = {}
    last: str | None = None
    # List items are separated by ';', so every ',' separates fields (a ',' inside '[...]' is an
    # unclosed list or a list written with commas: both errors below).
    for piece in meta.split(","):
        key, eq, value = piece.partition("=")
        key = key.strip()
        if not eq or not _KEY.fullmatch(key):
            if last is not None:  # '1,5': a decimal comma, or a stray piece after a value
                raise WorkloadError(f"not a number: {show(out[last] + ',' + piece)} (fields are separated "
                                    "by ', ' and decimals use '.')", path=path, line=line, field=last)
            raise WorkloadError(f"malformed field {show(piece.strip())} (expected key=value)",
                                path=path, line=line)
        if key not in _FIELDS:
            raise WorkloadError(f"unknown field (expected {', '.join(_FIELDS)})", path=path, line=line,
                                field=key)
        if key in out:
            raise WorkloadError("field given twice", path=path, line=line, field=key)
        out[key] = value.strip()
        last = key
    missing = [f for f in _FIELDS if f not in out]
    if missing:
        raise WorkloadError(f"missing {', '.join(missing)}", path=path, line=line, field=missing[0])
    return out


def load_pipedream(path: str | Path, *, name: str | None = None,
                   time_unit_s: float = PIPEDREAM_TIME_UNIT_S) -> OpGraph:
    """Parse a PipeDream ``graph.txt`` into an :class:`OpGraph` (times in seconds).

    Args:
        path: The ``graph.txt`` file.
        name: Model name; defaults to the parent directory name (``profiles/<model>/graph.txt``)
            or the file stem.
        time_unit_s: Seconds per profile time unit (1e-3 for real PipeDream profiles; the
            ``paper`` preset uses 1.0, treating profile numbers as the time unit, spec §9.1).
            The graph records the real unit of its times (``PIPEDREAM_TIME_UNIT_S / time_unit_s``
            seconds: profile numbers are milliseconds).

    Raises:
        WorkloadError: On any malformed line, unknown node, self-loop, duplicate edge, cycle or
            bad value; the message names the file, the line and the field.
    """
    path = Path(path)
    if name is None:
        name = path.parent.name if path.stem == "graph" else path.stem
    if not (0 < time_unit_s < float("inf")):
        raise WorkloadError(f"time unit must be a positive number of seconds, got {time_unit_s}",
                            path=path, field="time_unit_s")
    text = read_text(path)

    ids: list[str] = []
    labels: list[str] = []
    values: list[tuple[float, float, float, float]] = []
    index: dict[str, int] = {}
    edges: list[tuple[int, int]] = []
    edge_line: dict[tuple[int, int], int] = {}
    # Split on '\n' only (str.splitlines also splits on form feeds, U+2028 ...), so that line
    # numbers are those an editor shows.
    for lineno, raw in enumerate(text.split("\n"), start=1):
        raw = raw.rstrip("\r")
        if not raw.strip():
            continue
        tokens = [t.strip() for t in raw.strip().split(" -- ")]
        if raw.startswith("\t") or (len(tokens) == 2 and not any("=" in t for t in tokens)):
            if len(tokens) != 2 or not all(tokens):
                raise WorkloadError(f"malformed edge line {show(raw.strip())} (expected 'nodeA -- nodeB')",
                                    path=path, line=lineno)
            for end, tok in zip(("src", "dst"), tokens, strict=True):
                if tok not in index:
                    raise WorkloadError(f"edge refers to unknown node {show(tok)}", path=path,
                                        line=lineno, field=end)
            pair = (index[tokens[0]], index[tokens[1]])
            if pair[0] == pair[1]:
                raise WorkloadError(f"self-loop on {tokens[0]}", path=path, line=lineno)
            if pair in edge_line:
                raise WorkloadError(f"duplicate edge {tokens[0]} -> {tokens[1]} (first on line "
                                    f"{edge_line[pair]})", path=path, line=lineno)
            edge_line[pair] = lineno
            edges.append(pair)
            continue
        if edges:
            raise WorkloadError("node line after edge lines", path=path, line=lineno)
        plain = _PLAIN_NODE.fullmatch(raw.strip()) if raw.count("forward_compute_time") == 1 else None
        if plain is not None:
            node_id, label, *numbers = plain.groups()
            row = tuple(float(x) for x in numbers)
            if node_id not in index and all(v <= _BOUNDS[f] for v, f in zip(row, _FIELDS, strict=True)):
                index[node_id] = len(ids)
                ids.append(node_id)
                labels.append(label.strip())
                values.append(row)  # type: ignore[arg-type]
                continue
        meta_pos = next((i for i, t in enumerate(tokens) if "forward_compute_time" in t), None)
        if len(tokens) < 2 or meta_pos is None or meta_pos == 0:
            raise WorkloadError(
                "malformed node line (expected 'nodeID -- description -- forward_compute_time=..., ...')",
                path=path, line=lineno)
        node_id = tokens[0]
        if not _NODE_ID.fullmatch(node_id):
            raise WorkloadError(f"bad node id {show(node_id)} (expected node<integer>)", path=path,
                                line=lineno, field="id")
        if node_id in index:
            raise WorkloadError(f"duplicate node id {node_id!r}", path=path, line=lineno, field="id")
        for extra in tokens[meta_pos + 1:]:
            if not re.fullmatch(r"stage_id=\d{1,9}", extra):
                raise WorkloadError(f"unexpected text after the fields: {show(extra)}", path=path,
                                    line=lineno)
        kv = _fields(tokens[meta_pos], path=path, line=lineno)
        fwd, bwd, act, par = (_number(kv[f], path=path, line=lineno, field=f) for f in _FIELDS)
        index[node_id] = len(ids)
        ids.append(node_id)
        labels.append(" -- ".join(tokens[1:meta_pos]))
        values.append((fwd, bwd, act, par))

    if not ids:
        raise WorkloadError("empty graph file (no node lines)" if not text.strip() else "no node lines found",
                            path=path, line=1)
    if (cycle := cycle_error(len(ids), edge_line, ids)) is not None:
        raise WorkloadError(cycle[0], path=path, line=cycle[1])
    edge_arr = np.array(edges, dtype=np.int64).reshape(-1, 2)
    # The original joins the backward pass at the op with the highest numeric id (the loss).
    loss_index = max(range(len(ids)), key=lambda i: int(ids[i][4:]))
    vals = np.array(values, dtype=np.float64)
    return OpGraph(
        name=name, op_ids=tuple(ids), labels=tuple(labels),
        forward_time_s=vals[:, 0] * time_unit_s, backward_time_s=vals[:, 1] * time_unit_s,
        activation_bytes=vals[:, 2], parameter_bytes=vals[:, 3],
        edges=edge_arr, loss_index=loss_index, source=str(path),
        time_unit_s=PIPEDREAM_TIME_UNIT_S / time_unit_s,
    )
