"""PSD's tokens per forward under a confidence-driven policy, by how deeper drafts are sized.

`draft_width=replay` replays the policy on the stale confidences (after the real step nothing
left clears the threshold, so each depth adds one token); `last` adds as many tokens per depth
as the policy's real step just committed (the paper's n_k, estimated by n_0). Counts only, so
the figures do not depend on the machine's load; both are exact (token-identical to the
policy's own decoder, which this script checks).

    python benchmarks/psd_draft_width.py --samples 20
"""

from __future__ import annotations

import argparse
import json

import torch

from specbench import paths
from specbench.config import ModelConfig
from specbench.decoding.dllm.psd.config import PSDConfig
from specbench.decoding.dllm.psd.method import PSDDecoder
from specbench.decoding.dllm.vanilla.method import BlockDecoder
from specbench.decoding.generation import Stop
from specbench.models.kinds.diffusion import load_diffusion_lm

POLICIES = {  # psd_grid_tiny's knobs
    "threshold 0.5": dict(policy="threshold", threshold=0.5),
    "localleap 0.5/0.3": dict(policy="localleap", threshold=0.5, relaxed_threshold=0.3),
    "dynamic 1.0": dict(policy="dynamic", factor=1.0),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    cfg = ModelConfig(
        name="tiny-dlm", name_or_path="specbench:tiny-dlm", kind="diffusion", adapter="tiny"
    )
    target = load_diffusion_lm(cfg, "target", torch.device("cpu"), "float32")
    rows = [json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").open()]
    prompts = [target.tokenizer(r["prompt"])["input_ids"] for r in rows[: args.samples]]
    stop = Stop(frozenset(target.eos_token_ids))
    print(f"tiny-dlm, {len(prompts)} tiny_code prompts, {args.new_tokens} new tokens, block 32")
    print(f"{'policy':<18} {'depth':>5} {'policy TPF':>10} {'replay TPF':>10} {'last TPF':>9}")
    for name, knobs in POLICIES.items():
        for depth in (1, 3, 5, 7):
            cells = {}
            for width in ("replay", "last"):
                cfg = PSDConfig(
                    block_length=32, prefix_cache=True, depth=depth, draft_width=width, **knobs
                )
                tokens = calls = base_calls = 0
                for prompt in prompts:
                    want = BlockDecoder(target, cfg).generate(
                        prompt, args.new_tokens, torch.Generator(), stop
                    )
                    got = PSDDecoder(target, cfg).generate(
                        prompt, args.new_tokens, torch.Generator(), stop
                    )
                    assert got.tokens == want.tokens, (
                        f"{name} d{depth} {width}: not the policy's output"
                    )
                    tokens, calls, base_calls = (
                        tokens + len(got.tokens),
                        calls + got.target_calls,
                        base_calls + want.target_calls,
                    )
                cells[width] = tokens / calls
            print(
                f"{name:<18} {depth:>5} {tokens / base_calls:>10.2f} {cells['replay']:>10.2f} {cells['last']:>9.2f}"
            )


if __name__ == "__main__":
    main()
