"""SuffixDecoding: the drafter proposes what upstream's own suffix trees and cache propose
(goldens from snowflakedb/ArcticInference's code, built and run outside the repository), and
the method is lossless: greedy token for token through the shared loop, sampled in law."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from conftest import builtin, compose_cfg, law_pvalue, tree_beside_its_chain
from specbench import paths
from specbench.decoding.drafters.suffix.config import SuffixConfig
from specbench.decoding.drafters.suffix.method import Suffix, SuffixDrafter
from specbench.decoding.drafters.suffix.tree import SuffixCache
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.errors import ConfigError
from specbench.models.toy import exact_law, toy_lm
from specbench.pipeline import prepare

GOLDENS = Path(__file__).parent / "goldens" / "suffix"
REQUESTS = json.loads((GOLDENS / "requests.json").read_text())
DRAFTS = json.loads((GOLDENS / "drafts.json").read_text())
CASES = DRAFTS["cases"]


def config_of(case: dict) -> SuffixConfig:
    return SuffixConfig(**case["config"])


@pytest.mark.parametrize("case", CASES, ids=[f"{c['set']}-{i % 5}" for i, c in enumerate(CASES)])
def test_drafts_are_upstreams(case: dict) -> None:
    """Every round of every request, in order through one drafter (its global tree carrying
    earlier requests' responses): upstream's tokens and tree parents, and, from the cache
    the drafter drives, its float32 probabilities, score and match length."""
    cfg = config_of(case)
    drafter = SuffixDrafter(cfg)
    cache = SuffixCache(cfg.max_tree_depth, cfg.max_cached_requests)
    knobs = (cfg.max_spec_factor, cfg.max_spec_offset, cfg.min_token_prob, cfg.use_tree_spec)
    generator = torch.Generator()
    for request, rounds in zip(REQUESTS[case["set"]], case["rounds"], strict=True):
        prompt, response = request["prompt"], request["response"]
        drafter.reset()
        rid, seen = tuple(prompt), 0
        cache.start_request(rid, prompt)
        for want in rounds:
            context = prompt + response[: want["at"]]
            n = min(cfg.max_spec_tokens, len(response) - want["at"] - 1)
            draft = drafter.draft(context, n, generator)
            assert draft.tokens == want["token_ids"]
            assert draft.parents == (want["parents"] if cfg.use_tree_spec else None)
            cache.add_active_response(rid, context[len(prompt) + seen :])
            seen = want["at"]
            got = cache.speculate(rid, context, n, *knobs)
            assert (got.token_ids, got.parents, got.probs, got.score, got.match_len) == (
                want["token_ids"],
                want["parents"],
                want["probs"],
                want["score"],
                want["match_len"],
            )
        drafter.finish(prompt + response)
        cache.add_active_response(rid, response[seen:])
        cache.stop_request(rid)


def test_goldens_cover_trees_chains_and_the_global_tree() -> None:
    """The fixtures exercise what could differ: branching trees, chains, drafts from earlier
    requests (a round drafting in a request's first round, before its own response exists),
    evictions, and ties of equal probability among siblings."""
    assert DRAFTS["upstream"]["commit"] == "9d4643881608178f0f58a33d1b61919ca246997f"
    rounds = [r for c in CASES for request in c["rounds"] for r in request]
    assert len(rounds) > 2000
    assert sum(len(set(r["parents"])) < len(r["parents"]) for r in rounds) > 100
    assert sum(bool(request[0]["token_ids"]) for c in CASES for request in c["rounds"]) > 10
    assert {c["config"]["max_cached_requests"] for c in CASES} == {-1, 0, 1, 2}
    assert any(len(set(r["probs"])) < len(r["probs"]) for r in rounds)


def test_a_tree_branches_by_frequency_and_a_match_bounds_the_draft() -> None:
    """After "1 2" the prompt went on with 3 twice and 4 once: the tree holds both, the
    likelier first, each with its count ratio; the chain follows 3; a 2-token match drafts at
    most 2 tokens (max_spec_factor 1)."""
    cache = SuffixCache(max_tree_depth=8, max_cached_requests=-1)
    cache.start_request("r", [1, 2, 3, 1, 2, 4, 1, 2, 3])
    tree = cache.speculate("r", [5, 1, 2], 8, 1.0, 0.0, 0.1, True)
    assert (tree.token_ids, tree.parents, tree.match_len) == ([3, 4], [-1, -1], 2)
    assert tree.probs == pytest.approx([2 / 3, 1 / 3], rel=1e-6)
    chain = cache.speculate("r", [5, 1, 2], 8, 1.0, 0.0, 0.1, False)
    assert (chain.token_ids, chain.parents) == ([3, 1], [-1, 0])
    assert cache.speculate("r", [5, 1, 2], 8, 1.0, 0.0, 0.5, True).token_ids == [3]


def test_a_prompt_decoded_again_never_drafts_from_its_own_earlier_response() -> None:
    """Another prompt drafts from a finished request's response; the same prompt decoded
    again (the warm-up's decode of a sample, then its timed one) evicts it first."""
    drafter, generator = SuffixDrafter(SuffixConfig()), torch.Generator()
    prompt, response = [7, 8, 9], [1, 2, 3, 4, 5, 6]
    drafter.draft(prompt, 8, generator)
    drafter.finish(prompt + response)
    drafter.reset()
    assert drafter.draft([0, 1, 2], 8, generator).tokens == [3, 4]  # "1 2" matched: 2 tokens
    drafter.reset()
    drafter.draft(prompt, 8, generator)
    assert drafter.draft(prompt + [1, 2], 8, generator).tokens == []


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    rows = [json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").open()]
    return [tokenizer(r["prompt"])["input_ids"] for r in rows[:4]]


@pytest.mark.parametrize("tree", [True, False])
def test_greedy_suffix_is_the_targets_greedy_decoding(prompts, tree: bool) -> None:
    """One decoder over tiny_code prompts in turn (its global tree growing): the target's
    own greedy tokens, with drafts accepted."""
    target, warp = builtin("tiny"), Warp()
    decoder = Suffix(SuffixConfig(use_tree_spec=tree), warp).build(target, None, None)
    plain = AutoregressiveDecoder(target, warp)
    generator = torch.Generator().manual_seed(0)
    accepted = 0
    for prompt in prompts:
        ours = decoder.generate(prompt, 48, generator)
        assert ours.tokens == plain.generate(prompt, 48, generator).tokens
        assert len(ours.tokens) == sum(ours.emitted) == len(ours.accepted) + sum(ours.accepted)
        assert bool(ours.nodes) == tree
        accepted += sum(ours.accepted)
    assert accepted > 20


def test_a_suffix_cell_is_lossless_beside_its_chain(tmp_path: Path) -> None:
    """Through the pipeline on tiny_code: the tree arm and its chain arm both equal the
    baseline arm on every sample."""
    assert tree_beside_its_chain(tmp_path, "chain", "method=suffix", "drafter=none") > 0


@pytest.mark.slow
@pytest.mark.parametrize("tree", [True, False])
def test_sampled_suffix_samples_the_target_law(tree: bool) -> None:
    """The prompt repeats, so rounds draft point masses (a tree's verified by a draw at every
    node, a chain's by rejection); the output is the target's law."""
    length, draws, prompt, warp = 3, 3000, [3, 0, 4, 0, 3, 1, 4, 0], Warp(temperature=1.0)
    target = toy_lm(n_layer=2, seed=0)
    cfg = SuffixConfig(max_spec_tokens=2, min_token_prob=0.0, use_tree_spec=tree)
    decoder = Suffix(cfg, warp).build(target, None, None)
    generator = torch.Generator().manual_seed(0)
    counts = Counter(
        tuple(decoder.generate(prompt, length, generator).tokens) for _ in range(draws)
    )
    assert law_pvalue(counts, exact_law(target, prompt, length, warp), draws) > 1e-3


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("method.max_spec_tokens=0", "method.max_spec_tokens=0: must be an integer in"),
        ("method.min_token_prob=1.5", "method.min_token_prob=1.5: must be in"),
        ("method.max_cached_requests=-2", "method.max_cached_requests=-2: must be -1"),
        ("method.max_tree_depth=1", "method.max_tree_depth=1: must be an integer >= 2"),
        ("method.max_spec_factor=-1", "method.max_spec_factor=-1.0: must be >= 0"),
        ("backend=vllm", "backend='vllm': vLLM runs methods .*; not suffix"),
        ("backend=llamacpp", "backend='llamacpp': .* runs methods .*; not suffix"),
    ],
)
def test_unsupported_settings_are_refused_in_one_line(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        prepare(compose_cfg("method=suffix", "drafter=none", override))
    assert "\n" not in str(refused.value)
