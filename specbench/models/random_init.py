"""Random-init GPT-2-shaped models for unit tests and the early demo (no download).

The drafter is the target's first block with the target's embeddings and final norm, so the
two agree on some tokens and not on others: speculation both accepts and rejects.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    GPT2Tokenizer,
    PreTrainedTokenizerBase,
)

from specbench import paths
from specbench.registry import register_builtin_model

EOS = 50256


def gpt2_tokenizer() -> PreTrainedTokenizerBase:
    """GPT-2's BPE from OpenAI's original files (encoder.json, vocab.bpe) in the shared data
    folder when present, else from the hub."""
    local = paths.data_dir() / "gpt2_tokenizer"
    if not (local / "encoder.json").exists():
        return AutoTokenizer.from_pretrained("openai-community/gpt2")
    vocab = json.loads((local / "encoder.json").read_text(encoding="utf-8"))
    lines = (local / "vocab.bpe").read_text(encoding="utf-8").splitlines()[1:]  # after "#version"
    merges = [tuple(line.split()) for line in lines if line.strip()]
    return GPT2Tokenizer(vocab=vocab, merges=merges)


def _config(n_layer: int) -> GPT2Config:
    return GPT2Config(
        vocab_size=50257,
        n_positions=2048,
        n_embd=128,
        n_layer=n_layer,
        n_head=4,
        initializer_range=0.06,  # chosen so the 1-block drafter agrees on ~1 token in 4
        bos_token_id=EOS,
        eos_token_id=EOS,
    )


def random_target() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(_config(n_layer=4)).eval()


def _save(model: GPT2LMHeadModel, out: Path) -> None:
    model.generation_config.eos_token_id = EOS
    model.save_pretrained(out)
    gpt2_tokenizer().save_pretrained(out)


@register_builtin_model("random-gpt2", tokenizer=gpt2_tokenizer)
def build_target(out: Path) -> None:
    _save(random_target(), out)


@register_builtin_model("random-gpt2-draft", tokenizer=gpt2_tokenizer)
def build_drafter(out: Path) -> None:
    target = random_target()
    drafter = GPT2LMHeadModel(_config(n_layer=1)).eval()
    drafter.transformer.wte.load_state_dict(target.transformer.wte.state_dict())
    drafter.transformer.wpe.load_state_dict(target.transformer.wpe.state_dict())
    drafter.transformer.h[0].load_state_dict(target.transformer.h[0].state_dict())
    drafter.transformer.ln_f.load_state_dict(target.transformer.ln_f.state_dict())
    _save(drafter, out)
