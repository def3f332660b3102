"""W&B mirrors the local records; it is never the source of truth.

The mode always comes from config (without one, wandb asks for an API key); offline runs are
written inside the run's own directory. A run directory mirrors to one W&B run, its id kept in
the directory (`RunStore.wandb_id`): a resumed run continues that W&B run instead of starting
a second.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

from specbench.interrupt import EXIT_CODE
from specbench.runs.acceptance import Acceptance
from specbench.runs.record import Record
from specbench.runs.store import RunStore
from specbench.runs.summary import Summary


class WandbMirror:
    def __init__(
        self,
        wandb_cfg: dict[str, Any],
        store: RunStore,
        run_id: str,
        experiment: str,
        config: dict[str, Any],
    ):
        self.run = None
        if wandb_cfg["mode"] == "disabled":
            return
        import wandb

        self.wandb = wandb
        self.run = wandb.init(
            project=wandb_cfg["project"],
            entity=wandb_cfg["entity"],
            group=wandb_cfg["group"] or experiment,
            name=run_id,
            id=store.wandb_id(),
            resume="allow",
            mode=wandb_cfg["mode"],
            dir=str(store.run_dir),
            config=config,
            reinit="finish_previous",
            # no system monitor: it samples the machine during the timed decodes; W&B's own
            # console lines only when asked for (`logging.wandb.verbose`)
            settings=wandb.Settings(x_disable_stats=True, silent=not wandb_cfg["verbose"]),
        )

    def log_sample(self, record: Record) -> None:
        if self.run is None:
            return
        arm = record.method
        row = {
            "new_tokens": arm.new_tokens,
            "wall_s": arm.wall_s,
            "target_calls": arm.target_calls,
            "drafter_calls": record.drafter_calls,
            "tok_s": arm.tok_s,
        }
        if record.baseline:
            row["speedup"] = arm.tok_s / record.baseline.tok_s
        self.run.log(row)

    def finish(self, records: list[Record], summary: Summary) -> None:
        if self.run is None:
            return
        wandb = self.wandb
        columns = ["id", "new_tokens", "wall_s", "target_calls", "drafter_calls"]
        columns += ["first_divergence", "tie_flip", "text"]
        rows = [
            [
                r.id,
                r.method.new_tokens,
                r.method.wall_s,
                r.method.target_calls,
                r.drafter_calls,
                r.first_divergence,
                r.tie_flip,
                r.method.text,
            ]
            for r in records
        ]
        table = wandb.Table(columns=columns, data=rows)
        lengths = [[int(k), v] for k, v in summary.emitted_hist.items()]
        hist = wandb.Table(columns=["tokens", "forwards"], data=lengths)
        logged = {
            "samples": table,
            "emitted_hist": wandb.plot.bar(
                hist, "tokens", "forwards", title="tokens per target forward"
            ),
        }
        self.run.log({**logged, **self.acceptance(summary)})
        self.run.summary.update(summary.scalars())
        self.run.summary.update({f"quality/{k}": v for k, v in summary.quality.items()})
        self.run.summary.update(interval_columns(summary))
        self.run.finish()

    def acceptance(self, summary: Summary) -> dict:
        """The acceptance histogram (rounds by units accepted) and, for drafted tokens, both
        per-position rates, as W&B charts (docs/measurement.md#acceptance)."""
        wandb, charts, view = self.wandb, {}, Acceptance.of(summary)
        if view.counts:
            rows = [[k, v] for k, v in view.counts.items()]
            hist = wandb.Table(columns=["accepted", "rounds"], data=rows)
            title = f"{view.unit} accepted per round"
            charts["accepted_hist"] = wandb.plot.bar(hist, "accepted", "rounds", title=title)
        if view.by_position:
            rows = [
                [i + 1, cond, vllm]
                for i, (cond, vllm) in enumerate(zip(view.by_position, view.at_position))
            ]
            columns = ["position", "accept_by_position", "accepted_at_position"]
            charts["acceptance_by_position"] = wandb.Table(columns=columns, data=rows)
        return charts

    def failed(self) -> None:
        """End the W&B run as failed, without W&B's closing lines: the error's one line stays
        the last thing the command prints."""
        if self.run is None:
            return
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            self.run.finish(exit_code=1)

    def interrupted(self) -> None:
        """End the W&B run as interrupted (not finished); the rerun resumes it by its id."""
        if self.run is not None:
            self.run.finish(exit_code=EXIT_CODE)


def interval_columns(summary: Summary) -> dict[str, float]:
    """Each point's 95% interval as two W&B summary values, `ci/<point>_lo` and `_hi`, so a
    sweep's table and charts can show them beside `<point>`."""
    return {
        f"ci/{name}_{end}": bound
        for name, interval in summary.intervals.items()
        for end, bound in zip(("lo", "hi"), interval)
    }
