"""Harness overhead and peak memory of every method on the tiny world or the xl world.

Each cell is built as `specbench-run` builds it (composed config, registry, loaders), then its
model calls are timed (`forward_tokens`, `canvas_logits`, `tree_logits`, `block_logits`, device
synchronised) while it decodes the first prompts of tiny_code. Overhead = 1 - model time / wall
time: the share of decoding the harness itself spends (drafting logic, acceptance, policies,
stop checks). Peak memory: the process's peak RSS (each cell runs in its own process) or, on a
GPU, torch's peak allocation.

Every cell runs under both engines (`run.engine=eager` and `compiled`) unless `--engine` picks
one; two untimed decodes warm each up (under the compiled engine they compile the graphs).
`--world xl` runs each method's xl preset (conf/experiment/*_xl.yaml) instead.

    python benchmarks/method_overhead.py --threads 2
    python benchmarks/method_overhead.py --threads 2 --world xl --engine eager
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch
from hydra import compose, initialize_config_dir

from specbench import paths
from specbench.backends.specbench.backend import load_models
from specbench.config import ENGINES
from specbench.metrics.speed import synchronize
from specbench.pipeline import prepare
from specbench.registry import discover

DLM = ["target=tiny-dlm", "drafter=none", "method.prefix_cache=true"]
CELLS = {
    "ar": ["method=ar"],
    "sps": ["method=sps"],
    "specdiff": ["method=specdiff", "drafter=tiny-dlm"],
    "diffuspec": ["method=diffuspec", "drafter=tiny-dlm"],
    "dllm": [*DLM, "method=dllm", "method.policy=threshold", "method.threshold=0.5"],
    "psd": [*DLM, "method=psd", "method.policy=quota", "method.depth=3"],
    "spiffy": [*DLM, "method=spiffy", "method.nodes=5", "method.calibration_samples=10"],
}
XL = {
    "ar": ["experiment=sps_xl", "method=ar"],
    "sps": ["experiment=sps_xl"],
    "dflash": ["experiment=dflash_xl"],
    "specdiff": ["experiment=specdiff_xl", "method.gamma=5"],
    "diffuspec": ["experiment=diffuspec_xl"],
    "dllm": ["experiment=dllm_xl", "method.policy=threshold"],
    "psd": ["experiment=psd_xl"],
    "spiffy": ["experiment=spiffy_xl", "method.calibration_samples=10"],
}
WORLDS = {"tiny": CELLS, "xl": XL}
# a model's calls; a DFlash drafter is a torch module called directly, then its head
CALLS = (
    "forward_tokens",
    "canvas_logits",
    "tree_logits",
    "block_logits",
    "forward",
    "compute_logits",
)


def time_calls(model: object, clock: dict[str, float], device: torch.device) -> None:
    """Wrap the model's call methods so their time adds up in `clock`."""
    for name in CALLS:
        if not hasattr(model, name):
            continue
        original = getattr(model, name)

        def timed(*args, _original=original, **kwargs):
            synchronize(device)
            t0 = time.perf_counter()
            out = _original(*args, **kwargs)
            synchronize(device)
            clock["model_s"] += time.perf_counter() - t0
            return out

        setattr(model, name, timed)


def run_cell(cell: str, args: argparse.Namespace) -> dict:
    discover()
    overrides = [
        *WORLDS[args.world][cell],
        f"run.device={args.device}",
        f"run.engine={args.engine or 'eager'}",
        f"run.max_new_tokens={args.max_new_tokens}",
        "logging.wandb.mode=disabled",
        "run.results_dir=/tmp/specbench-bench",
    ]
    with initialize_config_dir(str(paths.CONF_DIR), version_base="1.3"):
        plan = prepare(compose("config", overrides=overrides))
    target, drafter = load_models(plan)
    decoder = plan.method.build(target, drafter, plan.task)
    clock = {"model_s": 0.0}
    for model in filter(None, (target, drafter)):
        time_calls(model, clock, plan.device)
    prompts = [plan.prompt_ids[s.id] for s in plan.samples[: args.samples + 2]]
    for prompt in prompts[:2]:  # warm-up
        decoder.generate(prompt, args.max_new_tokens, torch.Generator())
    if plan.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(plan.device)
    clock["model_s"], tokens, wall = 0.0, 0, 0.0
    for prompt in prompts[2:]:
        gen = decoder.generate(prompt, args.max_new_tokens, torch.Generator())
        tokens += len(gen.tokens)
        wall += gen.wall_s
    peak = (
        torch.cuda.max_memory_allocated(plan.device) / 2**20
        if plan.device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    return {
        "cell": cell,
        "engine": args.engine or "eager",
        "tok_s": tokens / wall,
        "overhead": 1 - clock["model_s"] / wall,
        "peak_mib": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--world", choices=sorted(WORLDS), default="tiny")
    parser.add_argument("--cell", choices=sorted(XL), help="one cell, in this process")
    parser.add_argument("--engine", choices=ENGINES, help="one engine (default: both)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cell:
        print(json.dumps(run_cell(args.cell, args)))
        return
    print(f"{'cell':<10} {'engine':<9} {'tok/s':>8} {'overhead':>9} {'peak MiB':>9}")
    for cell in WORLDS[args.world]:  # one process per cell and engine: peak RSS is per process
        for engine in [args.engine] if args.engine else ENGINES:
            out = subprocess.run(
                [sys.executable, __file__, "--cell", cell, "--engine", engine, *sys.argv[1:]],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"{cell:<10} {engine:<9} {row['tok_s']:8.1f} {row['overhead']:9.1%} "
                f"{row['peak_mib']:9.0f}"
            )


if __name__ == "__main__":
    main()
