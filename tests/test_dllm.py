"""Diffusion-LLM decoding and PSD: PSD at depth 0 is its policy's decoder; with a one-token policy
(and with the threshold policy) PSD's tokens equal the vanilla decoder's at every depth; call
counts are exact on scripted models; the policies follow their definitions; the LLaDA and Dream
adapters read random-init models with their interfaces; runs end to end with honest records."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer

from conftest import compose_cfg, dtype_for
from specbench import paths
from specbench.config import ModelConfig
from specbench.decoding.dllm.policies import (
    Dynamic,
    LocalLeap,
    Quota,
    Threshold,
    greedy_confidence,
    one_token_per_step,
)
from specbench.decoding.dllm.psd.config import PSDConfig
from specbench.decoding.dllm.psd.method import PSDDecoder
from specbench.decoding.dllm.vanilla.config import DLLMConfig
from specbench.decoding.dllm.vanilla.method import BlockDecoder
from specbench.decoding.generation import Stop
from specbench.decoding.knobs import SpatialConfig
from specbench.errors import ConfigError
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.models.kinds.diffusion import load_diffusion_lm
from specbench.pipeline import execute, prepare

CPU = torch.device("cpu")
MASK, VOCAB = 0, 16


def load(name: str, adapter: str) -> MaskedDiffusionLM:
    cfg = ModelConfig(
        name=name, name_or_path=f"specbench:{name}", kind="diffusion", adapter=adapter
    )
    return load_diffusion_lm(cfg, "target", CPU, dtype_for(name))


@pytest.fixture(scope="module")
def world() -> tuple[MaskedDiffusionLM, list[list[int]]]:
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    rows = [json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").open()]
    return load("tiny-dlm", "tiny"), [tokenizer(r["prompt"])["input_ids"] for r in rows]


def tokens(decoder: BlockDecoder, prompt: list[int], n: int) -> list[int]:
    return decoder.generate(prompt, n, torch.Generator(), Stop(frozenset())).tokens


POLICIES = [
    SpatialConfig(block_length=8),
    SpatialConfig(block_length=16, steps=32, schedule="dream", confidence="entropy"),
    SpatialConfig(policy="threshold", threshold=0.3, prefix_cache=True),
    SpatialConfig(policy="dynamic", factor=2.0, block_length=16),
    SpatialConfig(policy="localleap", threshold=0.4, relaxed_threshold=0.1, window=2),
]


@pytest.mark.parametrize("cfg", POLICIES, ids=lambda c: f"{c.policy}-{c.block_length}")
def test_psd_at_depth_zero_is_its_policys_decoder(world, cfg) -> None:
    dlm, prompts = world
    vanilla = BlockDecoder(dlm, DLLMConfig(**vars(cfg)))
    psd = PSDDecoder(dlm, PSDConfig(**vars(cfg), depth=0))
    for prompt in prompts[:4]:
        calls = dlm.calls
        want = tokens(vanilla, prompt, 48)
        vanilla_calls, calls = dlm.calls - calls, dlm.calls
        assert tokens(psd, prompt, 48) == want
        assert dlm.calls - calls == vanilla_calls


@pytest.mark.parametrize("depth", [1, 3, 5, 7])
@pytest.mark.parametrize(
    "cfg",
    [SpatialConfig(block_length=32, prefix_cache=True), POLICIES[2], POLICIES[4]],
    ids=["one-token", "threshold", "localleap"],
)
def test_psd_equals_the_vanilla_decoder_at_every_depth(world, cfg, depth) -> None:
    dlm, prompts = world
    vanilla = BlockDecoder(dlm, DLLMConfig(**vars(cfg)))
    psd = PSDDecoder(dlm, PSDConfig(**vars(cfg), depth=depth))
    fewer = 0
    for prompt in prompts[:4]:
        calls = dlm.calls
        want = tokens(vanilla, prompt, 64)
        vanilla_calls, calls = dlm.calls - calls, dlm.calls
        got = psd.generate(prompt, 64, torch.Generator(), Stop(frozenset()))
        assert got.tokens == want
        assert got.target_calls == dlm.calls - calls <= vanilla_calls
        # an accepted step saves the forward vanilla spends on it, except a step that finishes
        # a block: neither decoder runs a forward after a block's last step
        saved = vanilla_calls - got.target_calls
        assert sum(got.accepted) - -(-64 // cfg.block_length) <= saved <= sum(got.accepted)
        fewer += got.target_calls < vanilla_calls
    assert fewer > 0  # the drafts are accepted somewhere: speculation is exercised


class Scripted(MaskedDiffusionLM):
    """A fake diffusion LM: position j's greedy token is `token(j, committed)` with confidence
    falling from left to right; `drifting` makes a token depend on how much of the block is
    committed, so every draft built from a stale forward is wrong."""

    def __init__(self, drifting: bool):
        self.mask_id, self.vocab_size, self.device = MASK, VOCAB, CPU
        self.eos_token_ids, self.drifting = set(), drifting
        self.calls, self.positions, self.rows = 0, 0, []

    def reset(self) -> None:
        pass

    def _canvas_logits(self, canvas: torch.Tensor, lo: int, hi: int, reading) -> torch.Tensor:
        self.rows.append(canvas.shape[0])
        logits = torch.full((canvas.shape[0], hi - lo, VOCAB), -10.0)
        for b in range(canvas.shape[0]):
            committed = int((canvas[b, lo:hi] != MASK).sum()) if self.drifting else 0
            for j in range(hi - lo):
                logits[b, j, 1 + (j + committed) % (VOCAB - 1)] = 5.0 - 0.1 * j
        return logits


@pytest.mark.parametrize(
    "depth, calls_per_block",
    # block of 8, one token per step. Depth d: the block's first forward, then one batched
    # forward per iteration (1 + d tokens each) except when the policy's own step finishes it.
    [(0, 8), (1, 1 + 4), (2, 1 + 3), (3, 1 + 2), (6, 1 + 2 - 1), (7, 1 + 1)],
)
def test_psd_call_counts_are_exact_on_a_scripted_model(depth, calls_per_block) -> None:
    fake = Scripted(drifting=False)
    got = PSDDecoder(fake, PSDConfig(block_length=8, policy="quota", depth=depth)).generate(
        [5, 6], 16, torch.Generator(), Stop(frozenset())
    )
    assert got.target_calls == fake.calls == 2 * calls_per_block
    assert got.tokens == [1 + j % (VOCAB - 1) for j in range(8)] * 2
    assert max(fake.rows) == min(depth + 1, 7)  # the verification batch: D_0 .. D_d with a mask


def test_psd_falls_back_to_one_step_per_call_when_every_draft_is_wrong() -> None:
    fake = Scripted(drifting=True)
    vanilla = BlockDecoder(fake, DLLMConfig(block_length=8)).generate(
        [5], 16, torch.Generator(), Stop(frozenset())
    )
    fake.calls = 0
    got = PSDDecoder(fake, PSDConfig(block_length=8, policy="quota", depth=3)).generate(
        [5], 16, torch.Generator(), Stop(frozenset())
    )
    assert got.tokens == vanilla.tokens
    assert got.target_calls == vanilla.target_calls == 16
    assert set(got.accepted) == {0}


class Pairs(Scripted):
    """A fake whose threshold policy (0.9) commits exactly two tokens per step: the two
    leftmost masked positions are certain, every other one is unsure (about 0.6, falling from
    left to right), always with the same greedy token per position."""

    def __init__(self) -> None:
        super().__init__(drifting=False)

    def _canvas_logits(self, canvas: torch.Tensor, lo: int, hi: int, reading) -> torch.Tensor:
        self.rows.append(canvas.shape[0])
        logits = torch.full((canvas.shape[0], hi - lo, VOCAB), -10.0)
        for b in range(canvas.shape[0]):
            masked = (canvas[b, lo:hi] == MASK).nonzero()[:, 0].tolist()
            for j in range(hi - lo):
                token = 1 + j % (VOCAB - 1)
                logits[b, j, token] = 8.0 if j in masked[:2] else 1.0 - 0.01 * j
                logits[b, j, 1 + (token % (VOCAB - 1))] = 0.5 if j not in masked[:2] else -10.0
        return logits


def test_psd_drafts_match_a_policy_that_commits_several_tokens_per_step() -> None:
    """`last` sizes each deeper draft as the policy's step just did (two tokens), so the
    verifier's step matches it; `replay` adds one token per depth and never matches."""
    knobs = dict(block_length=8, policy="threshold", threshold=0.9)
    fake, run = Pairs(), ([5, 6], 16, torch.Generator(), Stop(frozenset()))
    vanilla = BlockDecoder(fake, DLLMConfig(**knobs)).generate(*run)
    last = PSDDecoder(fake, PSDConfig(**knobs, depth=3)).generate(*run)
    replay = PSDDecoder(fake, PSDConfig(**knobs, depth=3, draft_width="replay")).generate(*run)
    assert (
        last.tokens
        == replay.tokens
        == vanilla.tokens
        == [1 + j % (VOCAB - 1) for j in range(8)] * 2
    )
    assert vanilla.target_calls == 2 * 4 and vanilla.emitted == [2] * 8
    assert replay.target_calls == vanilla.target_calls and set(replay.accepted) == {0}
    # per block: the first forward, then one batched forward accepts D_1 .. D_3
    assert last.target_calls == 2 * 2 and last.accepted == [3, 3] and last.emitted == [2, 6] * 2


@pytest.mark.parametrize("depth", [None, 0, 2])
def test_decoding_stops_once_everything_up_to_a_stop_token_is_committed(depth) -> None:
    fake = Scripted(drifting=False)
    decoder = (
        BlockDecoder(fake, DLLMConfig(block_length=8))
        if depth is None
        else PSDDecoder(fake, PSDConfig(block_length=8, policy="quota", depth=depth))
    )
    got = decoder.generate([5], 32, torch.Generator(), Stop(frozenset({6})))
    assert got.tokens == [1, 2, 3, 4, 5, 6]  # kept up to the stop token, which is kept
    # left to right, one token per step: the sixth step commits the stop; with drafts of depth
    # 2, the second batched forward verifies it (1 + 1 + 1 steps per iteration after the first)
    assert got.target_calls == {None: 6, 0: 6, 2: 3}[depth]


def test_quota_schedules_reveal_the_whole_block() -> None:
    conf = torch.linspace(1, 0.1, 10)
    llada = Quota(steps=4, schedule="llada")
    assert [llada.count(10, 10, s) for s in range(3)] == [3, 3, 2]  # remainder to the earliest
    for schedule in ("llada", "dream"):
        quota, masked, step = Quota(steps=4, schedule=schedule), torch.ones(10, dtype=torch.bool), 0
        while masked.any():
            commit = quota.select(conf, masked, step)
            assert commit.sum() >= 1 and not (commit & ~masked).any()
            assert commit.nonzero()[0, 0] == (~masked).sum()  # most confident first
            masked &= ~commit
            step += 1
        assert step <= 4


@pytest.mark.parametrize("schedule", ["llada", "dream"])
def test_one_token_per_step_is_claimed_only_where_every_step_commits_one(world, schedule) -> None:
    """Quota with steps = block length commits one token a forward on LLaDA's schedule; on
    Dream's grid it commits none at a block's first step and two at its last, so neither the
    claim (exactness, the label) nor PSD's and Spiffy's reference may treat it as one a step."""
    from specbench.decoding.dllm.psd.method import PSD
    from specbench.decoding.dllm.vanilla.method import DLLM
    from specbench.decoding.warp import Warp

    dlm, prompts = world
    cfg = DLLMConfig(block_length=32, schedule=schedule)
    emitted = BlockDecoder(dlm, cfg).generate(prompts[0], 32, torch.Generator()).emitted
    one = set(emitted) == {1}
    assert one == (schedule == "llada")
    assert one_token_per_step(cfg) == one
    method = DLLM(cfg, Warp())
    assert method.exact() == one and ("1/step" in method.label()) == one
    psd = PSD(PSDConfig(block_length=32, policy="quota", schedule=schedule, depth=2), Warp())
    assert (psd.references(dlm, None)["one_token_per_step"] is None) == one


def test_threshold_dynamic_and_localleap_follow_their_definitions() -> None:
    conf = torch.tensor([0.2, 0.95, 0.5, 0.92, 0.1, 0.85, 0.6, 0.3], dtype=torch.float64)
    masked = torch.ones(8, dtype=torch.bool)
    masked[3] = False

    def chosen(mask: torch.Tensor) -> list[int]:
        return mask.nonzero()[:, 0].tolist()

    assert chosen(Threshold(0.9).select(conf, masked, 0)) == [1]
    assert chosen(Threshold(0.99).select(conf, masked, 0)) == [1]  # always the most confident
    # ranked 0.95, 0.85, 0.6: needs >= 1 - 1/2, 1 - 1/3, 1 - 1/4 -> the first two pass
    assert chosen(Dynamic(1.0).select(conf, masked, 0)) == [1, 5]
    # 0.7 passes 1 - 1/3 but not the third position's 1 - 1/4: the bound is f / (i + 1)
    three = torch.tensor([0.95, 0.85, 0.7, 0.1], dtype=torch.float64)
    assert chosen(Dynamic(1.0).select(three, torch.ones(4, dtype=torch.bool), 0)) == [0, 1]
    assert chosen(Dynamic(2.0).select(three, torch.ones(4, dtype=torch.bool), 0)) == [0, 1, 2]
    # anchor 1 (>= 0.9; 3 is committed); within 2 of it and >= 0.4: position 2
    assert chosen(LocalLeap(0.9, 0.4, 2).select(conf, masked, 0)) == [1, 2]
    assert chosen(LocalLeap(0.99, 0.4, 2).select(conf, masked, 0)) == [1]  # no anchor: top-1


@pytest.mark.parametrize("reference", ["llada", "fast_dllm", "dream"])
def test_confidences_are_dreams_three_scores_in_each_references_dtype(reference) -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    dtype = torch.float64 if reference == "fast_dllm" else torch.float32
    probs = logits.to(dtype).softmax(-1)
    token, top1 = greedy_confidence(logits, "maskgit_plus", reference)
    assert token.tolist() == [0, 1] and top1.dtype == dtype
    assert torch.equal(top1, probs.max(-1).values)
    _, margin = greedy_confidence(logits, "topk_margin", reference)
    top2 = probs.sort(-1, descending=True).values
    assert torch.equal(margin, top2[:, 0] - top2[:, 1])
    _, neg_entropy = greedy_confidence(logits, "entropy", reference)
    assert torch.allclose(neg_entropy, (probs * (probs + 1e-10).log()).sum(-1), atol=0, rtol=1e-6)


def test_llada_adapter_reads_its_own_row_as_the_model_computed_it() -> None:
    llada = load("random-llada", "llada")
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    assert llada.mask_id == llada.model.config.mask_token_id == tokenizer.mask_token_id
    canvas = torch.tensor([[5, 6, 7, 8] + [llada.mask_id] * 8])
    got = llada.canvas_logits(canvas, 4, 8)
    assert torch.equal(got, llada.model(canvas).logits[:, 4:8])  # the mask token included


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_prefix_cache_is_fast_dllms_stale_prefix(family) -> None:
    """Against an oracle recomputed from the model itself: the keys and values of the whole
    canvas at the block's first forward, cut before the window (the block's rows from
    `lo - shift`: Dream reads a position from the row before it), under the changed window."""
    dlm = load(f"random-{family}", family)
    shift = dlm.shift
    reading = dlm.reading(prefix_cache=True)
    canvas = torch.tensor([[5, 6, 7, 8] + [dlm.mask_id] * 8])
    first = dlm.canvas_logits(
        canvas, 4, 8, reading
    )  # a block's first forward reads the whole canvas
    assert torch.equal(first, dlm.model(canvas).logits[:, 4 - shift : 8 - shift])
    stale = dlm.model(canvas, use_cache=True).past_key_values
    later = canvas.clone().repeat(2, 1)
    later[0, 4], later[1, 5] = 9, 10  # the block changes under the cached prefix
    got = dlm.canvas_logits(later, 4, 8, reading)
    start = 4 - shift
    past = [tuple(t[:, :, :start].expand(2, -1, -1, -1) for t in layer) for layer in stale]
    positions = torch.arange(start, 12)[None].expand(2, -1)
    want = dlm.model(later[:, start:], position_ids=positions, past_key_values=past)
    assert torch.allclose(got, want.logits[:, :4], atol=1e-5)
    fresh = dlm.model(later).logits[:, start : 8 - shift]
    assert not torch.allclose(got, fresh, atol=1e-5)  # approximate
    assert reading.approximate and dlm.positions == 12 + 2 * (12 - start)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_dual_cache_feeds_the_block_over_the_stale_prefix_and_suffix(family) -> None:
    dlm = load(f"random-{family}", family)
    shift = dlm.shift
    reading = dlm.reading(prefix_cache=True, dual_cache=True)
    canvas = torch.tensor([[5, 6, 7, 8] + [dlm.mask_id] * 8])
    dlm.canvas_logits(canvas, 4, 8, reading)
    stale = dlm.model(canvas, use_cache=True).past_key_values
    later = canvas.clone()
    later[0, 5] = 9
    got = dlm.canvas_logits(later, 4, 8, reading)
    # the block's fresh keys sit between the prefix's and the suffix's, as in Fast-dLLM's
    # in-place replacement; only the order of the keys differs
    start = 4 - shift
    past = [tuple(torch.cat([t[:, :, :start], t[:, :, 8:]], 2) for t in layer) for layer in stale]
    positions = torch.arange(start, 8)[None]
    want = dlm.model(later[:, start:8], position_ids=positions, past_key_values=past)
    assert torch.allclose(got, want.logits[:, :4], atol=1e-5)
    assert dlm.positions == 12 + (8 - start)


def test_dream_adapter_reads_the_row_before_with_the_config_mask() -> None:
    dream = load("random-dream", "dream")
    assert dream.mask_id == dream.model.config.mask_token_id
    canvas = torch.tensor([[5, 6, 7, 8] + [dream.mask_id] * 8])
    got = dream.canvas_logits(canvas, 4, 8)
    assert torch.equal(got, dream.model(canvas).logits[:, 3:7])


@pytest.mark.parametrize("dual", [False, True], ids=["prefix", "dual"])
@pytest.mark.parametrize("family", ["llada", "dream"])
def test_one_sequence_verifies_every_draft_as_its_own_cached_step(family, dual) -> None:
    """Spiffy's and PSD's verification on the native families: the real block and each draft,
    in one forward over the block's cache, read what a cached step on that state reads, at a
    fraction of the positions whole canvases would cost."""
    dlm = load(f"random-{family}", family)
    reading = dlm.reading(prefix_cache=True, dual_cache=dual)
    lo, n, tail = 6, 8, 8
    canvas = torch.tensor([[5, 6, 7, 8, 9, 10] + [dlm.mask_id] * (n + tail)])
    dlm.canvas_logits(canvas, lo, lo + n, reading)  # the block's first forward fills the cache
    drafts = torch.full((3, n), dlm.mask_id)
    drafts[0, 0], drafts[1, :2], drafts[2, 3] = 11, torch.tensor([11, 12]), 13
    before = dlm.positions
    tree = dlm.tree_logits(canvas, lo, lo + n, drafts, reading)
    window = (n if dual else n + tail) + dlm.shift
    assert dlm.positions - before == 4 * window < 4 * canvas.shape[1]
    for row, state in enumerate([canvas[0, lo : lo + n], *drafts]):
        step = canvas.clone()
        step[0, lo : lo + n] = state
        logits = dlm.canvas_logits(step, lo, lo + n, reading)[0]
        assert torch.allclose(tree[row], logits, atol=1e-4)


def test_tiny_prefix_cache_is_exact_and_batch_rows_match_single_rows(world) -> None:
    dlm, prompts = world
    block = torch.tensor([prompts[0][-3:] + [dlm.mask_id] * 5, [dlm.mask_id] * 8])
    canvas = torch.tensor([prompts[0]] * 2)
    canvas = torch.cat([canvas, block], dim=1)
    lo = len(prompts[0])
    uncached = dlm.canvas_logits(canvas, lo, lo + 8, dlm.reading())
    reading = dlm.reading(prefix_cache=True)
    dlm.canvas_logits(canvas[:1], lo, lo + 8, reading)  # fills the cache
    cached = dlm.canvas_logits(canvas, lo, lo + 8, reading)
    single = torch.cat(
        [dlm.canvas_logits(canvas[i : i + 1], lo, lo + 8, reading) for i in range(2)]
    )
    assert not reading.approximate
    assert torch.allclose(cached, uncached, atol=1e-4)
    assert torch.allclose(cached, single, atol=1e-4)


@pytest.mark.parametrize(
    "target, method, extra",
    [
        ("random-llada", "psd", ["method.prefix_cache=true", "method.policy=quota"]),
        ("random-dream", "psd", ["method.prefix_cache=true", "method.dual_cache=true"]),
        (
            "random-llada",
            "spiffy",
            [
                "method.prefix_cache=true",
                "method.nodes=4",
                "method.calibration_samples=8",
                "method.calibration_new_tokens=48",
            ],
        ),
        ("random-dream", "dllm", ["method.policy=threshold", "method.threshold=0.5"]),
        ("tiny-dlm", "psd", ["method.depth=5", "method.block_length=8"]),
    ],
)
def test_runs_end_to_end_on_diffusion_targets(tmp_path, target, method, extra) -> None:
    cfg = compose_cfg(
        f"target={target}",
        "drafter=none",
        f"method={method}",
        "run.limit=3",
        "run.max_new_tokens=24",
        f"run.results_dir={tmp_path}",
        *extra,
    )
    summary = execute(prepare(cfg))
    records = [json.loads(line) for line in next(tmp_path.rglob("records.jsonl")).open()]
    assert summary.n_samples == 3 and len(records) == 3
    cache = "method.prefix_cache=true" in extra
    assert all(r["facts"]["approximate_cache"] == cache for r in records)
    assert summary.facts["approximate_cache"] == cache
    arms = [r["method"] for r in records]
    assert summary.tpf == pytest.approx(
        sum(len(a["output_ids"]) for a in arms) / sum(a["target_calls"] for a in arms)
    )
    assert all(len(a["emitted_per_call"]) == a["target_calls"] for a in arms)
    assert summary.positions_per_call >= 8
    if method in ("psd", "spiffy"):  # lossless against its policy's own decoder
        assert summary.lossless and summary.base.identical_rate == 1.0
        assert summary.round_unit == "steps" and summary.acceptance_rate is None
        # and measured, as the papers do, against one token per step
        one = summary.vs["one_token_per_step"]
        assert one.nfe_reduction == pytest.approx(one.nfe / summary.nfe_target)
    else:  # a threshold policy against one token per step: labelled lossy
        assert not summary.lossless and not any(r["exact"] for r in records)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["target=tiny-dlm", "method=psd", "method.dual_cache=true"], "method.dual_cache"),
        (
            [
                "target=random-llada",
                "target.name_or_path=specbench:random-mdlm",
                "target.adapter=mdlm",
                "method=dllm",
                "method.prefix_cache=true",
            ],
            "method.prefix_cache",
        ),
        (["target=random-dream", "method=psd", "method.policy=origin"], "method.policy"),
        (
            ["target=tiny-dlm", "method=psd", "method.prefix_cache=true", "method.dual_cache=true"],
            "method.dual_cache",
        ),
        (
            [
                "target=tiny-dlm",
                "method=dllm",
                "method.policy=threshold",
                "method.confidence=entropy",
            ],
            "method.confidence",
        ),
        (["target=tiny-dlm", "method=psd", "run.temperature=0.7"], "run.temperature"),
        (["target=tiny-dlm", "method=psd", "method.depth=-1"], "method.depth"),
        (["target=tiny-dlm", "method=dllm", "method.reference=mine"], "method.reference"),
        (["target=random-dream", "method=dllm", "method.reference=llada"], "method.reference"),
        (["target=tiny", "method=psd"], "target.kind"),
        (["target=tiny-dlm", "method=sps"], "target.kind"),
    ],
)
def test_bad_diffusion_configs_fail_before_loading(overrides, key) -> None:
    with pytest.raises(ConfigError) as err:
        prepare(compose_cfg(*overrides))
    assert err.value.key == key


def _checkpoint_dir(path, model_type: str, **config) -> str:
    """A checkpoint directory with the tiny world's tokenizer and only a config.json: every
    check below must answer before any weight is looked for."""
    AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny").save_pretrained(path)
    (path / "config.json").write_text(json.dumps({"model_type": model_type, **config}))
    return str(path)


def test_a_model_type_without_a_native_class_is_refused_in_one_line(tmp_path) -> None:
    ckpt = _checkpoint_dir(tmp_path, "qwen2", auto_map={"AutoModel": "modeling_x.X"})
    with pytest.raises(ConfigError) as err:
        prepare(compose_cfg("target=random-llada", "method=dllm", f"target.name_or_path={ckpt}"))
    assert err.value.key == "target.name_or_path"
    assert "'qwen2'" in str(err.value) and "llada (llada)" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_mask_id_that_contradicts_the_checkpoint_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        prepare(compose_cfg("target=random-llada", "method=dllm", "target.mask_token_id=3"))
    assert err.value.key == "target.mask_token_id" and "says" in str(err.value)


def test_a_diffusion_drafter_whose_logits_miss_target_tokens_is_refused(tmp_path) -> None:
    ckpt = _checkpoint_dir(tmp_path, "mdlm", vocab_size=10)
    overrides = ["method=specdiff", "drafter=random-mdlm", f"drafter.name_or_path={ckpt}"]
    with pytest.raises(ConfigError) as err:
        prepare(compose_cfg(*overrides))
    assert err.value.key == "drafter" and "do not cover" in str(err.value)
