"""The GPU check, sized to 8 minutes: one cell of every method on the tiny world on a CUDA
device (run.device=cuda, bfloat16; DFlash with tiny-dflash), each with its measured speedup, the cost model's
prediction and the gap, then one cell per native diffusion family (random-init LLaDA and
Dream decoded by PSD and dllm under Fast-dLLM's caches, MDLM drafting for SpecDiff) in bf16,
and SpS again under the compiled engine (static caches, CUDA graphs). Cells start only while the budget lasts; the rest are listed as skipped.

    python benchmarks/gpu_check.py --budget 480 --results "$OUT/gpu"
"""

from __future__ import annotations

import argparse
import time

import torch
from hydra import compose, initialize_config_dir
from method_overhead import CELLS as METHOD_CELLS

from specbench import paths
from specbench.pipeline import execute, prepare
from specbench.registry import discover
from specbench.runs.summary import Summary

CELLS = {name: cell for name, cell in METHOD_CELLS.items() if name != "ar"}
NATIVE = ["drafter=none", "run.max_new_tokens=64"]
CELLS.update(
    {
        "llada-psd": [*NATIVE, "target=random-llada", "method=psd", "method.prefix_cache=true"],
        "dream-dllm": [
            *NATIVE,
            "target=random-dream",
            "method=dllm",
            "method.policy=threshold",
            "method.prefix_cache=true",
            "method.dual_cache=true",
        ],
        "mdlm-specdiff": ["method=specdiff", "drafter=random-mdlm"],
        "dflash": ["method=dflash", "drafter=tiny-dflash"],
        "sps-compiled": [*METHOD_CELLS["sps"], "run.engine=compiled"],
    }
)
SECONDS_PER_CELL = 60  # a cell of 20 samples with its calibration, warm-up and cost timing


def row(summary: Summary) -> str:
    """A cell's line: its speedup over the target's decoding, the cost model's prediction, and
    its ratios to every further arm it ran beside (a tree's chain)."""
    columns = summary.columns()
    text = (
        f"speedup {columns['speedup']:.2f}  predicted {summary.predicted_speedup:.2f}"
        f"  gap {summary.prediction_gap:+.0%}  tau {summary.tau:.2f}  tpf {summary.tpf:.2f}"
        f"  lossless {columns['lossless_rate']:.2f}"
    )
    for name, arm in columns["vs"].items():
        text += (
            f"  | vs {name}: speedup {arm['speedup']:.2f}, NFE reduction {arm['nfe_reduction']:.2f}"
        )
    return text


def run_cells(cells: dict[str, list[str]], args: argparse.Namespace, experiment: str) -> None:
    """Each cell on the CUDA device in bf16 while the budget lasts; a table at the end."""
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"{experiment}: no CUDA device here (--device cpu for a dry run)")
    discover()
    start, rows = time.time(), []
    for name, overrides in cells.items():
        if time.time() - start > args.budget - SECONDS_PER_CELL:
            rows.append((name, "skipped (budget)"))
            continue
        cell = [
            *overrides,
            f"run.device={args.device}",
            "run.dtype=bfloat16",
            f"run.limit={args.limit}",
            f"run.results_dir={args.results}",
            f"run.experiment={experiment}",
            "run.progress=false",
            "logging.wandb.mode=disabled",
        ]
        with initialize_config_dir(str(paths.CONF_DIR), version_base="1.3"):
            summary = execute(prepare(compose("config", overrides=cell)))
        rows.append((name, row(summary)))
        print(f"{name}: {rows[-1][1]}", flush=True)
    device = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    print(f"\n{device} ({time.time() - start:.0f} s)")
    for name, text in rows:
        print(f"{name:<14} {text}")


def arguments(doc: str, budget: float) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=budget, help="seconds for all cells")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--results", default="results/runs")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the same cells")
    return parser.parse_args()


def main() -> None:
    run_cells(CELLS, arguments(__doc__, 480), "gpu_check")


if __name__ == "__main__":
    main()
