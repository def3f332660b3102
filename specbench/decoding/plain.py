"""The target's own plain decoding: one forward per token. It is the baseline arm of every run
(`Method.baseline`) and the decoder of the `ar` method."""

from __future__ import annotations

import torch

from specbench.decoding.generation import Generation, Meter, Stop
from specbench.decoding.warp import Warp
from specbench.models.causal import CausalLM


class AutoregressiveDecoder:
    def __init__(self, target: CausalLM, warp: Warp):
        self.target = target
        self.warp = warp

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        generator: torch.Generator,
        stop: Stop | None = None,
    ) -> Generation:
        target = self.target
        stop = stop or Stop(frozenset(target.eos_token_ids))
        meter = Meter(target)
        logits = target.prefill(prompt_ids)
        tokens: list[int] = []
        while True:
            token = self.warp.sample(logits, generator)
            tokens.append(token)
            meter.first_token()
            if stop.first(tokens, len(tokens) - 1) is not None or len(tokens) >= max_new_tokens:
                break
            logits = target.forward_tokens([token], keep=1)[0]
        return meter.generation(tokens, emitted=[1] * len(tokens))
