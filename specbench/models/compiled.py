"""The compiled engine (`run.engine=compiled`): gpt-fast's recipe on any transformers causal LM.

- A static KV cache sized once per run, so every decoding step has the same buffers.
- Rollback by position: the slots after the kept length stay, and the next tokens overwrite
  them before anything reads them (a query at position p reads slots <= p only). The cache's
  own write position (`cumulative_length`, where transformers' `StaticLayer` writes next)
  is set back with it.
- `torch.compile` of the forward over short inputs (up to `HOT_TOKENS` new tokens: one token,
  a draft plus its bonus, a block): two graphs, one for a single token and one whose length
  is symbolic. Inductor's C++ kernels and wrapper on a CPU; CUDA graphs (`reduce-overhead`) on
  a GPU.
  Longer inputs (a prompt) run the same forward uncompiled, on the same cache.
- Compilation happens in `warm_up`, outside every timer; its seconds are `compile_s`. After
  it only the guards that choose among the built graphs are evaluated (`settled`).

A masked-diffusion model (`MaskedDiffusionLM`) is compiled differently: its prefix caches grow
block by block and its batches of drafts change size, so the hot model methods it names
(`hot_methods`) are compiled with symbolic shapes over the adapter's own caches, and no CUDA
graphs are captured (one per shape would be). The run's warm-up decodes (`run.warmup`, at least
one) compile its graphs, outside every timer; env.json's `warm_up_s` holds their time.

The compiled forward runs under `torch.no_grad`, not `inference_mode`: under inference mode
torch 2.13's compiled in-place cache update reads stale keys (logits off by up to 1.0 on
`tiny`, checked against the dynamic cache), while under no_grad it matches to 2e-6.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase, StaticCache

from specbench import paths
from specbench.models.causal import (
    CausalLM,
    additive,
    ancestor_mask,
    capture,
    captured,
)

HOT_TOKENS = 64  # the longest input the compiled graph takes; longer ones run eagerly
# the largest |compiled - uncompiled| logit a warm-up check passes, as a share of the largest
# logit (bf16 kernels in another order differ by about 1%)
CHECK_TOLERANCE = 0.05
CACHE_ROUNDING = 64  # static caches are sized in multiples of this many positions
# graphs one compiled diffusion model may build (cache or none, one row or a batch, a mask or
# none) before dynamo runs it eagerly
RECOMPILE_LIMIT = 16
# graphs all compiled models share per forward's code where torch cannot isolate them
SHARED_RECOMPILE_LIMIT = 64


def static_length(positions: int) -> int:
    """A static cache's size for sequences of up to `positions`, rounded up, so runs of nearby
    lengths share compiled graphs (the spare slots cost a little attention)."""
    return -(-positions // CACHE_ROUNDING) * CACHE_ROUNDING


def describe(engine: str, **models: list[object]) -> dict:
    """What env.json says of the engine: its name, and per role the first of its models that
    was compiled (a drafter's loop may compile on its own, as DFlash's does), with the static
    cache's size and the seconds compilation took (spent in warm-up, outside every timer), or
    "eager" for a role whose model the compiled engine leaves eager."""
    report: dict = {"name": engine}
    for role, candidates in models.items():
        for lm in candidates:
            static = getattr(lm, "engine", None)
            if isinstance(static, StaticEngine):
                report[role] = {
                    "static_cache": static.max_length,
                    "compile_s": round(static.compile_s, 2),
                }
                break
            if getattr(lm, "compiled", False):
                report[role] = {"dynamic_shapes": list(lm.hot_methods)}
                break
        else:
            if engine == "compiled" and any(isinstance(lm, torch.nn.Module) for lm in candidates):
                report[role] = "eager"  # a model the engine leaves as it is (EAGLE-3's drafter)
    return report


def use_inductor_cache() -> None:
    """Inductor's on-disk cache under specbench's cache, so a graph compiled once (a test run,
    an earlier cell) loads in seconds in every later process, unless the user named one. Torch
    writes its default (a directory in /tmp every process on the machine shares) into the
    environment the first time it asks, at import: that value is not the user's."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    if os.environ.get("TORCHINDUCTOR_CACHE_DIR", default_cache_dir()) == default_cache_dir():
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(paths.cache_dir() / "inductor")


def compile_forward(forward, device: torch.device, dynamic: bool = False):
    """`forward` compiled as the engine compiles: CUDA graphs on a GPU for fixed shapes; on a CPU
    inductor's kernels called from a C++ wrapper (`cpp_wrapper`: no Python between the kernels
    of a step); its graphs cached on disk under the specbench cache. Each compiled model keeps
    its own graphs (`isolate_recompiles`): a target and a drafter of one class share a
    forward's code, and would otherwise count against, and be chosen among, each other's
    graphs. `dynamic`: symbolic shapes, and no CUDA graphs (one per shape would be captured)."""
    use_inductor_cache()
    if device.type == "cuda" and not dynamic:
        return torch.compile(forward, mode="reduce-overhead", **isolated())
    return torch.compile(
        forward,
        dynamic=dynamic or None,
        options={"cpp_wrapper": device.type == "cpu"},
        **isolated(RECOMPILE_LIMIT if dynamic else None),
    )


def isolated(recompile_limit: int | None = None) -> dict:
    """`torch.compile`'s arguments for graphs of their own and a recompile limit of their own
    (torch 2.13). An older torch, as a lent GPU machine's image may carry, shares the graphs of
    one forward's code among its compiled models: there, dynamo's global limit is raised to hold
    them all (every model's graphs are built in warm-up, so none is left to run eagerly)."""
    if "isolate_recompiles" in inspect.signature(torch.compile).parameters:
        return {"isolate_recompiles": True, "recompile_limit": recompile_limit}
    torch._dynamo.config.recompile_limit = max(
        torch._dynamo.config.recompile_limit, SHARED_RECOMPILE_LIMIT
    )
    return {}


def settled(warm: bool):
    """The context a compiled step runs in. Once warm-up has built every graph a decoding loop
    needs, dynamo evaluates only the guards that choose among them (`skip_guard_eval_unsafe`):
    the full guard set is a large share of a small model's step."""
    if not warm:
        return contextlib.nullcontext()
    return torch.compiler.set_stance(skip_guard_eval_unsafe=True)


def compile_diffusion(lm: object) -> None:
    """Compile a masked-diffusion adapter's hot model methods in place: the adapter and every
    decoder over it call them as before. Once: a model kept for the next cell is compiled."""
    if lm.compiled:
        return
    for name in lm.hot_methods:
        setattr(lm.model, name, compile_forward(getattr(lm.model, name), lm.device, dynamic=True))
    lm.compiled = True


def begin_step(device: torch.device) -> None:
    """Before a compiled call: on a GPU, tell CUDA graphs the previous outputs are released."""
    if device.type == "cuda":
        torch.compiler.cudagraph_mark_step_begin()


def keep_outputs(device: torch.device, *outputs: torch.Tensor | None) -> tuple:
    """A compiled call's outputs, copied on a GPU, where CUDA graphs overwrite their buffers at
    the next replay; on a CPU each call's outputs are its own, and no copy is made."""
    if device.type != "cuda":
        return outputs
    return tuple(None if t is None else t.clone() for t in outputs)


class StaticEngine:
    """A static KV cache and one forward compiled over it: what every model under the compiled
    engine runs on (a causal LM, a DFlash drafter's loop). `call` runs the compiled graph on
    inputs of up to `HOT_TOKENS` positions; a caller runs `forward` itself on longer ones, on
    the same cache. `seek` is the rollback; `warming` times graph building, after which only
    the guards that choose among the built graphs are evaluated."""

    def __init__(self, forward, cache: StaticCache, max_length: int, device: torch.device):
        self.forward, self.cache, self.max_length, self.device = forward, cache, max_length, device
        self.step = compile_forward(forward, device)
        self.compile_s = 0.0
        self.warm = False

    def seek(self, length: int) -> None:
        """Set the cache's write position (transformers' `StaticLayer.cumulative_length`, where
        its next `update` writes) to `length`."""
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.cumulative_length.fill_(length)

    def call(self, *args: torch.Tensor | None, lengths: tuple = ()) -> tuple:
        """The compiled forward's outputs on `args`; `lengths` names the (tensor, dim) pairs
        whose length varies from call to call (one symbolic graph for 2..HOT_TOKENS, and one
        for a length of 1)."""
        for tensor, dim in lengths:
            if tensor is not None and tensor.shape[dim] > 1:
                torch._dynamo.mark_dynamic(tensor, dim, min=2, max=HOT_TOKENS)
        begin_step(self.device)
        with settled(self.warm):
            return keep_outputs(self.device, *self.step(*args))

    @contextlib.contextmanager
    def warming(self):
        """Around the calls that build every graph a decoding loop needs (before any timer):
        their seconds go to `compile_s`, and the engine is settled after them."""
        started = time.perf_counter()
        yield
        self.warm = True
        self.compile_s += time.perf_counter() - started


class CompiledCausalLM(CausalLM):
    """`CausalLM` on a static cache with a compiled step; same interface, same results up to
    the kernels' floating-point order."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        name: str,
        max_length: int,
    ):
        device = model.get_input_embeddings().weight.device
        cache = StaticCache(config=model.config, max_cache_len=max_length)
        self.engine = StaticEngine(self._forward, cache, max_length, device)
        self.max_length = max_length
        super().__init__(model, tokenizer, name)
        # outside any compiled region: allocate the cache, and let transformers install the
        # hooks that capture hidden states (installing them inside a graph breaks it)
        with torch.no_grad():
            one = self._slots(1)
            self._forward(
                torch.zeros(1, 1, dtype=torch.long, device=self.device), one, one, None, (0,)
            )
        self.reset()

    @classmethod
    def from_eager(cls, lm: CausalLM, max_length: int) -> CompiledCausalLM:
        return cls(lm.model, lm.tokenizer, lm.name, max_length)

    def reset(self) -> None:
        self.cache = self.engine.cache
        self.length = 0
        self.fed_from = 0
        self.engine.seek(0)

    def rollback(self, length: int) -> None:
        if length > self.length:
            raise ValueError(f"cannot roll back to {length}: only {self.length} tokens cached")
        self.engine.seek(length)
        self.length = length
        self.fed_from = min(self.fed_from, length)

    def keep(self, indices: list[int]) -> None:
        """As `CausalLM.keep`, in place: the kept slots are copied down over the dropped ones
        and the write position set after them."""
        if indices == list(range(len(indices))):
            self.rollback(self.fed_from + len(indices))
            return
        index = torch.tensor(indices, device=self.device) + self.fed_from
        slots = torch.arange(self.fed_from, self.fed_from + len(indices), device=self.device)
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.keys.index_copy_(2, slots, layer.keys[:, :, index])
                layer.values.index_copy_(2, slots, layer.values[:, :, index])
        self.rollback(self.fed_from + len(indices))

    def _slots(self, n: int) -> torch.Tensor:
        return torch.arange(self.length, self.length + n, device=self.device)

    def _forward(
        self,
        input_ids: torch.Tensor,
        slots: torch.Tensor,
        positions: torch.Tensor,
        visible: torch.Tensor | None,
        hidden_layers: tuple[int, ...],
        keep: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits of the last `keep` positions (0: all, which the compiled graph always takes,
        an int argument being a guard); the captured layers' outputs, if any. `visible`
        ([n, cache slots] bool) replaces the causal mask (a tree's)."""
        mask = None if visible is None else additive(visible, self.model.dtype)
        out = self.model(
            input_ids=input_ids,
            cache=self.cache,
            cache_position=slots,
            position_ids=positions[None],
            attention_mask=mask,
            use_cache=True,
            logits_to_keep=keep,
            **capture(hidden_layers),
        )
        return out.logits[0], captured(out, hidden_layers) if hidden_layers else None

    grad_mode = torch.no_grad

    def _inputs(
        self, ids: list[int], positions: list[int] | None, ancestors: torch.Tensor | None
    ) -> tuple:
        """The ids, their cache slots, their positions and any tree's visibility over the
        whole static cache."""
        n = len(ids)
        if self.length + n > self.max_length:
            raise ValueError(
                f"{self.name}: {self.length} cached + {n} new positions exceed the static "
                f"cache of {self.max_length} (run.engine=compiled sizes it from the longest "
                "prompt plus max_new_tokens)"
            )
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        slots = self._slots(n)
        at = slots if positions is None else torch.tensor(positions, device=self.device)
        visible = None if ancestors is None else self._visible(ancestors, self.max_length)
        return input_ids, slots, at, visible

    def _run(
        self, inputs: tuple, last: int, hidden_layers: tuple[int, ...]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The compiled graph on up to `HOT_TOKENS` new tokens, the same forward uncompiled on
        more (a prompt)."""
        input_ids, slots, at, visible = inputs
        if len(slots) > HOT_TOKENS:
            return self._forward(input_ids, slots, at, visible, hidden_layers, last)
        lengths = ((input_ids, 1), (slots, 0), (at, 0), (visible, 0))
        logits, hidden = self.engine.call(
            input_ids, slots, at, visible, hidden_layers, lengths=lengths
        )
        return logits[-last:], hidden

    def warm_up(self, hidden_layers: tuple[int, ...] = (), trees: bool = False) -> float:
        """Compile the graphs (one token; two or more, under the causal mask and, with `trees`,
        under an ancestor mask) for each capture the run will ask for, then forget the
        sequence; returns the engine's `compile_s`."""
        with self.engine.warming():
            for layers in {(), tuple(hidden_layers)}:
                for tree in {False, trees}:
                    self.reset()
                    for n in (1, 2, 3):
                        mask = ancestor_mask(1, [-1] * (n - 1), self.device) if tree else None
                        self.forward(
                            [0] * n, ancestors=mask if n > 1 else None, hidden_layers=layers
                        )
        self.check(trees)
        self.reset()
        self.calls = self.positions = 0
        return self.engine.compile_s

    def check(self, trees: bool) -> None:
        """Each built graph against the same forward uncompiled, on the same cache and inputs:
        a run stops here unless their logits agree. A graph inductor loads from its on-disk
        cache is not recompiled, and one that computes something else has been seen (NaN
        logits at every step of a 256-position cache, found only because a baseline lost its
        token identity)."""
        self.reset()
        for n, tree in ((1, False), (3, False), (1, False), (3, trees)):
            ids = list(range(5, 5 + n))
            mask = ancestor_mask(1, [-1] * (n - 1), self.device) if tree else None
            start = self.length
            got = self.forward(ids, ancestors=mask).logits
            self.rollback(start)
            with self.grad_mode():
                want = self._forward(*self._inputs(ids, None, mask), (), 0)[0].float()
            self._fed(n)
            scale = float(want.abs().max())
            gap = float((got - want).abs().max())
            if not gap <= CHECK_TOLERANCE * scale:  # NaN fails too
                raise RuntimeError(
                    f"{self.name}: compiled logits differ from the uncompiled forward's by "
                    f"{gap:.3g} (largest logit {scale:.3g}) on {n} new token(s); a stale graph "
                    f"in inductor's cache? remove {os.environ.get('TORCHINDUCTOR_CACHE_DIR')} "
                    "and rerun"
                )
