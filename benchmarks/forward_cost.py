"""Forward costs of the tiny and xl worlds: each target on k new tokens (the verify(k)/step(1)
curve, k = 1..64), one tiny-ar step, and a diffusion LM's step over a block of masks behind its
cached prefix.

Speculation pays only when a drafter step is much cheaper than a target forward and verifying
several tokens costs little more than one; this measures both with the KV cache as the decoders
use it (a 128-token context cached, new tokens appended, then rolled back), arms interleaved.
The tiny world runs in float32, the xl world in bf16, each as its presets load it.

    python benchmarks/forward_cost.py --threads 2 --out results/figures
"""

from __future__ import annotations

import argparse
import csv
import time
from collections.abc import Callable
from pathlib import Path

import torch

from specbench.config import ModelConfig
from specbench.metrics.speed import synchronize
from specbench.models.causal import CausalLM
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.models.kinds.causal import load_causal_lm
from specbench.models.kinds.diffusion import load_diffusion_lm

CURVE = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
DTYPE = {"tiny": "float32", "tiny-ar": "float32", "tiny-xl": "bfloat16"}


def load(name: str, device: torch.device) -> CausalLM:
    cfg = ModelConfig(name=name, name_or_path=f"specbench:{name}")
    return load_causal_lm(cfg, name, device, DTYPE[name])


def load_dlm(name: str, device: torch.device, dtype: str) -> MaskedDiffusionLM:
    cfg = ModelConfig(name=name, name_or_path=f"specbench:{name}", kind="diffusion", adapter="tiny")
    return load_diffusion_lm(cfg, name, device, dtype)


def step_ms(lm: CausalLM, new_tokens: int) -> float:
    """One forward over `new_tokens` appended to the cached context, in milliseconds."""
    synchronize(lm.device)
    t0 = time.perf_counter()
    lm.forward_tokens(list(range(10, 10 + new_tokens)), keep=new_tokens)
    synchronize(lm.device)
    elapsed = time.perf_counter() - t0
    lm.rollback(lm.length - new_tokens)
    return 1000 * elapsed


def dlm_step_ms(dlm: MaskedDiffusionLM, block: int) -> float:
    synchronize(dlm.device)
    t0 = time.perf_counter()
    dlm.block_logits([dlm.mask_id] * block)
    synchronize(dlm.device)
    return 1000 * (time.perf_counter() - t0)


def arms(device: torch.device, context: list[int]) -> dict[str, Callable[[], float]]:
    """Every timed call, by label, each model's context already cached."""
    targets = {name: load(name, device) for name in ("tiny", "tiny-xl")}
    drafter = load("tiny-ar", device)
    dlms = {"tiny-dlm": load_dlm("tiny-dlm", device, "float32")}
    dlms["tiny-dlm-xl"] = load_dlm("tiny-dlm-xl", device, "bfloat16")
    for lm in (*targets.values(), drafter):
        lm.prefill(context)
    for dlm in dlms.values():
        dlm.set_prefix(context)
        dlm.block_logits([dlm.mask_id])  # encodes the prefix into the cache
    timed = {
        f"{name}, {k} tokens": (lambda lm=lm, k=k: step_ms(lm, k))
        for name, lm in targets.items()
        for k in CURVE
    }
    timed["tiny-ar, 1 tokens"] = lambda: step_ms(drafter, 1)
    for name, dlm in dlms.items():
        for block in (1, 16, 32):
            timed[f"{name}, {block} masks"] = lambda dlm=dlm, b=block: dlm_step_ms(dlm, b)
    return timed


def figure(median: dict[str, float], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.4))
    for name in ("tiny", "tiny-xl"):
        ratios = [median[f"{name}, {k} tokens"] / median[f"{name}, 1 tokens"] for k in CURVE]
        ax.plot(CURVE, ratios, marker="o", label=name)
    ax.axhline(1.5, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("new tokens in one forward (k)")
    ax.set_ylabel("verify(k) / step(1)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "forward_cost.png", dpi=150)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--out", type=Path, help="write forward_cost.csv and .png here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    timed = arms(torch.device(args.device), list(range(100, 100 + args.context)))
    times: dict[str, list[float]] = {name: [] for name in timed}
    for i in range(args.repeats + 5):  # the first 5 rounds are warm-up
        for name, measure in timed.items():
            ms = measure()
            if i >= 5:
                times[name].append(ms)
    median = {name: sorted(v)[len(v) // 2] for name, v in times.items()}
    print(
        f"forward cost, median of {args.repeats} | context {args.context} | "
        f"threads {torch.get_num_threads()}"
    )
    print("| k | tiny ms | tiny verify(k)/step(1) | tiny-xl ms | tiny-xl verify(k)/step(1) |")
    print("|---|---|---|---|---|")
    for k in CURVE:
        row = [f"{k}"]
        for name in ("tiny", "tiny-xl"):
            ms = median[f"{name}, {k} tokens"]
            row += [f"{ms:.2f}", f"{ms / median[f'{name}, 1 tokens']:.2f}"]
        print("| " + " | ".join(row) + " |")
    for name, ms in median.items():
        if "masks" in name or name.startswith("tiny-ar"):
            print(f"  {name:24s} {ms:7.2f} ms")
    ar = median["tiny-ar, 1 tokens"]
    for name in ("tiny", "tiny-xl"):
        print(f"{name} step / tiny-ar step: {median[f'{name}, 1 tokens'] / ar:.1f}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        with open(args.out / "forward_cost.csv", "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["call", "median_ms"])
            writer.writerows((name, f"{ms:.3f}") for name, ms in median.items())
        figure(median, args.out)


if __name__ == "__main__":
    main()
