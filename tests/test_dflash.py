"""DFlash and DFlash 2 on specbench's draft-verify loop against the authors' own generator
(`dflash.model.dflash_generate`, package 0.1.0) on seeded random drafters: the same tokens, the
same acceptance lengths and the same verification inputs, round for round; the target's law
at temperature > 0 (chi-square through the real loop); and hidden states captured only for a
drafter that asks."""

from __future__ import annotations

import time
from collections import Counter
from types import SimpleNamespace

import dflash.model
import pytest
import torch

from conftest import law_pvalue
from specbench.decoding.drafters.dflash.config import DFlashConfig
from specbench.decoding.drafters.dflash.method import DFlash
from specbench.decoding.drafters.sps.config import SpSConfig
from specbench.decoding.drafters.sps.method import SpS
from specbench.decoding.generation import Stop
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.models.causal import CausalLM
from specbench.models.random_dflash import dflash_config, random_dflash
from specbench.models.toy import exact_law, toy_lm

V, NEW = 128, 60
REPEATED = 88  # a token the random target falls into repeating: the drafters' mask token


def prompts(n: int = 6) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 20, (n,), generator=g).tolist()
    return [torch.randint(0, V, (k,), generator=g).tolist() for k in lengths]


def latest_new_token(tokens: list[int]) -> int | None:
    """The token whose first appearance comes last: a stop token that ends a generation
    midway (None if the generation is one token repeated)."""
    first: dict[int, int] = {}
    for i, token in enumerate(tokens):
        first.setdefault(token, i)
    token, at = max(first.items(), key=lambda item: item[1])
    return token if at > 0 else None


def verification_inputs(model: torch.nn.Module) -> list[list[int]]:
    """Records the ids of every target forward from now on."""
    seen: list[list[int]] = []

    def record(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        seen.append(ids[0].tolist())

    model.register_forward_pre_hook(record, with_kwargs=True)
    return seen


def drafter_calls(drafter: torch.nn.Module) -> list[tuple[list[int], int]]:
    """Records every drafter forward from now on: its positions (context and block) and how
    many new target feature rows it read."""
    seen: list[tuple[list[int], int]] = []

    def record(module, args, kwargs):
        seen.append((kwargs["position_ids"][0].tolist(), kwargs["target_hidden"].shape[1]))

    drafter.register_forward_pre_hook(record, with_kwargs=True)
    return seen


def same_verifications(ours: list[list[int]], theirs: list[list[int]]) -> bool:
    """The same target forwards, except that near the end the reference also verifies a draft
    for the position after the last it can keep (its block covers every remaining position
    and one more): those rounds, the last ones, verify one token less here."""
    if len(ours) != len(theirs):
        return False
    extra = [len(t) - len(o) for o, t in zip(ours, theirs)]
    tail = extra.index(1) if 1 in extra else len(extra)
    return (
        all(t[: len(o)] == o for o, t in zip(ours, theirs))
        and set(extra[:tail]) <= {0}
        and set(extra[tail:]) <= {1}
    )


# with the repeated token as its mask a fresh drafter's blocks are often accepted whole; with
# another its drafts vary with every position of the block, the block's length included
@pytest.mark.parametrize("mask", [REPEATED, 5], ids=["accepting", "rejecting"])
@pytest.mark.parametrize("v2", [False, True], ids=["dflash", "dflash2"])
@pytest.mark.parametrize("block_size", [4, 16])
def test_greedy_dflash_is_the_packages_dflash_generate(
    random_qwen3: CausalLM, v2: bool, block_size: int, mask: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dflash.model, "_cuda_time", time.perf_counter)  # its stats on a CPU
    config = dflash_config(random_qwen3.model.config, [0, 2], block_size, mask, layers=2, v2=v2)
    drafter = random_dflash(config, seed=1).double()
    decoder = DFlash(DFlashConfig(), Warp()).build(random_qwen3, drafter, None)
    plain = AutoregressiveDecoder(random_qwen3, Warp())
    generator = torch.Generator()
    whole_blocks = 0
    for prompt in prompts():
        stop = latest_new_token(plain.generate(prompt, NEW, generator).tokens)
        stops = [] if stop is None else [stop]
        theirs_in, theirs_drafts = verification_inputs(random_qwen3.model), drafter_calls(drafter)
        theirs = dflash.model.dflash_generate(
            drafter,
            random_qwen3.model,
            torch.tensor([prompt]),
            NEW,
            stops or None,
            block_size=block_size,
            return_stats=True,
        )
        random_qwen3.model._forward_pre_hooks.clear()
        drafter._forward_pre_hooks.clear()
        ours_in, ours_drafts = verification_inputs(random_qwen3.model), drafter_calls(drafter)
        ours = decoder.generate(prompt, NEW, generator, Stop(frozenset(stops)))
        random_qwen3.model._forward_pre_hooks.clear()
        drafter._forward_pre_hooks.clear()
        # the same blocks at the same positions; when one position is left the reference
        # still drafts a token for the position after it, which cannot be kept: not here
        assert ours_drafts == theirs_drafts[: len(ours_drafts)]
        one_left = len(ours.tokens) == NEW and ours.draft_lengths[-1] == 0
        assert len(theirs_drafts) - len(ours_drafts) == one_left
        assert ours.tokens == theirs.output_ids[0, len(prompt) :].tolist()
        assert ours.emitted[1:] == theirs.acceptance_lengths  # round 0 is the prefill
        assert same_verifications(ours_in, theirs_in)  # every draft, the rejected ones too
        whole_blocks += theirs.acceptance_lengths.count(block_size)
    assert (whole_blocks > 0) == (mask == REPEATED)  # accepted drafts are compared too


@pytest.mark.slow
@pytest.mark.parametrize(
    "v2, warp",
    [(False, Warp(temperature=1.0)), (True, Warp(temperature=0.7, top_k=3))],
    ids=["dflash", "dflash2"],
)
def test_sampling_dflash_samples_the_target_law(v2: bool, warp: Warp) -> None:
    length, draws, prompt = 3, 3000, [1, 3, 0]
    target = toy_lm(n_layer=2, seed=0)
    config = dflash_config(target.model.config, [0], 3, mask_token_id=4, v2=v2)
    decoder = DFlash(DFlashConfig(), warp).build(target, random_dflash(config, seed=1), None)
    generator = torch.Generator().manual_seed(0)
    counts = Counter(
        tuple(decoder.generate(prompt, length, generator).tokens) for _ in range(draws)
    )
    assert law_pvalue(counts, exact_law(target, prompt, length, warp), draws) > 1e-3


def test_verification_captures_hidden_states_only_for_a_drafter_that_asks(
    random_qwen3: CausalLM,
) -> None:
    asked: list[object] = []
    random_qwen3.model.register_forward_pre_hook(
        lambda m, args, kwargs: asked.append(kwargs.get("output_hidden_states")), with_kwargs=True
    )
    prompt = prompts(1)[0]
    try:
        SpS(SpSConfig(gamma=3), Warp()).build(random_qwen3, random_qwen3, None).generate(
            prompt, 8, torch.Generator()
        )
        assert set(asked) == {None}
        asked.clear()
        config = dflash_config(random_qwen3.model.config, [0, 2], 4, REPEATED)
        drafter = random_dflash(config, seed=1).double()
        DFlash(DFlashConfig(), Warp()).build(random_qwen3, drafter, None).generate(
            prompt, 8, torch.Generator()
        )
    finally:
        random_qwen3.model._forward_pre_hooks.clear()
    assert asked and all(layers == [1, 3] for layers in asked)  # hidden_states[l + 1]: layer l
    full = random_qwen3.model(torch.tensor([prompt]), output_hidden_states=True).hidden_states
    random_qwen3.reset()
    hidden = random_qwen3.forward(prompt, last=1, hidden_layers=(0, 2)).hidden
    torch.testing.assert_close(hidden, torch.cat([full[1][0], full[3][0]], -1))


def test_training_sees_each_block_as_decoding_does() -> None:
    """tiny-dflash's training forward (every block of a sequence at once, under its mask) gives
    each block the logits that decoding computes for it: the features before its anchor, the
    block at its own positions, nothing of the other blocks."""
    from transformers import AutoModelForCausalLM

    from specbench import paths
    from specbench.decoding.drafters.dflash.method import DFlashDrafter
    from specbench.models.tiny.dflash import block_logits, dflash_drafter

    model = AutoModelForCausalLM.from_pretrained(paths.TINY_DIR / "tiny", dtype=torch.float32)
    target = CausalLM(model.eval(), SimpleNamespace(eos_token_id=None), "tiny")
    torch.manual_seed(0)
    drafter = dflash_drafter(model, 1, [1, 3], 8, mask_id=2).eval()
    for param in drafter.parameters():
        torch.nn.init.normal_(param, std=0.05)
    ids = torch.randint(0, 4000, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        states = model(input_ids=ids, output_hidden_states=True).hidden_states
    features = torch.cat([states[2], states[4]], -1)
    embedding = model.get_input_embeddings().weight.detach()
    anchors = [10, 25, 31]
    with torch.no_grad():
        trained, _ = block_logits(drafter, embedding, ids, features, torch.tensor([anchors]))
    decoded: list[torch.Tensor] = []
    drafter.register_forward_hook(lambda module, args, out: decoded.append(out))
    for i, anchor in enumerate(anchors):
        decoding = DFlashDrafter(drafter, target, 8, Warp())
        decoding.observe(features[0, :anchor])
        decoding.draft(ids[0, : anchor + 1].tolist(), 7, torch.Generator())
        with torch.inference_mode():
            logits = drafter.compute_logits(decoded[-1][0, 1:], model.lm_head).float()
        torch.testing.assert_close(logits, trained[0, 8 * i + 1 : 8 * (i + 1)])
