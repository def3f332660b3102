"""DiffuSpec: greedy output equals the target's; CPS reduces to the per-position argmax when
the n-gram has no weight, the beam one path and tau single candidates; ADL follows its rule and
bounds on a scripted acceptance sequence; the n-gram's next-token laws sum to 1."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from transformers import AutoTokenizer, PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput

from conftest import builtin, compose_cfg, tiny_dlm
from specbench import paths
from specbench.decoding.autoregressive import AutoregressiveDecoder
from specbench.decoding.drafters.diffuspec import (
    AdaptiveDraftLength,
    DiffuSpec,
    DiffuSpecConfig,
    candidates,
    path_search,
)
from specbench.decoding.generation import Draft
from specbench.decoding.ngram import NgramLM
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


def test_ngram_next_token_laws_sum_to_one() -> None:
    rng = random.Random(0)
    sequences = [[rng.randrange(30) for _ in range(200)] for _ in range(20)]
    model = NgramLM(3, 30).fit(sequences)
    for context in ([], [4], [4, 9], sequences[0][:50], [29, 29]):
        law = model.probs(context)
        assert float(law.sum()) == pytest.approx(1.0, abs=1e-9) and float(law.min()) > 0
        by_token = sum(math.exp(model.logprob(t, context)) for t in range(30))
        assert by_token == pytest.approx(1.0, abs=1e-9)
    seen = sequences[0][10:13]
    assert model.logprob(seen[2], seen[:2]) > math.log(1 / 30)  # observed continuations gain mass


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
