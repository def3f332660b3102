"""specbench's greedy SpS against transformers' assisted generation on the same footing.

Same models, prompts, greedy rule, constant draft length gamma and new-token budget, both
stopping at EOS; so both must emit identical ids and run the same number of forwards, and any
speed difference is the loop around the forwards. Goal: specbench/HF tokens/s >= 1.10.

    python benchmarks/vs_hf_assisted.py --size base --samples 8 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from transformers import GPT2LMHeadModel

from common import acceptance, add_common_args, describe, print_table, setup, sps_decoder
from specbench.decoding.generation import Generation
from specbench.metrics.speed import synchronize

GOAL = 1.10


class ForwardCounter:
    """Counts calls of a model through a forward pre-hook. It sits on the shared model, so both
    arms pay its (tiny) cost alike; equal counts show both arms ran the same algorithm."""

    def __init__(self, model: torch.nn.Module):
        self.n = 0
        model.register_forward_pre_hook(self._count)

    def _count(self, module: torch.nn.Module, args: tuple) -> None:
        self.n += 1


def fix_assistant_draft_length(drafter: GPT2LMHeadModel, gamma: int) -> None:
    """Make HF draft exactly `gamma` tokens every round. transformers 5.24 reads these three from
    the *assistant's* generation_config (AssistedCandidateGenerator.__init__), not from the
    kwargs of `generate`; a threshold of None would be filled with the 0.4 default, whose
    ConfidenceCriteria ends a draft early once the assistant is unsure."""
    config = drafter.generation_config
    config.num_assistant_tokens = gamma
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0


def timed(
    device: torch.device, run: Callable[[list[int]], list[int]], prompt: list[int]
) -> tuple[list[int], float]:
    """Both arms are timed the same way, from outside their entry point."""
    synchronize(device)
    t0 = time.perf_counter()
    tokens = run(prompt)
    synchronize(device)
    return tokens, time.perf_counter() - t0


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing new token (a length difference counts), None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser)
    args = parser.parse_args()
    bench = setup(args)
    fix_assistant_draft_length(bench.drafter, args.gamma)
    sps = sps_decoder(*bench.causal_lms(), args.gamma)
    generator = torch.Generator(bench.device).manual_seed(args.seed)
    gens: list[Generation] = []

    def run_specbench(prompt: list[int]) -> list[int]:
        gens.append(sps.generate(prompt, args.max_new_tokens, generator))
        return gens[-1].tokens

    def run_hf(prompt: list[int]) -> list[int]:
        ids = torch.tensor([prompt], device=bench.device)
        out = bench.target.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            assistant_model=bench.drafter,
            do_sample=False,
            max_new_tokens=args.max_new_tokens,
        )
        return out[0, len(prompt) :].tolist()

    arms = {"specbench": run_specbench, "hf": run_hf}
    for prompt in bench.warmup_prompts(args.warmup):
        for run in arms.values():
            timed(bench.device, run, prompt)
    gens.clear()

    counters = {m: ForwardCounter(getattr(bench, m)) for m in ("target", "drafter")}
    tokens: dict[str, list[list[int]]] = {name: [] for name in arms}
    wall = dict.fromkeys(arms, 0.0)
    forwards = {name: dict.fromkeys(counters, 0) for name in arms}
    for prompt in bench.prompts:  # arms interleaved so drift in machine speed hits both alike
        for name, run in arms.items():
            before = {m: c.n for m, c in counters.items()}
            out, seconds = timed(bench.device, run, prompt)
            tokens[name].append(out)
            wall[name] += seconds
            for m, c in counters.items():
                forwards[name][m] += c.n - before[m]

    rate = {name: sum(map(len, tokens[name])) / wall[name] for name in arms}
    print(f"specbench SpS vs HF assisted generation | {describe(args)}")
    print_table(
        ["arm", "tokens", "wall s", "tokens/s", "target fwd", "drafter fwd"],
        [
            [
                name,
                sum(map(len, tokens[name])),
                f"{wall[name]:.3f}",
                f"{rate[name]:.1f}",
                forwards[name]["target"],
                forwards[name]["drafter"],
            ]
            for name in arms
        ],
    )
    print(f"specbench acceptance: {acceptance(gens):.2f}")
    pairs = list(zip(tokens["specbench"], tokens["hf"], strict=True))
    print(f"identical token ids: {sum(a == b for a, b in pairs)}/{len(pairs)} prompts")
    for i, (a, b) in enumerate(pairs):
        at = first_divergence(a, b)
        if at is not None:
            print(
                f"  prompt {i}: first divergence at new token {at} "
                f"(specbench {a[at : at + 1]} vs hf {b[at : at + 1]})"
            )
    ratio = rate["specbench"] / rate["hf"]
    verdict = "met" if ratio >= GOAL else "NOT met"
    print(f"tokens/s specbench/hf: {ratio:.2f}x (goal >= {GOAL:.2f}x: {verdict})")


if __name__ == "__main__":
    main()
