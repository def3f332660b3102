"""`CausalLM`: any `AutoModelForCausalLM` with a KV cache that extends and rolls back."""

from __future__ import annotations

import time
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from specbench.metrics.speed import synchronize


class CausalLM:
    """Keeps one sequence's KV cache. `forward_tokens` feeds new tokens after the cached ones;
    `rollback` crops rejected tokens so an accepted prefix is never recomputed."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.device = model.get_input_embeddings().weight.device
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.eos_token_ids = eos_token_ids(model, tokenizer)
        self.calls = 0
        self.positions = 0
        self.time_forwards = (
            False  # benchmarks switch this on to split model time from harness time
        )
        self.forward_s = 0.0
        self.hidden: torch.Tensor | None = None  # the layers `forward_tokens` was asked for
        self.reset()

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.length = 0

    @torch.inference_mode()
    def forward_tokens(
        self, ids: list[int], keep: int | None = None, hidden_layers: tuple[int, ...] = ()
    ) -> torch.Tensor:
        """Append `ids` to the cached sequence; return float32 logits of the last `keep` positions
        (all by default), row i predicting the token after position i.

        With `hidden_layers`, `self.hidden` becomes the outputs of those decoder layers (0-based)
        at every position fed, concatenated along features: [len(ids), len(layers) * hidden].
        Only those layers are captured, and nothing without them."""
        keep = len(ids) if keep is None else keep
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        if self.time_forwards:
            t0 = self._tick()
        out = self.model(
            input_ids=input_ids,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=keep,
            **capture(hidden_layers),
        )
        if hidden_layers:
            self.hidden = captured(out, hidden_layers)
        if self.time_forwards:
            self.forward_s += self._tick() - t0
        self.calls += 1
        self.positions += len(ids)
        self.length += len(ids)
        return out.logits[0, -keep:].float()

    def _tick(self) -> float:
        """A timestamp after the device's queued work is done."""
        synchronize(self.device)
        return time.perf_counter()

    def prefill(self, ids: list[int]) -> torch.Tensor:
        """Start a new sequence; logits of the next token after `ids`."""
        self.reset()
        return self.forward_tokens(ids, keep=1)[0]

    def top2(self, ids: list[int]) -> tuple[tuple[float, float], torch.dtype]:
        """The two largest next-token logits after `ids` (a fresh sequence), in the model's
        dtype's values."""
        first, second = self.prefill(ids).topk(2).values.tolist()
        return (first, second), self.model.dtype

    def rollback(self, length: int) -> None:
        """Forget every cached position from `length` on."""
        remove = self.length - length
        if remove < 0:
            raise ValueError(f"cannot roll back to {length}: only {self.length} tokens cached")
        if remove:
            self.cache.crop(-remove)
            self.length = length


def capture(hidden_layers: tuple[int, ...]) -> dict:
    """The forward's arguments that capture decoder layers `hidden_layers` (0-based; in
    transformers' `hidden_states`, index 0 is the embeddings' output and l + 1 layer l's)."""
    if not hidden_layers:
        return {}
    return {"output_hidden_states": [layer + 1 for layer in hidden_layers]}


def captured(out: Any, hidden_layers: tuple[int, ...]) -> torch.Tensor:
    """The captured layers' outputs, concatenated along features: [positions, len * hidden]."""
    return torch.cat([out.hidden_states[layer + 1][0] for layer in hidden_layers], -1)


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Every id that ends a generation: the generation config's (often a list) and the tokenizer's."""
    ids: set[int] = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (gen_eos, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(value)
    return ids
