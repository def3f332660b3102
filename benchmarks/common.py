"""Shared setup of the benchmark scripts: random-init GPT-2-shaped models built in memory (no
download, no disk), the packaged demo prompts, and the flags every script takes."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerBase

from specbench import paths
from specbench.decoding.drafters.sps.config import SpSConfig
from specbench.decoding.drafters.sps.method import SpS
from specbench.decoding.generation import Generation
from specbench.decoding.speculative import SpeculativeDecoder
from specbench.decoding.warp import Warp
from specbench.models.causal import CausalLM
from specbench.models.random_init import EOS, gpt2_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Size:
    """A target shape and its drafter: the target's first `draft_layers` blocks. A random model
    with tied embeddings mostly echoes its input token, so drafter and target agree on nearly
    everything unless the blocks are loud enough to move the residual stream; `initializer_range`
    sets that loudness. Greedy acceptance, gamma 4, 8 demo prompts x 64 tokens, float32: small
    (random_init's 0.06) 0.16; base 0.02 gives 0.45 (0.015: 0.88, 0.03: 0.12)."""

    n_layer: int
    n_embd: int
    n_head: int
    draft_layers: int
    initializer_range: float


SIZES = {
    "small": Size(n_layer=4, n_embd=128, n_head=4, draft_layers=1, initializer_range=0.06),
    "base": Size(n_layer=12, n_embd=768, n_head=12, draft_layers=2, initializer_range=0.02),
}


def positive(text: str) -> int:
    """argparse type: an integer >= 1 (AutoregressiveDecoder never stops at a budget of 0)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--samples", type=positive, default=8, help="measured prompts per arm")
    parser.add_argument("--max-new-tokens", type=positive, default=64)
    parser.add_argument("--gamma", type=positive, default=4, help="constant draft length of SpS")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured generations per arm")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=positive,
        help="torch CPU threads; use fewer than the cores when other processes share them, "
        "as OpenMP threads that wait on a busy core slow every matmul many times over",
    )


def _gpt2(size: Size, n_layer: int) -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=50257,
        n_positions=1024,
        n_embd=size.n_embd,
        n_layer=n_layer,
        n_head=size.n_head,
        initializer_range=size.initializer_range,
        bos_token_id=EOS,
        eos_token_id=EOS,
    )
    model = GPT2LMHeadModel(config).eval()
    model.generation_config.eos_token_id = EOS
    model.generation_config.pad_token_id = EOS  # silences HF's "setting pad to eos" warning
    return model


def build_models(
    size_name: str, seed: int, device: torch.device, dtype: torch.dtype
) -> tuple[GPT2LMHeadModel, GPT2LMHeadModel]:
    """Target and drafter built like `random_init.build_drafter`: the drafter owns copies of the
    target's embeddings, first blocks and final norm (its LM head is tied to the embeddings)."""
    size = SIZES[size_name]
    torch.manual_seed(seed)
    target = _gpt2(size, size.n_layer)
    drafter = _gpt2(size, size.draft_layers)
    src, dst = target.transformer, drafter.transformer
    for name in ("wte", "wpe", "ln_f"):
        getattr(dst, name).load_state_dict(getattr(src, name).state_dict())
    for i in range(size.draft_layers):
        dst.h[i].load_state_dict(src.h[i].state_dict())
    return target.to(device, dtype), drafter.to(device, dtype)


def load_prompts(tokenizer: PreTrainedTokenizerBase, n: int) -> list[list[int]]:
    """The first `n` packaged demo prompts as token ids."""
    lines = (paths.PACKAGE_DATA / "demo_prompts.jsonl").read_text(encoding="utf-8").splitlines()
    prompts = [json.loads(line)["prompt"] for line in lines if line.strip()]
    if not 1 <= n <= len(prompts):
        raise SystemExit(f"--samples must be in 1..{len(prompts)}, got {n}")
    return [tokenizer.encode(p) for p in prompts[:n]]


@dataclass
class Bench:
    """Everything an arm needs; the models are shared by all arms of a script."""

    device: torch.device
    target: GPT2LMHeadModel
    drafter: GPT2LMHeadModel
    tokenizer: PreTrainedTokenizerBase
    prompts: list[list[int]]

    def causal_lms(self) -> tuple[CausalLM, CausalLM]:
        return (
            CausalLM(self.target, self.tokenizer, "target"),
            CausalLM(self.drafter, self.tokenizer, "drafter"),
        )

    def warmup_prompts(self, n: int) -> list[list[int]]:
        return [self.prompts[i % len(self.prompts)] for i in range(n)]


def setup(args: argparse.Namespace) -> Bench:
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    target, drafter = build_models(args.size, args.seed, device, DTYPES[args.dtype])
    tokenizer = gpt2_tokenizer()
    return Bench(device, target, drafter, tokenizer, load_prompts(tokenizer, args.samples))


def describe(args: argparse.Namespace) -> str:
    """One line with the settings that decide the numbers, printed above each table."""
    return (
        f"size={args.size} device={args.device} dtype={args.dtype} threads={torch.get_num_threads()} "
        f"| {args.samples} prompts x {args.max_new_tokens} new tokens, gamma={args.gamma} "
        f"(constant), greedy, {args.warmup} warm-up generations per arm"
    )


def sps_decoder(target: CausalLM, drafter: CausalLM, gamma: int) -> SpeculativeDecoder:
    """Greedy SpS with a constant draft length, built exactly as `method=sps` builds it."""
    return SpS(SpSConfig(gamma=gamma, rule="greedy"), Warp()).build(target, drafter, None)


def acceptance(gens: Sequence[Generation]) -> float:
    """Accepted draft tokens over drafted ones, pooled over all rounds of all generations."""
    drafted = sum(sum(g.draft_lengths) for g in gens)
    return sum(sum(g.accepted) for g in gens) / drafted if drafted else float("nan")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Left-aligned first column, right-aligned numbers."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        first = r[0].ljust(widths[0])
        print("  ".join([first] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]))
