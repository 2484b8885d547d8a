"""``method=file``: evaluate a placement read from a JSON file (op name -> device name, or a
``placement.json`` of ``pacml place``) instead of searching for one; a file that is not a sound
placement is bad input (docs/op-placement.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError
from simulator.place.objectives import BoundObjective
from simulator.place.placer import PlacerResult, timed_place
from workloads.errors import WorkloadError
from workloads.io import line_of_offset

#: Largest placement file read (a placement of a 50,000-node graph is a few MB).
MAX_FILE_BYTES = 200_000_000


class FilePlacer:
    """The placement a JSON file gives (op name -> device name, or a ``placement.json`` of ``pacml
    place``), checked against graph and devices."""

    name = "file"

    def __init__(self, path: str) -> None:
        if not isinstance(path, str) or not path.strip():
            raise ConfigError(f"must be the path of a placement file, got {path!r}", field="method.path")
        self.path = Path(path).expanduser()

    def _read(self) -> tuple[dict[str, Any], str]:
        """The node -> device mapping and the file's text."""
        path = self.path
        if not path.is_file():
            raise WorkloadError("no such placement file", path=path, field="method.path")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise WorkloadError(f"larger than {MAX_FILE_BYTES:,} bytes: not a placement file", path=path)
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WorkloadError(f"not UTF-8 text (byte {exc.start})", path=path) from None
        except OSError as exc:
            raise WorkloadError(exc.strerror or str(exc), path=path) from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"not JSON: {exc.msg}", path=path, line=exc.lineno) from None
        except RecursionError:
            raise WorkloadError("not JSON: nested too deeply", path=path) from None
        if isinstance(doc, dict) and isinstance(doc.get("placement"), dict):
            doc = doc["placement"]
        if not isinstance(doc, dict) or not doc:
            raise WorkloadError("expected a JSON object mapping op names to device names "
                                "(or a placement.json with a 'placement' object)", path=path, line=1)
        return doc, text

    def _line(self, text: str, key: str) -> int | None:
        match = re.search(re.escape(json.dumps(key)) + r"\s*:", text)
        return None if match is None else line_of_offset(text, match.start())

    def load(self, objective: BoundObjective) -> NDArray[np.int64]:
        """The file's placement as device indices; raises :class:`WorkloadError` on any fault."""
        mapping, text = self._read()
        g, devices = objective.graph, objective.devices
        index = {name: i for i, name in enumerate(g.node_names)}
        device_index = {name: i for i, name in enumerate(devices.names)}
        placement = np.full(g.num_nodes, -1, dtype=np.int64)
        for node, device in mapping.items():
            where = {"path": self.path, "line": self._line(text, node)}
            if node not in index:
                raise WorkloadError(f"graph {g.name!r} has no op {node!r}", **where)
            if not isinstance(device, str) or device not in device_index:
                raise WorkloadError(f"op {node!r}: no device {device!r} (devices: {', '.join(devices.names)})",
                                    **where)
            placement[index[node]] = device_index[device]
        missing = np.flatnonzero(placement < 0)
        if len(missing):
            names = ", ".join(repr(g.node_names[i]) for i in missing[:3])
            raise WorkloadError(f"{len(missing)} of {g.num_nodes} ops have no device (e.g. {names})", path=self.path)
        for members in g.group_members:
            on = np.unique(placement[members])
            if len(on) > 1:
                a, b = (members[np.flatnonzero(placement[members] == d)[0]] for d in on[:2])
                raise WorkloadError(
                    f"ops {g.node_names[a]!r} and {g.node_names[b]!r} form one group (an op and its backward "
                    f"mirror, or a colour class) but are on {devices.names[on[0]]!r} and {devices.names[on[1]]!r}",
                    path=self.path, line=self._line(text, g.node_names[b]))
        reason = objective.infeasibility(placement)
        if reason:
            raise WorkloadError(f"infeasible placement: {reason}", path=self.path)
        return placement

    def check(self, objective: BoundObjective) -> None:
        """Before any work: the file must be a sound placement for this graph and these devices."""
        self.load(objective)

    @timed_place
    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """The file's placement (one evaluation, to count it like every other method)."""
        p = self.load(objective)
        objective.value(p)
        return PlacerResult(p, info={"path": str(self.path)})
