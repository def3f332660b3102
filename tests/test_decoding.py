"""The decoding core on random-init models: KV rollback, greedy losslessness, stop handling."""

from __future__ import annotations

import pytest
import torch

from conftest import builtin
from specbench.decoding.drafters.sps.config import SpSConfig
from specbench.decoding.drafters.sps.method import SpS, common_prefix_len
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.speculative import SpeculativeDecoder
from specbench.decoding.warp import Warp
from specbench.models.causal import CausalLM


def random_prompts(n: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, 40, (n,), generator=g).tolist()
    return [torch.randint(0, 50256, (k,), generator=g).tolist() for k in lengths]


def sps(
    target: CausalLM,
    drafter: CausalLM,
    gamma: int,
    schedule: str = "constant",
    warp: Warp | None = None,
) -> SpeculativeDecoder:
    """Built exactly as `method=sps` builds it (rule auto: greedy at T=0, rejection above)."""
    return SpS(SpSConfig(gamma=gamma, schedule=schedule), warp or Warp()).build(
        target, drafter, None
    )


def test_logits_after_rollback_and_extend_equal_a_fresh_forward(target: CausalLM) -> None:
    ids = random_prompts(1, seed=7)[0] + [11, 22, 33, 44, 55, 66]
    target.prefill(ids[:10])
    target.forward_tokens([999, 998, 997])  # a draft that gets rejected
    target.rollback(10)
    assert target.length == 10 and target.cache.get_seq_length() == 10
    extended = target.forward_tokens(ids[10:])
    fresh = CausalLM(target.model, target.tokenizer, "fresh")
    fresh.prefill(ids[:1])
    full = fresh.forward_tokens(ids[1:])
    torch.testing.assert_close(extended, full[-len(ids[10:]) :], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("gamma", [1, 4, 8])
def test_greedy_sps_equals_target_greedy_token_for_token(
    target: CausalLM, drafter: CausalLM, gamma: int
) -> None:
    prompts = random_prompts(12)
    baseline, method = AutoregressiveDecoder(target, Warp()), sps(target, drafter, gamma)
    g = torch.Generator()
    proposed = accepted = full_rounds = missed_rounds = 0
    for prompt in prompts:
        expected = baseline.generate(prompt, 24, g)
        got = method.generate(prompt, 24, g)
        assert got.tokens == expected.tokens
        assert got.target_calls == len(got.draft_lengths)
        proposed += sum(got.draft_lengths)
        accepted += sum(got.accepted)
        full_rounds += sum(a == d for a, d in zip(got.accepted, got.draft_lengths))
        missed_rounds += sum(a < d for a, d in zip(got.accepted, got.draft_lengths))
    # The random pair must both accept whole drafts and reject, or this test proves nothing.
    assert accepted / proposed > 0.02 and full_rounds > 0 and missed_rounds > 0


def test_heuristic_schedule_is_lossless_and_changes_draft_lengths(
    target: CausalLM, drafter: CausalLM
) -> None:
    baseline, method = AutoregressiveDecoder(target, Warp()), sps(target, drafter, 2, "heuristic")
    lengths: set[int] = set()
    for prompt in random_prompts(10, seed=3):
        got = method.generate(prompt, 32, torch.Generator())
        assert got.tokens == baseline.generate(prompt, 32, torch.Generator()).tokens
        lengths.update(got.draft_lengths)
    assert len(lengths) >= 3


def test_both_arms_stop_at_the_first_stop_token_and_keep_it_once(
    target: CausalLM, drafter: CausalLM
) -> None:
    prompt = random_prompts(1, seed=5)[0]
    free = AutoregressiveDecoder(target, Warp()).generate(prompt, 32, torch.Generator()).tokens
    stop = free[20]
    cut = free[: free.index(stop) + 1]
    saved = target.eos_token_ids
    target.eos_token_ids = {stop}
    try:
        assert (
            AutoregressiveDecoder(target, Warp()).generate(prompt, 32, torch.Generator()).tokens
            == cut
        )
        assert sps(target, drafter, 4).generate(prompt, 32, torch.Generator()).tokens == cut
    finally:
        target.eos_token_ids = saved


def test_max_new_tokens_is_exact_and_counters_add_up(target: CausalLM, drafter: CausalLM) -> None:
    for max_new in (1, 2, 7):
        gen = sps(target, drafter, 4).generate(random_prompts(1)[0], max_new, torch.Generator())
        assert len(gen.tokens) == max_new
        assert gen.drafter_calls == sum(gen.draft_lengths)
        assert len(gen.tokens) <= sum(gen.accepted) + len(gen.accepted)


def test_a_fully_accepted_last_round_stops_at_max_new_tokens(target: CausalLM) -> None:
    """The target drafting for itself: every draft is accepted, so the last round's budget
    alone keeps the output at max_new_tokens."""
    twin = builtin("random-gpt2")
    for max_new in (1, 2, 5, 6, 9, 13):
        gen = sps(target, twin, 4).generate(random_prompts(1)[0], max_new, torch.Generator())
        assert gen.accepted == gen.draft_lengths  # nothing rejected
        assert len(gen.tokens) == max_new


def test_sampling_is_reproducible_with_the_same_seed(target: CausalLM, drafter: CausalLM) -> None:
    warp = Warp(temperature=1.0, top_p=0.9)
    prompt = random_prompts(1, seed=9)[0]
    runs = [
        sps(target, drafter, 3, warp=warp)
        .generate(prompt, 24, torch.Generator().manual_seed(5))
        .tokens
        for _ in range(2)
    ]
    other = (
        sps(target, drafter, 3, warp=warp)
        .generate(prompt, 24, torch.Generator().manual_seed(6))
        .tokens
    )
    assert runs[0] == runs[1] != other


def test_common_prefix_len() -> None:
    assert common_prefix_len([1, 2, 3, 4], [1, 2, 9], known=1) == 2
    assert common_prefix_len([1, 2, 3], [1, 2, 3, 4], known=3) == 3
    assert common_prefix_len([5, 2], [1, 2], known=1) == 0
