"""The xl world's growth preserves the function exactly (float32, up to the order of sums), on
the committed checkpoints: logits, hidden states a drafter reads, greedy tokens, the DFlash
drafter reading a grown target, and the built-in's saved directory as plain transformers loads
it. Sizes here are small growths of the real checkpoints; the shipped xl sizes run in
benchmarks and experiments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

from conftest import REORDERED
from specbench import paths
from specbench.config import ModelConfig
from specbench.models.eagle3 import load_eagle3
from specbench.models.loading import resolve
from specbench.models.tiny.dlm import TinyDLM
from specbench.models.tiny.grow import (
    XL,
    Growth,
    Residual,
    build_grown,
    build_grown_drafter,
    grow_dflash,
    grow_dlm,
    grow_eagle3,
    grow_llama,
    grown_layer,
)

SMALL = Growth(width=2, heads=2, mlp=3, depth=2, seed=7)


@pytest.fixture(scope="module")
def tiny() -> LlamaForCausalLM:
    return LlamaForCausalLM.from_pretrained(paths.TINY_DIR / "tiny", dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def grown(tiny) -> LlamaForCausalLM:
    return grow_llama(tiny, SMALL)


def prompts(n: int) -> list[list[int]]:
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    lines = (paths.TINY_DIR / "tiny_code.jsonl").read_text().splitlines()[:n]
    return [tokenizer(json.loads(line)["prompt"])["input_ids"] for line in lines]


def test_growth_is_dense_and_of_the_asked_shape(tiny, grown) -> None:
    c = grown.config
    assert (c.hidden_size, c.num_attention_heads, c.intermediate_size, c.num_hidden_layers) == (
        640,
        10,
        2592,
        12,
    )
    # every grown source layer's matrices carry no zero entry; the silent layers' output
    # projections are the only zeros
    for i, layer in enumerate(grown.model.layers):
        silent = i % SMALL.depth != 0  # each source layer comes first, its silent ones after
        for name in ("q_proj", "k_proj", "v_proj"):
            assert (getattr(layer.self_attn, name).weight != 0).all()
        assert (layer.self_attn.o_proj.weight != 0).all() != silent
    # the embeddings' only zeros are the source's own (the padding row), spread over the width
    nonzero = (tiny.model.embed_tokens.weight != 0).sum()
    assert (grown.model.embed_tokens.weight != 0).sum() == SMALL.width * nonzero


def test_grown_logits_and_hidden_states_equal_the_source(tiny, grown) -> None:
    ids = torch.tensor(prompts(3)[0])[None]
    with torch.no_grad():
        source = tiny(ids, output_hidden_states=True)
        big = grown(ids, output_hidden_states=True)
    torch.testing.assert_close(big.logits, source.logits, **REORDERED)
    q = Residual.draw(tiny.config.hidden_size, SMALL.width, SMALL.seed).matrix.float()
    for layer in range(tiny.config.num_hidden_layers - 1):  # transformers norms the last
        hidden = big.hidden_states[grown_layer(layer, SMALL) + 1][0]
        torch.testing.assert_close(hidden, source.hidden_states[layer + 1][0] @ q.T, **REORDERED)


def test_grown_greedy_tokens_equal_the_source_on_tiny_code(tiny, grown) -> None:
    for ids in prompts(4):
        ids = torch.tensor(ids)[None]
        a = tiny.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=1)
        b = grown.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=1)
        assert a.tolist() == b.tolist()


def test_grown_diffusion_lm_equals_the_source_with_and_without_its_cache() -> None:
    dlm = TinyDLM.from_pretrained(paths.TINY_DIR / "tiny-dlm", dtype=torch.float32).eval()
    big = grow_dlm(dlm, Growth(width=3, heads=3, mlp=2, depth=3, seed=1))
    ids = torch.tensor(prompts(1)[0][:40])[None]
    noisy = ids.clone()
    noisy[:, 30:] = dlm.config.mask_token_id
    with torch.no_grad():
        torch.testing.assert_close(big(noisy).logits, dlm(noisy).logits, **REORDERED)
        prefix = dlm(ids[:, :30], use_cache=True).cache
        big_prefix = big(ids[:, :30], use_cache=True).cache
        block = noisy[:, 30:]
        torch.testing.assert_close(
            big(block, cache=big_prefix).logits, dlm(block, cache=prefix).logits, **REORDERED
        )


def test_a_grown_dflash_drafter_on_a_grown_target_drafts_as_on_the_source(tiny, grown) -> None:
    from dflash.model import DFlashDraftModel

    drafter = DFlashDraftModel.from_pretrained(
        paths.TINY_DIR / "tiny-dflash", dtype=torch.float32
    ).eval()
    big = grow_dflash(drafter, SMALL)
    assert big.target_layer_ids == [grown_layer(i, SMALL) for i in drafter.target_layer_ids]
    assert big.config.num_attention_heads == drafter.config.num_attention_heads  # still small
    ids = torch.tensor(prompts(2)[1])[None]
    block = torch.full((1, 16), drafter.mask_token_id)
    block[0, 0] = ids[0, -1]
    positions = torch.arange(ids.shape[1] + 15)[None]
    with torch.no_grad():
        logits = []
        for model, target in ((drafter, tiny), (big, grown)):
            states = target(ids[:, :-1], output_hidden_states=True).hidden_states
            features = torch.cat([states[i + 1] for i in model.target_layer_ids], -1)
            noise = target.model.embed_tokens(block)
            state = model(position_ids=positions, noise_embedding=noise, target_hidden=features)
            logits.append(model.compute_logits(state, target.lm_head))
    torch.testing.assert_close(logits[1], logits[0], **REORDERED)


def test_a_grown_eagle3_drafter_on_a_grown_target_drafts_as_on_the_source(tiny, grown) -> None:
    """tiny-eagle3 reads the inputs of tiny's layers 1, 3, 5; grown, those of layers 2, 6, 10
    of the grown target (depth 2), on its stream, through its embeddings: the same logits."""
    drafter = load_eagle3(paths.TINY_DIR / "tiny-eagle3").float()
    layers = list(drafter.config.aux_layer_ids)
    big = grow_eagle3(drafter, SMALL, layers)
    assert big.config.aux_layer_ids == [2 * i for i in layers]
    assert big.config.num_attention_heads == drafter.config.num_attention_heads  # still small
    ids = torch.tensor(prompts(2)[1])[None]
    n = ids.shape[1] - 1
    positions, visible = torch.arange(n)[None], torch.ones(n, n, dtype=torch.bool).tril()[None]
    with torch.no_grad():
        logits = []
        for model, target in ((drafter, tiny), (big, grown)):
            model.embedding = target.model.embed_tokens.weight
            states = target(ids, output_hidden_states=True).hidden_states
            hidden = model.fuse(torch.cat([states[i] for i in model.config.aux_layer_ids], -1))
            out, _ = model(ids[:, 1:], hidden[:, :-1], positions, visible)
            logits.append(model.logits(out))
    torch.testing.assert_close(logits[1], logits[0], **REORDERED)


def test_the_xl_built_in_is_a_directory_plain_transformers_loads() -> None:
    """Built on first use into the cache, keyed by the source checkpoint: the shipped size, in
    float32, with the source's tokenizer and its growth recorded."""
    where = Path(resolve(ModelConfig(name="tiny-xl", name_or_path="specbench:tiny-xl"), "target"))
    assert paths.cache_dir() in where.parents
    record = json.loads((where / "growth.json").read_text())
    assert record["source"] == "specbench:tiny" and 100e6 < record["parameters"] < 300e6
    model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32).eval()
    tiny_model = AutoModelForCausalLM.from_pretrained(paths.TINY_DIR / "tiny", dtype=torch.float32)
    assert (
        AutoTokenizer.from_pretrained(where).get_vocab()
        == AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny").get_vocab()
    )
    ids = torch.tensor(prompts(1)[0])[None]
    out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=1)
    assert out.tolist() == tiny_model.generate(ids, max_new_tokens=8, do_sample=False).tolist()
    assert XL["tiny-xl"].growth.width == model.config.hidden_size // tiny_model.config.hidden_size


def test_the_grown_eagle3_built_in_reads_the_xl_targets_layers(tmp_path: Path) -> None:
    """`specbench:tiny-eagle3-xl` as its builder writes it: EAGLE's own layout, on tiny-xl's
    stream, reading the inputs of tiny-xl's layers that tiny-eagle3 read on tiny, its growth
    recorded."""
    build_grown_drafter("tiny-eagle3-xl", tmp_path)
    source, grown = load_eagle3(paths.TINY_DIR / "tiny-eagle3"), load_eagle3(tmp_path)
    growth = XL["tiny-xl"].growth
    assert grown.config.hidden_size == source.config.hidden_size * growth.width
    assert grown.config.aux_layer_ids == [i * growth.depth for i in source.config.aux_layer_ids]
    record = json.loads((tmp_path / "growth.json").read_text())
    assert record["source"] == "specbench:tiny-eagle3" and record["built_on"] == "cpu"


def test_a_built_in_whose_build_fails_leaves_nothing_in_the_cache(monkeypatch, tmp_path) -> None:
    """A builder that raises half-way (as the grown EAGLE-3 once did) leaves no temporary
    directory behind, and the next resolve builds afresh."""
    from specbench.registry import BUILTIN_MODELS

    def broken(out: Path) -> None:
        (out / "half-written.bin").write_bytes(b"\0")
        raise RuntimeError("the build failed")

    broken.sources = ()
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setitem(BUILTIN_MODELS._entries, "broken-build", broken)
    with pytest.raises(RuntimeError, match="the build failed"):
        resolve(ModelConfig(name="broken-build", name_or_path="specbench:broken-build"), "target")
    assert list((tmp_path / "models").iterdir()) == []


@pytest.mark.parametrize("name", ["tiny-math-xl"])
def test_the_math_worlds_grown_models_decode_as_their_sources(name: str, tmp_path: Path) -> None:
    """The math world grows as the code world does: in float32 the grown target decodes the
    first held-out problems greedily to its source's tokens (the build's own check, with the
    source's tokenizer and the math task's prompts)."""
    build_grown(name, tmp_path)
    record = json.loads((tmp_path / "growth.json").read_text())
    assert record["source"] == f"specbench:{XL[name].source}"
    assert record["check"]["identical"] == record["check"]["prompts"] == 3
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert len(tokenizer) == len(AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny-math"))
