"""Prompt lookup decoding: the lookup is vLLM's ngram proposer's (goldens from vLLM's own
function), and the method is lossless: greedy token for token, sampled in law."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from conftest import law_pvalue
from specbench.backends.vllm.backend import DRAFTS_AT, SPECULATIVE
from specbench.decoding.drafters.pld.config import PLDConfig
from specbench.decoding.drafters.pld.method import PLD, lookup
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.models.causal import CausalLM
from specbench.models.toy import exact_law, toy_lm

GOLDENS = json.loads((Path(__file__).parent / "goldens" / "ngram" / "vllm_ngram.json").read_text())


def test_lookup_is_vllms_ngram_proposer() -> None:
    cases = GOLDENS["cases"]
    ours = [lookup(c["context"], c["min_n"], c["max_n"], c["k"]) for c in cases]
    assert ours == [c["draft"] for c in cases]
    assert sum(bool(c["draft"]) for c in cases) > len(cases) // 3  # matches, not only misses


def test_lookup_prefers_the_longest_ngram_then_its_earliest_occurrence() -> None:
    #          0  1  2  3  4  5  6  7  8  9
    context = [5, 1, 2, 8, 1, 2, 9, 7, 1, 2]
    assert lookup(context, 1, 3, 2) == [8, 1]  # "1 2" at 1 (earliest), not at 4
    assert lookup(context, 3, 3, 2) == []  # "7 1 2" never occurred before
    assert lookup([4, 4, 4], 1, 2, 5) == [4]  # an occurrence may overlap the suffix


def test_greedy_pld_is_the_targets_greedy_decoding(target: CausalLM) -> None:
    warp = Warp()
    decoder = PLD(PLDConfig(gamma=6), warp).build(target, None, None)
    plain = AutoregressiveDecoder(target, warp)
    prompt = [464, 3290, 318, 257, 1332, 13] * 3
    generator = torch.Generator().manual_seed(0)
    ours = decoder.generate(prompt, 40, generator)
    assert ours.tokens == plain.generate(prompt, 40, generator).tokens
    assert sum(ours.accepted) > 0 and max(ours.draft_lengths) > 0  # drafts were used
    assert len(ours.tokens) == sum(ours.emitted) == len(ours.accepted) + sum(ours.accepted)


@pytest.mark.slow
@pytest.mark.parametrize("warp", [Warp(temperature=1.0), Warp(temperature=0.7, top_k=3)])
def test_sampled_pld_samples_the_target_law(warp: Warp) -> None:
    """The prompt repeats, so rounds draft (one-hot proposals, accepted with p(d)); the first
    draft is the target's choice about half the time."""
    length, draws, prompt = 3, 3000, [3, 0, 4, 0]
    target = toy_lm(n_layer=2, seed=0)
    decoder = PLD(PLDConfig(gamma=2), warp).build(target, None, None)
    generator = torch.Generator().manual_seed(0)
    counts = Counter(
        tuple(decoder.generate(prompt, length, generator).tokens) for _ in range(draws)
    )
    assert law_pvalue(counts, exact_law(target, prompt, length, warp), draws) > 1e-3


def test_pld_maps_to_vllms_ngram_method() -> None:
    cfg = PLDConfig(gamma=5, prompt_lookup_min=2, prompt_lookup_max=4)
    assert SPECULATIVE["pld"](PLD(cfg, Warp()), None) == {
        "method": "ngram",
        "num_speculative_tokens": 5,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }


def test_vllm_drafts_where_the_lookup_matches() -> None:
    """The backend places vLLM's unrecorded steps by this: a draft after "1 2" (seen
    before), none after a token never seen."""
    drafts_at = DRAFTS_AT["pld"](PLD(PLDConfig(gamma=4, prompt_lookup_min=2), Warp()))
    assert drafts_at([5, 1, 2, 8, 1, 2]) and not drafts_at([5, 1, 2, 8, 7])
    assert not drafts_at([5, 1, 2, 8, 2])  # "8 2" unseen; n=1 is below prompt_lookup_min
