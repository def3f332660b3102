"""Rerun the reference runs whose code was dirty, from this clean tree, cell by cell.

A run directory stores its whole config (`config.yaml`), not the command that made it. This
tool turns each stored config back into `specbench-run` overrides (the group choices, then every
knob whose value differs from what those choices compose to), composes them and checks that
they give the stored config back before anything runs, then reruns the cell into the same
results directory. The old directory is moved aside first (same config, same run id) and put
back if the rerun fails, so a reference is never lost:

    python tools/rerun_references.py results/reference --only specdiff_grid_tiny --dry-run
    python tools/rerun_references.py results/reference

`--here` also reruns the clean runs that another machine class measured, so that an
experiment whose dirty cells were rerun here is not split over two machines in one figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from specbench import paths
from specbench.config import Config
from specbench.registry import discover_schemas
from specbench.report.load import dirty_runs
from specbench.runs import env as environment
from specbench.runs import machine
from specbench.runs.store import identity, upgraded

GROUPS = ("target", "drafter", "method", "task", "backend")


def flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat(value, name + "."))
        else:
            out[name] = value
    return out


def literal(value: Any) -> str:
    """A value in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{literal(v)}" for k, v in value.items()) + "}"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def composed(overrides: list[str]) -> dict[str, Any]:
    """The config `specbench-run overrides` would store (the run directory's config.yaml)."""
    cfg = compose("config", overrides=overrides)
    config: Config = OmegaConf.to_object(cfg)
    return paths.portable(asdict(config))


def overrides_for(stored: dict[str, Any]) -> list[str]:
    """The overrides that compose to `stored`; SystemExit naming the keys where none can."""
    choices = [f"{g}={stored[g]['name']}" for g in GROUPS if g in stored]
    want = flat(identity(stored))
    base = flat(identity(composed(choices)))
    knobs = [f"{key}={literal(value)}" for key, value in want.items() if base.get(key) != value]
    got = flat(identity(composed(choices + knobs)))
    lost = sorted(k for k in want if k != "record_schema" and got.get(k) != want[k])
    if lost:
        raise SystemExit(f"cannot recompose {', '.join(lost)} (knobs no longer in the schema?)")
    # the keys a run's identity leaves out (VOLATILE_KEYS): where it is written, and how logged
    kept = {f"run.{k}": stored["run"][k] for k in ("results_dir", "experiment", "limit")}
    kept |= flat(stored.get("logging", {}), "logging.")
    return choices + knobs + [f"{key}={literal(value)}" for key, value in kept.items()]


def rerun(run_dir: Path, overrides: list[str], aside: Path) -> bool:
    """Move the old directory aside, rerun the cell, and on a failure or Ctrl-C remove what the
    rerun wrote (its run id differs from the old one where the record schema or a knob's
    default changed since) and put the old directory back."""
    kept = aside / run_dir.name
    shutil.move(run_dir, kept)
    before = set(run_dir.parent.iterdir())
    command = [str(Path(sys.executable).parent / "specbench-run"), *overrides]
    done = False
    try:
        done = subprocess.run(command).returncode == 0
    finally:
        if done:
            shutil.rmtree(kept)
        else:
            for written in set(run_dir.parent.iterdir()) - before:
                shutil.rmtree(written, ignore_errors=True)
            shutil.move(kept, run_dir)
    return done


def selected(root: str | Path, only: list[str] | None, here: str | None) -> list[Path]:
    """The run directories to rerun in the experiments `only` names (all when it names none):
    the dirty ones, and with `here` (a machine class) those measured on another class."""
    dirty = {run_dir for run_dir, _ in dirty_runs(root)}

    def elsewhere(run_dir: Path) -> bool:
        env = json.loads((run_dir / "env.json").read_text())
        return here is not None and machine.of_env(env).label() != here

    runs = sorted(path.parent for path in Path(root).glob("*/*/env.json"))
    return [
        run_dir
        for run_dir in runs
        if (not only or run_dir.parent.name in only) and (run_dir in dirty or elsewhere(run_dir))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="a results directory, e.g. results/reference")
    parser.add_argument("--only", nargs="*", help="experiments (top folders) to rerun")
    parser.add_argument(
        "--here", action="store_true", help="also clean runs another machine class measured"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args()
    discover_schemas()
    here = environment.machine(torch.device("cpu")).label() if args.here else None
    runs = selected(args.root, args.only, here)
    with initialize_config_dir(config_dir=str(paths.CONF_DIR), version_base="1.3"):
        plans = [
            (d, overrides_for(upgraded(yaml.safe_load((d / "config.yaml").read_text()))))
            for d in runs
        ]
    aside = Path(tempfile.mkdtemp(prefix="specbench-dirty-"))
    failed = []
    for i, (run_dir, overrides) in enumerate(plans, 1):
        print(f"[{i}/{len(plans)}] {run_dir}: specbench-run {' '.join(overrides)}", flush=True)
        if args.dry_run:
            continue
        started = time.monotonic()
        ok = rerun(run_dir, overrides, aside)
        print(
            f"[{i}/{len(plans)}] {'ok' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s"
        )
        failed += [] if ok else [run_dir]
    if failed:
        raise SystemExit(
            f"{len(failed)} reruns failed (old directories kept): " + ", ".join(map(str, failed))
        )


if __name__ == "__main__":
    main()
