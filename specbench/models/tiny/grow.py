"""The xl world: the tiny world's checkpoints grown 14-140x in parameters without changing what
they compute, so every drafter trained for the tiny world keeps its acceptance and only the cost
of a target forward changes (a 124M-parameter target at batch 1 on a CPU is bound by reading its
weights, as a 7-8B target is on a GPU; the 8.7M `tiny` is bound by per-call overhead).

The growth is function-preserving, in four parts:

- **wider residual stream** (d -> D = width x d): every source coordinate i is spread over its
  own group of `width` grown coordinates along a random vector u_i of norm sqrt(width) (the
  groups interleaved by a random permutation). With Q = [u_1 ... u_d] (D x d, Q^T Q = width I)
  the grown stream Q x has the source's RMS, so every RMSNorm divides by what the source's
  divides by, with the same eps; its weight, constant on each group, commutes with Q (the grown
  weight is the source's repeated over the group). A linear that reads the stream becomes
  W Q^T / width, one that writes it Q W, the embeddings E Q^T; the final norm, whose output a
  tied head reads through the embeddings, is divided by the width. So a tied head stays tied,
  and a drafter that uses the target's embeddings and head (DFlash) reads them unchanged. A
  dense random rotation of the stream (SliceGPT/QuaRot's computational invariance) would be
  exact for the target alone, but not for a drafter that shares its head: the norm weights
  would have to be folded into the head, which the drafter's own final norm no longer matches.
- **more heads** (Net2Net): every head becomes `heads` copies; copy c scales its queries by t_c
  and keys by 1 / t_c (the same scores), its values by s_c and its output columns by
  a_c / s_c, with the shares a_c of a head summing to one.
- **wider MLP** (Net2Net): every neuron becomes `mlp` copies with the same gate row, its up
  row scaled by s_c and its down column by a_c / s_c.
- **more layers**: `depth - 1` new layers after every source layer, with dense random inputs
  and zero output projections, so each adds exactly nothing to the stream.

Every grown matrix except the new layers' output projections is dense (no zero padding): a
zero-padded stream would carry exact zeros in known coordinates and a compiler that folds
weights could skip them; here every coordinate and every weight carries signal, and bf16
rounds the grown model's sums as it rounds a real model's. The new layers' zero output
projections cost a dense matmul what any matrix costs (no kernel here inspects values).

The growth of a float32 model is exact up to the order of float32 sums (tests: logits within
`REORDERED`, the same greedy tokens). Grown checkpoints are built on first use from the committed
ones and cached under `$SPECBENCH_CACHE` keyed by the source checkpoint's and this module's
hashes; the presets load them in bfloat16. Two worlds are grown (docs/tiny-world.md):

- the **xl world** (`tiny-xl`, 192M parameters): built on the CPU and saved in float32;
- the **GPU world** (`tiny-8b`, 7.6B; `tiny-dlm-8b`, 7.0B): the cost shape of the papers' 7-8B
  targets, built in float32 on a CUDA device where there is one (a CPU would take an hour),
  checked there against its source, and saved in bfloat16 (15 GB, not 30). Its rehearsal
  (`tiny-8b-rehearsal`, ...) is the same code at a CPU's size.

Every build decodes a few tiny_code prompts greedily with the grown model in float32 and with its
source, and records in `growth.json` how many came out identical (`check`).
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import cached_property, partial
from itertools import chain
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from specbench import paths
from specbench.models.eagle3 import Eagle3Drafter, aux_layer_ids, load_eagle3, save_eagle3
from specbench.models.rotary import cast
from specbench.models.tiny.dlm import TinyDLM, TinyDLMConfig
from specbench.registry import register_builtin_model

Tensor = torch.Tensor


@dataclass(frozen=True)
class Growth:
    """Multiples of the source's shape: residual width, heads, MLP neurons, layers."""

    width: int
    heads: int
    mlp: int
    depth: int = 1
    seed: int = 0


@dataclass(frozen=True)
class Grown:
    """A built-in grown from a committed checkpoint, and how it is built and saved."""

    source: str  # the committed checkpoint it grows
    growth: Growth
    saved: torch.dtype = torch.float32  # the dtype of its saved weights
    on_gpu: bool = False  # built on a CUDA device where there is one
    task: str = "tiny_code"  # the world's task, whose first prompts check the growth


# The xl world: tiny-xl 192M parameters (tiny: 8.7M), tiny-dlm-xl 177M (tiny-dlm: 0.9M); the
# math world's target and its dLLM (adapted from it, the same shape) grown as tiny is.
MATH_XL = Growth(width=5, heads=5, mlp=5)
XL = {
    "tiny-xl": Grown("tiny", Growth(width=5, heads=5, mlp=5)),
    "tiny-dlm-xl": Grown("tiny-dlm", Growth(width=12, heads=12, mlp=12, depth=3)),
    "tiny-math-xl": Grown("tiny-math", MATH_XL, task="tiny_math"),
    "tiny-math-dlm-xl": Grown("tiny-math-dlm", MATH_XL, task="tiny_math"),
}
# The GPU world, multi-head attention as Llama-2-7B's and LLaDA-8B's: tiny-8b 7.56B parameters
# (d 4160, 65 heads of 64, MLP 11232, 36 layers: Qwen3-8B's depth), tiny-dlm-8b 7.03B (d 4096,
# 64 heads of 64, MLP 12384, 32 layers: LLaDA-8B's width and depth).
GPU_BUILD = {"saved": torch.bfloat16, "on_gpu": True}
GPU = {
    "tiny-8b": Grown("tiny", Growth(width=13, heads=13, mlp=13, depth=6), **GPU_BUILD),
    "tiny-dlm-8b": Grown("tiny-dlm", Growth(width=32, heads=32, mlp=36, depth=16), **GPU_BUILD),
}
# The GPU world's rehearsal: the same build, saving and presets at a size a CPU runs in seconds
# (the stream permuted and sign-flipped, one silent layer after each source layer).
REHEARSAL_GROWTH = Growth(width=1, heads=1, mlp=1, depth=2)
REHEARSAL = {
    "tiny-8b-rehearsal": Grown("tiny", REHEARSAL_GROWTH, **GPU_BUILD),
    "tiny-dlm-8b-rehearsal": Grown("tiny-dlm", REHEARSAL_GROWTH, **GPU_BUILD),
}
GROWN = {**XL, **GPU, **REHEARSAL}
# A drafter that reads a grown target's hidden states grows with the target's residual map.
WORLDS = {"xl": "tiny-xl", "8b": "tiny-8b", "8b-rehearsal": "tiny-8b-rehearsal"}
GROWN_DRAFTERS = {
    f"{drafter}-{world}": (drafter, target)
    for drafter in ("tiny-dflash", "tiny-eagle3")
    for world, target in WORLDS.items()
} | {f"tiny-math-{d}-xl": (f"tiny-math-{d}", "tiny-math-xl") for d in ("dflash", "eagle3")}


@dataclass(frozen=True)
class Residual:
    """Q (D x d): source coordinate i spread over the grown coordinates of group i, along a
    vector of norm sqrt(width) (Q^T Q = width I), so the grown stream's RMS is the source's."""

    group: Tensor  # [D] the source coordinate each grown coordinate carries
    vector: Tensor  # [D] its component of that coordinate's vector
    width: int

    @classmethod
    def draw(cls, d: int, width: int, seed: int) -> Residual:
        g = torch.Generator().manual_seed(seed)
        group = torch.arange(d).repeat_interleave(width)[torch.randperm(d * width, generator=g)]
        vector = torch.randn(d * width, generator=g, dtype=torch.float64)
        norms = torch.zeros(d, dtype=torch.float64).index_add_(0, group, vector**2).sqrt()
        return cls(group, vector / norms[group] * math.sqrt(width), width)

    @cached_property  # every read and write of a growth multiplies by the same Q
    def matrix(self) -> Tensor:
        q = torch.zeros(len(self.group), len(self.group) // self.width, dtype=torch.float64)
        q[torch.arange(len(self.group)), self.group] = self.vector
        return q

    def on(self, weight: Tensor) -> Tensor:
        """Q where `weight` lives (a GPU world grows on the GPU)."""
        return self.matrix.to(weight.device)

    def embed(self, weight: Tensor) -> Tensor:
        """Rows that are stream vectors (embeddings): [rows, d] -> [rows, D]."""
        return (weight.double() @ self.on(weight).T).to(weight.dtype)

    def read(self, weight: Tensor) -> Tensor:
        """A linear that reads the stream: [out, d] -> [out, D]."""
        return (weight.double() @ self.on(weight).T / self.width).to(weight.dtype)

    def write(self, weight: Tensor) -> Tensor:
        """A linear that writes the stream: [d, in] -> [D, in]."""
        return (self.on(weight) @ weight.double()).to(weight.dtype)

    def norm(self, weight: Tensor, head: bool = False) -> Tensor:
        """An RMSNorm's weight, the source's per group; before an LM head that reads the
        embeddings (tied, or a drafter's on the target's), divided by the width."""
        grown = weight.double()[self.group.to(weight.device)]
        return (grown / (self.width if head else 1)).to(weight.dtype)


@dataclass(frozen=True)
class Copies:
    """n units (heads or neurons) as n x m copies, in a random order."""

    source: Tensor  # [n m] the unit each copy copies
    share: Tensor  # [n m] a_c: a unit's copies' shares of its output sum to one
    scale: Tensor  # [n m] s_c: values (up rows) scaled by s_c, outputs by a_c / s_c
    tilt: Tensor  # [n m] t_c: queries scaled by t_c, keys by 1 / t_c

    @classmethod
    def draw(cls, n: int, m: int, g: torch.Generator) -> Copies:
        source = torch.arange(n).repeat_interleave(m)[torch.randperm(n * m, generator=g)]
        weight = torch.rand(n * m, generator=g, dtype=torch.float64) + 0.5
        total = torch.zeros(n, dtype=torch.float64).index_add_(0, source, weight)
        sign = torch.randint(0, 2, (n * m,), generator=g).double() * 2 - 1
        scale = sign * torch.exp(0.3 * torch.randn(n * m, generator=g, dtype=torch.float64))
        tilt = torch.exp(0.3 * torch.randn(n * m, generator=g, dtype=torch.float64))
        return cls(source, weight / total[source], scale, tilt)

    def rows(self, weight: Tensor, size: int, factor: Tensor) -> Tensor:
        """[n size, in] -> [n m size, in]: each copy's rows, times its factor."""
        units = weight.double().view(-1, size, weight.shape[1])[self.source.to(weight.device)]
        scaled = units * factor.to(weight.device)[:, None, None]
        return scaled.reshape(-1, weight.shape[1]).to(weight.dtype)

    def cols(self, weight: Tensor, size: int, factor: Tensor) -> Tensor:
        """[out, n size] -> [out, n m size]: each copy's columns, times its factor."""
        units = weight.double().view(weight.shape[0], -1, size)[:, self.source.to(weight.device)]
        scaled = units * factor.to(weight.device)[None, :, None]
        return scaled.reshape(weight.shape[0], -1).to(weight.dtype)


@dataclass
class Block:
    """One transformer layer's matrices, by role, in [out, in] layout."""

    q: Tensor
    k: Tensor
    v: Tensor
    o: Tensor
    gate: Tensor
    up: Tensor
    down: Tensor
    attn_norm: Tensor
    mlp_norm: Tensor


def grow_block(block: Block, res: Residual, growth: Growth, head_dim: int, g) -> Block:
    """A source layer, wider: more heads, more neurons, on the grown stream."""
    heads = Copies.draw(block.q.shape[0] // head_dim, growth.heads, g)
    neurons = Copies.draw(block.gate.shape[0], growth.mlp, g)
    return Block(
        q=res.read(heads.rows(block.q, head_dim, heads.tilt)),
        k=res.read(heads.rows(block.k, head_dim, 1 / heads.tilt)),
        v=res.read(heads.rows(block.v, head_dim, heads.scale)),
        o=res.write(heads.cols(block.o, head_dim, heads.share / heads.scale)),
        gate=res.read(neurons.rows(block.gate, 1, torch.ones_like(neurons.scale))),
        up=res.read(neurons.rows(block.up, 1, neurons.scale)),
        down=res.write(neurons.cols(block.down, 1, neurons.share / neurons.scale)),
        attn_norm=res.norm(block.attn_norm),
        mlp_norm=res.norm(block.mlp_norm),
    )


def silent_block(like: Block, g: torch.Generator) -> Block:
    """A new layer shaped like `like`: dense random inputs, zero output projections (drawn on
    `g`'s device: a GPU world's billions of draws on the GPU)."""

    def dense(t: Tensor) -> Tensor:
        drawn = torch.randn(t.shape, generator=g, dtype=torch.float64, device=g.device)
        return drawn.to(t.dtype) * t.std()

    def norm(t: Tensor) -> Tensor:
        drawn = torch.rand(t.shape, generator=g, dtype=torch.float64, device=g.device)
        return drawn.to(t.dtype) + 0.5

    return Block(
        q=dense(like.q),
        k=dense(like.k),
        v=dense(like.v),
        o=torch.zeros_like(like.o),
        gate=dense(like.gate),
        up=dense(like.up),
        down=torch.zeros_like(like.down),
        attn_norm=norm(like.attn_norm),
        mlp_norm=norm(like.mlp_norm),
    )


def grow_blocks(
    blocks: list[Block], res: Residual, growth: Growth, head_dim: int
) -> Iterator[Block]:
    """Every source layer grown, each followed by `depth - 1` silent layers, one at a time (a
    GPU world's layers are filled into its model as they are made, never all held twice). The
    copies are drawn on the CPU, the silent layers' weights where the source lives."""
    g = torch.Generator().manual_seed(growth.seed + 1)
    device = blocks[0].q.device
    silent = torch.Generator(device).manual_seed(growth.seed + 2)
    for block in blocks:
        grown = grow_block(block, res, growth, head_dim, g)
        yield grown
        for _ in range(growth.depth - 1):
            yield silent_block(grown, silent)


def grown_layer(source_layer: int, growth: Growth) -> int:
    """The grown layer whose output is source layer `source_layer`'s on the grown stream (the
    last of its silent followers: a reader of that layer reads through them)."""
    return source_layer * growth.depth + growth.depth - 1


def grown_config(config: PretrainedConfig, growth: Growth) -> dict:
    """The source's config with the grown shape (every other key kept)."""
    return {
        **config.to_dict(),
        "hidden_size": config.hidden_size * growth.width,
        "intermediate_size": config.intermediate_size * growth.mlp,
        "num_attention_heads": config.num_attention_heads * growth.heads,
        "num_hidden_layers": config.num_hidden_layers * growth.depth,
    }


def _tied_ends(res: Residual, state: dict[str, Tensor], embed: str, norm: str) -> dict:
    """The grown embeddings, the head tied to them, and the final norm that feeds the head."""
    grown = res.embed(state[embed])
    return {embed: grown, norm: res.norm(state[norm], head=True), "lm_head.weight": grown}


# Llama (tiny, tiny-ar): transformers' parameter names

LLAMA = {
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "mlp_norm": "post_attention_layernorm",
}


def _blocks(state: dict[str, Tensor], prefix: str, n: int, names: dict[str, str]) -> list[Block]:
    return [
        Block(**{role: state[f"{prefix}{i}.{name}.weight"] for role, name in names.items()})
        for i in range(n)
    ]


def _layer_state(block: Block, prefix: str, names: dict[str, str]) -> dict[str, Tensor]:
    return {f"{prefix}{name}.weight": getattr(block, role) for role, name in names.items()}


def _layer_states(
    blocks: Iterable[Block], prefix: str, names: dict[str, str]
) -> Iterator[dict[str, Tensor]]:
    """Each grown layer's part of the state dict, as it is made."""
    for i, block in enumerate(blocks):
        yield _layer_state(block, f"{prefix}{i}.", names)


def _fill(model: PreTrainedModel, parts: Iterable[dict[str, Tensor]]) -> PreTrainedModel:
    """`model` with its weights copied from `parts` one part at a time; every entry of its
    state dict must come from some part."""
    missing = set(model.state_dict())
    for part in parts:
        unexpected = model.load_state_dict(part, strict=False).unexpected_keys
        if unexpected:
            raise KeyError(f"grown weights the model has no place for: {unexpected}")
        missing -= part.keys()
    if missing:
        raise KeyError(f"grown model weights left unset: {sorted(missing)}")
    return model


def _empty(cls: type, config: PretrainedConfig, like: PreTrainedModel) -> PreTrainedModel:
    """A new model of `config` in `like`'s dtype, on its device, in eval mode."""
    with torch.device(like.device):
        return cast(cls(config), like.dtype).eval()


@torch.no_grad()
def grow_llama(model: LlamaForCausalLM, growth: Growth) -> LlamaForCausalLM:
    """A grown Llama computing the same function (tied embeddings stay tied), on the source's
    device and in its dtype."""
    c = model.config
    if c.num_key_value_heads != c.num_attention_heads:
        raise ValueError(
            "growth copies heads with their keys: grouped-query attention is not grown"
        )
    if not c.tie_word_embeddings:
        raise ValueError(
            "growth keeps an LM head tied to the embeddings: untied heads are not grown"
        )
    d, state = c.hidden_size, model.state_dict()
    res = Residual.draw(d, growth.width, growth.seed)
    heads = {"num_key_value_heads": c.num_key_value_heads * growth.heads, "head_dim": c.head_dim}
    grown = _empty(LlamaForCausalLM, LlamaConfig(**{**grown_config(c, growth), **heads}), model)
    blocks = grow_blocks(
        _blocks(state, "model.layers.", c.num_hidden_layers, LLAMA), res, growth, c.head_dim
    )
    ends = _tied_ends(res, state, "model.embed_tokens.weight", "model.norm.weight")
    _fill(grown, chain(_layer_states(blocks, "model.layers.", LLAMA), [ends]))
    grown.generation_config = model.generation_config
    return grown


# TinyDLM (tiny-dlm): one fused qkv matrix per layer

DLM = {
    "o": "out",
    "gate": "gate",
    "up": "up",
    "down": "down",
    "attn_norm": "attn_norm",
    "mlp_norm": "mlp_norm",
}


def _dlm_layer_states(blocks: Iterable[Block]) -> Iterator[dict[str, Tensor]]:
    for i, block in enumerate(blocks):
        qkv = {f"layers.{i}.qkv.weight": torch.cat([block.q, block.k, block.v])}
        yield {**_layer_state(block, f"layers.{i}.", DLM), **qkv}


@torch.no_grad()
def grow_dlm(model: TinyDLM, growth: Growth) -> TinyDLM:
    """A grown TinyDLM computing the same function (its head width is the source's), on the
    source's device and in its dtype."""
    c, state = model.config, model.state_dict()
    d, head_dim = c.hidden_size, c.hidden_size // c.num_attention_heads
    res = Residual.draw(d, growth.width, growth.seed)
    config = TinyDLMConfig(**grown_config(c, growth))
    if config.hidden_size // config.num_attention_heads != head_dim:
        raise ValueError("TinyDLM's head width is hidden_size / heads: grow both alike")
    sources = []
    for i in range(c.num_hidden_layers):
        q, k, v = state[f"layers.{i}.qkv.weight"].chunk(3)
        named = {role: state[f"layers.{i}.{name}.weight"] for role, name in DLM.items()}
        sources.append(Block(q=q, k=k, v=v, **named))
    blocks = grow_blocks(sources, res, growth, head_dim)
    ends = _tied_ends(res, state, "embed.weight", "norm.weight")
    return _fill(_empty(TinyDLM, config, model), chain(_dlm_layer_states(blocks), [ends]))


# DFlash drafters (the `dflash` package's Qwen3 layers): only the residual stream grows


def _read_halves(res: Residual, weight: Tensor, halves: int) -> Tensor:
    """A linear reading `halves` grown streams side by side: [out, halves d] -> [out, halves D]."""
    return torch.cat([res.read(w) for w in weight.chunk(halves, 1)], 1)


DFLASH = {**LLAMA, "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}


@torch.no_grad()
def grow_dflash(drafter: PreTrainedModel, growth: Growth) -> PreTrainedModel:
    """A DFlash drafter for the target grown by `growth`: its residual stream on the target's
    grown stream (it shares the target's embeddings and head), its `fc` reading the grown
    target layers, its heads and MLP unchanged (a drafter's cost stays a drafter's)."""
    from dflash.model import DFlashDraftModel

    c, state = drafter.config, drafter.state_dict()
    d = c.hidden_size
    res = Residual.draw(d, growth.width, growth.seed)
    config = c.__class__(**c.to_dict())
    config.hidden_size = d * growth.width
    config.num_target_layers = c.num_target_layers * growth.depth
    layers = [grown_layer(i, growth) for i in drafter.target_layer_ids]
    config.dflash_config = {**c.dflash_config, "target_layer_ids": layers}
    grown_state = {}
    for key, value in state.items():
        role = next((r for r, name in DFLASH.items() if f".{name}." in key), None)
        if role in ("q", "k", "v", "gate", "up"):
            value = res.read(value)
        elif role in ("o", "down"):
            value = res.write(value)
        elif role in ("attn_norm", "mlp_norm") or key in ("norm.weight", "hidden_norm.weight"):
            value = res.norm(value, head=key == "norm.weight")
        elif key == "fc.weight":
            value = res.write(_read_halves(res, value, len(layers)))
        grown_state[key] = value
    return _fill(_empty(DFlashDraftModel, config, drafter), [grown_state])


# EAGLE-3 drafters (models/eagle3.py): only the residual stream grows, as DFlash's


@torch.no_grad()
def grow_eagle3(drafter: Eagle3Drafter, growth: Growth, layers: list[int]) -> Eagle3Drafter:
    """An EAGLE-3 drafter for the target grown by `growth`: its stream on the target's grown
    stream (it embeds with the target's grown embeddings), `fc` reading the grown target's
    inputs of source layers `layers` (layer i's input is grown layer i x depth's), the layer's
    two input halves (embedding, state) each read from the grown stream, its own final norm and
    head reading it back; its heads, MLP and draft vocabulary unchanged."""
    c = drafter.config
    if drafter.embed_tokens is not None or c.target_hidden_size != c.hidden_size:
        raise ValueError("growth puts the drafter on its target's stream: it must share its width")
    if drafter.fc.bias is not None:
        raise ValueError("growth maps fc's weight: an fc bias is not grown")
    res = Residual.draw(c.hidden_size, growth.width, growth.seed)
    config = c.__class__(**c.to_dict())
    config.hidden_size = config.target_hidden_size = c.hidden_size * growth.width
    config.aux_layer_ids = [layer * growth.depth for layer in layers]
    grown_state = {}
    for key, value in drafter.state_dict().items():
        if key == "fc.weight":
            value = res.write(_read_halves(res, value, len(layers)))
        elif key.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            value = _read_halves(res, value, 2)
        elif key.endswith(("gate_proj.weight", "up_proj.weight")) or key == "lm_head.weight":
            value = res.read(value)
        elif key.endswith(("o_proj.weight", "down_proj.weight")):
            value = res.write(value)
        elif key.endswith("norm.weight"):
            value = res.norm(value)
        grown_state[key] = value
    model = cast(Eagle3Drafter(config), drafter.fc.weight.dtype, drafter.fc.weight.device)
    model.load_state_dict(grown_state, strict=True)
    return model.eval()


# The built-ins: grown from the committed checkpoints on first use

CHECK_PROMPTS = 3  # tiny_code prompts every build decodes with the grown model and its source
CHECK_TOKENS = 24  # greedy tokens each (a diffusion LM: masked positions after the prompt)


def check_prompts(
    source: str = "tiny", task: str = "tiny_code", n: int = CHECK_PROMPTS
) -> list[list[int]]:
    """The first `n` prompts of the world's task as the source's token ids."""
    from transformers import AutoTokenizer

    from specbench.models.tiny.math_corpus import prompt

    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / source)
    rows = [
        json.loads(line) for line in (paths.TINY_DIR / f"{task}.jsonl").read_text().splitlines()[:n]
    ]
    texts = [row["prompt"] if "prompt" in row else prompt(row["question"]) for row in rows]
    return [tokenizer(text)["input_ids"] for text in texts]


@torch.no_grad()
def greedy_tokens(model: PreTrainedModel, ids: list[int]) -> list[int]:
    """A causal LM's greedy continuation; a TinyDLM's argmax over `CHECK_TOKENS` masks after
    the prompt, in one forward."""
    prompt = torch.tensor([ids], device=model.device)
    if isinstance(model, TinyDLM):
        masks = torch.full((1, CHECK_TOKENS), model.config.mask_token_id, device=model.device)
        logits = model(torch.cat([prompt, masks], 1)).logits
        return logits[0, len(ids) :].argmax(-1).tolist()
    out = model.generate(prompt, max_new_tokens=CHECK_TOKENS, do_sample=False, pad_token_id=1)
    return out[0, len(ids) :].tolist()


def check_growth(source: PreTrainedModel, grown: PreTrainedModel, spec: Grown) -> dict:
    """How many check prompts the grown model (float32, before it is saved) decodes to the
    source's tokens: the growth's function preservation, measured where it was built."""
    prompts = check_prompts(spec.source, spec.task)
    same = sum(greedy_tokens(source, ids) == greedy_tokens(grown, ids) for ids in prompts)
    return {"dtype": "float32", "prompts": len(prompts), "tokens": CHECK_TOKENS, "identical": same}


def build_device(grown: Grown) -> torch.device:
    return torch.device("cuda" if grown.on_gpu and torch.cuda.is_available() else "cpu")


def _provenance(out: Path, grown: Grown, model: torch.nn.Module, **facts) -> None:
    device = next(model.parameters()).device
    record = {
        "source": f"specbench:{grown.source}",
        "growth": asdict(grown.growth),
        "parameters": sum(p.numel() for p in model.parameters()),
        "saved_dtype": str(grown.saved).removeprefix("torch."),
        "built_on": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        **facts,
    }
    (out / "growth.json").write_text(json.dumps(record, indent=2) + "\n")


def _copy_tokenizer(source: Path, out: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, out / name)


def build_grown(name: str, out: Path) -> None:
    """A grown target (`GROWN[name]`) with its source's tokenizer: grown in float32 on its
    build device, checked against its source there, saved in its dtype."""
    grown = GROWN[name]
    src_dir = paths.TINY_DIR / grown.source
    is_dlm = (
        json.loads((src_dir / "config.json").read_text())["model_type"] == TinyDLMConfig.model_type
    )
    cls, grow = (TinyDLM, grow_dlm) if is_dlm else (LlamaForCausalLM, grow_llama)
    source = cls.from_pretrained(src_dir, dtype=torch.float32).to(build_device(grown)).eval()
    model = grow(source, grown.growth)
    check = check_growth(source, model, grown)
    cast(model, grown.saved).save_pretrained(out)
    _copy_tokenizer(src_dir, out)
    _provenance(out, grown, model, check=check)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the next built-in (a second 7B model) gets the whole device


def _grown_dflash(source: Path, grown: Grown, out: Path) -> PreTrainedModel:
    from dflash.model import DFlashDraftModel

    src = DFlashDraftModel.from_pretrained(source, dtype=torch.float32)
    model = grow_dflash(src.to(build_device(grown)), grown.growth)
    cast(model, grown.saved).save_pretrained(out)
    return model


def _grown_eagle3(source: Path, grown: Grown, out: Path) -> Eagle3Drafter:
    src = cast(load_eagle3(source), torch.float32, build_device(grown))
    target = LlamaConfig.from_pretrained(paths.TINY_DIR / grown.source)
    layers = aux_layer_ids(src.config, target.num_hidden_layers)
    model = grow_eagle3(src, grown.growth, layers)
    save_eagle3(cast(model, grown.saved), out)
    return model


def build_grown_drafter(name: str, out: Path) -> None:
    """A drafter grown with its target's residual map, on the target's build device, in the
    target's saved dtype (an EAGLE-3 checkpoint is in EAGLE's layout, a DFlash one is not)."""
    source, target = GROWN_DRAFTERS[name]
    grown = GROWN[target]
    eagle = "draft_vocab_size" in json.loads((paths.TINY_DIR / source / "config.json").read_text())
    model = (_grown_eagle3 if eagle else _grown_dflash)(paths.TINY_DIR / source, grown, out)
    _provenance(out, Grown(source, grown.growth, grown.saved, grown.on_gpu), model)


def _tokenizer(source: Path) -> PreTrainedTokenizerBase:
    """A grown model's tokenizer: its source checkpoint's, which growing leaves as it is."""
    return AutoTokenizer.from_pretrained(source)


def _register() -> None:
    for name, grown in GROWN.items():
        source = paths.TINY_DIR / grown.source
        register_builtin_model(name, sources=(source,), tokenizer=partial(_tokenizer, source))(
            lambda out, name=name: build_grown(name, out)
        )
    for name, (source, target) in GROWN_DRAFTERS.items():
        sources = (paths.TINY_DIR / source, paths.TINY_DIR / GROWN[target].source)
        register_builtin_model(name, sources=sources)(
            lambda out, name=name: build_grown_drafter(name, out)
        )


_register()
