"""Harness overhead: the share of decode wall time spent outside model forward calls.

A speed-up claimed by the harness is only credible if the harness itself is nearly free, so
this times every forward of target and drafter (`CausalLM.time_forwards`) and reports
1 - forward time / wall time per arm: `ar` (plain decoding) and `sps` (greedy SpS, constant
gamma). Goal: at most 3% for both.

    python benchmarks/overhead.py --size base --samples 8 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import torch

from common import acceptance, add_common_args, describe, print_table, setup, sps_decoder
from specbench.decoding.generation import Decoder, Generation
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.models.causal import CausalLM

GOAL = 0.03


@dataclass
class Arm:
    name: str
    decoder: Decoder
    gens: list[Generation] = field(default_factory=list)
    forward_s: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(len(g.tokens) for g in self.gens)

    @property
    def wall_s(self) -> float:
        return sum(g.wall_s for g in self.gens)

    @property
    def overhead(self) -> float:
        return 1.0 - self.forward_s / self.wall_s


def forward_seconds(lms: tuple[CausalLM, ...]) -> float:
    return sum(lm.forward_s for lm in lms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser)
    args = parser.parse_args()
    bench = setup(args)
    target, drafter = bench.causal_lms()
    target.time_forwards = drafter.time_forwards = True
    arms = [
        Arm("ar", AutoregressiveDecoder(target, Warp())),
        Arm("sps", sps_decoder(target, drafter, args.gamma)),
    ]
    generator = torch.Generator(bench.device).manual_seed(args.seed)

    for prompt in bench.warmup_prompts(args.warmup):
        for arm in arms:
            arm.decoder.generate(prompt, args.max_new_tokens, generator)
    for prompt in bench.prompts:  # arms interleaved so drift in machine speed hits both alike
        for arm in arms:
            before = forward_seconds((target, drafter))
            arm.gens.append(arm.decoder.generate(prompt, args.max_new_tokens, generator))
            arm.forward_s += forward_seconds((target, drafter)) - before

    print(f"harness overhead | {describe(args)}")
    print_table(
        ["arm", "tokens", "wall s", "forward s", "overhead", "accept"],
        [
            [
                a.name,
                a.tokens,
                f"{a.wall_s:.3f}",
                f"{a.forward_s:.3f}",
                f"{a.overhead:.2%}",
                f"{acceptance(a.gens):.2f}" if a.name == "sps" else "-",
            ]
            for a in arms
        ],
    )
    for a in arms:
        verdict = "met" if a.overhead <= GOAL else "NOT met"
        print(f"overhead {a.name}: {a.overhead:.2%} (goal <= {GOAL:.0%}: {verdict})")


if __name__ == "__main__":
    main()
