"""How decoding cost grows with the generation length and the draft length, on the tiny world.

For each max_new_tokens (gamma fixed) and each gamma (length fixed), plain decoding and SpS
decode the same prompts, arms interleaved (AR, SpS, AR, SpS, ...); printed per row: ms per
token of each arm and their ratio (the speedup). Longer generations read longer KV caches;
larger gammas draft more tokens that are rejected more often.

    python benchmarks/cost_growth.py --threads 2
"""

from __future__ import annotations

import argparse
import json

import torch
from transformers import AutoTokenizer

from specbench import paths
from specbench.config import ModelConfig
from specbench.decoding.drafters.sps.config import SpSConfig
from specbench.decoding.drafters.sps.method import SpS
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.models.kinds.causal import load_causal_lm


def ms_per_token(decoder: object, prompts: list[list[int]], max_new: int) -> float:
    tokens, wall = 0, 0.0
    for prompt in prompts:
        gen = decoder.generate(prompt, max_new, torch.Generator())
        tokens += len(gen.tokens)
        wall += gen.wall_s
    return 1000 * wall / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=6)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--gammas", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    def load(name: str):
        cfg = ModelConfig(name=name, name_or_path=f"specbench:{name}")
        return load_causal_lm(cfg, name, device, "float32")

    target, drafter = load("tiny"), load("tiny-ar")
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    rows = [json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").open()]
    prompts = [tokenizer(r["prompt"])["input_ids"] for r in rows[: args.samples]]
    ar = AutoregressiveDecoder(target, Warp())
    ms_per_token(ar, prompts[:1], 16)  # warm-up

    def row(label: str, max_new: int, gamma: int) -> None:
        sps = SpS(SpSConfig(gamma=gamma), Warp()).build(target, drafter, None)
        ar_ms, sps_ms = [], []
        for prompt in prompts:  # interleaved per prompt
            ar_ms.append(ms_per_token(ar, [prompt], max_new))
            sps_ms.append(ms_per_token(sps, [prompt], max_new))
        a, s = sum(ar_ms) / len(ar_ms), sum(sps_ms) / len(sps_ms)
        print(f"{label:<18} AR {a:6.2f} ms/tok   SpS {s:6.2f} ms/tok   speedup {a / s:5.2f}")

    for max_new in args.lengths:
        row(f"tokens {max_new}, γ 4", max_new, 4)
    for gamma in args.gammas:
        row(f"tokens 128, γ {gamma}", 128, gamma)


if __name__ == "__main__":
    main()
