"""Gantt charts of one op placement, drawn from plain data (no simulator import).

``pacml place`` calls :func:`plot_step_gantt` for the ``step`` and ``latency`` objectives (one
lane per device: its ops over one step, forward and backward in two colours, and every transfer
between devices as a thin bar under the sender's lane with an arrow to the receiver) and
:func:`plot_pipeline_loads` for ``pipeline`` (the max-load model has no timeline: one bar per
device, compute plus communication, the tallest being the time per sample).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from workloads.io import atomic_write, clear_stale_temporaries

#: Arrows are drawn for at most this many transfers (beyond, only the bars: a chart stays legible).
MAX_ARROWS = 150
FORWARD_COLOUR = "#4c72b0"
BACKWARD_COLOUR = "#dd8452"
TRANSFER_COLOUR = "#c44e52"


@dataclass(frozen=True)
class Task:
    """One op on one device: lane index, start and finish (seconds), backward pass or not."""

    device: int
    start_s: float
    finish_s: float
    backward: bool = False


@dataclass(frozen=True)
class Transfer:
    """One transfer between devices: sender and receiver lanes, start and finish (seconds)."""

    src: int
    dst: int
    start_s: float
    finish_s: float


def _time_scale(span_s: float) -> tuple[float, str]:
    """A divisor and unit label for times up to ``span_s``."""
    if span_s >= 1.0:
        return 1.0, "s"
    if span_s >= 1e-3:
        return 1e-3, "ms"
    return 1e-6, "µs"


def plot_step_gantt(devices: Sequence[str], tasks: Sequence[Task], transfers: Sequence[Transfer],
                    title: str) -> Figure:
    """Per-device timeline of one step (see module docstring)."""
    span = max([t.finish_s for t in tasks] + [t.finish_s for t in transfers] + [1e-9])
    scale, unit = _time_scale(span)
    lanes = len(devices)
    fig = Figure(figsize=(10, 1.2 + 0.55 * lanes), layout="constrained")
    ax = fig.subplots()
    for lane in range(lanes):
        for backward, colour in ((False, FORWARD_COLOUR), (True, BACKWARD_COLOUR)):
            bars = [(t.start_s / scale, (t.finish_s - t.start_s) / scale) for t in tasks
                    if t.device == lane and t.backward == backward]
            if bars:
                ax.broken_barh(bars, (lane - 0.35, 0.5), facecolors=colour, linewidth=0)
        sent = [(t.start_s / scale, (t.finish_s - t.start_s) / scale) for t in transfers if t.src == lane]
        if sent:
            ax.broken_barh(sent, (lane + 0.2, 0.15), facecolors=TRANSFER_COLOUR, alpha=0.6)
    if len(transfers) <= MAX_ARROWS:
        for t in transfers:
            ax.annotate("", xy=(t.finish_s / scale, t.dst - 0.1), xytext=(t.start_s / scale, t.src + 0.28),
                        arrowprops={"arrowstyle": "->", "color": TRANSFER_COLOUR, "lw": 0.6, "alpha": 0.7})
    ax.set_yticks(range(lanes), list(devices))
    ax.set_ylim(lanes - 0.4, -0.6)
    ax.set_xlim(0, span / scale * 1.02)
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(title, fontsize=10)
    handles = [ax.bar(0, 0, color=FORWARD_COLOUR, label="forward op"),
               ax.bar(0, 0, color=BACKWARD_COLOUR, label="backward op"),
               ax.bar(0, 0, color=TRANSFER_COLOUR, alpha=0.6, label=f"transfer ({len(transfers)})")]
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return fig


def plot_pipeline_loads(devices: Sequence[str], compute_s: Sequence[float], comm_s: Sequence[float],
                        title: str) -> Figure:
    """Per-device load of pipelined execution: compute and communication stacked."""
    span = max([c + m for c, m in zip(compute_s, comm_s, strict=True)] + [1e-9])
    scale, unit = _time_scale(span)
    fig = Figure(figsize=(max(5.0, 0.6 * len(devices) + 2), 3.8), layout="constrained")
    ax = fig.subplots()
    x = range(len(devices))
    compute = [c / scale for c in compute_s]
    comm = [m / scale for m in comm_s]
    ax.bar(x, compute, color=FORWARD_COLOUR, label="compute")
    ax.bar(x, comm, bottom=compute, color=TRANSFER_COLOUR, alpha=0.7, label="communication")
    ax.axhline(span / scale, color="black", lw=0.8, ls="--", label=f"max load {span / scale:.4g} {unit}")
    ax.set_xticks(list(x), list(devices), rotation=45 if len(devices) > 8 else 0)
    ax.set_ylim(0, span / scale * 1.1)
    ax.set_ylabel(f"load per sample ({unit})")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return fig


def save_chart(fig: Figure, directory: str | Path, name: str) -> list[Path]:
    """Write ``fig`` as ``directory/name.png`` and ``.svg`` (atomically); returns the paths."""
    paths = []
    # A run killed while drawing left its temporary files; one directory holds one run's charts.
    clear_stale_temporaries(directory, [f"{name}.{fmt}" for fmt in ("png", "svg")])
    for fmt in ("png", "svg"):
        path = Path(directory) / f"{name}.{fmt}"
        atomic_write(path, lambda fh, fmt=fmt: fig.savefig(fh, format=fmt, dpi=120))
        paths.append(path)
    return paths
