"""LLaDA (GSAI-ML/LLaDA-8B-Base, -8B-Instruct, LLaDA-1.5) as a native transformers-5 model.

The hub checkpoints ship an OLMo-derived `LLaDAModelLM` as remote code (`model_type` "llada").
This file reads the same config.json and safetensors unchanged (parameter names
`model.transformer.wte`, `model.transformer.blocks.N.{attn_norm, q_proj, k_proj, v_proj,
attn_out, ff_norm, ff_proj, up_proj, ff_out}`, `model.transformer.ln_f`,
`model.transformer.ff_out`), so no remote code runs.

Only the architecture the real checkpoints use is built: the "llama" block (pre-RMSNorm, separate
q/k/v projections, `silu(ff_proj(x)) * up_proj(x)` MLP), RoPE, no biases, untied output layer,
full (bidirectional) attention. Any other value of a config key that changes the architecture
raises one ValueError naming the key and what is supported.

Numerics follow the hub file (as vendored in NVlabs/Fast-dLLM llada/model/modeling_llada.py):
RMSNorm in float32 then cast back before the weight multiply, RoPE in float32 (the hub's
`rope_full_precision`) with the half-split rotation, SDPA with the default 1/sqrt(head_dim)
scale. Two things differ on purpose, neither in the logits:

* upstream caches keys before RoPE and rotates every key again on each call (keys at absolute
  positions 0 .. P + Q - 1); here the cache holds keys after RoPE, rotated once at their own
  positions, which are the same values, so the common interface's `position_ids` can place the
  new tokens anywhere (Fast-dLLM's dual cache needs that);
* upstream ignores its attention bias (`attn_mask=None`, full attention); here a boolean 4-D
  `attention_mask` is honoured, and None means full attention as upstream.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModel, PreTrainedConfig, PreTrainedModel
from transformers.utils import ModelOutput

KVCache = tuple[tuple[torch.Tensor, torch.Tensor], ...]


class LLaDAConfig(PreTrainedConfig):
    """The hub's LLaDAConfig keys, with the upstream `ModelConfig` defaults, so a key missing
    from a config.json means what it means upstream. Keys not listed here (dropouts, init
    settings, precision, ...) are kept as plain attributes."""

    model_type = "llada"
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "n_heads",
        "num_hidden_layers": "n_layers",
    }

    d_model: int = 768
    n_heads: int = 12
    n_kv_heads: int | None = None
    n_layers: int = 12
    mlp_ratio: int = 4
    mlp_hidden_size: int | None = None
    activation_type: str = "swiglu"
    block_type: str = "sequential"
    block_group_size: int = 1
    alibi: bool = False
    rope: bool = False
    rope_full_precision: bool = True
    rope_theta: float = 10000.0
    multi_query_attention: bool | None = None
    attention_layer_norm: bool = False
    input_emb_norm: bool = False
    layer_norm_type: str = "default"
    layer_norm_with_affine: bool = True
    rms_norm_eps: float = 1e-05
    include_bias: bool = False
    include_qkv_bias: bool | None = False
    bias_for_layer_norm: bool | None = None
    scale_logits: bool = False
    weight_tying: bool = True
    vocab_size: int = 50257
    embedding_size: int | None = 50304
    max_sequence_length: int = 1024
    eos_token_id: int | None = 50256
    pad_token_id: int | None = 50256
    mask_token_id: int | None = 50256
    use_cache: bool = False


# key -> (the values built here, how to say them); every other value raises.
SUPPORTED: dict[str, tuple[tuple, str]] = {
    "block_type": (("llama",), "'llama'"),
    "activation_type": (("silu",), "'silu'"),
    "layer_norm_type": (("rms",), "'rms'"),
    "layer_norm_with_affine": ((True,), "True"),
    "rope": ((True,), "True"),
    "rope_full_precision": ((True,), "True"),
    "alibi": ((False,), "False"),
    "weight_tying": ((False,), "False"),
    "include_bias": ((False,), "False"),
    "include_qkv_bias": ((False, None), "False"),
    "bias_for_layer_norm": ((False, None), "False"),
    "attention_layer_norm": ((False,), "False"),
    "input_emb_norm": ((False,), "False"),
    "scale_logits": ((False,), "False"),
    "block_group_size": ((1,), "1"),
    "multi_query_attention": ((False, None), "None"),
}


def check_supported(config: LLaDAConfig) -> None:
    """Refuse, in one line, a config this file would otherwise build wrongly."""
    for key, (values, said) in SUPPORTED.items():
        value = getattr(config, key)
        if not any(type(value) is type(v) and value == v for v in values):
            raise ValueError(f"LLaDA config {key}={value!r} is not supported (supported: {said})")
    if config.n_kv_heads not in (None, config.n_heads):
        raise ValueError(
            f"LLaDA config n_kv_heads={config.n_kv_heads!r} is not supported "
            f"(supported: None or n_heads={config.n_heads})"
        )
    if config.d_model % config.n_heads:
        raise ValueError(f"LLaDA config d_model={config.d_model} is not divisible by n_heads")


class RMSNorm(nn.Module):
    """Upstream's RMSLayerNorm: normalise in float32, cast back, then scale in the model dtype."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        as_float = hidden.float()
        variance = as_float.pow(2).mean(-1, keepdim=True)
        normed = (as_float * torch.rsqrt(variance + self.eps)).to(hidden.dtype)
        return self.weight * normed


def rope_tables(config: LLaDAConfig, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 (sin, cos), [B or 1, 1, Q, head_dim], built as upstream builds its table (same
    inverse frequencies, one product per entry, halves concatenated) but at any positions."""
    head_dim = config.d_model // config.n_heads
    steps = torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float)
    inv_freq = 1.0 / (config.rope_theta ** (steps / head_dim))
    freqs = positions.float()[..., None] * inv_freq
    angles = torch.cat((freqs, freqs), dim=-1)[:, None]
    return angles.sin(), angles.cos()


def rotate(states: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """Upstream's apply_rotary_pos_emb in float32 with its half-split rotate_half."""
    as_float = states.float()
    first, second = as_float.chunk(2, dim=-1)
    rotated = torch.cat((-second, first), dim=-1)
    return (as_float * cos + rotated * sin).to(states.dtype)


class LLaDALlamaBlock(nn.Module):
    """One "llama" block: x + attn(norm(x)), then + ff_out(silu(ff_proj(h)) * up_proj(h))."""

    def __init__(self, config: LLaDAConfig):
        super().__init__()
        width = config.d_model
        hidden = config.mlp_hidden_size or config.mlp_ratio * width
        self.n_heads = config.n_heads
        self.attn_norm = RMSNorm(width, config.rms_norm_eps)
        self.ff_norm = RMSNorm(width, config.rms_norm_eps)
        self.q_proj = nn.Linear(width, width, bias=False)
        self.k_proj = nn.Linear(width, width, bias=False)
        self.v_proj = nn.Linear(width, width, bias=False)
        self.attn_out = nn.Linear(width, width, bias=False)
        self.ff_proj = nn.Linear(width, hidden, bias=False)
        self.up_proj = nn.Linear(width, hidden, bias=False)
        self.ff_out = nn.Linear(hidden, width, bias=False)

    def heads(self, states: torch.Tensor) -> torch.Tensor:
        batch, length, width = states.shape
        return states.view(batch, length, self.n_heads, width // self.n_heads).transpose(1, 2)

    def attention(self, hidden, rope, mask, past):
        """Self-attention of the new tokens over past + new keys; returns output and (k, v)."""
        normed = self.attn_norm(hidden)
        queries = rotate(self.heads(self.q_proj(normed)), *rope)
        keys = rotate(self.heads(self.k_proj(normed)), *rope)
        values = self.heads(self.v_proj(normed))
        if past is not None:
            keys = torch.cat((past[0], keys), dim=-2)
            values = torch.cat((past[1], values), dim=-2)
        mixed = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
        mixed = mixed.transpose(1, 2).reshape(hidden.shape)
        return self.attn_out(mixed), (keys, values)

    def forward(self, hidden, rope, mask=None, past=None):
        attended, present = self.attention(hidden, rope, mask, past)
        hidden = hidden + attended
        normed = self.ff_norm(hidden)
        gated = F.silu(self.ff_proj(normed)) * self.up_proj(normed)
        return hidden + self.ff_out(gated), present


class LLaDAModel(nn.Module):
    """The `model` submodule of the hub class: `transformer` holds every parameter."""

    def __init__(self, config: LLaDAConfig):
        super().__init__()
        self.config = config
        vocab = config.embedding_size or config.vocab_size
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(vocab, config.d_model),
                "blocks": nn.ModuleList(LLaDALlamaBlock(config) for _ in range(config.n_layers)),
                "ln_f": RMSNorm(config.d_model, config.rms_norm_eps),
                "ff_out": nn.Linear(config.d_model, vocab, bias=False),
            }
        )

    def forward(self, input_ids, attention_mask, position_ids, past_key_values):
        past_length = 0 if past_key_values is None else past_key_values[0][0].shape[-2]
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
            position_ids = position_ids + past_length
        rope = rope_tables(self.config, position_ids)
        hidden = self.transformer.wte(input_ids)
        presents = []
        for index, block in enumerate(self.transformer.blocks):
            past = None if past_key_values is None else past_key_values[index]
            hidden, present = block(hidden, rope, attention_mask, past)
            presents.append(present)
        logits = self.transformer.ff_out(self.transformer.ln_f(hidden))
        return logits, tuple(presents)


@dataclass
class LLaDAOutput(ModelOutput):
    """logits [B, Q, V] in the model dtype; `past_key_values` the per-layer (k, v) over P + Q.
    transformers 5 names a ModelOutput's cache field `cache` and makes `past_key_values` a
    warning alias of it; the alias here is silent, since `past_key_values` is this interface."""

    logits: torch.Tensor | None = None
    cache: KVCache | None = None

    @property
    def past_key_values(self) -> KVCache | None:
        return self.cache


class LLaDAPreTrainedModel(PreTrainedModel):
    config_class = LLaDAConfig
    base_model_prefix = "model"
    _no_split_modules = ["LLaDALlamaBlock"]
    _supports_sdpa = True

    def _init_weights(self, module: nn.Module) -> None:
        """Only reached for weights a checkpoint lacks; norms start at one as upstream's do."""
        if isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)
        else:
            super()._init_weights(module)


class LLaDAModelLM(LLaDAPreTrainedModel):
    """The hub's `LLaDAModelLM` (architectures entry), with the shared native forward."""

    def __init__(self, config: LLaDAConfig):
        check_supported(config)
        super().__init__(config)
        self.model = LLaDAModel(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.model.transformer.wte

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.transformer.wte = value

    def get_output_embeddings(self) -> nn.Module:
        return self.model.transformer.ff_out

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.model.transformer.ff_out = value

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: KVCache | list | None = None,
        use_cache: bool = False,
        **kwargs,
    ) -> LLaDAOutput:
        """input_ids [B, Q]; attention_mask bool [B or 1, 1, Q, P + Q] (True: may attend) or
        None (full attention); position_ids [B or 1, Q] (None: P .. P + Q - 1);
        past_key_values per layer (k, v), each [B, heads, P, head_dim], keys after RoPE."""
        if kwargs:
            raise TypeError(f"LLaDA forward got unexpected arguments: {sorted(kwargs)}")
        logits, presents = self.model(input_ids, attention_mask, position_ids, past_key_values)
        return LLaDAOutput(logits=logits, cache=presents if use_cache else None)


AutoConfig.register(LLaDAConfig.model_type, LLaDAConfig)
AutoModel.register(LLaDAConfig, LLaDAModelLM)
