"""Saved placers: ``placer.pt`` files (weights, network sizes, training facts) and the shipped ones.

A shipped placer lives in ``pacml/checkpoints/placers/<name>/`` with its ``placer.pt``, the
``train_config.yaml`` that trained it, its ``metrics.csv``, ``curve.png`` and ``train_summary.json``.
:data:`DEFAULT_PLACERS` says which shipped placer serves which objective when
``method.checkpoint`` is not given (the device set is an input of the network, so one placer serves
every device preset it was trained on).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pacml.placer.settings import NetConfig
from pacml.runfiles import load_torch_file, save_torch_file
from simulator.errors import ConfigError

if TYPE_CHECKING:
    from pacml.placer.model import PlacerNet

PLACER_FORMAT = "pacml-placer"
#: Directory of the shipped placers.
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "checkpoints" / "placers"
#: Shipped placer used for each objective when no checkpoint is named.
DEFAULT_PLACERS = {"step": "placer_step", "latency": "placer_step", "pipeline": "placer_pipeline"}


def save_placer(path: str | Path, net: PlacerNet, meta: dict[str, Any]) -> None:
    """Write a placer (weights, sizes, ``meta``) atomically."""
    save_torch_file(path, {"format": PLACER_FORMAT, "version": 1, "net": net.config_dict(), "model": net.state_dict(),
                           "meta": meta})


def resolve_placer(spec: str | None, objective: str, *, field: str = "method.checkpoint") -> Path:
    """The ``placer.pt`` of ``spec``: a file, a run directory, a shipped name, or ``None`` for the
    shipped default of ``objective``."""
    name = spec if spec else DEFAULT_PLACERS.get(objective, "placer_step")
    candidates = [Path(name), Path(name) / "placer.pt", SHIPPED_DIR / name / "placer.pt"]
    for path in candidates:
        if path.is_file():
            return path
    shipped = sorted(p.name for p in SHIPPED_DIR.glob("*") if (p / "placer.pt").is_file()) if SHIPPED_DIR.is_dir() \
        else []
    raise ConfigError(f"no placer at {name!r} (a placer.pt file, a pacml train-placer run directory, or a "
                      f"shipped name: {', '.join(shipped) or 'none shipped'})", field=field)


def load_placer(path: str | Path, *, field: str = "method.checkpoint") -> tuple[PlacerNet, dict[str, Any]]:
    """Load a placer written by :func:`save_placer`; bad files are one-line config errors."""
    from pacml.placer.model import PlacerNet  # lazy: torch

    path = Path(path)
    try:
        state = load_torch_file(path, "placer")
    except ValueError as exc:
        raise ConfigError(str(exc), field=field) from None
    if not isinstance(state, dict) or state.get("format") != PLACER_FORMAT:
        raise ConfigError(f"{path}: not a pacml placer (written by pacml train-placer as placer.pt)", field=field)
    if isinstance(state.get("net"), dict) and state["net"].get("order") == "heft":
        raise ConfigError(f"{path}: trained with net.order=heft, which was retired (measured no better); "
                          "this version decodes only rank, full_rank or first", field=field)
    try:
        net = PlacerNet(NetConfig(**state["net"]))
        net.load_state_dict(state["model"])
    except Exception as exc:  # wrong sizes or keys: a file of another version
        raise ConfigError(f"{path}: does not fit this version's placer ({' '.join(str(exc).split())[:160]})",
                          field=field) from None
    net.eval()
    return net, dict(state.get("meta", {}))
