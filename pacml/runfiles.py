"""Files every training run writes: the resumable checkpoint (keeping the one before) and metrics.csv,
the resolvers that send a resumed run's output into its own folder (``pacml_resume_run_dir``,
``pacml_resume_output_subdir``, registered on import) and the process age a time budget counts from.

Shared by ``pacml train`` (:mod:`pacml.agent.ppo`) and ``pacml train-placer`` (:mod:`pacml.placer.trainer`).
"""

from __future__ import annotations

import csv
import io
import os
import pickle
import shutil
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from simulator.errors import ConfigError
from workloads.io import atomic_write, atomic_write_text

CHECKPOINT = "checkpoint.pt"
PREVIOUS_CHECKPOINT = "checkpoint.prev.pt"


def write_checkpoint(out: Path, state: Mapping[str, Any], *, keep_previous: bool) -> Path:
    """Write ``out/checkpoint.pt`` atomically.

    With ``keep_previous`` (the existing file was written or read successfully by this run), the
    existing ``checkpoint.pt`` is first kept as ``checkpoint.prev.pt`` (hard-linked, then renamed,
    so some ``checkpoint.pt`` exists at every instant).
    """
    path = out / CHECKPOINT
    if keep_previous and path.is_file():
        tmp = out / f".{PREVIOUS_CHECKPOINT}.tmp"
        tmp.unlink(missing_ok=True)
        try:
            os.link(path, tmp)
        except OSError:  # no hard links on this file system
            shutil.copyfile(path, tmp)
        os.replace(tmp, out / PREVIOUS_CHECKPOINT)
    return save_torch_file(path, dict(state))


def save_torch_file(path: str | Path, payload: Any) -> Path:
    """``torch.save`` of ``payload`` to ``path``, serialised in memory and written atomically."""
    import torch  # lazy: torch

    buf = io.BytesIO()
    torch.save(payload, buf)
    return atomic_write(Path(path), lambda fh: fh.write(buf.getvalue()))


def write_metrics_csv(path: Path, rows: Iterable[Mapping[str, Any]], *, sort_columns: bool = False,
                      columns: Iterable[str] = ()) -> None:
    """Write ``rows`` (one dict per logged step; keys may differ) as a CSV, atomically; with no
    rows, the header is ``columns`` (a fit stopped before its first log still names its columns)."""
    rows = list(rows)
    keys = list(dict.fromkeys(k for r in rows for k in r)) or list(columns)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=sorted(keys) if sort_columns else keys)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, out.getvalue())


def load_run_config(run_dir: Path, prog: str) -> DictConfig:
    """The ``train_config.yaml`` a run wrote (its composed config), for resuming it.

    Raises:
        ConfigError: (field ``resume``) missing, unreadable, or not a training config (no ``ppo``).
    """
    path = run_dir / "train_config.yaml"
    try:
        saved = OmegaConf.load(path)
        if not isinstance(saved, DictConfig) or not isinstance(saved.get("ppo"), DictConfig):
            raise ValueError(f"not a {prog} config (no ppo section)")
    except (OSError, ValueError, yaml.YAMLError) as exc:  # OmegaConf errors are ValueErrors
        problem = " ".join(str(exc).split())  # yaml messages span lines; ours is one
        raise ConfigError(f"cannot read {path}: {problem}", field="resume") from exc
    return saved


def apply_resume_overrides(saved: DictConfig, cfg: DictConfig, overrides: Iterable[str] | None,
                           allowed: tuple[str, ...]) -> list[str]:
    """Apply a resumed run's command-line ``overrides`` (values from ``cfg``) to its ``saved``
    config; returns the ``key=value`` changes.

    Raises:
        ConfigError: An override of a key outside ``allowed`` (a resumed run keeps its config).
    """
    changed = []
    for item in overrides or []:
        key = item.split("=", 1)[0].lstrip("+~")
        if key == "resume" or key.startswith("hydra."):
            continue
        if key not in allowed:
            raise ConfigError(f"a resumed run keeps its own config; only {', '.join(allowed)} "
                              f"may change (start a new run to change {key})", field=key)
        value = OmegaConf.select(cfg, key)
        if OmegaConf.select(saved, key) != value:
            OmegaConf.update(saved, key, value, merge=False)
            changed.append(f"{key}={value}")
    return changed


def _first_sentence(exc: BaseException) -> str:
    """The first sentence of ``exc``'s message on one line (torch's miniz errors run to a paragraph)."""
    text = " ".join(str(exc).split())
    cut = text.find(". ")
    return (text[:cut] if cut > 0 else text.rstrip("."))[:200] or type(exc).__name__


def archive_problem(path: str | Path, what: str) -> str | None:
    """Why ``path`` is not a zip archive (``torch.save`` and ``np.savez`` write one; a cut one has lost
    its central directory), e.g. ``"empty file"``, or ``None`` when it is one. Checked before loading,
    since the loaders' own messages for such a file advise unsafe loading.

    Raises:
        OSError: ``path`` cannot be read.
    """
    size = Path(path).stat().st_size
    if zipfile.is_zipfile(path):
        return None
    return "empty file" if size == 0 else f"not {what} archive (truncated, damaged or another kind of file; {size} bytes)"


def load_torch_file(path: str | Path, kind: str) -> Any:
    """Read a checkpoint written with ``torch.save`` without unpickling anything but tensors and plain data.

    Every checkpoint of this project (policy, critic, placer and training checkpoints) is a dict of
    tensors, numbers, strings, lists and dicts, so ``weights_only`` loading reads them all, and a
    damaged or foreign file cannot run code.

    Raises:
        ValueError: one line naming the file and the cause (``cannot read {kind} {path}: ...``).
    """
    path = Path(path)
    try:
        problem = archive_problem(path, "a torch.save")
    except OSError as exc:
        raise ValueError(f"cannot read {kind} {path}: {exc.strerror or exc}") from None
    if problem:
        raise ValueError(f"cannot read {kind} {path}: {problem}")
    import torch  # lazy: torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # torch's message would suggest weights_only=False: never for a damaged file
        raise ValueError(f"cannot read {kind} {path}: it holds objects other than tensors and plain data "
                         "(no checkpoint of this tool does; not loaded)") from None
    except Exception as exc:  # noqa: BLE001 - zip, zlib and torch raise many types for a damaged archive
        raise ValueError(f"cannot read {kind} {path}: damaged archive ({_first_sentence(exc)})") from None


def resume_run_dir(resume: str | None, default: str) -> str:
    """``hydra.run.dir`` of ``conf/train.yaml``: the resumed run's own directory, if ``resume``
    names a run directory or a checkpoint file in one, else ``default`` (a new run's folder).

    Resuming into the run itself means no stray output folder named after the default config.
    """
    if resume:
        path = Path(str(resume))
        run = path if path.is_dir() else path.parent
        if (run / CHECKPOINT).is_file() or (run / PREVIOUS_CHECKPOINT).is_file() or path.is_file():
            return str(run)
    return default


def resume_output_subdir(resume: str | None, stamp: str) -> str:
    """``hydra.output_subdir``: ``.hydra`` for a new run; ``.hydra/resume-<stamp>`` when resuming,
    so the run's original ``.hydra/config.yaml`` is kept beside each resume's record."""
    return f".hydra/resume-{stamp}" if resume else ".hydra"


OmegaConf.register_new_resolver("pacml_resume_run_dir", resume_run_dir, replace=True)
OmegaConf.register_new_resolver("pacml_resume_output_subdir", resume_output_subdir, replace=True)


def process_age_s() -> float:
    """Seconds since this process started (from Linux's ``/proc``; 0 where that is unavailable).

    The console command's time budget starts with the process: imports and config composition
    take seconds that ``ppo.time_budget_s`` must cover too.
    """
    try:
        stat = Path("/proc/self/stat").read_text()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0
