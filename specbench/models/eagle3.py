"""EAGLE-3's drafter (Li, Wei, Zhang, Zhang 2025, arXiv 2503.01840), written from its authors'
code (SafeAILab/EAGLE, `eagle/model/cnets.py`) and read from either published layout:

- EAGLE's own (e.g. `yuhuili/EAGLE3-LLaMA3.1-Instruct-8B`): a Llama config.json with
  `draft_vocab_size`, weights `fc.weight`, `midlayer.*`, `norm.weight`, `lm_head.weight`,
  `d2t`, `t2d` in pytorch_model.bin or model.safetensors, no embeddings (it reads the target's);
- vLLM's `speculators` format: `speculators_model_type: eagle3`, the Llama settings under
  `transformer_layer_config`, the layer as `layers.0.*`, `embed_tokens.weight` optional,
  `norm_before_residual`, `eagle_aux_hidden_state_layer_ids`.

The model: the target's hidden states entering three of its decoder layers (low, middle, high),
concatenated and fused by `fc` (3 x target hidden -> hidden); one decoder layer whose attention
reads [norm(embedding of the next token) ; norm(hidden)] (2 x hidden wide), its residual the
un-normed hidden (`norm_before_residual` normalises it first); its own final norm and an LM
head over a draft vocabulary, draft id d being target id d + d2t[d] (`t2d` marks the target ids
the draft vocabulary holds). Drafter position p pairs the target's state at position p with
the token at p + 1 and predicts the token at p + 2; drafting further feeds back the layer's own
output state (before the final norm), one position on.

Which target layers: `eagle_aux_hidden_state_layer_ids` where the checkpoint names them, else
upstream's rule (`modeling_llama_kv.py`): the inputs of layers 2, n // 2 and n - 3 of n. An
id i is the input of decoder layer i, the output of layer i - 1 (`hidden_layers` here).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import (
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

from specbench.models.rotary import cast

SPECULATORS_LAYER = "layers.0."
EAGLE_LAYER = "midlayer."


def is_speculators(raw: dict) -> bool:
    """vLLM's speculators layout: the Llama settings nested, the algorithm named."""
    return raw.get("speculators_model_type") == "eagle3"


def eagle3_config(raw: dict) -> LlamaConfig:
    """A checkpoint's config.json, of either layout, as one Llama config carrying EAGLE-3's own
    keys: `draft_vocab_size`, `target_hidden_size`, `norm_before_residual`, `aux_layer_ids`."""
    settings = dict(raw.get("transformer_layer_config", {})) if is_speculators(raw) else dict(raw)
    for key in ("architectures", "model_type", "torch_dtype", "dtype", "transformers_version"):
        settings.pop(key, None)
    config = LlamaConfig(**settings)
    config.draft_vocab_size = raw.get("draft_vocab_size") or config.vocab_size
    config.target_hidden_size = raw.get("target_hidden_size") or config.hidden_size
    # speculators' own default is False, as upstream's layer (residual before the norm)
    config.norm_before_residual = bool(raw.get("norm_before_residual", False))
    config.aux_layer_ids = raw.get("eagle_aux_hidden_state_layer_ids")
    return config


def aux_layer_ids(config: LlamaConfig, target_layers: int) -> list[int]:
    """The target layers whose inputs EAGLE-3 fuses: the checkpoint's, else upstream's rule."""
    if config.aux_layer_ids:
        return list(config.aux_layer_ids)
    return [2, target_layers // 2, target_layers - 3]


def target_reads(config: LlamaConfig, target: nn.Module) -> tuple[int, ...]:
    """The layers of `target` (a transformers model) whose outputs it reads: upstream's ids
    name a layer's input, which is the output of the layer before."""
    layers = target.config.get_text_config().num_hidden_layers
    return tuple(i - 1 for i in aux_layer_ids(config, layers))


class Eagle3Attention(nn.Module):
    """Llama attention whose queries, keys and values are projected from 2 x hidden features;
    `visible` says which key each query reads, so one call serves a chain, a tree and the
    training-time test alike."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        width, bias = 2 * config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(width, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=bias)

    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        visible: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x [b, n, 2h]; `visible` [b or 1, n, past + n] bool over the past keys then these.
        Returns the output and these positions' (keys, values), rotated, for a cache."""
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rotary
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        keys = k if past is None else torch.cat([past[0], k], -2)
        values = v if past is None else torch.cat([past[1], v], -2)
        out = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=visible[:, None], enable_gqa=self.heads != self.kv_heads
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1)), (k, v)


class Eagle3Layer(nn.Module):
    """The drafter's one decoder layer (upstream's `LlamaDecoderLayeremb`)."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        eps = config.rms_norm_eps
        self.norm_before_residual = config.norm_before_residual
        self.hidden_norm = LlamaRMSNorm(config.hidden_size, eps=eps)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=eps)
        self.self_attn = Eagle3Attention(config)
        self.mlp = LlamaMLP(config)

    def forward(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        visible: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        normed = self.hidden_norm(hidden)
        residual = normed if self.norm_before_residual else hidden
        x = torch.cat([self.input_layernorm(embeds), normed], -1)
        attended, kv = self.self_attn(x, rotary, visible, past)
        state = residual + attended
        return state + self.mlp(self.post_attention_layernorm(state)), kv


class Eagle3Drafter(nn.Module):
    """fc, the layer, the final norm and the draft-vocabulary head; `embedding` is its own
    `embed_tokens` where the checkpoint has one, else the target's (bound by the method)."""

    def __init__(self, config: LlamaConfig, own_embedding: bool = False, fc_bias: bool = False):
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, hidden) if own_embedding else None
        self.fc = nn.Linear(3 * config.target_hidden_size, hidden, bias=fc_bias)
        self.midlayer = Eagle3Layer(config)
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, config.draft_vocab_size, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(config)
        self.mapped = config.draft_vocab_size != config.vocab_size
        if self.mapped:
            self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
            self.register_buffer("t2d", torch.zeros(config.vocab_size, dtype=torch.bool))
        self.embedding: torch.Tensor | None = None  # the target's, where it has none

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        weight = self.embed_tokens.weight if self.embed_tokens is not None else self.embedding
        assert weight is not None, "an EAGLE-3 checkpoint without embed_tokens reads the target's"
        return F.embedding(ids, weight)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """The target's three layers' states [.., 3 x target hidden] -> [.., hidden]."""
        return self.fc(features)

    def forward(
        self,
        ids: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        visible: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """ids [b, n] (target ids), hidden [b, n, hidden] (fused target states or the
        drafter's own), positions [b, n]: the layer's output states (before the final norm,
        what drafting feeds back) and these positions' keys and values."""
        rotary = self.rotary_emb(hidden, positions)
        return self.midlayer(self.embed(ids).to(hidden.dtype), hidden, rotary, visible, past)

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits of output states."""
        return self.lm_head(self.norm(states))

    def target_logits(self, states: torch.Tensor) -> torch.Tensor:
        """Logits over the target's vocabulary: each draft id's at its target id, -inf at the
        ids the draft vocabulary lacks."""
        draft = self.logits(states)
        if not self.mapped:
            return draft
        full = draft.new_full((*draft.shape[:-1], self.config.vocab_size), float("-inf"))
        targets = torch.arange(self.config.draft_vocab_size, device=draft.device) + self.d2t
        return full.index_copy(-1, targets, draft)

    def target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids] if self.mapped else draft_ids


def read_state(directory: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, else pytorch_model.bin (EAGLE's own releases ship the latter)."""
    if (directory / "model.safetensors").exists():
        return load_file(directory / "model.safetensors")
    return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)


def drafter_state(state: dict[str, torch.Tensor], mapped: bool) -> dict[str, torch.Tensor]:
    """A checkpoint's tensors under this module's names: speculators' `layers.0.` is upstream's
    `midlayer.`; a draft vocabulary that is the target's needs no maps (upstream drops them)."""
    renamed = {key.replace(SPECULATORS_LAYER, EAGLE_LAYER): value for key, value in state.items()}
    if not mapped:
        renamed.pop("d2t", None)
        renamed.pop("t2d", None)
    return renamed


def load_eagle3(directory: Path) -> Eagle3Drafter:
    """An EAGLE-3 checkpoint of either layout from a local directory, in its stored dtype, its
    rotary frequencies float32 (as upstream's and transformers' are, in any dtype)."""
    config = eagle3_config(json.loads((directory / "config.json").read_text()))
    state = drafter_state(read_state(directory), config.draft_vocab_size != config.vocab_size)
    model = Eagle3Drafter(config, "embed_tokens.weight" in state, "fc.bias" in state)
    model.load_state_dict(state, strict=True)
    dtype = state["fc.weight"].dtype
    return cast(model, dtype).eval()


def save_eagle3(
    model: Eagle3Drafter, out: Path, speculators: bool = False, extra: dict[str, Any] | None = None
) -> None:
    """Write `model` as its authors publish it (config.json + model.safetensors), or in the
    speculators layout; `extra` adds config keys (the target layers it reads, its verifier)."""
    out.mkdir(parents=True, exist_ok=True)
    config = model.config
    llama = {
        key: value
        for key, value in config.to_diff_dict().items()
        if key not in ("draft_vocab_size", "target_hidden_size", "norm_before_residual")
        and key != "aux_layer_ids"
    }
    rope = llama.pop("rope_parameters", {})  # as transformers 4 and vLLM read it
    llama["rope_theta"] = rope.get("rope_theta", 10000.0)
    if rope.get("rope_type", "default") != "default":
        llama["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    eagle = {"draft_vocab_size": config.draft_vocab_size}
    if config.target_hidden_size != config.hidden_size:
        eagle["target_hidden_size"] = config.target_hidden_size
    if config.aux_layer_ids:
        eagle["eagle_aux_hidden_state_layer_ids"] = list(config.aux_layer_ids)
    if speculators:
        raw = {
            "speculators_model_type": "eagle3",
            "architectures": ["Eagle3Speculator"],
            "transformer_layer_config": {**llama, "model_type": "llama"},
            "norm_before_residual": config.norm_before_residual,
            **eagle,
            **(extra or {}),
        }
    else:
        raw = {**llama, "architectures": ["LlamaForCausalLMEagle3"], **eagle, **(extra or {})}
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    prefix = SPECULATORS_LAYER if speculators else EAGLE_LAYER
    state = {
        key.replace(EAGLE_LAYER, prefix): value.contiguous()
        for key, value in model.state_dict().items()
    }
    save_file(state, out / "model.safetensors", metadata={"format": "pt"})
