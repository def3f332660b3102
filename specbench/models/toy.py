"""Five-token models for checking sampling laws by enumeration (tests and benchmarks): a
random causal LM whose next-token law depends strongly on its context, and a masked-diffusion
drafter whose block law depends on its prefix and on the tokens already revealed in the block."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from specbench.models.causal import CausalLM
from specbench.models.diffusion import MaskedDiffusionLM

V = 5  # real tokens; the drafter's mask is id V


def toy_lm(n_layer: int, seed: int) -> CausalLM:
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=V,
        n_positions=32,
        n_embd=16,
        n_layer=n_layer,
        n_head=2,
        initializer_range=0.6,
        bos_token_id=None,
        eos_token_id=None,
    )
    model = GPT2LMHeadModel(config)
    model.generation_config.eos_token_id = None
    return CausalLM(model, SimpleNamespace(eos_token_id=None), f"toy{n_layer}")


class ToyDLM(MaskedDiffusionLM):
    """Block logits drawn from a generator seeded by (prefix, block): unlike the target's law,
    and a later denoising step's draws depend on tokens revealed to their right."""

    def __init__(self) -> None:
        self.mask_id, self.vocab_size, self.context, self.name = V, V + 1, None, "toy-dlm"
        self.device, self.calls, self.prefix = torch.device("cpu"), 0, []
        self.time_conditioned = False

    def reset(self) -> None:
        pass

    def block_logits(self, block: list[int], subs: bool = True) -> torch.Tensor:
        self.calls += 1
        g = torch.Generator().manual_seed(hash((*self.prefix, -1, *block)) % 2**31)
        logits = 2 * torch.randn(len(block), self.vocab_size, generator=g)
        logits[:, self.mask_id] = float("-inf")
        return logits


def exact_law(
    target: CausalLM, prompt: list[int], length: int, warp: object
) -> dict[tuple[int, ...], float]:
    """The target's law of its next `length` tokens after `prompt`, every sequence enumerated."""
    law = {}
    for seq in itertools.product(range(V), repeat=length):
        prob = 1.0
        for i in range(length):
            prob *= float(warp.probs(target.prefill(prompt + list(seq[:i])))[seq[i]])
        law[seq] = prob
    return law
