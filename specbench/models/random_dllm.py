"""Random-init LLaDA, Dream and MDLM on the native classes, so their adapters and decoders run in
tests (and on a GPU check) without a download.

Each is its family's native class with the hub config's architecture keys at tiny sizes, over
the tiny world's tokenizer and its mask token, with weights wide enough that confidences reach
the thresholds the policies use. The facts that differ between families stay where the hub
keeps them: LLaDA and Dream name the mask id in their model config; Dream's adapter reads a
position from the row before it; MDLM adds its mask after the vocabulary's last id when the
tokenizer has none (here it has one).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import AutoTokenizer, PreTrainedModel

from specbench import paths
from specbench.models.native.dream import DreamConfig, DreamModel
from specbench.models.native.llada import LLaDAConfig, LLaDAModelLM
from specbench.models.native.mdlm import MDLM, MDLMConfig
from specbench.registry import register_builtin_model

WIDTH, LAYERS, HEADS = 64, 2, 4


def _widen(model: PreTrainedModel) -> None:
    """Confident enough to reach thresholds: every matrix N(0, 0.5), norms left at one."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.5)
    for name, parameter in model.named_parameters():
        if name.endswith("embedding"):  # MDLM's bare embedding Parameter
            nn.init.normal_(parameter, std=0.5)


def _tokenizer():
    return AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")


def _special_ids(tokenizer) -> dict[str, int]:
    """LLaDA and Dream keep the mask id in the model config, beside EOS and padding."""
    return {
        "mask_token_id": tokenizer.mask_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def _save(model: PreTrainedModel, out: Path) -> None:
    _widen(model)
    model.save_pretrained(out)
    _tokenizer().save_pretrained(out)


@register_builtin_model("random-llada")
def build_llada(out: Path) -> None:
    torch.manual_seed(0)
    tokenizer = _tokenizer()
    config = LLaDAConfig(
        d_model=WIDTH,
        n_heads=HEADS,
        n_kv_heads=HEADS,
        n_layers=LAYERS,
        mlp_hidden_size=2 * WIDTH,
        activation_type="silu",
        block_type="llama",
        layer_norm_type="rms",
        rope=True,
        rope_theta=500000.0,
        weight_tying=False,
        vocab_size=len(tokenizer),
        embedding_size=len(tokenizer),
        max_sequence_length=4096,
        **_special_ids(tokenizer),
    )
    _save(LLaDAModelLM(config), out)


@register_builtin_model("random-dream")
def build_dream(out: Path) -> None:
    torch.manual_seed(0)
    tokenizer = _tokenizer()
    config = DreamConfig(
        hidden_size=WIDTH,
        intermediate_size=2 * WIDTH,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS // 2,
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        **_special_ids(tokenizer),
    )
    _save(DreamModel(config), out)


@register_builtin_model("random-mdlm")
def build_mdlm(out: Path) -> None:
    torch.manual_seed(0)
    tokenizer = _tokenizer()
    config = MDLMConfig(
        vocab_size=len(tokenizer),
        model_length=1024,
        hidden_dim=WIDTH,
        cond_dim=WIDTH // 2,
        n_blocks=LAYERS,
        n_heads=HEADS,
        dropout=0.0,
        time_conditioning=False,
    )
    _save(MDLM(config), out)
