"""Seeded random DFlash and DFlash 2 drafters, written in the authors' checkpoint format (a Qwen3
config with `dflash_config`, safetensors without embeddings or head, DFlash 2's codebooks stored
without `.weight`), so the loading path a hub checkpoint takes runs without a download.

`random-dflash` drafts for `random-gpt2`; tests build others for their own targets.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import PretrainedConfig, Qwen3Config

from specbench.registry import register_builtin_model

CODEBOOKS = ("predecessor_codebook", "successor_codebook")


def dflash_config(
    target: PretrainedConfig,
    target_layer_ids: list[int],
    block_size: int,
    mask_token_id: int,
    layers: int = 1,
    v2: bool = False,
) -> Qwen3Config:
    """A drafter for `target`: its hidden size and vocabulary, reading `target_layer_ids`."""
    text = target.get_text_config()
    heads = 4
    config = Qwen3Config(
        vocab_size=text.vocab_size,
        hidden_size=text.hidden_size,
        intermediate_size=2 * text.hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=2,
        head_dim=text.hidden_size // heads,
        max_position_embeddings=4096,
        architectures=["DFlash2DraftModel" if v2 else "DFlashDraftModel"],
    )
    config.num_target_layers = text.num_hidden_layers
    config.block_size = block_size
    config.dflash_config = {"mask_token_id": mask_token_id, "target_layer_ids": target_layer_ids}
    if v2:
        config.dflash_config.update(
            conv_kernel_size=3, conv_group_size=8, selector_rank=8, selector_top_k=4
        )
    return config


def random_dflash(config: Qwen3Config, seed: int) -> torch.nn.Module:
    """The package's model class for `config`, seeded. DFlash 2's convolution base kernels are
    left uninitialised by the package's `post_init`; they are drawn here."""
    from dflash.model import DFlash2DraftModel, DFlashDraftModel

    torch.manual_seed(seed)
    v2 = config.architectures == ["DFlash2DraftModel"]
    model = (DFlash2DraftModel if v2 else DFlashDraftModel)(config).eval()
    for name, param in model.named_parameters():
        if name.endswith("base_kernel"):
            torch.nn.init.normal_(param, std=0.3)
    return model


def save_dflash(model: torch.nn.Module, out: Path) -> None:
    """As z-lab publishes them: config.json plus model.safetensors, codebooks without `.weight`."""
    out.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(out)
    state = {}
    for key, value in model.state_dict().items():
        for codebook in CODEBOOKS:
            key = key.replace(f"{codebook}.weight", codebook)
        state[key] = value.contiguous()
    save_file(state, out / "model.safetensors", metadata={"format": "pt"})


@register_builtin_model("random-dflash")
def build_drafter(out: Path) -> None:
    from specbench.models.random_init import random_target

    target = random_target().config
    save_dflash(random_dflash(dflash_config(target, [1, 2], 8, mask_token_id=0), seed=2), out)
