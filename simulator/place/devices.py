"""Device sets for op placement: devices (kind, speed, memory) and the links between them.

Node times and link layouts (``full_mesh``, ``two_level``, ``host_accelerator``): docs/op-placement.md
("Devices"). Presets live in ``conf/devices/*.yaml`` and are built by :func:`device_set_from_config`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError

#: Kind of a host CPU: it pays no communication in the pipeline (max-load) objective.
CPU_KIND = "cpu"
#: Keys of each link layout (``links.type``, a :class:`DeviceSet` constructor) and their defaults.
LINK_DEFAULTS: dict[str, dict[str, float]] = {
    "full_mesh": {"bandwidth_Bps": 4e11, "latency_s": 2.5e-7},
    "two_level": {"devices_per_server": 8, "intra_bandwidth_Bps": 3e11, "intra_latency_s": 1e-6,
                  "inter_bandwidth_Bps": 2.5e10, "inter_latency_s": 5e-6},
    "host_accelerator": {"host_bandwidth_Bps": 2.5e10, "host_latency_s": 1e-5, "peer_bandwidth_Bps": 3e11,
                         "peer_latency_s": 2e-6},
}


@dataclass(frozen=True, slots=True)
class Device:
    """One device.

    Attributes:
        name: Unique name (e.g. ``gpu0``).
        kind: Device kind; devices of one kind are interchangeable up to speed and memory.
        speed: Speed relative to the graph's reference kind, used where the graph has no times of
            its own for this kind.
        memory_bytes: Memory capacity (``inf``: unlimited, e.g. host memory).
    """

    name: str
    kind: str
    speed: float = 1.0
    memory_bytes: float = math.inf


@dataclass(frozen=True, eq=False)
class DeviceSet:
    """Devices and their links.

    Attributes:
        name: Preset or description (``gpu4``, ``file``...).
        devices: The devices, in index order.
        bandwidth_Bps: ``(D, D)`` link bandwidth in bytes/s (diagonal unused).
        latency_s: ``(D, D)`` link latency in seconds (diagonal unused).
        links: Link layout name (see module docstring).
    """

    name: str
    devices: tuple[Device, ...]
    bandwidth_Bps: NDArray[np.float64]
    latency_s: NDArray[np.float64]
    links: str = "full_mesh"

    def __post_init__(self) -> None:
        d = len(self.devices)
        if d < 1:
            raise ConfigError("a device set needs at least one device", field="devices")
        names = [dev.name for dev in self.devices]
        if len(set(names)) != d:
            dup = next(n for n in names if names.count(n) > 1)
            raise ConfigError(f"device name {dup!r} used twice", field="devices")
        for dev in self.devices:
            if not (math.isfinite(dev.speed) and dev.speed > 0):
                raise ConfigError(f"device {dev.name!r}: speed must be a finite number > 0, got {dev.speed!r}",
                                  field="devices.speed")
            if not dev.memory_bytes > 0:
                raise ConfigError(f"device {dev.name!r}: memory must be > 0, got {dev.memory_bytes!r}",
                                  field="devices.memory_bytes")
        bw = np.array(self.bandwidth_Bps, dtype=np.float64)
        lat = np.array(self.latency_s, dtype=np.float64)
        if bw.shape != (d, d) or lat.shape != (d, d):
            raise ConfigError(f"link matrices must be {d}x{d}", field="devices.links")
        off = ~np.eye(d, dtype=bool)
        if d > 1 and (not (bw[off] > 0).all() or np.isnan(bw).any()):
            raise ConfigError("link bandwidth must be > 0", field="devices.links")
        if d > 1 and (not np.isfinite(lat[off]).all() or (lat[off] < 0).any()):
            raise ConfigError("link latency must be a finite number >= 0", field="devices.links")
        np.fill_diagonal(bw, np.inf)
        np.fill_diagonal(lat, 0.0)
        bw.setflags(write=False)
        lat.setflags(write=False)
        object.__setattr__(self, "bandwidth_Bps", bw)
        object.__setattr__(self, "latency_s", lat)

    @property
    def num_devices(self) -> int:
        """Number of devices."""
        return len(self.devices)

    @property
    def names(self) -> tuple[str, ...]:
        """Device names in index order."""
        return tuple(dev.name for dev in self.devices)

    @property
    def memory_bytes(self) -> NDArray[np.float64]:
        """Memory capacity of each device."""
        return np.array([dev.memory_bytes for dev in self.devices], dtype=np.float64)

    @property
    def is_cpu(self) -> NDArray[np.bool_]:
        """Whether each device is a host CPU."""
        return np.array([dev.kind == CPU_KIND for dev in self.devices], dtype=bool)

    def transfer_time_s(self, src: NDArray[np.int64], dst: NDArray[np.int64],
                        size_bytes: NDArray[np.float64]) -> NDArray[np.float64]:
        """Time of each transfer of ``size_bytes`` from device ``src`` to ``dst`` (0 on one device)."""
        t = self.latency_s[src, dst] + size_bytes / self.bandwidth_Bps[src, dst]
        return np.where((src == dst) | (size_bytes <= 0), 0.0, t)

    def describe(self) -> str:
        """One line: counts of each kind and the link layout."""
        kinds: dict[tuple[str, float, float], int] = {}
        for dev in self.devices:
            key = (dev.kind, dev.speed, dev.memory_bytes)
            kinds[key] = kinds.get(key, 0) + 1
        parts = [f"{n} x {k} (speed {s:g}, {'unlimited' if math.isinf(m) else f'{m / 1e9:g} GB'})"
                 for (k, s, m), n in kinds.items()]
        return f"{self.name}: {', '.join(parts)}; links {self.links}"

    # ------------------------------------------------------------------ constructors
    @classmethod
    def full_mesh(cls, name: str, devices: Sequence[Device], *, bandwidth_Bps: float,
                  latency_s: float) -> DeviceSet:
        """Every pair of devices joined by an identical link (RAMP)."""
        d = len(devices)
        return cls(name, tuple(devices), np.full((d, d), float(bandwidth_Bps)), np.full((d, d), float(latency_s)),
                   "full_mesh")

    @classmethod
    def two_level(cls, name: str, devices: Sequence[Device], *, devices_per_server: int,
                  intra_bandwidth_Bps: float, intra_latency_s: float, inter_bandwidth_Bps: float,
                  inter_latency_s: float) -> DeviceSet:
        """Fast links among the ``devices_per_server`` devices of a server, slower ones between."""
        d = len(devices)
        server = np.arange(d) // devices_per_server
        same = server[:, None] == server[None, :]
        return cls(name, tuple(devices), np.where(same, intra_bandwidth_Bps, inter_bandwidth_Bps),
                   np.where(same, intra_latency_s, inter_latency_s), "two_level")

    @classmethod
    def host_accelerator(cls, name: str, devices: Sequence[Device], *, host_bandwidth_Bps: float,
                         host_latency_s: float, peer_bandwidth_Bps: float, peer_latency_s: float) -> DeviceSet:
        """Hosts (kind ``cpu``) reach accelerators over host links; accelerators reach each other over peer links."""
        cpu = np.array([dev.kind == CPU_KIND for dev in devices], dtype=bool)
        host = cpu[:, None] | cpu[None, :]
        return cls(name, tuple(devices), np.where(host, host_bandwidth_Bps, peer_bandwidth_Bps),
                   np.where(host, host_latency_s, peer_latency_s), "host_accelerator")

    @classmethod
    def for_dnn_partitioning(cls, meta: Mapping[str, Any], *, name: str = "file") -> DeviceSet:
        """The device set a dnn-partitioning file brings: one CPU plus ``maxFPGAs`` accelerators.

        The CPU's memory is unlimited; each accelerator holds ``maxSizePerFPGA`` bytes. Links are
        never used for pricing (every edge of such a file has a fixed cost), so they are nominal.
        """
        count = int(meta["max_accelerators"])
        mem = float(meta["accelerator_memory_bytes"])
        devices = [Device("cpu", CPU_KIND, 1.0, math.inf)] + [
            Device(f"acc{i}", "accelerator", 1.0, mem) for i in range(count)]
        return cls.host_accelerator(name, devices, host_bandwidth_Bps=1.6e10, host_latency_s=0.0,
                                    peer_bandwidth_Bps=1.6e10, peer_latency_s=0.0)


# ---------------------------------------------------------------------- configs
def _num(cfg: Mapping[str, Any], key: str, where: str, *, positive: bool = True, default: Any = None) -> float:
    value = cfg.get(key, default)
    if isinstance(value, str):  # plain YAML reads 80.0e9 as a string; OmegaConf as a float
        with contextlib.suppress(ValueError):
            value = float(value.strip().replace(".inf", "inf"))
    ok = isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value) and (
        value > 0 if positive else value >= 0)
    if not ok:
        raise ConfigError(f"must be a number {'> 0' if positive else '>= 0'}, got {value!r}", field=f"{where}.{key}")
    return float(value)


def device_set_from_config(cfg: Mapping[str, Any], *, where: str = "devices") -> DeviceSet:
    """Build a device set from a preset mapping (``conf/devices/*.yaml``): ``name``, ``groups``
    (``{kind, count, speed, memory_bytes, prefix}``), ``links`` (:data:`LINK_DEFAULTS`); a
    ConfigError names the key at fault."""
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"expected a mapping, got {cfg!r}", field=where)
    allowed = {"name", "groups", "links", "description"}
    unknown = sorted(set(cfg) - allowed)
    if unknown:
        raise ConfigError(f"unknown key (expected one of {', '.join(sorted(allowed))})", field=f"{where}.{unknown[0]}")
    groups = cfg.get("groups")
    if not isinstance(groups, Sequence) or isinstance(groups, str) or not groups:
        raise ConfigError("expected a non-empty list of device groups", field=f"{where}.groups")
    devices: list[Device] = []
    for i, grp in enumerate(groups):
        gw = f"{where}.groups[{i}]"
        if not isinstance(grp, Mapping):
            raise ConfigError(f"expected a mapping, got {grp!r}", field=gw)
        unknown = sorted(set(grp) - {"kind", "count", "speed", "memory_bytes", "prefix"})
        if unknown:
            raise ConfigError("unknown key (expected kind, count, speed, memory_bytes, prefix)", field=f"{gw}.{unknown[0]}")
        kind = grp.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"expected a device kind name, got {kind!r}", field=f"{gw}.kind")
        count = grp.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 4096:
            raise ConfigError(f"must be an integer in 1..4096, got {count!r}", field=f"{gw}.count")
        speed = _num(grp, "speed", gw, default=1.0)
        if math.isinf(speed):
            raise ConfigError("must be finite", field=f"{gw}.speed")
        memory = _num(grp, "memory_bytes", gw, default=math.inf)
        prefix = grp.get("prefix", kind)
        if not isinstance(prefix, str) or not prefix:
            raise ConfigError(f"expected a name prefix, got {prefix!r}", field=f"{gw}.prefix")
        start = sum(1 for dev in devices if dev.name.startswith(prefix))
        devices += [Device(f"{prefix}{start + k}", kind, speed, memory) for k in range(count)]
    if len(devices) > 4096:
        raise ConfigError(f"at most 4096 devices, got {len(devices)}", field=f"{where}.groups")
    links = cfg.get("links", {"type": "full_mesh"})
    if not isinstance(links, Mapping):
        raise ConfigError(f"expected a mapping with a 'type', got {links!r}", field=f"{where}.links")
    kind = links.get("type", "full_mesh")
    lw = f"{where}.links"
    if kind not in LINK_DEFAULTS:
        raise ConfigError(f"unknown link layout {kind!r} (expected {', '.join(LINK_DEFAULTS)})", field=f"{lw}.type")
    unknown = sorted(set(links) - {"type", *LINK_DEFAULTS[kind]})
    if unknown:
        raise ConfigError(f"unknown key for {kind} (expected {', '.join(LINK_DEFAULTS[kind])})",
                          field=f"{lw}.{unknown[0]}")
    args: dict[str, Any] = {}
    for key, default in LINK_DEFAULTS[kind].items():
        if key == "devices_per_server":
            per = links.get(key, default)
            if isinstance(per, bool) or not isinstance(per, int) or per < 1:
                raise ConfigError(f"must be an integer >= 1, got {per!r}", field=f"{lw}.{key}")
            args[key] = per
        else:
            args[key] = _num(links, key, lw, positive=not key.endswith("latency_s"), default=default)
    return getattr(DeviceSet, kind)(str(cfg.get("name", "devices")), devices, **args)


def ramp_block_devices(topology: Any, servers: Sequence[int], *, name: str = "ramp_block") -> DeviceSet:
    """The servers of a RAMP block as a device set: one GPU each, of the server's kind, speed and
    memory, and the cluster simulator's point-to-point link (propagation + 2 x I/O latency, one
    transceiver's bandwidth)."""
    devices = [Device(f"server{s}", topology.server_kind[s], float(topology.server_speed[s]),
                      float(topology.server_memory_bytes[s])) for s in servers]
    latency = topology.propagation_latency_s + 2 * topology.io_latency_s
    return DeviceSet.full_mesh(name, devices, bandwidth_Bps=topology.channel_bandwidth_Bps, latency_s=latency)
