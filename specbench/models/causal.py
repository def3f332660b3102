"""`CausalLM`: any `AutoModelForCausalLM` with a KV cache that extends and rolls back."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from specbench.metrics.speed import synchronize


@dataclass
class Forward:
    """What a forward over new tokens returns: float32 logits of the rows asked for (row i
    predicting the token after position i), and the outputs of the decoder layers asked for
    at every position fed, concatenated along features ([n, len(layers) * hidden]; None when
    none were asked for)."""

    logits: torch.Tensor
    hidden: torch.Tensor | None = None


def ancestor_mask(n_chain: int, parents: list[int], device: torch.device) -> torch.Tensor:
    """Which new token reads which ([n, n] bool, row i over columns j): `n_chain` >= 1 tokens in
    a row (causal among themselves), then a tree hanging off the last of them, node k (new
    token n_chain + k) reading the chain, its ancestors and itself. `parents[k]` is node k's
    parent node, -1 for the chain's last token; parents come before their children."""
    n = n_chain + len(parents)
    visible = np.zeros((n, n), dtype=bool)
    visible[:n_chain, :n_chain] = np.tri(n_chain, dtype=bool)
    for k, parent in enumerate(parents):
        row = n_chain + k
        visible[row] = visible[n_chain + parent] if parent >= 0 else visible[n_chain - 1]
        visible[row, row] = True
    return torch.from_numpy(visible).to(device)


class CausalLM:
    """The verifier contract: one sequence's KV cache, fed new tokens by `forward` (at explicit
    positions, under an optional ancestor mask, returning logits and any decoder layers asked
    for) and compacted by `keep` to the slots a round accepted. A chain keeps a prefix of what
    it fed (`rollback`); a tree keeps one root path. Shapes carry a leading batch dimension of
    one inside (`[1, n]` ids, `[1, 1, n, slots]` masks), so batching adds rows, not a new
    contract."""

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
        self.reset()

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.length = 0
        self.fed_from = 0  # the first slot the last forward wrote: what `keep` indexes from

    # the autograd mode a forward runs in (the compiled engine needs no_grad: see compiled.py)
    grad_mode = torch.inference_mode

    def forward(
        self,
        ids: list[int],
        positions: list[int] | None = None,
        ancestors: torch.Tensor | None = None,
        last: int | None = None,
        hidden_layers: tuple[int, ...] = (),
    ) -> Forward:
        """Append `ids` to the cache at the next slots and read them: at `positions` (default:
        the slots' own), each new token reading every cached slot and the new tokens its row
        of `ancestors` ([n, n] bool) marks (default: those before it). Logits of the `last`
        rows (all by default); the outputs of decoder layers `hidden_layers` (0-based). An
        engine supplies `_inputs` and `_run`; the timing and the counters are the same for
        every engine."""
        with self.grad_mode():
            last = len(ids) if last is None else last
            inputs = self._inputs(ids, positions, ancestors)
            if self.time_forwards:
                t0 = self._tick()
            logits, hidden = self._run(inputs, last, tuple(hidden_layers))
            if self.time_forwards:
                self.forward_s += self._tick() - t0
            self._fed(len(ids))
            return Forward(logits.float(), hidden)

    def _inputs(
        self, ids: list[int], positions: list[int] | None, ancestors: torch.Tensor | None
    ) -> tuple:
        """What the model call takes, prepared before the forward's timer starts."""
        return torch.tensor([ids], dtype=torch.long, device=self.device), positions, ancestors

    def _run(
        self, inputs: tuple, last: int, hidden_layers: tuple[int, ...]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The model call: logits of the `last` rows and the captured layers' outputs."""
        input_ids, positions, ancestors = inputs
        n = input_ids.shape[1]
        out = self.model(
            input_ids=input_ids,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=last,
            **self._layout(n, positions, ancestors, self.length + n),
            **capture(hidden_layers),
        )
        hidden = captured(out, hidden_layers) if hidden_layers else None
        return out.logits[0, -last:], hidden

    def forward_tokens(self, ids: list[int], keep: int | None = None) -> torch.Tensor:
        """`forward` of a chain, its logits only."""
        return self.forward(ids, last=keep).logits

    def _layout(
        self, n: int, positions: list[int] | None, ancestors: torch.Tensor | None, slots: int
    ) -> dict:
        """The forward's position ids and attention mask for `n` new tokens over a cache of
        `slots` slots (nothing for a plain chain: the model's causal default)."""
        if positions is None and ancestors is None:
            return {}
        layout: dict = {}
        if positions is not None:
            layout["position_ids"] = torch.tensor([positions], device=self.device)
        if ancestors is not None:
            layout["attention_mask"] = additive(self._visible(ancestors, slots), self.model.dtype)
        return layout

    def _visible(self, ancestors: torch.Tensor, slots: int) -> torch.Tensor:
        """[n, slots] bool: what each of the n new tokens reads, every cached slot and the new
        tokens its row of `ancestors` marks; the slots after them stay hidden."""
        n = len(ancestors)
        visible = torch.zeros(n, slots, dtype=torch.bool, device=self.device)
        visible[:, : self.length] = True
        visible[:, self.length : self.length + n] = ancestors
        return visible

    def _fed(self, n: int) -> None:
        self.calls += 1
        self.positions += n
        self.fed_from = self.length
        self.length += n

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

    def top2_along(
        self, prompt: list[int], tokens: list[int]
    ) -> tuple[list[tuple[float, float]], torch.dtype]:
        """The two largest logits before each of `tokens` after `prompt`, from one forward of a
        fresh sequence, in the model's dtype's values."""
        self.reset()
        logits = self.forward_tokens(prompt + tokens[:-1], keep=len(tokens))
        return [(a, b) for a, b in logits.topk(2).values.tolist()], self.model.dtype

    def keep(self, indices: list[int]) -> None:
        """Of the slots the last forward wrote, keep those at `indices` (into its new tokens),
        moved in that order to follow the earlier cache; drop the rest. The kept tokens' positions
        must be their new slots (a root path's are). A prefix is a plain `rollback`."""
        if indices == list(range(len(indices))):
            self.rollback(self.fed_from + len(indices))
            return
        if max(indices) >= self.length - self.fed_from:
            raise ValueError(
                f"cannot keep {indices}: the last forward fed {self.length - self.fed_from}"
            )
        index = torch.tensor(indices, device=self.device) + self.fed_from
        compact(self.cache, self.fed_from, index)
        self.length = self.fed_from + len(indices)

    def rollback(self, length: int) -> None:
        """Forget every cached position from `length` on."""
        remove = self.length - length
        if remove < 0:
            raise ValueError(f"cannot roll back to {length}: only {self.length} tokens cached")
        if remove:
            self.cache.crop(-remove)
            self.length = length
        self.fed_from = min(self.fed_from, length)


def additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A [n, slots] visibility as the [1, 1, n, slots] additive mask every attention kernel
    takes (0 where visible, the dtype's lowest value elsewhere)."""
    hidden = torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=visible.device)
    return torch.where(visible, torch.zeros((), dtype=dtype, device=visible.device), hidden)[
        None, None
    ]


def compact(cache: Any, base: int, index: torch.Tensor) -> None:
    """Every layer of a dynamic cache cut to its first `base` slots and then the slots `index`."""
    for layer in cache.layers:
        if layer.is_initialized:
            layer.keys = torch.cat([layer.keys[..., :base, :], layer.keys[..., index, :]], -2)
            layer.values = torch.cat([layer.values[..., :base, :], layer.values[..., index, :]], -2)


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
