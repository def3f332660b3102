"""Forward costs of the tiny world: the target on 1, 9 and 21 new tokens, one tiny-ar step, and
one tiny-dlm denoising step over a block of 10 and of 20 masks behind its cached prefix.

Speculation pays only when a drafter step is much cheaper than a target forward and verifying
several tokens costs little more than one; this measures both with the KV cache as the decoders
use it (a 128-token context cached, new tokens appended, then rolled back), arms interleaved.

    python benchmarks/forward_cost.py --threads 2
"""

from __future__ import annotations

import argparse
import time

import torch

from specbench.config import ModelConfig
from specbench.metrics.speed import synchronize
from specbench.models.causal import CausalLM
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.models.loading import load_causal_lm, load_diffusion_lm


def load(name: str, device: torch.device) -> CausalLM:
    return load_causal_lm(
        ModelConfig(name=name, name_or_path=f"specbench:{name}"), name, device, "float32"
    )


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    target, drafter = load("tiny", device), load("tiny-ar", device)
    dlm = load_diffusion_lm(
        ModelConfig(
            name="tiny-dlm", name_or_path="specbench:tiny-dlm", kind="diffusion", adapter="tiny"
        ),
        "tiny-dlm",
        device,
        "float32",
    )
    arms = {
        "tiny, 1 token": lambda: step_ms(target, 1),
        "tiny, 9 tokens": lambda: step_ms(target, 9),
        "tiny, 21 tokens": lambda: step_ms(target, 21),
        "tiny-ar, 1 token": lambda: step_ms(drafter, 1),
        "tiny-dlm, 10 masks": lambda: dlm_step_ms(dlm, 10),
        "tiny-dlm, 20 masks": lambda: dlm_step_ms(dlm, 20),
    }
    context = list(range(100, 100 + args.context))
    for lm in (target, drafter):
        lm.prefill(context)
    dlm.set_prefix(context)
    dlm.block_logits([dlm.mask_id])  # encodes the prefix into the cache
    times: dict[str, list[float]] = {name: [] for name in arms}
    for i in range(args.repeats + 20):  # the first 20 rounds are warm-up
        for name, measure in arms.items():
            ms = measure()
            if i >= 20:
                times[name].append(ms)
    median = {name: sorted(v)[len(v) // 2] for name, v in times.items()}
    print(
        f"forward cost, median of {args.repeats} | context {args.context} | threads {torch.get_num_threads()}"
    )
    for name, ms in median.items():
        print(f"  {name:20s} {ms:6.2f} ms")
    for step in ("tiny-ar, 1 token", "tiny-dlm, 10 masks"):
        print(f"{step} / tiny, 1 token: {median[step] / median['tiny, 1 token']:.2f}")
    print(
        f"target 9 tokens / 1 token:     {median['tiny, 9 tokens'] / median['tiny, 1 token']:.2f}"
    )


if __name__ == "__main__":
    main()
