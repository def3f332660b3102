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
from transformers import AutoConfig, AutoModel, AutoTokenizer, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from specbench import paths
from specbench.models.tiny.dlm import Layer, rotary
from specbench.registry import register_builtin_model


class BidirectionalConfig(PretrainedConfig):
    model_type = "specbench-bidirectional-lm"

    def __init__(
        self,
        vocab_size: int = 4096,
        hidden_size: int = 64,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 4,
        intermediate_size: int = 128,
        max_position_embeddings: int = 1024,
        rope_theta: float = 10000.0,
        rms_norm_eps: float = 1e-6,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = rope_theta
        self.rms_norm_eps = rms_norm_eps
        super().__init__(**kwargs)


class BidirectionalLM(PreTrainedModel):
    config_class = BidirectionalConfig

    def __init__(self, config: BidirectionalConfig):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.5)  # confident enough to reach thresholds

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def forward(
        self,
        input_ids: torch.Tensor,
        past_key_values: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
        use_cache: bool = False,
    ) -> CausalLMOutputWithPast:
        offset = past_key_values[0][0].shape[2] if past_key_values else 0
        positions = torch.arange(offset, offset + input_ids.shape[1], device=input_ids.device)
        head_dim = self.config.hidden_size // self.config.num_attention_heads
        cos, sin = rotary(positions, head_dim, self.config.rope_theta)
        x = self.embed(input_ids)
        present = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, cos, sin, None, past_key_values[i] if past_key_values else None)
            present.append(kv)
        logits = self.lm_head(self.norm(x))
        return CausalLMOutputWithPast(logits=logits, past_key_values=present if use_cache else None)


AutoConfig.register(BidirectionalConfig.model_type, BidirectionalConfig)
AutoModel.register(BidirectionalConfig, BidirectionalLM)


def _build(out: Path, mask_in_config: bool) -> None:
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    config = BidirectionalConfig(vocab_size=len(tokenizer))
    if mask_in_config:
        config.mask_token_id = tokenizer.mask_token_id
    BidirectionalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)


@register_builtin_model("random-llada")
def build_llada(out: Path) -> None:
    _build(out, mask_in_config=True)


@register_builtin_model("random-dream")
def build_dream(out: Path) -> None:
    _build(out, mask_in_config=False)
