"""How often tiny-dlm's argmax drafts agree with the tiny target's greedy continuation: the
ceiling of SpecDiff's acceptance on the tiny world.

For each tiny_code prompt the target decodes its greedy continuation; at each `--offsets`
position of it (0 = right after the prompt, which is cut mid-line; later ones are where
SpecDiff drafts after verified tokens) the diffusion LM drafts `--length` positions from an
all-mask block behind the cached context, in one step (argmax everywhere) or in `--steps`
steps (each reveals the most confident masked positions, an equal share per step). Reported
per position, plus the mean accepted run length; tiny-ar's greedy draft is the reference peer.

    python benchmarks/dlm_agreement.py --samples 100 --steps 1 4 --offsets 0 8 16 24
"""

from __future__ import annotations

import argparse
import json

import torch
from transformers import AutoModel, AutoTokenizer

from specbench import paths
from specbench.config import ModelConfig
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.models.kinds.causal import load_causal_lm
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
    parser.add_argument("--offsets", type=int, nargs="+", default=[0, 8, 16, 24])
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    target, peer = (
        load_causal_lm(
            ModelConfig(name=name, name_or_path=f"specbench:{name}"),
            "target",
            torch.device("cpu"),
            "float32",
        )
        for name in ("tiny", "tiny-ar")
    )
    dlm = AutoModel.from_pretrained(paths.TINY_DIR / "tiny-dlm", dtype=torch.float32).eval()
    rows = [
        json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").read_text().splitlines()
    ]
    greedy, peer_greedy = AutoregressiveDecoder(target, Warp()), AutoregressiveDecoder(peer, Warp())
    arms = [*(f"{s} step(s)" for s in args.steps), "tiny-ar"]
    hits = {a: {o: [0] * args.length for o in args.offsets} for a in arms}
    runs = {a: {o: 0 for o in args.offsets} for a in arms}
    n = 0
    horizon = max(args.offsets) + args.length
    for row in rows[: args.samples]:
        prompt = tokenizer(row["prompt"])["input_ids"]
        truth = greedy.generate(prompt, horizon, torch.Generator()).tokens
        if len(truth) < horizon:
            continue  # the target stopped early: nothing to compare past its end
        n += 1
        for offset in args.offsets:
            context, expected = prompt + truth[:offset], truth[offset : offset + args.length]
            drafts = {f"{s} step(s)": dlm_draft(dlm, context, args.length, s) for s in args.steps}
            drafts["tiny-ar"] = peer_greedy.generate(context, args.length, torch.Generator()).tokens
            for arm, draft in drafts.items():
                for i in range(args.length):
                    hits[arm][offset][i] += i < len(draft) and draft[i] == expected[i]
                runs[arm][offset] += run_length(draft, expected)
    print(
        f"drafts vs tiny's greedy next {args.length} tokens | {n} tiny_code prompts x offsets "
        f"{args.offsets}"
    )
    for arm in arms:
        total = [sum(hits[arm][o][i] for o in args.offsets) for i in range(args.length)]
        count = n * len(args.offsets)
        by_offset = " ".join(f"{o}:{hits[arm][o][0] / n:.2f}" for o in args.offsets)
        print(
            f"  {arm:11s}: first token {total[0] / count:.2f} (by offset {by_offset}) | per "
            f"position {' '.join(f'{h / count:.2f}' for h in total)} | mean accepted run "
            f"{sum(runs[arm].values()) / count:.2f}"
        )


if __name__ == "__main__":
    main()
