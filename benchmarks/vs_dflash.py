"""specbench's DFlash against the authors' own `dflash.model.dflash_generate` on the same pair.

Same target and drafter, prompts, block size, new-token budget and stop tokens, greedy, the arms
interleaved prompt by prompt, each leading in turn, and timed from outside their entry points; so both must emit
identical ids, and any speed difference is the loop around the forwards. Prints identical
outputs, tau both ways (the package's: mean over prompts of the mean tokens per verify round;
specbench's: tokens per target forward, the prefill included) and the tokens/s ratio.
Goal: specbench/dflash tokens/s >= 1.00.

    python benchmarks/vs_dflash.py --samples 20 --max-new-tokens 128          # tiny + tiny-dflash
    python benchmarks/vs_dflash.py --target Qwen/Qwen3-8B --drafter z-lab/Qwen3-8B-DFlash-b16 \\
        --device cuda --dtype bfloat16 --prompts gsm8k
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable

import dflash.model
import torch
from omegaconf import OmegaConf

from common import positive, print_table
from specbench.config import ModelConfig
from specbench.decoding.drafters.dflash.config import DFlashConfig
from specbench.decoding.drafters.dflash.method import DFlash
from specbench.decoding.generation import Generation, Stop
from specbench.decoding.warp import Warp
from specbench.metrics.speed import synchronize
from specbench.models.kinds import dflash as dflash_kind
from specbench.models.kinds.causal import load_causal_lm
from specbench.registry import TASKS, discover

GOAL = 1.00


def load(args: argparse.Namespace, device: torch.device):
    """Target (a `CausalLM`) and drafter, through specbench's loaders, as a run loads them."""
    target_cfg = ModelConfig(name="target", name_or_path=args.target, chat_template=args.chat)
    drafter_cfg = ModelConfig(name="drafter", name_or_path=args.drafter, kind="dflash")
    dflash_kind.check_reads_target(drafter_cfg, target_cfg)
    target = load_causal_lm(target_cfg, "target", device, args.dtype)
    drafter = dflash_kind.load(drafter_cfg, "drafter", device, args.dtype)
    return target, drafter


def prompts(args: argparse.Namespace, tokenizer) -> list[list[int]]:
    """The first samples of a specbench task, in its prompt format."""
    discover()
    spec = TASKS[args.prompts]
    task = spec.build(OmegaConf.to_object(OmegaConf.structured(spec.config)), args.chat, {})
    return [task.prompt_ids(tokenizer, s, args.chat) for s in task.samples()[: args.samples]]


def timed(device: torch.device, run: Callable, prompt: list[int]) -> tuple[object, float]:
    """Both arms are timed the same way, from outside their entry point."""
    synchronize(device)
    t0 = time.perf_counter()
    out = run(prompt)
    synchronize(device)
    return out, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="specbench:tiny")
    parser.add_argument("--drafter", default="specbench:tiny-dflash")
    parser.add_argument("--prompts", default="tiny_code", help="a specbench task")
    parser.add_argument("--chat", action="store_true", help="the target reads chat templates")
    parser.add_argument("--block-size", type=positive, help="default: the checkpoint's")
    parser.add_argument("--samples", type=positive, default=20)
    parser.add_argument("--max-new-tokens", type=positive, default=128)
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured prompts per arm")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=positive)
    args = parser.parse_args()
    # the package passes the target `past_key_values=`, which transformers 5.24 renamed `cache`
    warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type != "cuda":  # the package times with torch.cuda.synchronize
        dflash.model._cuda_time = time.perf_counter
    target, drafter = load(args, device)
    block = args.block_size or drafter.block_size
    decoder = DFlash(DFlashConfig(block_size=block), Warp()).build(target, drafter, None)
    stops = sorted(target.eos_token_ids)
    generator = torch.Generator(device)

    def ours(prompt: list[int]) -> Generation:
        return decoder.generate(prompt, args.max_new_tokens, generator, Stop(frozenset(stops)))

    def theirs(prompt: list[int]):
        ids = torch.tensor([prompt], device=device)
        return dflash.model.dflash_generate(
            drafter, target.model, ids, args.max_new_tokens, stops or None,
            block_size=block, return_stats=True,
        )  # fmt: skip

    samples = prompts(args, target.tokenizer)
    for prompt in samples[: args.warmup]:
        ours(prompt), theirs(prompt)
    wall = {"specbench": 0.0, "dflash": 0.0}
    same, tokens, tau_ours, tau_theirs, rounds_ours, rounds_theirs = 0, 0, [], [], [], []
    arms = {"specbench": ours, "dflash": theirs}
    for k, prompt in enumerate(samples):
        # interleaved, so drift in machine speed hits both arms alike, and each leads in turn
        order = list(arms) if k % 2 == 0 else list(arms)[::-1]
        out = {}
        for arm in order:
            out[arm], seconds = timed(device, arms[arm], prompt)
            wall[arm] += seconds
        mine, ref = out["specbench"], out["dflash"]
        ref_tokens = ref.output_ids[0, len(prompt) :].tolist()
        same += mine.tokens == ref_tokens
        tokens += len(mine.tokens)
        tau_ours.append(len(mine.tokens) / mine.target_calls)
        rounds_ours.append(statistics.mean(mine.emitted[1:] or [1]))
        rounds_theirs.append(statistics.mean(ref.acceptance_lengths or [1]))
        tau_theirs.append(len(ref_tokens) / (1 + len(ref.acceptance_lengths)))
    rate = {arm: tokens / seconds for arm, seconds in wall.items()}
    print(
        f"specbench DFlash vs dflash.model.dflash_generate | {args.target} + {args.drafter} | "
        f"block {block} | {len(samples)} {args.prompts} prompts x {args.max_new_tokens} new "
        f"tokens, greedy | {args.device} {args.dtype} threads={torch.get_num_threads()}"
    )
    print_table(
        ["arm", "tokens/s", "tau (package's)", "tokens per target forward"],
        [
            ["specbench", f"{rate['specbench']:.1f}", f"{statistics.mean(rounds_ours):.2f}",
             f"{statistics.mean(tau_ours):.2f}"],
            ["dflash", f"{rate['dflash']:.1f}", f"{statistics.mean(rounds_theirs):.2f}",
             f"{statistics.mean(tau_theirs):.2f}"],
        ],
    )  # fmt: skip
    print(f"identical outputs: {same}/{len(samples)} prompts")
    ratio = rate["specbench"] / rate["dflash"]
    verdict = "met" if ratio >= GOAL else "NOT met"
    print(f"tokens/s specbench/dflash: {ratio:.2f}x (goal >= {GOAL:.2f}x: {verdict})")


if __name__ == "__main__":
    main()
