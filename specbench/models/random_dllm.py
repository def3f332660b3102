"""Random-init stand-ins for LLaDA and Dream, so their adapters run in tests without a download.

Both are a small bidirectional transformer with the calling convention of the real remote code:
`model(input_ids)` returns `.logits` for every position, and with `use_cache=True` the keys and
values as a list of per-layer `(k, v)` tuples that `past_key_values=` takes back (LLaDA's
OLMo-derived convention, which Fast-dLLM's prefix cache uses). What differs between the two is
where the facts live, as on the hub: `random-llada` names its mask id in its model config and is
read without a shift; `random-dream` keeps the mask token in its tokenizer and its adapter reads
position j from row j - 1. They share the tiny world's tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer
from transformers.modeling_outputs import CausalLMOutputWithPast

from specbench import paths
from specbench.models.tiny.dlm import TinyDLM, TinyDLMConfig
from specbench.registry import register_builtin_model


class BidirectionalConfig(TinyDLMConfig):
    model_type = "specbench-bidirectional-lm"

    def __init__(self, mask_token_id: int | None = None, **kwargs):
        super().__init__(mask_token_id=mask_token_id, **kwargs)


class BidirectionalLM(TinyDLM):
    """TinyDLM's layers without its shift, SUBS output or cache format: plain logits per row,
    full attention, `past_key_values` as per-layer (k, v) tuples."""

    config_class = BidirectionalConfig

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.5)  # confident enough to reach thresholds

    def forward(
        self,
        input_ids: torch.Tensor,
        past_key_values: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
        use_cache: bool = False,
    ) -> CausalLMOutputWithPast:
        offset = past_key_values[0][0].shape[2] if past_key_values else 0
        positions = torch.arange(offset, offset + input_ids.shape[1], device=input_ids.device)
        hidden, present = self.hidden_states(input_ids, None, positions, past_key_values)
        return CausalLMOutputWithPast(
            logits=self.lm_head(hidden), past_key_values=present if use_cache else None
        )


AutoConfig.register(BidirectionalConfig.model_type, BidirectionalConfig)
AutoModel.register(BidirectionalConfig, BidirectionalLM)


def _build(out: Path, mask_in_config: bool) -> None:
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    config = BidirectionalConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        mask_token_id=tokenizer.mask_token_id if mask_in_config else None,  # Dream: tokenizer
    )
    BidirectionalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)


@register_builtin_model("random-llada")
def build_llada(out: Path) -> None:
    _build(out, mask_in_config=True)


@register_builtin_model("random-dream")
def build_dream(out: Path) -> None:
    _build(out, mask_in_config=False)
