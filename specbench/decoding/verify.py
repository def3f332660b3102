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


def ratio(leniency: float) -> AcceptanceRule:
    """Ratio leniency l in (0, 1]: accept d_i with probability min(1, p_i(d_i) / (l q_i(d_i))),
    on rejection sample the residual as the exact rule does. l = 1 is exact rejection sampling;
    smaller l accepts more often and is lossy."""

    def rule(p_logits, q_probs, draft, warp, generator):
        p = warp.probs(p_logits)
        k = len(draft)
        if k:
            draft_ids = torch.tensor(draft, device=p.device)
            if q_probs is None:
                q_probs = torch.nn.functional.one_hot(draft_ids, p.shape[-1]).to(p.dtype)
            rows = torch.arange(k, device=p.device)
            u = torch.rand(k, generator=generator, device=p.device)
            rejected = (u * leniency * q_probs[rows, draft_ids] > p[rows, draft_ids]).nonzero()
            if len(rejected):
                n = int(rejected[0])
                residual = (p[n] - q_probs[n]).clamp_min(0.0)
                dist = residual / residual.sum() if residual.sum() > 0 else p[n]
                return n, int(torch.multinomial(dist, 1, generator=generator))
        return k, int(torch.multinomial(p[k], 1, generator=generator))

    return rule


def _threshold_rule(
    accepts: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> AcceptanceRule:
    """Accept the longest draft prefix whose tokens pass `accepts(p_rows, draft_ids)`, read on
    the target's unwarped distribution; then emit the target's own token (its argmax when
    decoding greedily, a sample of its warped law otherwise), so a round always advances."""

    def rule(p_logits, q_probs, draft, warp, generator):
        p = p_logits.float().softmax(-1)
        k = len(draft)
        ok = accepts(p[:k], torch.tensor(draft, device=p.device)) if k else torch.ones(0)
        n = int(ok.long().cumprod(0).sum())
        return n, warp.sample(p_logits[n], generator)

    return rule


def floor(epsilon: float) -> AcceptanceRule:
    """Probability floor: accept d_i iff p_i(d_i) >= epsilon."""
    return _threshold_rule(lambda p, d: p[torch.arange(len(d)), d] >= epsilon)


def top_k(k: float) -> AcceptanceRule:
    """Accept d_i iff it is among the target's k most likely tokens (k = 1: exact greedy)."""
    return _threshold_rule(lambda p, d: (p > p[torch.arange(len(d)), d, None]).sum(-1) < int(k))


def typical(epsilon: float) -> AcceptanceRule:
    """Medusa's typical acceptance: accept d_i iff p_i(d_i) > min(epsilon, delta exp(-H(p_i))),
    with delta = sqrt(epsilon) as Medusa sets it."""

    def accepts(p: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        entropy = -(p * p.clamp_min(1e-12).log()).sum(-1)
        bound = torch.minimum(torch.full_like(entropy, epsilon), epsilon**0.5 * (-entropy).exp())
        return p[torch.arange(len(d)), d] > bound

    return _threshold_rule(accepts)


TreeRule = Callable[
    [torch.Tensor, list[int], list[int], Warp, torch.Generator], tuple[list[int], int]
]
"""`(p_logits [N+1, V], tokens (N), parents (N), warp, generator) -> (path, next_token)`: row 0
of `p_logits` is the root's (the newest committed token), row 1 + k node k's; `path` is the
accepted nodes from the root down, and `next_token` the target's token after the last."""


def follow(target_ids: list[int], tokens: list[int], parents: list[int]) -> tuple[list[int], int]:
    """From the root, step to the child whose token is the target's token at the current node
    (`target_ids[node + 1]`) while there is one; that token after the last node reached is the
    round's next token."""
    child_by_token = {(parent, tokens[node]): node for node, parent in enumerate(parents)}
    path, node = [], -1
    while (child := child_by_token.get((node, target_ids[node + 1]))) is not None:
        path.append(child)
        node = child
    return path, target_ids[node + 1]


def greedy_tree(
    p_logits: torch.Tensor,
    tokens: list[int],
    parents: list[int],
    warp: Warp,
    generator: torch.Generator,
) -> tuple[list[int], int]:
    """Follow the target's argmax down the tree: token-identical to greedy decoding."""
    return follow(p_logits.argmax(-1).tolist(), tokens, parents)


def sampled_tree(
    p_logits: torch.Tensor,
    tokens: list[int],
    parents: list[int],
    warp: Warp,
    generator: torch.Generator,
) -> tuple[list[int], int]:
    """Exact sampling over a tree fixed before the target reads it: every node's next token is
    drawn from the target's warped law there, and the walk follows the draws while they are
    children (DDTree's `follow_verified_tree`). Each emitted token is a draw of p given the
    tokens before it, so the output is the target's law whatever the tree. This is recursive
    rejection over siblings (SpecInfer; multi-draft speculative sampling) with one-hot
    proposals: accepting child t with probability p(t), else removing t from p and trying the
    next, selects each t with probability p(t), as one draw from p does."""
    draws = torch.multinomial(warp.probs(p_logits), 1, generator=generator)[:, 0]
    return follow(draws.tolist(), tokens, parents)


TREE_RULES: dict[str, TreeRule] = {"greedy": greedy_tree, "rejection": sampled_tree}


def make_tree_rule(name: str, warp: Warp) -> TreeRule:
    """The tree rule an exact `rule` knob names (auto: greedy at temperature 0)."""
    return TREE_RULES[resolve_rule(name, warp)]


RULES: dict[str, AcceptanceRule] = {"greedy": greedy, "rejection": rejection}
LENIENT: dict[str, Callable[[float], AcceptanceRule]] = {
    "ratio": ratio,
    "floor": floor,
    "topk": top_k,
    "typical": typical,
}


def resolve_rule(name: str, warp: Warp) -> str:
    """`auto` is greedy at temperature 0 and exact rejection sampling above it."""
    if name == "auto":
        return "greedy" if warp.greedy else "rejection"
    return name


def make_rule(name: str, leniency: float, warp: Warp) -> AcceptanceRule:
    """The rule a method's `rule` and `leniency` knobs name."""
    name = resolve_rule(name, warp)
    return RULES[name] if name in RULES else LENIENT[name](leniency)


def is_lossless(name: str, warp: Warp) -> bool:
    """Only the exact rules preserve the target's output (a lenient rule at its exact setting
    is still labelled lossy: its config says a lenient rule ran)."""
    return resolve_rule(name, warp) in RULES


def rule_label(rule: str, leniency: float, warp: Warp) -> list[str]:
    """A lenient rule and its knob for a label; nothing for the exact rules."""
    return [] if is_lossless(rule, warp) else [f"{resolve_rule(rule, warp)}{leniency:g}"]
