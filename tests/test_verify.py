"""Acceptance rules: greedy picks the argmax; rejection preserves the (warped) target law."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from specbench.decoding.knobs import EXACT_RULES, LENIENT_RULES
from specbench.decoding.verify import (
    LENIENT,
    RULES,
    floor,
    greedy,
    ratio,
    rejection,
    top_k,
    typical,
)
from specbench.decoding.warp import Warp

V, GAMMA, DRAWS = 6, 3, 20_000


def broken_rejection(p_logits, q_probs, draft, warp, generator):
    """Rejection without the residual: on a rejection it resamples from p. Biased."""
    p = warp.probs(p_logits)
    for i, token in enumerate(draft):
        if torch.rand(1, generator=generator) * q_probs[i, token] > p[i, token]:
            return i, int(torch.multinomial(p[i], 1, generator=generator))
    return len(draft), int(torch.multinomial(p[len(draft)], 1, generator=generator))


def sample_pairs(rule, warp: Warp, p_logits: torch.Tensor, q_logits: torch.Tensor) -> Counter:
    """First two emitted tokens of speculative decoding with a context-free target and drafter,
    so their exact law is p x p. Rounds repeat until two tokens exist (exercising accepts,
    residual draws at every position and the bonus token)."""
    g = torch.Generator().manual_seed(1234)
    q = warp.probs(q_logits)
    p_rows = p_logits.expand(GAMMA + 1, V)
    q_rows = q.expand(GAMMA, V)
    pairs: Counter = Counter()
    for _ in range(DRAWS):
        emitted: list[int] = []
        while len(emitted) < 2:
            draft = torch.multinomial(q, GAMMA, replacement=True, generator=g).tolist()
            n, nxt = rule(p_rows, q_rows, draft, warp, g)
            emitted += draft[:n] + [nxt]
        pairs[tuple(emitted[:2])] += 1
    return pairs


def pair_pvalue(pairs: Counter, p: torch.Tensor) -> float:
    cells = [(a, b) for a in range(V) for b in range(V) if p[a] * p[b] > 0]
    assert sum(pairs[c] for c in cells) == DRAWS, "a token outside the target's support was emitted"
    law = [float(p[a]) * float(p[b]) for a, b in cells]
    expected = [x / sum(law) * DRAWS for x in law]
    return chisquare([pairs[c] for c in cells], expected).pvalue


LOGITS_P = torch.tensor([2.0, 1.5, 0.2, -0.5, 0.9, -1.0])
LOGITS_Q = torch.tensor([-0.5, 1.8, 1.2, 0.7, -1.0, 0.4])


@pytest.mark.parametrize("warp", [Warp(temperature=1.0), Warp(temperature=0.8, top_p=0.8)])
def test_rejection_preserves_target_distribution(warp: Warp) -> None:
    pairs = sample_pairs(rejection, warp, LOGITS_P, LOGITS_Q)
    assert pair_pvalue(pairs, warp.probs(LOGITS_P)) > 1e-3


def test_rule_without_residual_fails_the_same_test() -> None:
    warp = Warp(temperature=1.0)
    pairs = sample_pairs(broken_rejection, warp, LOGITS_P, LOGITS_Q)
    assert pair_pvalue(pairs, warp.probs(LOGITS_P)) < 1e-6


def test_top_p_keeps_the_smallest_nucleus_and_top_k_the_k_best() -> None:
    probs = Warp(temperature=1.0, top_p=0.7).probs(LOGITS_P)
    assert (probs > 0).tolist() == [True, True, False, False, False, False]
    probs = Warp(temperature=1.0, top_k=3).probs(LOGITS_P)
    assert (probs > 0).tolist() == [True, True, False, False, True, False]
    assert torch.allclose(probs.sum(), torch.tensor(1.0))


def test_greedy_accepts_the_argmax_prefix_and_corrects_the_first_miss() -> None:
    p_logits = torch.full((4, V), -1.0)
    for row, best in enumerate([3, 1, 4, 2]):
        p_logits[row, best] = 1.0
    g = torch.Generator()
    assert greedy(p_logits, None, [3, 1, 0], Warp(), g) == (2, 4)
    assert greedy(p_logits, None, [3, 1, 4], Warp(), g) == (3, 2)
    assert greedy(p_logits, None, [0, 1, 4], Warp(), g) == (0, 3)


def test_rejection_with_a_one_hot_draft_accepts_with_probability_p() -> None:
    """Deterministic drafts: acceptance prob p(d), and the residual is p without d."""
    warp = Warp(temperature=1.0)
    p = warp.probs(LOGITS_P)
    g = torch.Generator().manual_seed(0)
    firsts = Counter(rejection(LOGITS_P.expand(2, V), None, [1], warp, g) for _ in range(DRAWS))
    accepted = sum(c for (n, _), c in firsts.items() if n == 1)
    assert abs(accepted / DRAWS - float(p[1])) < 0.015
    assert all(tok != 1 for (n, tok), _ in firsts.items() if n == 0)


def accepted_share(rule, warp: Warp, draws: int = 4000) -> float:
    g = torch.Generator().manual_seed(7)
    q = warp.probs(LOGITS_Q)
    kept = 0
    for _ in range(draws):
        draft = torch.multinomial(q, GAMMA, replacement=True, generator=g).tolist()
        n, _ = rule(LOGITS_P.expand(GAMMA + 1, V), q.expand(GAMMA, V), draft, warp, g)
        kept += n
    return kept / (draws * GAMMA)


def test_ratio_leniency_one_is_exact_and_smaller_accepts_more() -> None:
    warp = Warp(temperature=1.0)
    pairs = sample_pairs(ratio(1.0), warp, LOGITS_P, LOGITS_Q)
    assert pair_pvalue(pairs, warp.probs(LOGITS_P)) > 1e-3
    shares = [accepted_share(ratio(level), warp) for level in (1.0, 0.7, 0.4)]
    assert shares[0] < shares[1] < shares[2]
    lenient = sample_pairs(ratio(0.4), warp, LOGITS_P, LOGITS_Q)
    assert pair_pvalue(lenient, warp.probs(LOGITS_P)) < 1e-6  # and it is lossy


def test_threshold_rules_accept_what_they_promise() -> None:
    p_logits = torch.log(
        torch.tensor(
            [
                [0.50, 0.30, 0.10, 0.05, 0.03, 0.02],
                [0.25, 0.25, 0.20, 0.15, 0.10, 0.05],
                [0.90, 0.02, 0.02, 0.02, 0.02, 0.02],
                [0.40, 0.30, 0.10, 0.10, 0.05, 0.05],
            ]
        )
    )
    draft, g = [1, 3, 0], torch.Generator()
    assert floor(0.2)(p_logits, None, draft, Warp(), g) == (1, 0)  # 0.15 < 0.2 stops at 2
    assert floor(0.1)(p_logits, None, draft, Warp(), g) == (3, 0)  # all pass; bonus = argmax
    assert top_k(2)(p_logits, None, draft, Warp(), g) == (1, 0)  # token 3 is 4th in row 2
    assert top_k(3)(p_logits, None, draft, Warp(), g) == (1, 0)  # rank k + 1 is refused
    assert top_k(4)(p_logits, None, draft, Warp(), g) == (3, 0)
    greedy_draft = [0, 1, 0]  # row 2's argmax is 0 and 1 (a tie): both are top-1
    assert top_k(1)(p_logits, None, greedy_draft, Warp(), g)[0] == 3
    assert typical(0.09)(p_logits, None, draft, Warp(), g)[0] == 3
    assert typical(0.9)(p_logits, None, draft, Warp(), g)[0] == 1  # row 2: 0.15 < 0.95 e^-H = 0.17


def test_top_1_is_greedy_on_random_logits() -> None:
    g = torch.Generator().manual_seed(3)
    for _ in range(200):
        p_logits = torch.randn(5, 50, generator=g)
        draft = torch.randint(50, (4,), generator=g).tolist()
        agree = int(torch.randint(4, (1,), generator=g))  # a prefix equal to the argmax
        draft[:agree] = p_logits[:agree].argmax(-1).tolist()
        assert top_k(1)(p_logits, None, draft, Warp(), g) == greedy(
            p_logits, None, draft, Warp(), g
        )


def test_the_rules_a_config_may_name_are_the_rules_verify_implements() -> None:
    """The names are checked before torch (knobs.py) and resolved after it (verify.py)."""
    assert tuple(RULES) == EXACT_RULES and tuple(LENIENT) == LENIENT_RULES
