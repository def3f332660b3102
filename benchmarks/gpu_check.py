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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=480, help="seconds for all cells")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--results", default="results/runs")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device here")
    discover()
    start, rows = time.time(), []
    for name, overrides in CELLS.items():
        if time.time() - start > args.budget - SECONDS_PER_CELL:
            rows.append((name, "skipped (budget)"))
            continue
        cell = [
            *overrides,
            "run.device=cuda",
            "run.dtype=bfloat16",
            f"run.limit={args.limit}",
            f"run.results_dir={args.results}",
            "run.experiment=gpu_check",
            "run.progress=false",
            "logging.wandb.mode=disabled",
        ]
        with initialize_config_dir(str(paths.CONF_DIR), version_base="1.3"):
            summary = execute(prepare(compose("config", overrides=cell)))
        rows.append(
            (
                name,
                f"speedup {summary.speedup:.2f}  predicted {summary.predicted_speedup:.2f}"
                f"  gap {summary.prediction_gap:+.0%}  tpf {summary.tpf:.2f}"
                f"  lossless {summary.lossless_rate:.2f}",
            )
        )
    print(f"\n{torch.cuda.get_device_name()} ({time.time() - start:.0f} s)")
    for name, text in rows:
        print(f"{name:<10} {text}")


if __name__ == "__main__":
    main()
