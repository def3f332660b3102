"""Acceptance rules: given the target's logits over a draft, how many draft tokens survive and
which token the target emits after them.

Every rule has the signature `(p_logits [k+1, V], q_probs [k, V] | None, draft (k ids), warp,
generator) -> (n_accepted, next_token)`. Row i of `p_logits` predicts draft[i]; the last row
predicts the bonus token. `q_probs` None means the draft was chosen deterministically (one-hot).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from specbench.decoding.warp import Warp
from specbench.errors import ConfigError

AcceptanceRule = Callable[
    [torch.Tensor, torch.Tensor | None, list[int], Warp, torch.Generator], tuple[int, int]
]


def greedy(
    p_logits: torch.Tensor,
    q_probs: torch.Tensor | None,
    draft: list[int],
    warp: Warp,
    generator: torch.Generator,
) -> tuple[int, int]:
    """Accept while the draft equals the target's argmax; emit the argmax at the first mismatch.
    Token-identical to greedy decoding of the target."""
    target_ids = p_logits.argmax(-1).tolist()
    n = 0
    while n < len(draft) and draft[n] == target_ids[n]:
        n += 1
    return n, target_ids[n]


def rejection(
    p_logits: torch.Tensor,
    q_probs: torch.Tensor | None,
    draft: list[int],
    warp: Warp,
    generator: torch.Generator,
) -> tuple[int, int]:
    """Exact speculative sampling (Leviathan et al. 2023, Chen et al. 2023): accept d_i with
    probability min(1, p_i(d_i) / q_i(d_i)); on the first rejection sample the residual
    max(0, p_i - q_i) normalised; if every token survives, sample the bonus from p_{k+1}."""
    p = warp.probs(p_logits)
    k = len(draft)
    if k:
        device = p.device
        draft_ids = torch.tensor(draft, device=device)
        rows = torch.arange(k, device=device)
        if q_probs is None:
            q_probs = torch.nn.functional.one_hot(draft_ids, p.shape[-1]).to(p.dtype)
        p_draft, q_draft = p[rows, draft_ids], q_probs[rows, draft_ids]
        u = torch.rand(k, generator=generator, device=device)
        rejected = (u * q_draft > p_draft).nonzero()
        if len(rejected):
            n = int(rejected[0])
            residual = (p[n] - q_probs[n]).clamp_min(0.0)
            mass = residual.sum()
            dist = residual / mass if mass > 0 else p[n]
            return n, int(torch.multinomial(dist, 1, generator=generator))
    return k, int(torch.multinomial(p[k], 1, generator=generator))


RULES: dict[str, AcceptanceRule] = {"greedy": greedy, "rejection": rejection}


def resolve_rule(name: str, warp: Warp) -> str:
    """`auto` is greedy at temperature 0 and exact rejection sampling above it."""
    if name == "auto":
        return "greedy" if warp.greedy else "rejection"
    return name


def check_rule(name: str, warp: Warp) -> None:
    """A method's `rule` knob: a known rule, and greedy acceptance only for greedy decoding."""
    if name not in ("auto", *RULES):
        raise ConfigError("method.rule", name, f"allowed: auto, {', '.join(RULES)}")
    if name == "greedy" and not warp.greedy:
        raise ConfigError(
            "method.rule", name, "greedy acceptance needs run.temperature=0; use auto or rejection"
        )
