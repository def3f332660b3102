"""End to end at temperature > 0: SpS through the real draft-verify loop and AR drafter, and
SpecDiff with one denoising step, emit sequences distributed exactly as the target's
(chi-square against the enumerated law)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from conftest import law_pvalue
from specbench.decoding.drafters.specdiff.config import SpecDiffConfig
from specbench.decoding.drafters.specdiff.method import SpecDiff
from specbench.decoding.drafters.sps.config import SpSConfig
from specbench.decoding.drafters.sps.method import SpS
from specbench.decoding.warp import Warp
from specbench.models.toy import ToyDLM, exact_law, toy_lm

LENGTH, DRAWS = 3, 6000
PROMPT = [1, 3, 0]


@pytest.mark.slow
@pytest.mark.parametrize("warp", [Warp(temperature=1.0), Warp(temperature=0.7, top_k=3)])
def test_sps_samples_the_target_law(warp: Warp) -> None:
    target, drafter = toy_lm(n_layer=2, seed=0), toy_lm(n_layer=1, seed=1)
    decoder = SpS(SpSConfig(gamma=2), warp).build(target, drafter, None)
    generator, draws = torch.Generator().manual_seed(0), DRAWS // 2
    counts = Counter(
        tuple(decoder.generate(PROMPT, LENGTH, generator).tokens) for _ in range(draws)
    )
    assert law_pvalue(counts, exact_law(target, PROMPT, LENGTH, warp), draws) > 1e-3


@pytest.mark.parametrize("steps, q_source", [(1, "reveal_step"), (3, "onehot")])
def test_exact_specdiff_configs_sample_the_target_law(steps: int, q_source: str) -> None:
    """T = 1 draws every position independently from its row, so `reveal_step` is exact; a
    one-hot proposal (accept with p(d), else resample p without d) is exact for any draft law.
    The method labels both exact and `reveal_step` at T >= 2 approximate."""
    warp, draws = Warp(temperature=1.0), DRAWS // 3
    method = SpecDiff(SpecDiffConfig(gamma=2, steps=steps, q_source=q_source), warp)
    assert method.exact() and not SpecDiff(SpecDiffConfig(gamma=2, steps=2), warp).exact()
    target = toy_lm(n_layer=2, seed=0)
    decoder = method.build(target, ToyDLM(), None)
    generator = torch.Generator().manual_seed(0)
    counts = Counter(
        tuple(decoder.generate(PROMPT, LENGTH, generator).tokens) for _ in range(draws)
    )
    assert law_pvalue(counts, exact_law(target, PROMPT, LENGTH, warp), draws) > 1e-3
