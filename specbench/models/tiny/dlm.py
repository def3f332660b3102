"""tiny-dlm: a small masked-diffusion LM with two attention forms.

* bidirectional (MDLM's contract): every position attends to every position;
* block-causal (as block-diffusion LMs, SDAR and BD3-LM, do): a clean prefix attends causally,
  a block of noisy positions attends to the whole prefix and bidirectionally within itself, so
  the prefix's KV cache is exact and a draft step is a forward over the block alone.

Outputs follow MDLM's SUBS parameterisation: the mask token gets no probability and an unmasked
input position predicts itself. Like Dream, position i is predicted from the hidden state at
i - 1 (the right shift): the first position after a clean prefix is then read from exactly the
state an AR model predicts its next token from, which is what makes initialising from an AR model
pay (Dream, Ye et al. 2025). Registered with transformers' Auto classes, so
`AutoModel.from_pretrained(dir)` loads it once specbench is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.utils import ModelOutput

KV = list[tuple[torch.Tensor, torch.Tensor]]


class TinyDLMConfig(PretrainedConfig):
    model_type = "specbench-tiny-dlm"

    def __init__(
        self,
        vocab_size: int = 4096,
        hidden_size: int = 256,
        num_hidden_layers: int = 4,
        num_attention_heads: int = 4,
        intermediate_size: int = 688,
        max_position_embeddings: int = 1024,
        rope_theta: float = 10000.0,
        rms_norm_eps: float = 1e-6,
        mask_token_id: int = 2,
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
        self.mask_token_id = mask_token_id
        kwargs.setdefault("tie_word_embeddings", True)
        super().__init__(**kwargs)


@dataclass
class PrefixCache:
    """A clean prefix's keys and values, and the final hidden state of its last position: the
    state that predicts the first position after it."""

    kv: KV
    last: torch.Tensor


@dataclass
class TinyDLMOutput(ModelOutput):
    logits: torch.Tensor | None = None
    cache: PrefixCache | None = None


def rotary(positions: torch.Tensor, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, device=positions.device).float() / dim)
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Layer(nn.Module):
    def __init__(self, c: TinyDLMConfig):
        super().__init__()
        self.heads, self.head_dim = c.num_attention_heads, c.hidden_size // c.num_attention_heads
        self.attn_norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.qkv = nn.Linear(c.hidden_size, 3 * c.hidden_size, bias=False)
        self.out = nn.Linear(c.hidden_size, c.hidden_size, bias=False)
        self.mlp_norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.gate = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x, cos, sin, mask, past):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, n, 3, self.heads, self.head_dim).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(attn.transpose(1, 2).reshape(b, n, -1))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h)), (k, v)


class TinyDLM(PreTrainedModel):
    config_class = TinyDLMConfig
    base_model_prefix = "dlm"
    _tied_weights_keys = {"lm_head.weight": "embed.weight"}

    def __init__(self, config: TinyDLMConfig):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor,
        kv: KV | None = None,
    ) -> tuple[torch.Tensor, KV]:
        """Final (normed) hidden states, unshifted, and every layer's keys and values."""
        head_dim = self.config.hidden_size // self.config.num_attention_heads
        x = self.embed(input_ids)
        cos, sin = (t.to(x.dtype) for t in rotary(position_ids, head_dim, self.config.rope_theta))
        new_kv: KV = []
        for i, layer in enumerate(self.layers):
            x, layer_kv = layer(x, cos, sin, attention_mask, kv[i] if kv else None)
            new_kv.append(layer_kv)
        return self.norm(x), new_kv

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: PrefixCache | None = None,
        use_cache: bool = False,
        subs: bool = True,
        cache_upto: int | None = None,
    ) -> TinyDLMOutput:
        """`attention_mask` is a boolean [queries, keys] matrix (True = may attend), None for
        full attention; keys are the cached positions followed by `input_ids`. Logits are
        aligned with `input_ids`; without a cache the first position has no predecessor and is
        read from its own state (in use it is always a clean prompt token). With `cache_upto`,
        the returned cache keeps only the first `cache_upto` inputs: clean tokens fed together
        with a noisy block after them, so one forward both extends the prefix and denoises."""
        offset = cache.kv[0][0].shape[2] if cache else 0
        if position_ids is None:
            position_ids = torch.arange(
                offset, offset + input_ids.shape[1], device=input_ids.device
            )
        hidden, kv = self.hidden_states(
            input_ids, attention_mask, position_ids, cache.kv if cache else None
        )
        before = cache.last if cache else hidden[:, :1]
        logits = self.lm_head(torch.cat([before, hidden[:, :-1]], dim=1))
        if subs:
            logits = subs_parameterise(logits, input_ids, self.config.mask_token_id)
        new_cache = None
        if use_cache:
            keep = input_ids.shape[1] if cache_upto is None else cache_upto
            kept = [(k[:, :, : offset + keep], v[:, :, : offset + keep]) for k, v in kv]
            new_cache = PrefixCache(kv=kept, last=hidden[:, keep - 1 : keep])
        return TinyDLMOutput(logits=logits, cache=new_cache)

    def training_logits(self, x_t: torch.Tensor, x: torch.Tensor, block: int) -> torch.Tensor:
        """Logits for every position of the noisy `x_t`, each block seeing the clean `x` before
        it, in one forward over [x_t ; x] (BD3-LM's vectorised form). A block's first position
        is read from the clean state before the block, as in inference; the sequence's first
        position has none and reads its own."""
        length = x.shape[1]
        hidden, _ = self.hidden_states(
            torch.cat([x_t, x], 1),
            vectorised_training_mask(length, block, device=x.device),
            torch.arange(length, device=x.device).repeat(2),
        )
        noisy, clean = hidden[:, :length], hidden[:, length:]
        before = torch.cat([noisy[:, :1], noisy[:, :-1]], dim=1)
        starts = torch.arange(block, length, block, device=x.device)
        before[:, starts] = clean[:, starts - 1]
        return self.lm_head(before)


def subs_parameterise(logits: torch.Tensor, input_ids: torch.Tensor, mask_id: int) -> torch.Tensor:
    """No mass on the mask token; a position whose input is not the mask copies its input."""
    logits = logits.float().clone()
    logits[..., mask_id] = float("-inf")
    clean = input_ids != mask_id
    copy = torch.full_like(logits, float("-inf")).scatter(-1, input_ids.unsqueeze(-1), 0.0)
    return torch.where(clean.unsqueeze(-1), copy, logits)


def block_causal_mask(
    prefix_len: int, total: int, device: torch.device | None = None
) -> torch.Tensor:
    """Prefix positions attend causally; the block after them attends to everything."""
    i = torch.arange(total, device=device)[:, None]
    j = torch.arange(total, device=device)[None, :]
    return (j <= i) | (i >= prefix_len)


def vectorised_training_mask(
    length: int, block: int, device: torch.device | None = None
) -> torch.Tensor:
    """For the input [noisy x_t ; clean x] (2 x length): clean tokens attend causally to clean
    tokens; a noisy token attends to its own noisy block and to every clean token before the
    block starts. One forward then trains every block of the sequence at once (BD3-LM)."""
    i = torch.arange(length, device=device)
    noisy_block = i[:, None] // block == i[None, :] // block
    noisy_to_clean = i[None, :] < (i[:, None] // block) * block
    clean_causal = i[None, :] <= i[:, None]
    top = torch.cat([noisy_block, noisy_to_clean], dim=1)
    bottom = torch.cat(
        [torch.zeros(length, length, dtype=torch.bool, device=device), clean_causal], dim=1
    )
    return torch.cat([top, bottom], dim=0)


@torch.no_grad()
def from_causal(causal: PreTrainedModel, mask_token_id: int) -> TinyDLM:
    """A TinyDLM holding a Llama-architecture causal LM's weights. With a causal mask its logit
    at position i is exactly the causal LM's at i - 1, so diffusion training starts from a good
    prefix encoder and next-token predictor (Dream was initialised from Qwen2.5 the same way)."""
    c = causal.config
    dlm = TinyDLM(
        TinyDLMConfig(
            vocab_size=c.vocab_size,
            hidden_size=c.hidden_size,
            num_hidden_layers=c.num_hidden_layers,
            num_attention_heads=c.num_attention_heads,
            intermediate_size=c.intermediate_size,
            max_position_embeddings=c.max_position_embeddings,
            rope_theta=c.rope_parameters["rope_theta"],
            rms_norm_eps=c.rms_norm_eps,
            mask_token_id=mask_token_id,
        )
    )
    src = causal.model
    dlm.embed.weight.copy_(src.embed_tokens.weight)
    dlm.norm.weight.copy_(src.norm.weight)
    for mine, theirs in zip(dlm.layers, src.layers):
        attn, mlp = theirs.self_attn, theirs.mlp
        mine.qkv.weight.copy_(
            torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        )
        mine.out.weight.copy_(attn.o_proj.weight)
        mine.attn_norm.weight.copy_(theirs.input_layernorm.weight)
        mine.mlp_norm.weight.copy_(theirs.post_attention_layernorm.weight)
        mine.gate.weight.copy_(mlp.gate_proj.weight)
        mine.up.weight.copy_(mlp.up_proj.weight)
        mine.down.weight.copy_(mlp.down_proj.weight)
    dlm.tie_weights()
    return dlm


AutoConfig.register(TinyDLMConfig.model_type, TinyDLMConfig)
AutoModel.register(TinyDLMConfig, TinyDLM)
