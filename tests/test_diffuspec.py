"""DiffuSpec: greedy output equals the target's; CPS reduces to the per-position argmax when
the n-gram has no weight, the beam one path and tau single candidates; ADL follows its rule and
bounds on a scripted acceptance sequence; the n-gram's next-token laws sum to 1."""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput

from conftest import builtin, compose_cfg, tiny_dlm
from specbench import paths
from specbench.decoding.drafters.diffuspec.config import DiffuSpecConfig
from specbench.decoding.drafters.diffuspec.method import (
    AdaptiveDraftLength,
    DiffuSpec,
    candidates,
    path_search,
)
from specbench.decoding.drafters.diffuspec.ngram_lm import NgramLM
from specbench.decoding.generation import Draft
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.errors import ConfigError
from specbench.models.diffusion import DreamDiffusionLM
from specbench.models.tiny.dlm import TinyDLM, TinyDLMConfig
from specbench.pipeline import prepare
from specbench.tasks.tiny_code import TinyCodeConfig, TinyCodeTask

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def world():
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    rows = [json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").open()]
    target, dlm = builtin("tiny"), tiny_dlm()
    return target, dlm, [tokenizer(r["prompt"])["input_ids"] for r in rows]


@pytest.mark.parametrize(
    "cfg",
    [
        DiffuSpecConfig(),
        DiffuSpecConfig(cps=False, adl=False, k=10),
        DiffuSpecConfig(refine_steps=3),
    ],
    ids=["cps+adl", "neither", "three-refinement-steps"],
)
def test_greedy_diffuspec_equals_the_targets_greedy_output(world, cfg) -> None:
    target, dlm, prompts = world
    method = DiffuSpec(cfg, Warp()).build(target, dlm, TinyCodeTask(TinyCodeConfig()))
    baseline = AutoregressiveDecoder(target, Warp())
    for prompt in prompts[:10]:
        got = method.generate(prompt, 40, torch.Generator())
        assert got.tokens == baseline.generate(prompt, 40, torch.Generator()).tokens
        assert all({"L_gen", "k"} <= set(r) for r in got.rounds)
        assert all(k <= (cfg.k_max if cfg.adl else cfg.k) for k in got.draft_lengths)


def test_cps_is_the_argmax_path_without_ngram_weight_beam_or_alternatives() -> None:
    g = torch.Generator().manual_seed(0)
    logprobs = (torch.randn(8, 50, generator=g) * 4).log_softmax(-1)
    eos = {49}
    logprobs[:, 49] = -30.0  # no EOS anywhere: the lattice spans all 8 positions
    lattice = candidates(logprobs, tau=1e-6, m_max=15, eos=eos)
    assert [len(c) for c in lattice] == [1] * 8
    path, score = path_search(lattice, logprobs, None, [1, 2], beam=1, lam=1.0, eos=eos)
    assert path == logprobs.argmax(-1).tolist()
    assert score == pytest.approx(float(logprobs.max(-1).values.sum()))


def test_cps_lattice_stops_at_the_first_position_that_may_end() -> None:
    probs = torch.full((4, 6), 0.02)
    probs[:, 0] = 0.9  # a confident token everywhere ...
    probs[2, 0], probs[2, 5] = 0.5, 0.42  # ... but at position 3 EOS (id 5) is second, in the mass
    lattice = candidates(probs.log(), tau=0.8, m_max=1, eos={5})
    assert lattice == [[0], [0], [0, 5]]  # EOS kept past the m_max cap; the lattice ends there


def test_adl_follows_its_rule_and_bounds() -> None:
    adl = AdaptiveDraftLength(k_min=4, k_max=12, delta=3, rho=0.5)
    assert adl.start == 12
    script = [(12, 12), (12, 2), (3, 3), (1, 0), (30, 30)]  # (L_gen, L_acc) per round
    generated = accepted = 0.0
    for l_gen, l_acc in script:
        generated = 0.5 * generated + 0.5 * l_gen
        accepted = 0.5 * accepted + 0.5 * l_acc
        expected = min(max(math.floor(generated) + (3 if accepted >= generated else 0), 4), 12)
        k = adl.next(0, l_acc, Draft([], None, 0, 0.0, {"L_gen": l_gen}))
        assert k == expected and 4 <= k <= 12
    adl.reset()
    assert adl.next(0, 0, Draft([], None, 0, 0.0, {"L_gen": 0})) == 4  # floor(0) -> k_min


def kneser_ney(sequences: list[list[int]], order: int, vocab: int, token: int, context: list[int]):
    """The interpolated Kneser-Ney recursion over plain Python counts (raw at the top order,
    distinct left extensions below), discount 0.75, uniform floor: the oracle for NgramLM."""
    grams = [tuple(s[i : i + order]) for s in sequences for i in range(len(s) - order + 1)]
    levels = {order: Counter(grams)}
    distinct = set(grams)
    for k in range(order - 1, 0, -1):
        levels[k] = Counter(g[1:] for g in distinct)
        distinct = set(levels[k])
    history = tuple(context[max(len(context) - order + 1, 0) :]) if order > 1 else ()
    prob = 1 / vocab
    for k in range(1, len(history) + 2):
        h = history[len(history) - k + 1 :]
        follows = {g[-1]: c for g, c in levels[k].items() if g[:-1] == h}
        if follows:
            total = sum(follows.values())
            kept = max(follows.get(token, 0) - 0.75, 0) / total
            prob = kept + 0.75 * len(follows) / total * prob
    return math.log(prob)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_the_ngram_is_kneser_ney_and_its_laws_sum_to_one(order) -> None:
    rng = random.Random(order)
    sequences = [[rng.randrange(30) % rng.choice([6, 30]) for _ in range(150)] for _ in range(12)]
    model = NgramLM(order, 30).fit(sequences)
    for context in ([], [4], [4, 9], sequences[0][:50], [29, 29, 29]):
        law = model.probs(context)
        assert float(law.sum()) == pytest.approx(1.0, abs=1e-9) and float(law.min()) > 0
        oracle = [kneser_ney(sequences, order, 30, t, context) for t in range(30)]
        assert np.log(law).tolist() == pytest.approx(oracle, abs=1e-12)


def test_an_ngram_too_wide_to_pack_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        NgramLM(4, 152_064)
    assert err.value.key == "method.ngram_order" and "at most 3" in str(err.value)


def test_cps_with_a_wide_beam_finds_the_best_path_of_the_lattice() -> None:
    """A beam as wide as the lattice has paths keeps every path: the search returns the
    exhaustive argmax of lam * drafter + (1 - lam) * n-gram log-probs, score included."""
    rng = random.Random(0)
    sequences = [[rng.randrange(12) % rng.choice([3, 12]) for _ in range(200)] for _ in range(8)]
    ngram = NgramLM(3, 12).fit(sequences)
    logprobs = torch.randn(5, 12, generator=torch.Generator().manual_seed(1)).log_softmax(-1)
    lattice = candidates(logprobs, tau=1.0, m_max=3, eos=set())
    context, lam = [1, 2], 0.4

    def score(path: tuple[int, ...]) -> float:
        history = list(context)
        total = 0.0
        for i, token in enumerate(path):
            ngram_lp = ngram.logprobs(np.array([token]), ngram.history(history)[None])[0]
            total += lam * float(logprobs[i, token]) + (1 - lam) * ngram_lp
            history.append(token)
        return total

    best = max(itertools.product(*lattice), key=score)
    path, got = path_search(lattice, logprobs, ngram, context, beam=3**5, lam=lam, eos=set())
    assert path == list(best) and got == pytest.approx(score(best), abs=1e-9)


def test_cps_carries_a_finished_path_unchanged() -> None:
    """A path that took EOS stops growing; it wins when the open paths' later tokens cost more
    than its lead."""
    logprobs = torch.full((3, 4), -9.0)
    logprobs[0, 3], logprobs[0, 1] = -0.1, -0.2  # EOS (3) first, then token 1
    logprobs[1:, 2] = -1.0  # after token 1 every continuation is unlikely
    lattice = [[3, 1], [2], [2]]
    path, score = path_search(lattice, logprobs, None, [], beam=2, lam=1.0, eos={3})
    assert path == [3] and score == pytest.approx(-0.1)


class DreamShaped(PreTrainedModel):
    """Dream's calling convention: `forward(input_ids)` -> `.logits` whose row i predicts the
    token at i + 1, over a random bidirectional TinyDLM (whose own rows are aligned)."""

    config_class = TinyDLMConfig

    def __init__(self, config: TinyDLMConfig):
        super().__init__(config)
        self.backbone = TinyDLM(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.backbone.embed

    def get_output_embeddings(self):
        return self.backbone.lm_head

    def forward(self, input_ids: torch.Tensor) -> MaskedLMOutput:
        aligned = self.backbone(input_ids, subs=False).logits
        return MaskedLMOutput(logits=torch.cat([aligned[:, 1:], aligned[:, -1:]], dim=1))


def test_the_dream_adapter_reads_each_position_from_the_row_before_it() -> None:
    torch.manual_seed(0)
    config = TinyDLMConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        mask_token_id=63,
    )
    model = DreamShaped(config).eval()
    dlm = DreamDiffusionLM(model, mask_id=63, context=None, name="dream-shaped")
    prefix, block = [5, 9, 14, 3, 22], [63, 63, 7, 63]
    dlm.set_prefix(prefix)
    got = dlm.block_logits(block, subs=False)
    with torch.no_grad():
        aligned = model.backbone(torch.tensor([prefix + block]), subs=False).logits[0, 5:]
    torch.testing.assert_close(got, aligned)
    subs = dlm.block_logits(block).softmax(-1)
    assert subs[:, 63].max() == 0 and subs[2].argmax() == 7  # SUBS on the shifted rows


def test_the_ngram_is_fitted_on_the_tasks_own_training_text(tmp_path) -> None:
    """tiny_code's n-gram is the tiny world's training text; a task with no training split
    is refused in one line unless a file is given or the n-gram is off."""
    base = ["method=diffuspec", "drafter=tiny-dlm", f"run.results_dir={tmp_path}"]
    assert prepare(compose_cfg(*base, "run.limit=1")).task.train_texts()
    with pytest.raises(ConfigError) as err:
        prepare(compose_cfg(*base, "task=prompts"))
    assert err.value.key == "method.ngram_corpus" and "no training text" in str(err.value)
    prepare(compose_cfg(*base, "task=prompts", "method.lam=1"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("def f():\n    return 1\n")
    prepare(compose_cfg(*base, "task=prompts", f"method.ngram_corpus={corpus}"))
