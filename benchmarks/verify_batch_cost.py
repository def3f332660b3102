"""What a batched verification costs: one forward of a diffusion LLM over B drafts of a block
against one forward over the block alone, behind a cached prefix (the tiny world's exact cache).

PSD trades forward calls for rows: an iteration at depth d verifies up to d + 1 drafts in one
call. The trade pays when B rows cost little more than one, as on a GPU with spare compute; on a
small CPU a forward's cost grows with the rows it reads. This prints the ratio per B, arms
interleaved (1 row, B rows, 1 row, B rows, ...), medians of `--repeats`.

    python benchmarks/verify_batch_cost.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specbench.config import ModelConfig
from specbench.metrics.speed import synchronize
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.models.kinds.diffusion import load_diffusion_lm


def forward_ms(dlm: MaskedDiffusionLM, reading, canvas: torch.Tensor, lo: int, hi: int) -> float:
    synchronize(dlm.device)
    t0 = time.perf_counter()
    dlm.canvas_logits(canvas, lo, hi, reading)
    synchronize(dlm.device)
    return 1000 * (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--rows", type=int, nargs="+", default=[2, 4, 6, 8])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cfg = ModelConfig(
        name="tiny-dlm", name_or_path="specbench:tiny-dlm", kind="diffusion", adapter="tiny"
    )
    dlm = load_diffusion_lm(cfg, "target", device, "float32")
    reading = dlm.reading(prefix_cache=True, dual_cache=False)
    lo, hi = args.context, args.context + args.block
    prompt = torch.arange(10, 10 + args.context, device=device)
    canvas = torch.cat([prompt, torch.full((args.block,), dlm.mask_id, device=device)])[None]
    dlm.canvas_logits(canvas, lo, hi, reading)  # the prefix enters the cache once, as decoding
    print(f"tiny-dlm, block {args.block} behind a cached {args.context}-token prefix")
    for rows in args.rows:
        batch = canvas.expand(rows, -1).clone()
        one, many = [], []
        for _ in range(args.repeats):
            one.append(forward_ms(dlm, reading, canvas, lo, hi))
            many.append(forward_ms(dlm, reading, batch, lo, hi))
        single, batched = statistics.median(one), statistics.median(many)
        print(
            f"{rows} rows: {batched:.2f} ms vs 1 row {single:.2f} ms -> {batched / single:.2f}x "
            f"the cost for {rows}x the positions"
        )


if __name__ == "__main__":
    main()
