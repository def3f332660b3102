"""How far SpecDiff's rejection sampling is from the target's law, by proposal and step count.

Monte Carlo on a five-token target and a drafter whose block law depends on tokens already
revealed (specbench/models/toy.py): total variation between the empirical law of `--length`
generated tokens and the target's enumerated law. The exact configs (T = 1 with `reveal_step`,
`onehot` at any T) measure the sampling noise floor at this draw count; the rest measure the
approximation of using a joint sample's rows as left-to-right proposals.

    python benchmarks/specdiff_joint_error.py --draws 40000
"""

from __future__ import annotations

import argparse
from collections import Counter

import torch

from specbench.decoding.drafters.specdiff.config import SpecDiffConfig
from specbench.decoding.drafters.specdiff.method import SpecDiff
from specbench.decoding.warp import Warp
from specbench.models.toy import ToyDLM, exact_law, toy_lm

PROMPT = [1, 3, 0]
CONFIGS = [
    (1, "reveal_step"),
    (2, "onehot"),
    (2, "reveal_step"),
    (4, "reveal_step"),
    (2, "final_step"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=40000)
    parser.add_argument("--length", type=int, default=2)
    args = parser.parse_args()
    warp, target = Warp(temperature=1.0), toy_lm(n_layer=2, seed=0)
    law = exact_law(target, PROMPT, args.length, warp)
    print(f"toy target (V=5), gamma {args.length}, {args.draws} draws of {args.length} tokens")
    print(f"{'T':>2} {'q_source':<12} {'labelled':<8} {'total variation':>15}")
    for steps, q_source in CONFIGS:
        method = SpecDiff(SpecDiffConfig(gamma=args.length, steps=steps, q_source=q_source), warp)
        decoder = method.build(target, ToyDLM(), None)
        generator = torch.Generator().manual_seed(0)
        counts = Counter(
            tuple(decoder.generate(PROMPT, args.length, generator).tokens)
            for _ in range(args.draws)
        )
        tv = 0.5 * sum(abs(counts[s] / args.draws - p) for s, p in law.items())
        label = "exact" if method.exact() else "lossy"
        print(f"{steps:>2} {q_source:<12} {label:<8} {tv:>15.4f}")


if __name__ == "__main__":
    main()
