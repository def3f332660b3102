"""The tiny world: committed checkpoints load like hub models, the tokenizer round-trips,
training lowers the loss deterministically, and greedy SpS on it is lossless."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from conftest import builtin, compose_cfg
from specbench import paths
from specbench.decoding.drafters.sps.config import SpSConfig
from specbench.decoding.drafters.sps.method import SpS
from specbench.decoding.generation import Stop
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.models.tiny import corpus
from specbench.models.tiny.dlm import (
    TinyDLM,
    block_causal_mask,
    from_causal,
    subs_parameterise,
)
from specbench.models.tiny.train import Schedule, Shape, causal_model, token_stream, train_causal
from specbench.pipeline import execute, prepare


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")


def test_committed_checkpoints_load_with_the_hub_loader(tokenizer) -> None:
    for name in ("tiny", "tiny-ar"):
        model = AutoModelForCausalLM.from_pretrained(paths.TINY_DIR / name)
        assert model.config.vocab_size == len(tokenizer) == 4096
        report = json.loads((paths.TINY_DIR / name / "training.json").read_text())
        assert report["validation"]["loss"] < 4.0  # far below the 8.3 nats of a uniform guess
    dlm = AutoModel.from_pretrained(paths.TINY_DIR / "tiny-dlm")
    assert isinstance(dlm, TinyDLM) and dlm.config.mask_token_id == tokenizer.mask_token_id
    report = json.loads((paths.TINY_DIR / "tiny-dlm" / "training.json").read_text())
    assert report["validation"]["masked_loss"] < 6.0
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.mask_token_id) == (0, 1, 2)
    assert builtin("tiny").eos_token_ids == {0}


def test_tokenizer_round_trips_held_out_source(tokenizer) -> None:
    for text in corpus.texts("heldout"):
        assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_training_lowers_the_loss_and_is_deterministic(tokenizer) -> None:
    stream = token_stream(tokenizer, corpus.texts("validation")[:5])
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = causal_model(Shape(hidden=64, layers=1, heads=2, ffn=128), tokenizer)
        runs.append(
            train_causal(model, stream, Schedule(steps=60, batch=8, seq_len=32, warmup=10), seed=0)
        )
    assert runs[0] == runs[1]
    assert sum(runs[0][-10:]) / 10 < sum(runs[0][:10]) / 10 - 1.0


def test_tiny_code_samples_are_held_out_prefixes() -> None:
    rows = [
        json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 100 and len({r["id"] for r in rows}) == 100
    heldout = {p.relative_to(corpus.stdlib_root()).as_posix() for p in corpus.files("heldout")}
    assert {r["module"] for r in rows} <= heldout


def test_greedy_sps_on_the_tiny_world_is_lossless(tokenizer) -> None:
    target, drafter = builtin("tiny"), builtin("tiny-ar")
    baseline, method = (
        AutoregressiveDecoder(target, Warp()),
        SpS(SpSConfig(gamma=4), Warp()).build(target, drafter, None),
    )
    rows = [
        json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").read_text().splitlines()
    ]
    proposed = accepted = 0
    for row in rows[:20]:
        prompt = tokenizer(row["prompt"])["input_ids"]
        got = method.generate(prompt, 48, torch.Generator())
        assert got.tokens == baseline.generate(prompt, 48, torch.Generator()).tokens, row["id"]
        proposed += sum(got.draft_lengths)
        accepted += sum(got.accepted)
    assert accepted / proposed > 0.3  # a trained pair agrees far more than chance


@pytest.fixture(scope="module")
def dlm() -> TinyDLM:
    return AutoModel.from_pretrained(paths.TINY_DIR / "tiny-dlm", dtype=torch.float32).eval()


def test_the_diffusion_lm_honours_the_mask_contract(dlm, tokenizer) -> None:
    """SUBS: no probability on MASK anywhere; an unmasked position predicts itself, in both
    attention forms."""
    text = corpus.texts("heldout")[0][:600]
    ids = torch.tensor([tokenizer(text)["input_ids"][:64]])
    noisy = ids.clone()
    noisy[0, 40:] = tokenizer.mask_token_id
    noisy[0, 10:20] = tokenizer.mask_token_id
    for mask in (None, block_causal_mask(40, 64)):
        probs = dlm(noisy, attention_mask=mask).logits.softmax(-1)[0]
        assert probs[:, tokenizer.mask_token_id].max() == 0
        clean = noisy[0] != tokenizer.mask_token_id
        assert torch.equal(probs[clean].argmax(-1), noisy[0, clean])
        assert torch.allclose(probs[clean].max(-1).values, torch.ones(int(clean.sum())))
        torch.testing.assert_close(probs.sum(-1), torch.ones(64))


def test_block_causal_prefix_cache_is_exact_and_matches_training(dlm, tokenizer) -> None:
    ids = torch.tensor([tokenizer(corpus.texts("heldout")[1])["input_ids"][:48]])
    block = ids.clone()
    block[0, 32:] = tokenizer.mask_token_id
    full = dlm(block, attention_mask=block_causal_mask(32, 48)).logits.softmax(-1)[0, 32:]
    prefix = dlm(ids[:, :32], attention_mask=block_causal_mask(32, 32), use_cache=True).cache
    cached = dlm(block[:, 32:], cache=prefix).logits.softmax(-1)[0]
    torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-5)
    # The vectorised training input [x_t ; x] sees block 2 (positions 32..47) exactly as inference does.
    x_t = ids.clone()
    x_t[0, 32:48] = tokenizer.mask_token_id
    train_view = subs_parameterise(
        dlm.training_logits(x_t, ids, block=16), x_t, tokenizer.mask_token_id
    ).softmax(-1)[0, 32:48]
    torch.testing.assert_close(train_view, full, rtol=1e-4, atol=1e-5)


def test_an_ar_initialised_dlm_drafts_its_first_position_as_the_ar_model_predicts(
    tokenizer,
) -> None:
    """The right shift: after a cached clean prefix, the first masked position is read from the
    prefix's last state, so a DLM initialised from a causal LM starts as that LM's next-token
    law there (what AR initialisation is for)."""
    causal = AutoModelForCausalLM.from_pretrained(paths.TINY_DIR / "tiny-ar", dtype=torch.float32)
    dlm = from_causal(causal, tokenizer.mask_token_id).eval()
    ids = torch.tensor([tokenizer(corpus.texts("heldout")[1])["input_ids"][:40]])
    with torch.no_grad():
        prefix = dlm(ids, attention_mask=block_causal_mask(40, 40), use_cache=True).cache
        block = torch.full((1, 8), tokenizer.mask_token_id)
        drafted = dlm(block, cache=prefix, subs=False).logits[0, 0]
        expected = causal(ids).logits[0, -1]
    expected[tokenizer.mask_token_id] = drafted[tokenizer.mask_token_id]
    torch.testing.assert_close(drafted, expected, rtol=1e-4, atol=1e-4)


def test_stop_strings_end_sps_exactly_where_plain_decoding_ends(tokenizer) -> None:
    target, drafter = builtin("tiny"), builtin("tiny-ar")
    baseline = AutoregressiveDecoder(target, Warp())
    method = SpS(SpSConfig(gamma=4), Warp()).build(target, drafter, None)
    stop = Stop(frozenset(target.eos_token_ids), ("\n\n", "return"), decode=tokenizer.decode)
    rows = [
        json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").read_text().splitlines()
    ]
    stopped = 0
    for row in rows[:20]:
        prompt = tokenizer(row["prompt"])["input_ids"]
        plain = baseline.generate(prompt, 64, torch.Generator(), stop).tokens
        assert method.generate(prompt, 64, torch.Generator(), stop).tokens == plain, row["id"]
        end = stop.first(plain)
        assert end in (None, len(plain) - 1)  # nothing is emitted past the stop
        stopped += end is not None
    assert stopped >= 6  # the stop strings did end generations (12 of 20 here)


def test_a_multi_turn_task_runs_end_to_end_with_categories(tmp_path) -> None:
    cfg = compose_cfg(
        "task=spec_bench",
        "task.categories=[mt_bench,qa]",
        "run.limit=3",
        "run.max_new_tokens=6",
        f"run.results_dir={tmp_path}",
    )
    plan = prepare(cfg)
    assert [s.meta["category"] for s in plan.samples] == ["mt_bench"] * 3
    summary = execute(plan)
    records = plan.store.records
    assert all(isinstance(r.method.text, list) and len(r.method.text) == 2 for r in records)
    assert all(r.first_divergence is None for r in records)  # greedy SpS: lossless, both turns
    assert all(r.baseline.text == r.method.text for r in records)
    assert summary.by_category["mt_bench"].n_samples == 3
