"""Positions a verification call reads, on a native LLaDA of tiny size (`random-llada`): PSD at
depths 1, 3, 7 and Spiffy with graphs of 5 and 10 nodes, each under no cache (a whole canvas
per draft, which is what the hub code's forward allowed), Fast-dLLM's prefix cache and its dual
cache. Measured, not computed: the target's position counter divided by its calls over whole
generations (each block's first forward reads the whole canvas in every mode; every other call
is a verification), on the tiny world's prompts, 64 new tokens in blocks of 32. Counts, not
times, so it may run beside other work.

    python benchmarks/verify_positions.py --prompts 4
"""

from __future__ import annotations

import argparse
import json

import torch
from transformers import AutoTokenizer

from specbench import paths
from specbench.config import ModelConfig
from specbench.decoding.dllm.psd.config import PSDConfig
from specbench.decoding.dllm.psd.method import PSDDecoder
from specbench.decoding.dllm.spiffy.calibrate import calibrate
from specbench.decoding.dllm.spiffy.config import SpiffyConfig
from specbench.decoding.dllm.spiffy.method import SpiffyDecoder
from specbench.decoding.generation import Stop
from specbench.models.kinds.diffusion import load_diffusion_lm

CACHES = {
    "none (whole canvases)": {},
    "prefix cache": {"prefix_cache": True},
    "dual cache": {"prefix_cache": True, "dual_cache": True},
}
NEW_TOKENS, BLOCK = 64, 32


def per_call(decoder, target, prompts: list[list[int]]) -> tuple[float, float]:
    """Mean positions per call and calls per generation."""
    calls = positions = 0
    for prompt in prompts:
        got = decoder.generate(prompt, NEW_TOKENS, torch.Generator(), Stop(frozenset()))
        calls, positions = calls + got.target_calls, positions + got.positions
    return positions / calls, calls / len(prompts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=4)
    args = parser.parse_args()
    cfg = ModelConfig(
        name="random-llada",
        name_or_path="specbench:random-llada",
        kind="diffusion",
        adapter="llada",
    )
    target = load_diffusion_lm(cfg, "target", torch.device("cpu"), "float32")
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    rows = [json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").open()]
    prompts = [tokenizer(r["prompt"])["input_ids"] for r in rows[: args.prompts]]
    calibration = [tokenizer(r["prompt"])["input_ids"] for r in rows[-8:]]  # never measured
    canvas = sum(len(p) + NEW_TOKENS for p in prompts) / len(prompts)
    print(f"random-llada, {len(prompts)} prompts, mean canvas {canvas:.0f} positions")
    print(f"{'decoder':<12} {'cache':<22} {'positions/call':>15} {'calls':>7}")
    for cache_name, cache in CACHES.items():
        for depth in (1, 3, 7):
            decoder = PSDDecoder(
                target, PSDConfig(block_length=BLOCK, policy="quota", depth=depth, **cache)
            )
            ppc, calls = per_call(decoder, target, prompts)
            print(f"{f'PSD d={depth}':<12} {cache_name:<22} {ppc:>15.0f} {calls:>7.1f}")
        for nodes in (5, 10):
            spiffy = SpiffyConfig(block_length=BLOCK, nodes=nodes, calibration_samples=8, **cache)
            graph = calibrate(target, spiffy, calibration)
            decoder = SpiffyDecoder(target, spiffy, graph)
            ppc, calls = per_call(decoder, target, prompts)
            print(f"{f'Spiffy D={nodes}':<12} {cache_name:<22} {ppc:>15.0f} {calls:>7.1f}")


if __name__ == "__main__":
    main()
