"""A sweep that survives its failing cells: each job writes its outcome next to its Hydra
output, and when the multirun ends (with any launcher) one summary lists every cell, failed
ones with their errors. Rerunning the sweep skips complete cells and resumes the others."""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table

from specbench.runs.store import atomic_write


def write_outcome(status: str, run_id: str | None, error: BaseException | None = None) -> None:
    """This job's outcome, in its Hydra output directory: ok, complete (skipped), or failed."""
    hydra = HydraConfig.get()
    outcome: dict[str, Any] = {
        "job": hydra.job.num,
        "overrides": list(hydra.overrides.task),
        "status": status,
        "run_id": run_id,
    }
    if error is not None:
        outcome["error"] = f"{type(error).__name__}: {error}"
        outcome["traceback"] = "".join(traceback.format_exception(error))
    out = Path(hydra.runtime.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "outcome.json", json.dumps(outcome, indent=1))  # read by another process


def summarize_sweep(sweep_dir: Path) -> dict[str, Any]:
    outcomes = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/outcome.json"))]
    outcomes.sort(key=lambda o: o["job"])
    summary = {
        "cells": len(outcomes),
        "failed": [o for o in outcomes if o["status"] == "failed"],
        "outcomes": [{k: v for k, v in o.items() if k != "traceback"} for o in outcomes],
    }
    atomic_write(sweep_dir / "sweep_summary.json", json.dumps(summary, indent=1))
    return summary


class SweepSummary(Callback):
    """Hydra callback (conf/config.yaml: hydra.callbacks). `failed` counts the failed cells of
    the last multirun in this process, so the command can exit non-zero after it."""

    failed = 0

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        summary = summarize_sweep(sweep_dir)
        SweepSummary.failed = len(summary["failed"])
        table = Table(title=f"sweep: {summary['cells']} cells, {len(summary['failed'])} failed")
        for column in ("job", "status", "cell", "error"):
            table.add_column(column)
        for o in summary["outcomes"]:
            cell = o["run_id"] or " ".join(o["overrides"])
            table.add_row(str(o["job"]), o["status"], cell, o.get("error", ""))
        console = Console(width=160)
        console.print(table)
        console.print(f"sweep summary: {sweep_dir / 'sweep_summary.json'}")
        if summary["failed"]:
            console.print(
                "rerun the same command to retry the failed cells (complete ones are skipped)"
            )
