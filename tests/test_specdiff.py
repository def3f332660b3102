"""SpecDiff: greedy is token-identical to the target on the tiny world; the cached sampler
skips forwards when nothing changed; q rows are distributions over real tokens; the mdlm
adapter drives an MDLM-shaped model (forward(x, sigma)) built here without a download."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_outputs import MaskedLMOutput

from conftest import builtin, tiny_dlm
from specbench import paths
from specbench.config import ModelConfig
from specbench.decoding.drafters.specdiff import method as specdiff
from specbench.decoding.drafters.specdiff.config import SpecDiffConfig
from specbench.decoding.drafters.specdiff.method import SpecDiff, SpecDiffDrafter
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.models.diffusion import MaskedDiffusionLM, MDLMDiffusionLM
from specbench.models.kinds.diffusion import load_diffusion_lm
from specbench.models.tiny.dlm import TinyDLM, TinyDLMConfig, block_causal_mask

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    rows = [json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").open()]
    return [tokenizer(r["prompt"])["input_ids"] for r in rows]


@pytest.mark.parametrize(("gamma", "steps"), [(5, 1), (10, 4), (20, 8)])
def test_greedy_specdiff_equals_the_targets_greedy_output(prompts, gamma, steps) -> None:
    target, dlm = builtin("tiny"), tiny_dlm()
    method = SpecDiff(SpecDiffConfig(gamma=gamma, steps=steps), Warp()).build(target, dlm, None)
    baseline = AutoregressiveDecoder(target, Warp())
    accepted = 0
    for i, prompt in enumerate(prompts[:8]):
        generator = torch.Generator().manual_seed(i)
        got = method.generate(prompt, 32, generator)
        assert got.tokens == baseline.generate(prompt, 32, torch.Generator()).tokens, i
        assert all(d <= gamma for d in got.draft_lengths)
        accepted += sum(got.accepted)
    assert accepted > 0  # the drafts are not merely decoration


class ScriptedDLM(MaskedDiffusionLM):
    """Fixed logits; logs the block it is asked about, to count forwards."""

    def __init__(self, vocab: int = 16, mask_id: int = 15):
        self.mask_id, self.context, self.name, self.device = mask_id, None, "scripted", CPU
        self.vocab_size, self.calls, self.prefix, self.seen = vocab, 0, [], []

    def block_logits(self, block: list[int], subs: bool = True) -> torch.Tensor:
        self.calls += 1
        self.seen.append(list(block))
        logits = torch.arange(len(block) * self.vocab_size, dtype=torch.float32)
        logits = logits.view(len(block), self.vocab_size).sin()
        logits[:, self.mask_id] = float("-inf")
        return logits


def test_the_sampler_runs_the_denoiser_only_after_something_changed() -> None:
    for seed in range(20):
        dlm = ScriptedDLM()
        drafter = SpecDiffDrafter(
            dlm, Warp(temperature=1.0), steps=64, q_source="reveal_step", vocab_size=15
        )
        draft = drafter.draft([1, 2, 3], 3, torch.Generator().manual_seed(seed))
        assert draft.nfe == dlm.calls == len(dlm.seen)
        assert all(a != b for a, b in zip(dlm.seen, dlm.seen[1:]))  # no forward on an unchanged x
        assert dlm.calls <= 3 + 1  # at most one forward per reveal event, plus the first
        assert dlm.mask_id not in draft.tokens


@pytest.mark.parametrize("q_source", ["reveal_step", "final_step"])
def test_q_rows_are_distributions_over_real_tokens(prompts, q_source) -> None:
    target, dlm = builtin("tiny"), tiny_dlm()
    drafter = SpecDiffDrafter(
        dlm, Warp(temperature=1.0, top_p=0.95), 4, q_source, target.vocab_size
    )
    spread = 0  # rows with mass on several tokens: rows tokens were drawn from, not one-hots
    for i, prompt in enumerate(prompts[:10]):
        draft = drafter.draft(prompt, 12, torch.Generator().manual_seed(i))
        q = draft.q_probs
        assert q.shape == (12, target.vocab_size)
        torch.testing.assert_close(q.sum(-1), torch.ones(12))
        assert q[:, dlm.mask_id].max() == 0
        assert bool((q[torch.arange(12), torch.tensor(draft.tokens)] > 0).all())
        spread += int(((q > 0).sum(-1) > 1).sum())
    assert spread > 0


def test_a_revealed_positions_proposal_is_the_row_it_was_drawn_from(prompts, monkeypatch) -> None:
    """`reveal_step`: with one position revealed per step (scripted), position i's proposal
    row is the denoiser's row i at step i, not a later row (where SUBS makes it one-hot)."""
    target, dlm = builtin("tiny"), tiny_dlm()
    drafter = SpecDiffDrafter(
        dlm, Warp(temperature=1.0), 4, "reveal_step", target.vocab_size, upstream_rng=True
    )
    rows, probs = [], drafter._probs

    def recorded(*args, **kwargs):
        rows.append(probs(*args, **kwargs))
        return rows[-1]

    monkeypatch.setattr(drafter, "_probs", recorded)

    def one_per_step(step_probs, t, dt, mask_id, width, prefix, generator):
        winners = torch.full((step_probs.shape[0],), mask_id)
        winners[len(rows) - 1] = step_probs[len(rows) - 1].argmax()
        return winners

    monkeypatch.setattr(specdiff, "gumbel_winners", one_per_step)
    draft = drafter.draft(prompts[0], 4, torch.Generator())
    assert len(rows) == 4
    for i in range(4):
        torch.testing.assert_close(draft.q_probs[i], rows[i][i], rtol=0, atol=0)
    assert bool(((draft.q_probs > 0).sum(-1) > 1).all())


class MDLMShapedConfig(PretrainedConfig):
    model_type = "specbench-test-mdlm"

    def __init__(self, vocab_size: int = 50258, hidden_size: int = 32, **kwargs):
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        super().__init__(**kwargs)


class MDLMShaped(PreTrainedModel):
    """MDLM-OWT's calling convention (`forward(input_ids, timesteps)` -> `.logits` over GPT-2's
    vocabulary plus the mask) around a random one-layer bidirectional transformer."""

    config_class = MDLMShapedConfig

    def __init__(self, config: MDLMShapedConfig):
        super().__init__(config)
        self.backbone = TinyDLM(
            TinyDLMConfig(
                vocab_size=config.vocab_size,
                hidden_size=config.hidden_size,
                num_hidden_layers=1,
                num_attention_heads=2,
                intermediate_size=64,
                mask_token_id=config.vocab_size - 1,
            )
        )
        self.post_init()

    def get_input_embeddings(self):
        return self.backbone.embed

    def get_output_embeddings(self):
        return self.backbone.lm_head

    def forward(self, input_ids: torch.Tensor, timesteps: torch.Tensor) -> MaskedLMOutput:
        return MaskedLMOutput(logits=self.backbone(input_ids, subs=False).logits)


def test_the_mdlm_adapter_drives_an_mdlm_shaped_model(tmp_path, target) -> None:
    AutoConfig.register(MDLMShapedConfig.model_type, MDLMShapedConfig, exist_ok=True)
    AutoModel.register(MDLMShapedConfig, MDLMShaped, exist_ok=True)  # what the adapter loads
    AutoModelForMaskedLM.register(MDLMShapedConfig, MDLMShaped, exist_ok=True)
    torch.manual_seed(0)
    MDLMShaped(MDLMShapedConfig()).save_pretrained(tmp_path / "mdlm")
    cfg = ModelConfig(
        name="mdlm",
        name_or_path=str(tmp_path / "mdlm"),
        kind="diffusion",
        adapter="mdlm",
        mask_token_id=50257,
        context_length=64,
    )
    dlm = load_diffusion_lm(cfg, "drafter", CPU, "float32")
    assert (dlm.mask_id, dlm.context, dlm.vocab_size) == (50257, 64, 50258)
    prompt = list(range(100, 160))  # 60 tokens: the drafter must left-truncate to fit 64
    method = SpecDiff(SpecDiffConfig(gamma=8, steps=2), Warp()).build(target, dlm, None)
    got = method.generate(prompt, 12, torch.Generator().manual_seed(0))
    assert (
        got.tokens
        == AutoregressiveDecoder(target, Warp()).generate(prompt, 12, torch.Generator()).tokens
    )
    sampled = SpecDiffDrafter(dlm, Warp(temperature=1.0), 2, "reveal_step", target.vocab_size)
    draft = sampled.draft(prompt, 8, torch.Generator().manual_seed(1))
    assert draft.q_probs.shape == (8, target.vocab_size)  # the mask column is not a real token
    torch.testing.assert_close(draft.q_probs.sum(-1), torch.ones(8))


def test_the_tiny_adapters_growing_prefix_cache_is_exact(prompts) -> None:
    """Prefix tokens folded into a denoising forward, then reused: the same logits as a full
    block-causal forward over prefix and block."""
    dlm = tiny_dlm()
    block = [dlm.mask_id] * 6
    for length in (30, 37, 40):  # a fresh prefix, then two extensions of it
        prefix = prompts[0][:length]
        dlm.set_prefix(prefix)
        fused = dlm.block_logits(block)
        cached = dlm.block_logits(block)
        full = dlm.model(
            torch.tensor([prefix + block]),
            attention_mask=block_causal_mask(length, length + 6),
        ).logits[0, length:]
        torch.testing.assert_close(fused, full, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-4)
    assert dlm.calls == 6


MDLM_GOLDENS = Path(__file__).parent / "goldens" / "mdlm"


def golden_mdlm(tmp_path: Path, config: str) -> MDLMDiffusionLM:
    folder = tmp_path / config
    folder.mkdir()
    shutil.copy(MDLM_GOLDENS / config, folder / "config.json")
    shutil.copy(MDLM_GOLDENS / "model.safetensors", folder / "model.safetensors")
    model = AutoModelForMaskedLM.from_pretrained(folder)  # the native class, float32
    return MDLMDiffusionLM(model, mask_id=50257, context=1024, name="mdlm")


@pytest.mark.parametrize("time_conditioning", [False, True])
def test_mdlm_drafts_are_upstreams_cached_ancestral_samples(tmp_path, time_conditioning) -> None:
    """Token-identical to MDLM's `_sample` (ddpm_cache) from a clamped prompt + gamma masks,
    with the generator seeded as upstream's global RNG; one forward fewer than upstream's when
    its final argmax ran on an unchanged or fully revealed x."""
    goldens = json.loads((MDLM_GOLDENS / "goldens.json").read_text())
    dlm = golden_mdlm(tmp_path, "config_tc.json" if time_conditioning else "config.json")
    assert dlm.time_conditioned == time_conditioning
    cases = [c for c in goldens["cases"] if c["args"]["time_conditioning"] == time_conditioning]
    assert len(cases) >= 24
    for case in cases:
        args = case["args"]
        drafter = SpecDiffDrafter(
            dlm,
            Warp(temperature=1.0),
            args["num_steps"],
            "reveal_step",
            50257,
            args["eps"],
            upstream_rng=True,
        )
        generator = torch.Generator().manual_seed(args["global_seed"])
        draft = drafter.draft(case["prompt"], args["gamma"], generator)
        assert draft.tokens == case["tokens"], case["id"]
        final = case["masked_before_noise_removal"] > 0 and case["cache_stale_at_noise_removal"]
        assert draft.nfe == case["forwards"] - 1 + final, case["id"]
    assert any(c["masked_before_noise_removal"] for c in cases)  # the final argmax is exercised
