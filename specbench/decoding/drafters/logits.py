"""A drafter's logits over the target's vocabulary: the drafters whose model has another
vocabulary size than the target's (a causal drafter, a diffusion LM with its mask token) propose
only the target's ids, so rejection sampling compares laws over one set of tokens."""

from __future__ import annotations

import torch

from specbench.models.diffusion import MaskedDiffusionLM


def fit_vocab(logits: torch.Tensor, size: int) -> torch.Tensor:
    """Logits over exactly `size` ids: extra rows dropped, missing ones at -inf."""
    if logits.shape[-1] >= size:
        return logits[..., :size]
    pad = logits.new_full((*logits.shape[:-1], size - logits.shape[-1]), float("-inf"))
    return torch.cat([logits, pad], dim=-1)


def real_token_logits(
    dlm: MaskedDiffusionLM,
    block: list[int],
    vocab_size: int,
    subs: bool = True,
    t: torch.Tensor | None = None,
):
    """A draft block's logits over the target's vocabulary, the mask token at -inf (it may sit
    inside that vocabulary, as the tiny world's does, or past it, as MDLM's and Dream's do).
    `t` (the diffusion time, float32 [1, 1]) is passed on only to a time-conditioned drafter."""
    if t is not None and dlm.time_conditioned:
        logits = fit_vocab(dlm.block_logits(block, subs, t=t), vocab_size)
    else:
        logits = fit_vocab(dlm.block_logits(block, subs), vocab_size)
    if dlm.mask_id < vocab_size:
        mask = torch.tensor([dlm.mask_id], device=logits.device)
        logits = logits.index_fill(-1, mask, float("-inf"))
    return logits
