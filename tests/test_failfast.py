"""FailFast: greedy is token-identical to the target on the tiny world; the length rule grows
while the drafter is confident, fails fast on one low confidence, restarts every round whatever
was accepted, and reproduces upstream's Algorithm 1 (goldens from its function run outside the
repository); sampled outputs follow the target's law."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from conftest import builtin, law_pvalue, tiny_dlm
from specbench import paths
from specbench.decoding.drafters.failfast.config import FailFastConfig
from specbench.decoding.drafters.failfast.method import FailFast, FailFastDrafter, SpeculationLength
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.errors import ConfigError
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.models.toy import ToyDLM, exact_law, toy_lm

GOLDENS = json.loads(
    (Path(__file__).parent / "goldens" / "failfast" / "length_rule.json").read_text()
)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    rows = [json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").open()]
    return [tokenizer(r["prompt"])["input_ids"] for r in rows]


@pytest.mark.parametrize(
    ("cfg", "longest"),
    [
        (FailFastConfig(), 10),  # upstream's defaults: mostly one forward per small block
        # every confidence passes, so drafts grow across block boundaries
        (
            FailFastConfig(
                spec_len=4,
                incr_len=4,
                max_spec_len=16,
                lowconf_threshold=0.0,
                threshold=0.5,
                block_size=8,
                small_block_size=4,
            ),
            9,  # past the first block
        ),
    ],
)
def test_greedy_failfast_equals_the_targets_greedy_output(prompts, cfg, longest) -> None:
    target, dlm = builtin("tiny"), tiny_dlm()
    decoder = FailFast(cfg, Warp()).build(target, dlm, None)
    baseline = AutoregressiveDecoder(target, Warp())
    accepted, lengths = 0, []
    for i, prompt in enumerate(prompts[:6]):
        got = decoder.generate(prompt, 32, torch.Generator().manual_seed(i))
        assert got.tokens == baseline.generate(prompt, 32, torch.Generator()).tokens, i
        accepted += sum(got.accepted)
        lengths += got.draft_lengths
    assert accepted > 0  # the drafts are not merely decoration
    assert max(lengths) >= longest


def test_the_length_grows_while_confident_and_fails_fast() -> None:
    """Scripted forwards: each settles once its window is unmasked."""
    cfg = FailFastConfig(spec_len=4, incr_len=3, max_spec_len=12, lowconf_threshold=0.5)
    length = SpeculationLength(cfg)
    length.observe([0.9] * 4)
    assert length.settle() is None and length.spec_len == 7  # confident: grows by incr_len
    length.observe([0.6] * 4)
    assert length.settle() is None and length.spec_len == 10
    length.observe([0.9, 0.4])  # one confidence below tau, wherever it sits
    assert length.settle() == "low_confidence" and length.spec_len == 10

    capped = SpeculationLength(cfg)
    capped.observe([0.9] * 12)
    assert capped.settle() == "max_spec_len" and capped.spec_len == 4  # N_max confidences seen

    exact_tau = SpeculationLength(cfg)
    exact_tau.observe([0.5] * 4)
    assert exact_tau.settle() is None  # "below" is strict, as upstream's `x < lowconf_threshold`


class ScriptedDLM(MaskedDiffusionLM):
    """The goldens' script: logits predicting each absolute position from the position and
    how many drafted positions are filled (`tests/goldens/failfast/length_rule.json`)."""

    def __init__(self, case: dict):
        self.case, self.vocab_size = case, case["vocab"] + 1
        self.mask_id, self.context, self.name = case["vocab"], None, "scripted"
        self.device, self.calls, self.prefix = torch.device("cpu"), 0, []

    def block_logits(self, block: list[int], subs: bool = True) -> torch.Tensor:
        case, self.calls = self.case, self.calls + 1
        start = len(self.prefix)
        filled = start - len(case["prompt"]) + sum(t != self.mask_id for t in block)
        position = torch.arange(start, start + len(block), dtype=torch.float32)[:, None]
        token = torch.arange(case["vocab"], dtype=torch.float32)[None, :]
        drafted = position - len(case["prompt"])
        easy = ((drafted >= case["hard_for"]) & (drafted < case["easy_for"])).float()
        favourite = (token == (5 * position + position // 4) % case["vocab"]).float()
        wave = torch.sin(1.3 * position + 0.7 * filled + 2.1 * token + case["phase"])
        logits = case["scale"] * wave + case["sharp"] * easy * favourite
        return torch.cat([logits, torch.full((len(block), 1), -torch.inf)], dim=1)


def golden_config(case: dict) -> FailFastConfig:
    knobs = ("spec_len", "incr_len", "max_spec_len", "lowconf_threshold", "threshold")
    sizes = ("block_size", "small_block_size")
    return FailFastConfig(**{k: case[k] for k in (*knobs, *sizes)})


@pytest.mark.parametrize(
    "golden", GOLDENS["cases"], ids=lambda g: str(len(g["upstream"]["proposal"]))
)
def test_the_drafts_are_upstream_algorithm_1s(golden) -> None:
    """Upstream's function on the same script (run outside the repository at the commit the
    fixture names): the same proposal and the same final spec_len, across growth, failure,
    N_max, block boundaries (prefill and cache-update tokens) and stop tokens."""
    case = golden["case"]
    drafter = FailFastDrafter(
        ScriptedDLM(case), golden_config(case), {case["stop_token"]}, case["vocab"]
    )
    draft = drafter.draft(case["prompt"], 3 * case["block_size"], torch.Generator())
    assert draft.tokens == golden["upstream"]["proposal"]
    assert draft.info["spec_len"] == golden["upstream"]["spec_len"]


def test_the_goldens_cover_every_way_a_draft_ends() -> None:
    stops = set()
    for golden in GOLDENS["cases"]:
        case = golden["case"]
        drafter = FailFastDrafter(
            ScriptedDLM(case), golden_config(case), {case["stop_token"]}, case["vocab"]
        )
        stops.add(drafter.draft(case["prompt"], 3 * case["block_size"], None).info["stop"])
    assert stops == {"low_confidence", "max_spec_len", "eos", "blocks"}


def test_every_round_restarts_at_spec_len_whatever_was_accepted() -> None:
    """Scripted rounds: a round after a fully accepted draft and one after a draft rejected at
    its first token start again from spec_len, so a drafter confident everywhere drafts the
    same length every round; upstream passes `spec_len=args.spec_len` to every round."""
    case = dict(GOLDENS["cases"][0]["case"], prompt=[1, 2, 3])
    # one position per forward inside one block: lengths free of block alignment
    cfg = FailFastConfig(spec_len=2, incr_len=2, max_spec_len=6, small_block_size=1)
    drafter = FailFastDrafter(ScriptedDLM(case), cfg, set(), case["vocab"])
    first = drafter.draft(case["prompt"], 40, None).tokens
    accepted = drafter.draft(case["prompt"] + first + [0], 40, None)
    rejected = drafter.draft(case["prompt"] + [first[0] + 1], 40, None)
    assert len(first) == len(accepted.tokens) == len(rejected.tokens) == 6
    assert accepted.info["spec_len"] == rejected.info["spec_len"] == 6  # 2 -> 4 -> 6, N_max


def test_sampled_failfast_samples_the_target_law() -> None:
    """One-hot proposals (the argmax draft) under rejection sampling: exact whatever law chose
    the draft, so the output is the target's law; lengths vary with the drafter's confidence."""
    length, draws, prompt, warp = 3, 2000, [1, 3, 0], Warp(temperature=1.0)
    cfg = FailFastConfig(
        spec_len=1, incr_len=1, lowconf_threshold=0.3, block_size=4, small_block_size=1
    )
    method = FailFast(cfg, warp)
    assert method.exact()
    target = toy_lm(n_layer=2, seed=0)
    decoder = method.build(target, ToyDLM(), None)
    generator = torch.Generator().manual_seed(0)
    counts, lengths = Counter(), Counter()
    for _ in range(draws):
        got = decoder.generate(prompt, length, generator)
        counts[tuple(got.tokens)] += 1
        lengths.update(got.draft_lengths)
    assert len(lengths) > 1
    assert law_pvalue(counts, exact_law(target, prompt, length, warp), draws) > 1e-3


@pytest.mark.parametrize(
    ("knob", "value"),
    [("block_size", 30), ("lowconf_threshold", 1.5), ("incr_len", 0), ("rule", "ratio")],
)
def test_bad_knobs_are_refused(knob: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"method.{knob}"):
        FailFastConfig(**{knob: value}).check(0.0, 64)
