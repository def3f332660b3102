"""MDLM (Sahoo et al. 2024; kuleshov-group/mdlm-owt) as a native transformers-5 model.

The hub checkpoint (model_type "mdlm", class `MDLM`) holds `backbone`, the DiT of
kuleshov-group/mdlm models/dit.py: `vocab_embed.embedding` (a bare parameter), `sigma_map`
(the sinusoidal timestep MLP), `rotary_emb` (RoPE, split halves, base 10000), `blocks.N` (adaLN
DiT blocks: norm1, attn_qkv, attn_out, norm2, mlp, adaLN_modulation) and `output_layer`
(norm_final, linear, adaLN_modulation). Attention is bidirectional; this class adds the
shared native interface (4-D boolean masks, explicit positions, a per-layer (k, v) cache).

Numerics follow upstream. Its blocks run under `torch.cuda.amp.autocast(bfloat16)`: on a GPU
even a float32 load computes every linear layer in bfloat16 (logits come out bfloat16) while the
residual stream, the layer norms (`F.layer_norm(x.float())`, no eps, no bias) and the timestep
embedding stay float32; on a CPU everything is float32. Here a float32 model does the same
(`config.cuda_bf16_autocast`, default true, turns the GPU autocast off when false), and a
bfloat16 (or float16) load always runs that mixed recipe: a float32 residual stream and timestep
MLP, half-precision matmuls, float32 layer norms and RoPE arithmetic. Upstream cannot be loaded
in bfloat16 at all (its timestep MLP gets float32 input), so that is the recipe of its GPU run
with rounded weights.

`timesteps` is sigma, one per row; with `time_conditioning` false (MDLM-OWT) it is replaced by
zeros as the hub file does, and may be omitted.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    PreTrainedConfig,
    PreTrainedModel,
)
from transformers.utils import ModelOutput

FREQUENCY_EMBEDDING_SIZE = 256  # TimestepEmbedder's sinusoid width
ROPE_BASE = 10_000

# Config keys of sibling hub classes (BD3LM, UDLM) that change the architecture; a checkpoint
# that sets any of them to something other than the value here is not MDLM-OWT's DiT.
PLAIN_VALUES = {"adaln": True, "cross_attn": False, "block_size": None, "cfg": False}


class MDLMConfig(PreTrainedConfig):
    model_type = "mdlm"

    def __init__(
        self,
        vocab_size: int = 50258,
        model_length: int = 1024,
        hidden_dim: int = 768,
        cond_dim: int = 128,
        n_blocks: int = 12,
        n_heads: int = 12,
        dropout: float = 0.1,
        time_conditioning: bool = False,
        cuda_bf16_autocast: bool = True,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.model_length = model_length
        self.hidden_dim = hidden_dim
        self.cond_dim = cond_dim
        self.n_blocks = n_blocks
        self.n_heads = n_heads
        self.dropout = dropout
        self.time_conditioning = time_conditioning
        self.cuda_bf16_autocast = cuda_bf16_autocast
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)


def check_supported(config: MDLMConfig) -> None:
    """One ValueError line for a checkpoint this class would silently compute wrong."""
    for key, plain in PLAIN_VALUES.items():
        value = getattr(config, key, plain)
        if value != plain:
            raise ValueError(
                f"mdlm config {key}={value!r} is not supported: the native MDLM is the "
                f"bidirectional adaLN DiT of mdlm-owt ({key} must be {plain!r} or absent)"
            )
    if config.hidden_dim % config.n_heads or (config.hidden_dim // config.n_heads) % 2:
        raise ValueError(
            f"mdlm config hidden_dim={config.hidden_dim}, n_heads={config.n_heads} is not "
            "supported: hidden_dim / n_heads must be an even integer (the RoPE head size)"
        )


@dataclass
class MDLMOutput(ModelOutput):
    """transformers 5 names a model output's cache `cache` (its ModelOutput renames a
    `past_key_values` argument to it); `past_key_values` reads the same per-layer (k, v)."""

    logits: torch.Tensor | None = None
    cache: tuple[tuple[torch.Tensor, torch.Tensor], ...] | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None

    @property
    def past_key_values(self) -> tuple[tuple[torch.Tensor, torch.Tensor], ...] | None:
        return self.cache


class LayerNorm(nn.Module):
    """Upstream's: float32 normalisation without eps override or bias, then the weight."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            x = F.layer_norm(x.float(), [self.dim])
        return x * self.weight[None, None, :]


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


def gated_residual(x, gate, residual, p: float, training: bool) -> torch.Tensor:
    """upstream's bias_dropout_add_scale without a bias: residual + gate * dropout(x)."""
    return residual + gate * F.dropout(x, p=p, training=training)


def rope_cos_sin(position_ids: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 cos/sin [B or 1, Q, head_dim / 2] at the given positions (upstream's Rotary)."""
    exponents = torch.arange(0, head_dim, 2, device=position_ids.device).float() / head_dim
    inv_freq = 1.0 / (ROPE_BASE**exponents)
    freqs = position_ids.float()[..., None] * inv_freq
    return freqs.cos(), freqs.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, Q, H, D] rotated by split halves as flash-attn's kernel does: cos/sin first rounded
    to x's dtype (upstream's `.to(qkv.dtype)`), the arithmetic in float32, the result in x's."""
    half = cos.shape[-1]
    cos = cos.to(x.dtype).float()[:, :, None, :]
    sin = sin.to(x.dtype).float()[:, :, None, :]
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class TimestepEmbedder(nn.Module):
    """sigma [B] -> [B, cond_dim]; always float32 (upstream runs it outside the autocast)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(FREQUENCY_EMBEDDING_SIZE, hidden_size, bias=True),
            nn.SiLU(),
            nn.Linear(hidden_size, hidden_size, bias=True),
        )

    @staticmethod
    def timestep_embedding(t: torch.Tensor, dim: int, max_period: int = 10000) -> torch.Tensor:
        half = dim // 2
        freqs = torch.exp(
            -math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half
        ).to(device=t.device)
        args = t[:, None].float() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        first, act, second = self.mlp
        x = self.timestep_embedding(t, FREQUENCY_EMBEDDING_SIZE)
        x = F.linear(x, first.weight.float(), first.bias.float())
        return F.linear(act(x), second.weight.float(), second.bias.float())


class EmbeddingLayer(nn.Module):
    """The hub's bare `embedding` parameter; `weight` and `num_embeddings` let generic code read
    its device and vocabulary size as from an nn.Embedding."""

    def __init__(self, dim: int, vocab_dim: int):
        super().__init__()
        self.embedding = nn.Parameter(torch.empty(vocab_dim, dim))

    @property
    def weight(self) -> nn.Parameter:
        return self.embedding

    @property
    def num_embeddings(self) -> int:
        return self.embedding.shape[0]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding[ids]


class DDiTBlock(nn.Module):
    def __init__(self, dim: int, n_heads: int, cond_dim: int, dropout: float, mlp_ratio: int = 4):
        super().__init__()
        self.n_heads, self.dropout = n_heads, dropout
        self.norm1 = LayerNorm(dim)
        self.attn_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.attn_out = nn.Linear(dim, dim, bias=False)
        self.norm2 = LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_ratio * dim, bias=True),
            nn.GELU(approximate="tanh"),
            nn.Linear(mlp_ratio * dim, dim, bias=True),
        )
        self.adaLN_modulation = nn.Linear(cond_dim, 6 * dim, bias=True)

    def forward(self, x, c, cos, sin, mask, past):
        """x [B, Q, dim] (float32 residual stream); returns it and this layer's (k, v)."""
        batch, length, dim = x.shape
        modulation = self.adaLN_modulation(c)[:, None].chunk(6, dim=2)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = modulation
        qkv = self.attn_qkv(modulate(self.norm1(x), shift_msa, scale_msa))
        q, k, v = qkv.view(batch, length, 3, self.n_heads, dim // self.n_heads).unbind(2)
        with torch.autocast(x.device.type, enabled=False):
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, Q, D]
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        attn = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask)
        attn = attn.transpose(1, 2).reshape(batch, length, dim)
        x = gated_residual(self.attn_out(attn), gate_msa, x, self.dropout, self.training)
        mlp = self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
        return gated_residual(mlp, gate_mlp, x, self.dropout, self.training), (k, v)


class DDitFinalLayer(nn.Module):
    def __init__(self, hidden_size: int, out_channels: int, cond_dim: int):
        super().__init__()
        self.norm_final = LayerNorm(hidden_size)
        self.linear = nn.Linear(hidden_size, out_channels)
        self.adaLN_modulation = nn.Linear(cond_dim, 2 * hidden_size, bias=True)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c)[:, None].chunk(2, dim=2)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class DITBackbone(nn.Module):
    def __init__(self, config: MDLMConfig):
        super().__init__()
        self.vocab_embed = EmbeddingLayer(config.hidden_dim, config.vocab_size)
        self.sigma_map = TimestepEmbedder(config.cond_dim)
        self.blocks = nn.ModuleList(
            DDiTBlock(config.hidden_dim, config.n_heads, config.cond_dim, config.dropout)
            for _ in range(config.n_blocks)
        )
        self.output_layer = DDitFinalLayer(config.hidden_dim, config.vocab_size, config.cond_dim)


class MDLM(PreTrainedModel):
    config_class = MDLMConfig
    base_model_prefix = "mdlm"
    main_input_name = "input_ids"
    _no_split_modules = ["DDiTBlock"]
    _supports_sdpa = True
    # upstream's Rotary stores inv_freq; it is recomputed here in float32 from the head size
    _keys_to_ignore_on_load_unexpected = [r"rotary_emb\.inv_freq"]

    def __init__(self, config: MDLMConfig):
        check_supported(config)
        super().__init__(config)
        self.backbone = DITBackbone(config)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """Only for weights a checkpoint lacks: upstream's zero adaLN/output, unit norms."""
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, LayerNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, EmbeddingLayer):
            nn.init.kaiming_uniform_(module.embedding, a=math.sqrt(5))

    def get_input_embeddings(self) -> EmbeddingLayer:
        return self.backbone.vocab_embed

    def get_output_embeddings(self) -> nn.Linear:
        return self.backbone.output_layer.linear

    def _autocast(self, device: torch.device):
        """Upstream's bfloat16 autocast around the blocks: always for a half-precision load,
        for a float32 one only on CUDA (where upstream's `torch.cuda.amp.autocast` acts)."""
        dtype = self.backbone.output_layer.linear.weight.dtype
        if dtype in (torch.bfloat16, torch.float16):
            return torch.autocast(device.type, dtype=dtype)
        if device.type == "cuda" and self.config.cuda_bf16_autocast:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()

    def _sigma(self, timesteps: torch.Tensor | None, input_ids: torch.Tensor) -> torch.Tensor:
        """sigma [B] float32: zeros without time conditioning (the hub's zeros_like)."""
        rows = input_ids.shape[0]
        if not self.config.time_conditioning:
            return torch.zeros(rows, device=input_ids.device)
        if timesteps is None:
            raise ValueError("this MDLM is time-conditioned: pass timesteps (sigma, one per row)")
        sigma = torch.as_tensor(timesteps, device=input_ids.device).float().reshape(-1)
        return sigma.expand(rows) if sigma.numel() == 1 else sigma

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values=None,
        use_cache: bool = False,
        timesteps: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool | None = None,
    ) -> MDLMOutput:
        """The result always carries `.logits` (`return_dict` is ignored): mdlm-owt's config
        says `return_dict: false`, which made the hub class return a bare tensor."""
        if attention_mask is not None and (
            attention_mask.dtype != torch.bool or attention_mask.dim() != 4
        ):
            raise ValueError(
                "attention_mask must be a bool [B or 1, 1, Q, P + Q] tensor; "
                "pass MDLM's sigma as timesteps="
            )
        past_length = past_key_values[0][0].shape[2] if past_key_values else 0
        if position_ids is None:
            position_ids = torch.arange(
                past_length, past_length + input_ids.shape[1], device=input_ids.device
            )[None]
        backbone = self.backbone
        c = F.silu(backbone.sigma_map(self._sigma(timesteps, input_ids)))
        cos, sin = rope_cos_sin(position_ids, self.config.hidden_dim // self.config.n_heads)
        x = backbone.vocab_embed(input_ids).float()
        hidden, cache = [x], []
        with self._autocast(input_ids.device):
            for i, block in enumerate(backbone.blocks):
                past = past_key_values[i] if past_key_values else None
                x, kv = block(x, c, cos, sin, attention_mask, past)
                cache.append(kv)
                hidden.append(x)
            logits = backbone.output_layer(x, c)
        return MDLMOutput(
            logits=logits,
            cache=tuple(cache) if use_cache else None,
            hidden_states=tuple(hidden) if output_hidden_states else None,
        )


AutoConfig.register(MDLMConfig.model_type, MDLMConfig, exist_ok=True)
AutoModel.register(MDLMConfig, MDLM, exist_ok=True)
AutoModelForMaskedLM.register(MDLMConfig, MDLM, exist_ok=True)
