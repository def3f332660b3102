"""Rotary tables are float32 whatever dtype a model's weights are stored or run in: every model
kind as its loader builds it in bfloat16 (and EAGLE-3's drafter from its float16 checkpoint in
float32), the diffusion LMs' per-call tables, grown models and the tiny world's half-precision
saves give the float32 table transformers and upstream build. A frequency cast to float16 or
bfloat16 moves angles by more than 0.1 rad at position 1000."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from specbench import paths
from specbench.config import ModelConfig
from specbench.models.eagle3 import load_eagle3
from specbench.models.kinds import dflash
from specbench.models.kinds.causal import load_causal_lm
from specbench.models.native import dream, llada, mdlm
from specbench.models.rotary import cast
from specbench.models.tiny import build, dlm
from specbench.models.tiny.grow import Growth, grow_eagle3, grow_llama
from specbench.registry import MODEL_KINDS

CPU = torch.device("cpu")
POSITIONS = torch.arange(1024)  # the tiny world's max_position_embeddings
HEAD_DIM, THETA = 64, 10000.0  # every tiny-world model's
SMALL = Growth(width=2, heads=1, mlp=1, depth=1, seed=3)


def reference(theta: float = THETA, dim: int = HEAD_DIM) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' default table, float32: cos and sin of p / theta^(2i / dim), halves
    duplicated, [positions, dim]."""
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)
    angles = POSITIONS.float()[:, None] * inv_freq
    emb = torch.cat([angles, angles], -1)
    return emb.cos(), emb.sin()


def assert_reference(cos: torch.Tensor, sin: torch.Tensor) -> None:
    want_cos, want_sin = reference()
    torch.testing.assert_close(cos, want_cos, atol=1e-5, rtol=0)
    torch.testing.assert_close(sin, want_sin, atol=1e-5, rtol=0)


def table(rotary: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """A transformers rotary module's table for float32 activations, [positions, dim]."""
    cos, sin = rotary(torch.zeros(1, dtype=torch.float32), POSITIONS[None])
    return cos[0], sin[0]


def builtin(name: str) -> ModelConfig:
    return ModelConfig(name=name, name_or_path=f"specbench:{name}")


def eagle3(dtype: str) -> torch.nn.Module:
    return MODEL_KINDS["eagle3"]().load(builtin("tiny-eagle3"), "drafter", CPU, dtype)


KINDS: dict[str, Callable[[], torch.nn.Module]] = {
    "causal": lambda: load_causal_lm(builtin("tiny"), "target", CPU, "bfloat16").model.model,
    "dflash": lambda: dflash.load(builtin("tiny-dflash"), "drafter", CPU, "bfloat16"),
    "eagle3-bf16": lambda: eagle3("bfloat16"),
    "eagle3-f16-checkpoint-in-f32": lambda: eagle3("float32"),
}


@pytest.mark.parametrize("kind", KINDS)
def test_each_kinds_loaded_model_has_the_float32_table(kind) -> None:
    assert_reference(*table(KINDS[kind]().rotary_emb))


DIFFUSION: dict[str, Callable[[], tuple[torch.Tensor, torch.Tensor]]] = {
    "tiny-dlm": lambda: dlm.rotary(POSITIONS, HEAD_DIM, THETA),
    "dream": lambda: tuple(
        t[0] for t in dream.rope_cos_sin(THETA, HEAD_DIM, POSITIONS[None], torch.float32)
    ),
    "llada": lambda: llada_table(),
    "mdlm": lambda: tuple(torch.cat([t, t], -1) for t in mdlm.rope_cos_sin(POSITIONS, HEAD_DIM)),
}


def llada_table() -> tuple[torch.Tensor, torch.Tensor]:
    config = llada.LLaDAConfig(d_model=HEAD_DIM * 2, n_heads=2, rope_theta=THETA)
    sin, cos = llada.rope_tables(config, POSITIONS[None])
    return cos[0, 0], sin[0, 0]


@pytest.mark.parametrize("model", DIFFUSION)
def test_diffusion_lms_build_the_float32_table_at_every_call(model) -> None:
    """Their tables are recomputed per forward from positions, never held in a buffer."""
    assert_reference(*DIFFUSION[model]())


def test_dream_casts_only_the_float32_table_to_the_run_dtype() -> None:
    cos, sin = dream.rope_cos_sin(THETA, HEAD_DIM, POSITIONS[None], torch.bfloat16)
    want_cos, want_sin = reference()
    assert torch.equal(cos[0], want_cos.bfloat16()) and torch.equal(sin[0], want_sin.bfloat16())


def test_grown_models_keep_the_float32_table() -> None:
    """Growth builds its models empty and casts them to the source's dtype (bfloat16 here)."""
    tiny = LlamaForCausalLM.from_pretrained(paths.TINY_DIR / "tiny", dtype=torch.bfloat16)
    assert_reference(*table(grow_llama(tiny, SMALL).model.rotary_emb))
    drafter = load_eagle3(paths.TINY_DIR / "tiny-eagle3")
    grown = grow_eagle3(cast(drafter, torch.bfloat16), SMALL, list(drafter.config.aux_layer_ids))
    assert grown.fc.weight.dtype == torch.bfloat16
    assert_reference(*table(grown.rotary_emb))


def test_the_tiny_worlds_half_precision_save_leaves_the_float32_table(tmp_path) -> None:
    """Training saves each model in float16 and goes on with it in float32."""
    model = LlamaForCausalLM.from_pretrained(paths.TINY_DIR / "tiny", dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    build.save(model, tokenizer, tmp_path, {})
    assert model.lm_head.weight.dtype == torch.float32
    assert_reference(*table(model.model.rotary_emb))


def test_cast_moves_and_casts_everything_but_the_frequencies() -> None:
    drafter = load_eagle3(paths.TINY_DIR / "tiny-eagle3")
    cast(drafter, torch.bfloat16)
    floating = [t for t in drafter.state_dict().values() if t.is_floating_point()]
    assert {t.dtype for t in floating} == {torch.bfloat16}
    assert drafter.rotary_emb.inv_freq.dtype == torch.float32
    assert drafter.rotary_emb.original_inv_freq.dtype == torch.float32
