"""SpS with EAGLE-2's dynamic draft trees (`method.tree=dynamic`): greedy output token-identical
to the target's; sampled output in the target's law (chi-square through the real loop); the
tree node for node what a naive EAGLE-2 builds from a fresh drafter forward per node, and with
top_k 1 the chain drafter's chain; on the tiny world, lossless and measured against its chain."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from conftest import builtin, law_pvalue, tree_beside_its_chain
from specbench.decoding.drafters.logits import fit_vocab
from specbench.decoding.drafters.sps.config import SpSConfig
from specbench.decoding.drafters.sps.method import ARDrafter, SpS, TreeDrafter
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.trees import node_depths
from specbench.decoding.warp import Warp
from specbench.errors import ConfigError
from specbench.models.causal import CausalLM
from specbench.models.toy import exact_law, toy_lm


def random_prompts(n: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, 30, (n,), generator=g).tolist()
    return [torch.randint(0, 50256, (k,), generator=g).tolist() for k in lengths]


def tree_sps(gamma: int, top_k: int, budget: int, warp: Warp | None = None) -> SpS:
    return SpS(SpSConfig(gamma=gamma, tree="dynamic", top_k=top_k, budget=budget), warp or Warp())


@pytest.fixture(scope="module")
def drafter64() -> CausalLM:
    """The random drafter in float64: a tree forward and a chain of fresh forwards then round
    alike, so their rankings agree (float32 top-2 logits of a random model can tie)."""
    return builtin("random-gpt2-draft")


@pytest.mark.parametrize("gamma, top_k, budget", [(1, 3, 2), (4, 4, 16)])
def test_greedy_tree_sps_is_the_targets_greedy_decoding(
    target: CausalLM, drafter: CausalLM, gamma: int, top_k: int, budget: int
) -> None:
    decoder = tree_sps(gamma, top_k, budget).build(target, drafter, None)
    plain = AutoregressiveDecoder(target, Warp())
    g = torch.Generator()
    accepted = branched = 0
    for prompt in random_prompts(6):
        got = decoder.generate(prompt, 24, g)
        assert got.tokens == plain.generate(prompt, 24, g).tokens
        assert got.target_calls == len(got.accepted)
        assert all(n <= budget for n in got.nodes) and max(got.accepted) <= gamma
        accepted += sum(got.accepted)
        branched += sum(n > d for n, d in zip(got.nodes, got.draft_lengths))
    # trees that branch and drafts that are accepted, or the test proves nothing
    assert accepted > 0 and (branched > 0 or budget <= gamma)


@pytest.mark.slow
@pytest.mark.parametrize("warp", [Warp(temperature=1.0), Warp(temperature=0.7, top_k=3)])
def test_sampled_tree_sps_samples_the_target_law(warp: Warp) -> None:
    length, draws, prompt = 3, 3000, [1, 3, 0]
    target, drafter = toy_lm(n_layer=2, seed=0), toy_lm(n_layer=1, seed=1)
    decoder = tree_sps(2, 2, 3, warp).build(target, drafter, None)
    generator = torch.Generator().manual_seed(0)
    counts = Counter(
        tuple(decoder.generate(prompt, length, generator).tokens) for _ in range(draws)
    )
    assert law_pvalue(counts, exact_law(target, prompt, length, warp), draws) > 1e-3


def root_paths(tokens: list[int], parents: list[int]) -> set[tuple[int, ...]]:
    paths: list[tuple[int, ...]] = []
    for token, parent in zip(tokens, parents):
        paths.append((*(paths[parent] if parent >= 0 else ()), token))
    return set(paths)


def naive_eagle2(
    lm: CausalLM, context: list[int], gamma: int, k: int, budget: int, stop: set[int]
) -> set[tuple[int, ...]]:
    """The tree's root paths from the algorithm as written: every node's children from a fresh
    drafter forward over the context and the node's path."""
    candidates: list[tuple[tuple[int, ...], float]] = []
    frontier: list[tuple[tuple[int, ...], float]] = [((), 0.0)]
    for _ in range(gamma):
        children = []
        for path, score in frontier:
            log_probs = fit_vocab(lm.prefill(context + list(path)), lm.vocab_size).log_softmax(-1)
            top = log_probs.topk(k)
            children += [
                ((*path, t), score + s) for s, t in zip(top.values.tolist(), top.indices.tolist())
            ]
        candidates += children
        ranked = sorted(children, key=lambda c: -c[1])  # stable: ties to the earlier node
        frontier = [c for c in ranked if c[0][-1] not in stop][:k]
    return {path for path, _ in sorted(candidates, key=lambda c: -c[1])[:budget]}


def rounds_of_contexts(prompt: list[int]) -> list[list[int]]:
    """Contexts as the loop's rounds give them (each extends the last), then a shorter one,
    as the cost model's timed drafts give."""
    return [prompt, prompt + [5, 6], prompt + [5, 6, 7, 8, 9], prompt[:-3], prompt + [1]]


@pytest.mark.parametrize("gamma, top_k, budget", [(2, 3, 5), (4, 3, 12), (5, 2, 9)])
def test_the_tree_is_eagle2s_and_well_formed(
    drafter64: CausalLM, gamma: int, top_k: int, budget: int
) -> None:
    """Node for node the naive algorithm's tree, round after round on one drafter cache;
    within the budget, parents first (so closed under ancestors), no deeper than gamma. The
    stop token is the first context's likeliest next token, so one node is never expanded."""
    prompt = random_prompts(1, seed=4)[0]
    oracle = CausalLM(drafter64.model, drafter64.tokenizer, "oracle")
    stop = {int(oracle.prefill(prompt).argmax())}
    tree = TreeDrafter(drafter64, stop, drafter64.vocab_size, top_k, budget)
    tree.reset()
    for context in rounds_of_contexts(prompt):
        draft = tree.draft(context, gamma, torch.Generator())
        assert draft.nfe == gamma and drafter64.length == len(context) - 1
        assert len(draft.tokens) == budget
        assert all(-1 <= p < k for k, p in enumerate(draft.parents))
        assert max(node_depths(draft.parents)) <= gamma
        got = root_paths(draft.tokens, draft.parents)
        assert got == naive_eagle2(oracle, context, gamma, top_k, budget, stop)
        assert all(path[-2] not in stop for path in got if len(path) > 1)


def test_top_k_one_with_budget_gamma_is_the_chain(target: CausalLM, drafter64: CausalLM) -> None:
    """The tree drafter drafts the chain drafter's greedy chain round for round, each on its
    own cache and taking turns on one (as the tree arm and its chain arm do), and SpS decodes
    the same tokens with the same accepted lengths and drafter calls."""
    gamma, prompt = 4, random_prompts(1, seed=2)[0]
    own = CausalLM(drafter64.model, drafter64.tokenizer, "own")
    for lm in (own, drafter64):
        chain = ARDrafter(drafter64, Warp(), set(), drafter64.vocab_size)
        tree = TreeDrafter(lm, set(), lm.vocab_size, 1, gamma)
        for context in rounds_of_contexts(prompt):
            want = chain.draft(context, gamma, torch.Generator())
            got = tree.draft(context, gamma, torch.Generator())
            assert (got.tokens, got.parents) == (want.tokens, list(range(-1, gamma - 1)))
    sps = SpS(SpSConfig(gamma=gamma), Warp()).build(target, drafter64, None)
    sps_tree = tree_sps(gamma, 1, gamma).build(target, drafter64, None)
    for prompt in random_prompts(4, seed=6):
        want = sps.generate(prompt, 32, torch.Generator())
        got = sps_tree.generate(prompt, 32, torch.Generator())
        assert got.tokens == want.tokens and got.accepted == want.accepted
        assert got.draft_lengths == want.draft_lengths
        assert got.drafter_calls == want.drafter_calls


def test_tree_knobs_label_arms_and_refusals() -> None:
    method = tree_sps(4, 4, 16)
    assert method.label() == "sps γ4 tree k4 N16" and method.drafts_trees()
    chain = SpS(SpSConfig(gamma=4), Warp())
    assert (
        chain.label() == "sps γ4"
        and not chain.drafts_trees()
        and chain.references(None, None) == {}
    )
    for knobs, key in [
        ({"tree": "static"}, "method.tree"),
        ({"top_k": 0}, "method.top_k"),
        ({"budget": 0}, "method.budget"),
        ({"schedule": "heuristic"}, "method.schedule"),
        ({"rule": "floor", "leniency": 0.1}, "method.rule"),
    ]:
        with pytest.raises(ConfigError, match=key):
            SpSConfig(**{"tree": "dynamic", **knobs}).check(0.0, 40)
    SpSConfig(rule="floor", leniency=0.1).check(0.0, 40)  # a chain keeps its lenient rules


def test_the_tiny_worlds_tree_is_lossless_and_measured_against_its_chain(tmp_path) -> None:
    """Tau at least 1.2x the chain's (the issue's goal for tree SpS)."""
    cell = ["method=sps", "drafter=tiny-ar", "method.gamma=4", "method.tree=dynamic"]
    assert tree_beside_its_chain(tmp_path, "chain", *cell) > 1.2
