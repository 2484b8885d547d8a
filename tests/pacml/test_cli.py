"""The ``pacml`` command: its subcommands are today's programs, unchanged; the old commands are
aliases that say where they moved."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pacml.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PACML = str(BIN / "pacml")


def run(*cmd: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PATH": str(BIN), "HOME": str(cwd or ROOT), **env})


def imported(stderr: str) -> set[str]:
    """Top-level modules a process imported (``PYTHONPROFILEIMPORTTIME=1`` writes one line each)."""
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def test_help_lists_every_subcommand_with_one_line_and_loads_no_torch() -> None:
    for args in ([], ["--help"], ["-h"]):
        proc = run(PACML, *args, PYTHONPROFILEIMPORTTIME="1")
        assert proc.returncode == 0, proc.stderr
        for name, (_, _, text) in COMMANDS.items():
            assert f"  {name} " in proc.stdout and text in proc.stdout
        assert not imported(proc.stderr) & {"torch", "simulator", "hydra"}, "pacml --help imports a subcommand"


def test_an_unknown_subcommand_is_one_line_naming_the_valid_ones_and_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["simulate"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and err.startswith("pacml: error: unknown command 'simulate'")
    assert all(name in err for name in COMMANDS)


def test_pacml_sim_runs_as_the_old_program_did_without_torch(tmp_path: Path) -> None:
    """Same jobs.csv and .hydra files (job name, overrides) as today's entry point, no torch loaded."""
    args = ["scenario=paper", "policy=para_min", "seed=1", "horizon_s=2e4", "progress=false"]
    new = run(PACML, "sim", *args, f"hydra.run.dir={tmp_path / 'x'}", cwd=tmp_path, PYTHONPROFILEIMPORTTIME="1")
    assert new.returncode == 0, new.stderr
    assert not imported(new.stderr) & {"torch", "torch_geometric"}
    (tmp_path / "x").rename(tmp_path / "new")
    old = run(sys.executable, "-c", "from simulator.run import main; main()", *args, f"hydra.run.dir={tmp_path / 'x'}",
              cwd=tmp_path)
    assert old.returncode == 0, old.stderr
    (tmp_path / "x").rename(tmp_path / "old")
    for name in ("jobs.csv", ".hydra/config.yaml", ".hydra/overrides.yaml", ".hydra/hydra.yaml"):
        assert (tmp_path / "new" / name).read_text() == (tmp_path / "old" / name).read_text(), name
    assert "name: run" in (tmp_path / "new" / ".hydra/hydra.yaml").read_text()  # Hydra's job name as before


def test_pacml_place_help_and_cfg_job_exit_0() -> None:
    helped = run(PACML, "place", "--help")
    assert helped.returncode == 0 and "== Configuration groups ==" in helped.stdout, helped.stderr
    cfg = run(PACML, "place", "--cfg", "job", "method=random")
    assert cfg.returncode == 0 and "method:" in cfg.stdout, cfg.stderr


def test_every_subcommand_help_exits_0() -> None:
    """Each subcommand's module imports and its ``--help`` exits 0 (in one process, for speed)."""
    code = ("import contextlib, io, json, sys\n"
            "from pacml.cli import COMMANDS, main\n"
            "codes = {}\n"
            "for name in COMMANDS:\n"
            "    out = io.StringIO()\n"
            "    with contextlib.redirect_stdout(out):\n"
            "        try:\n"
            "            main([name, '--help'])\n"
            "            codes[name] = 0\n"
            "        except SystemExit as stop:\n"
            "            codes[name] = stop.code\n"
            "    codes[name] = [codes[name], bool(out.getvalue().strip())]\n"
            "print(json.dumps(codes))\n")
    proc = run(sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {name: [0, True] for name in COMMANDS}


def test_an_old_command_says_where_it_moved_then_runs_as_before() -> None:
    old = run(str(BIN / "pacml-graph"), "info", "resnet18")
    new = run(PACML, "graph", "info", "resnet18")
    assert old.returncode == new.returncode == 0, old.stderr
    assert old.stdout == new.stdout and "resnet18" in new.stdout
    assert old.stderr == "pacml-graph is now `pacml graph` (this alias goes in the next release)\n" + new.stderr


def test_the_console_scripts_are_pacml_and_one_alias_per_subcommand() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["pacml"] == "pacml.cli:main"
    for name in COMMANDS:
        assert scripts[f"pacml-{name}"] == f"pacml.cli:{name.replace('-', '_')}_alias"
        assert (BIN / f"pacml-{name}").is_file() and (BIN / "pacml").is_file()
