"""End to end at temperature > 0: SpS through the real draft-verify loop and AR drafter emits
sequences distributed exactly as the target's (chi-square against the enumerated law)."""

from __future__ import annotations

import itertools
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from scipy.stats import chisquare
from transformers import GPT2Config, GPT2LMHeadModel

from specbench.decoding.drafters.ar import SpSConfig, build
from specbench.decoding.warp import Warp
from specbench.models.causal import CausalLM

V, LENGTH, DRAWS = 5, 3, 6000
PROMPT = [1, 3, 0]


def toy_lm(n_layer: int, seed: int) -> CausalLM:
    """A tiny-vocabulary model whose next-token law depends strongly on the context."""
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


def exact_law(target: CausalLM, warp: Warp) -> dict[tuple[int, ...], float]:
    law = {}
    for seq in itertools.product(range(V), repeat=LENGTH):
        prob = 1.0
        for i in range(LENGTH):
            logits = target.prefill(PROMPT + list(seq[:i]))
            prob *= float(warp.probs(logits)[seq[i]])
        law[seq] = prob
    return law


@pytest.mark.parametrize("warp", [Warp(temperature=1.0), Warp(temperature=0.7, top_k=3)])
def test_sps_samples_the_target_law(warp: Warp) -> None:
    target, drafter = toy_lm(n_layer=2, seed=0), toy_lm(n_layer=1, seed=1)
    decoder = build(SpSConfig(gamma=2), target, drafter, warp)
    generator = torch.Generator().manual_seed(0)
    counts = Counter(
        tuple(decoder.generate(PROMPT, LENGTH, generator).tokens) for _ in range(DRAWS)
    )
    law = exact_law(target, warp)
    assert set(counts) <= {seq for seq, p in law.items() if p > 0}
    big = [seq for seq, p in law.items() if p * DRAWS >= 5]  # chi-square needs expected >= 5
    observed = [counts[s] for s in big] + [DRAWS - sum(counts[s] for s in big)]
    expected = [law[s] * DRAWS for s in big] + [DRAWS * (1 - sum(law[s] for s in big))]
    total = sum(expected)
    assert chisquare(observed, [e / total * DRAWS for e in expected]).pvalue > 1e-3
