"""How often tiny-dlm's argmax drafts agree with the tiny target's greedy continuation: the
ceiling of SpecDiff's acceptance on the tiny world.

For each tiny_code prompt the target decodes its greedy next `--length` tokens; the diffusion
LM drafts the same number of positions from an all-mask block behind the cached prompt, in one
step (argmax everywhere) or in `--steps` steps (each reveals the most confident masked
positions, an equal share per step). Reported per position, plus the mean accepted run length.

    python benchmarks/dlm_agreement.py --samples 100 --steps 1 4
"""

from __future__ import annotations

import argparse
import json

import torch
from transformers import AutoModel, AutoTokenizer

from specbench import paths
from specbench.config import ModelConfig
from specbench.decoding.autoregressive import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.models.loading import load_causal_lm
from specbench.models.tiny.dlm import block_causal_mask


@torch.no_grad()
def dlm_draft(dlm, prompt: list[int], length: int, steps: int) -> list[int]:
    mask_id = dlm.config.mask_token_id
    prefix = torch.tensor([prompt])
    cache = dlm(
        prefix, attention_mask=block_causal_mask(len(prompt), len(prompt)), use_cache=True
    ).cache
    block = torch.full((1, length), mask_id)
    per_step = [length // steps + (i < length % steps) for i in range(steps)]
    for reveal in per_step:
        probs = dlm(block, cache=cache).logits[0].softmax(-1)
        confidence, tokens = probs.max(-1)
        confidence[block[0] != mask_id] = -1.0
        chosen = confidence.topk(reveal).indices
        block[0, chosen] = tokens[chosen]
    return block[0].tolist()


def run_length(draft: list[int], truth: list[int]) -> int:
    n = 0
    while n < len(draft) and draft[n] == truth[n]:
        n += 1
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--length", type=int, default=8)
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    target = load_causal_lm(
        ModelConfig(name="tiny", name_or_path="specbench:tiny"),
        "target",
        torch.device("cpu"),
        "float32",
    )
    dlm = AutoModel.from_pretrained(paths.TINY_DIR / "tiny-dlm", dtype=torch.float32).eval()
    rows = [
        json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").read_text().splitlines()
    ]
    greedy = AutoregressiveDecoder(target, Warp())
    hits = {s: [0] * args.length for s in args.steps}
    runs = {s: 0 for s in args.steps}
    n = 0
    for row in rows[: args.samples]:
        prompt = tokenizer(row["prompt"])["input_ids"]
        truth = greedy.generate(prompt, args.length, torch.Generator()).tokens
        if len(truth) < args.length:
            continue  # the target stopped early: nothing to compare past its end
        n += 1
        for s in args.steps:
            draft = dlm_draft(dlm, prompt, args.length, s)
            for i in range(args.length):
                hits[s][i] += draft[i] == truth[i]
            runs[s] += run_length(draft, truth)
    print(f"tiny-dlm drafts vs tiny's greedy next {args.length} tokens | {n} tiny_code prompts")
    for s in args.steps:
        per_position = " ".join(f"{h / n:.2f}" for h in hits[s])
        print(
            f"  {s} step(s): first token {hits[s][0] / n:.2f} | per position {per_position} | mean accepted run {runs[s] / n:.2f}"
        )


if __name__ == "__main__":
    main()
