"""Dream (Dream-org/Dream-v0-Base-7B, Dream-v0-Instruct-7B) as a native transformers-5 model.

The hub ships Dream as remote code written for transformers 4 (`DreamModel`, model_type
"Dream"): a Qwen2.5-shaped transformer (q/k/v with bias, grouped-query attention, RMSNorm,
RoPE, untied lm_head) run with full bidirectional attention. Its RoPE came from
`ROPE_INIT_FUNCTIONS['default']`, which transformers 5 no longer has, so the default RoPE is
computed here. The classes read the hub's config.json (its keys, its `mask_token_id` 151666)
and safetensors (its parameter names) unchanged, with no trust_remote_code.

Numerics follow the hub file op for op: RMSNorm in float32 cast back before the weight, cos/sin
in float32 cast to the model dtype, SDPA with its default 1/sqrt(head_dim) scale. Logits come
back in the model's dtype, unshifted: Dream's row i predicts position i + 1 (its generate
right-shifts them), which is the caller's business.

Variants the hub code would run that these classes do not implement (any `rope_scaling` type
but none/default, sliding-window attention switched on) fail at config time with one
ValueError line.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModel, PreTrainedConfig, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.utils import ModelOutput

KeyValues = tuple[tuple[torch.Tensor, torch.Tensor], ...]


class DreamConfig(PreTrainedConfig):
    """The hub's DreamConfig keys and defaults. Its `rope_theta`/`rope_scaling` land in
    transformers 5's `rope_parameters` (`rope_type`, `rope_theta`)."""

    model_type = "Dream"
    keys_to_ignore_at_inference = ["past_key_values"]

    vocab_size: int = 151936
    hidden_size: int = 4096
    intermediate_size: int = 22016
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = 32
    hidden_act: str = "silu"
    max_position_embeddings: int = 32768
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    use_cache: bool = False
    tie_word_embeddings: bool = False
    rope_parameters: dict | None = None
    use_sliding_window: bool = False
    sliding_window: int | None = 4096
    max_window_layers: int = 28
    attention_dropout: float = 0.0
    mask_token_id: int | None = 151666
    pad_token_id: int | None = 151643
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self, **kwargs):
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        super().__post_init__(**kwargs)
        check_supported(self)
        # as the hub config: the window exists only when switched on
        self.sliding_window = self.sliding_window if self.use_sliding_window else None


def check_supported(config: DreamConfig) -> None:
    """One ValueError line for what the hub config allows but these classes do not run."""
    rope_type = (config.rope_parameters or {}).get("rope_type", "default")
    if rope_type != "default":
        raise ValueError(
            f"Dream config: rope_scaling type {rope_type!r} is not supported; "
            "supported: rope_scaling null or {'rope_type': 'default'}"
        )
    if config.use_sliding_window and config.sliding_window is not None:
        raise ValueError(
            f"Dream config: use_sliding_window=true (sliding_window={config.sliding_window}) "
            "is not supported; supported: use_sliding_window=false (full attention)"
        )
    if config.hidden_size % config.num_attention_heads:
        raise ValueError(
            f"Dream config: hidden_size {config.hidden_size} is not divisible by "
            f"num_attention_heads {config.num_attention_heads}"
        )


@dataclass
class DreamOutput(ModelOutput):
    """Logits [B, Q, V] in the model dtype; `past_key_values`: per-layer (k, v) over P + Q
    positions (keys after RoPE) when use_cache. transformers 5 names a ModelOutput's cache field
    `cache` and makes `past_key_values` a warning alias; here the alias is silent, since
    `past_key_values` is this interface."""

    logits: torch.Tensor | None = None
    cache: KeyValues | None = None

    @property
    def past_key_values(self) -> KeyValues | None:
        return self.cache


class DreamRMSNorm(nn.Module):
    """The hub's RMSNorm: normalise in float32, cast back, then scale by the weight."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        dtype = hidden.dtype
        hidden = hidden.to(torch.float32)
        variance = hidden.pow(2).mean(-1, keepdim=True)
        hidden = hidden * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden.to(dtype)


def default_inv_freq(theta: float, head_dim: int, device: torch.device) -> torch.Tensor:
    """transformers 4's default RoPE frequencies, float32: 1 / theta^(2i / head_dim)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    return 1.0 / (theta**exponents)


def rope_cos_sin(
    theta: float, head_dim: int, positions: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [B, Q, head_dim] as the hub computes them: a float32 outer product of the
    frequencies and positions (recomputed per call, so no dtype cast of a buffer can round the
    frequencies), duplicated over both halves, cast to the model dtype."""
    inv_freq = default_inv_freq(theta, head_dim, positions.device)
    inv_freq = inv_freq[None, :, None].expand(positions.shape[0], -1, 1)
    freqs = (inv_freq @ positions[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, Q, D] rotated by cos/sin [B, Q, D]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (x * cos) + (rotate_half(x) * sin)


def repeat_kv(states: torch.Tensor, groups: int) -> torch.Tensor:
    """[B, kv_heads, L, D] -> [B, kv_heads * groups, L, D], each KV head serving its group."""
    if groups == 1:
        return states
    batch, kv_heads, length, dim = states.shape
    states = states[:, :, None].expand(batch, kv_heads, groups, length, dim)
    return states.reshape(batch, kv_heads * groups, length, dim)


class DreamMLP(nn.Module):
    def __init__(self, config: DreamConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(hidden)) * self.up_proj(hidden))


class DreamAttention(nn.Module):
    """Full (non-causal) grouped-query attention; keys are cached after RoPE."""

    def __init__(self, config: DreamConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        kv_size = self.num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(config.hidden_size, kv_size, bias=True)
        self.v_proj = nn.Linear(config.hidden_size, kv_size, bias=True)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(
        self,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        batch, length, _ = hidden.shape
        query = self.q_proj(hidden).view(batch, length, self.num_heads, self.head_dim)
        key = self.k_proj(hidden).view(batch, length, self.num_kv_heads, self.head_dim)
        value = self.v_proj(hidden).view(batch, length, self.num_kv_heads, self.head_dim)
        query = apply_rope(query.transpose(1, 2), cos, sin)
        key = apply_rope(key.transpose(1, 2), cos, sin)
        value = value.transpose(1, 2)
        if past is not None:
            key = torch.cat([past[0], key], dim=-2)
            value = torch.cat([past[1], value], dim=-2)
        groups = self.num_heads // self.num_kv_heads
        keys, values = repeat_kv(key, groups), repeat_kv(value, groups)
        if query.device.type == "cuda" and mask is not None:  # the hub's SDPA workaround
            query, keys, values = query.contiguous(), keys.contiguous(), values.contiguous()
        out = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, is_causal=False)
        out = out.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_dim)
        return self.o_proj(out), (key, value)


class DreamDecoderLayer(nn.Module):
    def __init__(self, config: DreamConfig):
        super().__init__()
        self.self_attn = DreamAttention(config)
        self.mlp = DreamMLP(config)
        self.input_layernorm = DreamRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = DreamRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden, cos, sin, mask, past):
        attended, present = self.self_attn(self.input_layernorm(hidden), cos, sin, mask, past)
        hidden = hidden + attended
        hidden = hidden + self.mlp(self.post_attention_layernorm(hidden))
        return hidden, present


class DreamPreTrainedModel(PreTrainedModel):
    config: DreamConfig
    config_class = DreamConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = False
    _no_split_modules = ["DreamDecoderLayer"]
    _skip_keys_device_placement = "past_key_values"
    _supports_sdpa = True


class DreamBaseModel(DreamPreTrainedModel):
    """Embeddings, decoder layers and final norm (the hub's `model.` prefix)."""

    def __init__(self, config: DreamConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(
            DreamDecoderLayer(config) for _ in range(config.num_hidden_layers)
        )
        self.norm = DreamRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.Tensor,
        mask: torch.Tensor | None,
        positions: torch.Tensor,
        past: KeyValues | None,
    ) -> tuple[torch.Tensor, KeyValues]:
        hidden = self.embed_tokens(input_ids)
        head_dim = self.config.hidden_size // self.config.num_attention_heads
        theta = self.config.rope_parameters["rope_theta"]
        cos, sin = rope_cos_sin(theta, head_dim, positions, hidden.dtype)
        presents = []
        for index, layer in enumerate(self.layers):
            hidden, present = layer(hidden, cos, sin, mask, None if past is None else past[index])
            presents.append(present)
        return self.norm(hidden), tuple(presents)


class DreamModel(DreamPreTrainedModel):
    """The hub's `DreamModel` (AutoModel): the base model plus an untied lm_head."""

    def __init__(self, config: DreamConfig):
        super().__init__(config)
        self.model = DreamBaseModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: KeyValues | list | None = None,
        use_cache: bool = False,
        **kwargs,
    ) -> DreamOutput:
        """input_ids [B, Q]; attention_mask None (every query reads every key) or bool
        [B or 1, 1, Q, P + Q] (True: may read); position_ids [B or 1, Q] (None: P .. P+Q-1);
        past_key_values per-layer (k, v) [B, kv_heads, P, head_dim]."""
        past = self._checked_past(past_key_values)
        start = 0 if past is None else past[0][0].shape[-2]
        length = input_ids.shape[1]
        self._check_mask(attention_mask, length, start + length)
        if position_ids is None:
            position_ids = torch.arange(start, start + length, device=input_ids.device)[None]
        hidden, presents = self.model(input_ids, attention_mask, position_ids, past)
        return DreamOutput(logits=self.lm_head(hidden), cache=presents if use_cache else None)

    def _checked_past(self, past: KeyValues | list | None) -> KeyValues | None:
        if past is None or len(past) == 0:
            return None
        if len(past) != self.config.num_hidden_layers:
            raise ValueError(
                f"past_key_values has {len(past)} layers; the model has "
                f"{self.config.num_hidden_layers}"
            )
        return tuple((k, v) for k, v in past)

    @staticmethod
    def _check_mask(mask: torch.Tensor | None, queries: int, keys: int) -> None:
        if mask is None:
            return
        if mask.dtype != torch.bool:
            raise ValueError(f"attention_mask must be bool (True: may read), got {mask.dtype}")
        if mask.dim() != 4 or mask.shape[-2:] != (queries, keys):
            raise ValueError(
                f"attention_mask must be [B or 1, 1, {queries}, {keys}], got {tuple(mask.shape)}"
            )


AutoConfig.register(DreamConfig.model_type, DreamConfig)
AutoModel.register(DreamConfig, DreamModel)
