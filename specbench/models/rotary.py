"""Casting a model without rounding its rotary frequencies.

transformers and EAGLE's authors compute a rotary embedding's inverse frequencies in float32 and
cast only the cos/sin tables made from them to the activations' dtype. `nn.Module.to(dtype)`
casts every floating buffer, the frequencies among them, and a later cast back does not restore
them: a model cast to float16 keeps frequencies with 11 significant bits (relative error up to
4e-4, bfloat16 4e-3), and the angle error grows with the position. `cast` is `to` for
everything else; the frequency buffers only move to the new device.
"""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)

# transformers' rotary embeddings (and specbench's, which are theirs) hold these two buffers
FREQUENCIES = ("inv_freq", "original_inv_freq")


def cast(model: M, dtype: torch.dtype | None = None, device: torch.device | None = None) -> M:
    """`model.to(device, dtype)` in place, its rotary frequencies kept in their own dtype."""
    kept = {
        name: buffer
        for name, buffer in model.named_buffers(remove_duplicate=False)
        if name.rpartition(".")[2] in FREQUENCIES
    }
    model.to(device=device, dtype=dtype)
    for name, buffer in kept.items():
        owner, _, attr = name.rpartition(".")
        module = model.get_submodule(owner)
        setattr(module, attr, buffer.to(getattr(module, attr).device))
    return model
