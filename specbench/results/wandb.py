"""W&B mirrors the local records; it is never the source of truth.

The mode always comes from config (without one, wandb asks for an API key); offline runs are
written inside the run's own directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class WandbMirror:
    def __init__(
        self,
        wandb_cfg: dict[str, Any],
        run_dir: Path,
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
            mode=wandb_cfg["mode"],
            dir=str(run_dir),
            config=config,
            reinit="finish_previous",
        )

    def log_sample(self, record: dict[str, Any]) -> None:
        if self.run is None:
            return
        row = {k: record[k] for k in ("new_tokens", "wall_s", "target_calls", "drafter_calls")}
        row["tok_s"] = record["new_tokens"] / record["wall_s"]
        if record.get("baseline"):
            row["speedup"] = row["tok_s"] / (
                record["baseline"]["new_tokens"] / record["baseline"]["wall_s"]
            )
        self.run.log(row)

    def finish(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        if self.run is None:
            return
        wandb = self.wandb
        columns = [
            "id",
            "new_tokens",
            "wall_s",
            "target_calls",
            "drafter_calls",
            "accepted_tokens",
            "draft_tokens",
            "first_divergence",
            "text",
        ]
        table = wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in records])
        lengths = [[int(k), v] for k, v in summary.get("accept_hist", {}).items()]
        hist = wandb.Table(columns=["accept_length", "rounds"], data=lengths)
        self.run.log(
            {
                "samples": table,
                "accept_hist": wandb.plot.bar(
                    hist, "accept_length", "rounds", title="tokens per round"
                ),
            }
        )
        self.run.summary.update(
            {k: v for k, v in summary.items() if not isinstance(v, (dict, list))}
        )
        self.run.summary.update({f"quality/{k}": v for k, v in summary.get("quality", {}).items()})
        self.run.finish()
