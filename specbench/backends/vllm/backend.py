"""`backend=vllm`: a cell's arms inside vLLM's engine instead of specbench's (the servers,
requests and records: `server.py`; the knobs: `config.py`).

The methods vLLM runs, and how each config maps to vLLM's `--speculative-config`, are this
backend's table (`SPECULATIVE`); a config vLLM has no knob for is refused in one line before any
server starts, and every other method is refused by name. vLLM runs the method's and the
baseline's arms only (no reference or ceiling arms), several requests in flight at once
(`run.concurrency`), and its forwards are not specbench's to time, so no cost model predicts it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from transformers import PretrainedConfig

from specbench import paths
from specbench.backends import Backend, longest_sequence, runs_only
from specbench.backends.serving import DraftsAt
from specbench.backends.vllm.server import Launch, preload, python_of, start_arms
from specbench.config import Config
from specbench.decoding.drafters.pld.method import lookup
from specbench.decoding.verify import resolve_rule
from specbench.errors import ConfigError
from specbench.evaluate import Arms
from specbench.method import Method
from specbench.models import compiled, loading
from specbench.models.kinds import kind_of
from specbench.registry import BACKENDS


def plain(method: Method, drafter: str | None) -> None:
    """`ar`: vLLM without a speculative config."""
    return None


def exact_rule(method: Method) -> tuple[str, str, str]:
    """The rule knob against the exact rule at the cell's temperature, for `runs_only`."""
    warp = method.warp
    return ("method.rule", resolve_rule(method.cfg.rule, warp), resolve_rule("auto", warp))


def draft_model(method: Method, drafter: str | None) -> dict:
    """`sps`: vLLM's draft_model, a chain of gamma, exact verification."""
    cfg = method.cfg
    runs_only(
        "vLLM's draft_model",
        ("method.tree", cfg.tree, None),
        ("method.schedule", cfg.schedule, "constant"),
        exact_rule(method),
    )
    return {"method": "draft_model", "model": drafter, "num_speculative_tokens": cfg.gamma}


def eagle3(method: Method, drafter: str | None) -> dict:
    """`eagle3`: vLLM's eagle3, a chain of gamma (vLLM drafts no tree), exact verification.
    vLLM loads EAGLE's own layout as committed (`d2t` kept, `t2d` skipped, the target's
    embeddings shared where the drafter has none) and reads the same target layers: its
    `eagle_aux_hidden_state_layer_ids`, like specbench's, name a layer's input."""
    runs_only("vLLM's eagle3", ("method.tree", method.cfg.tree, None), exact_rule(method))
    return {"method": "eagle3", "model": drafter, "num_speculative_tokens": method.cfg.gamma}


def dflash(method: Method, drafter: str | None) -> dict:
    """`dflash`: vLLM's dflash, a block of block_size - 1 drafts, exact verification."""
    if resolve_rule(method.cfg.rule, method.warp) != resolve_rule("auto", method.warp):
        raise ConfigError("method.rule", method.cfg.rule, "vLLM's dflash verifies exactly only")
    block = method.cfg.block_size or PretrainedConfig.get_config_dict(drafter)[0]["block_size"]
    return {"method": "dflash", "model": drafter, "num_speculative_tokens": block - 1}


def ngram(method: Method, drafter: str | None) -> dict:
    """`pld`: vLLM's ngram proposer, the same lookup (specbench/decoding/drafters/pld/)."""
    cfg = method.cfg
    return {
        "method": "ngram",
        "num_speculative_tokens": cfg.gamma,
        "prompt_lookup_min": cfg.prompt_lookup_min,
        "prompt_lookup_max": cfg.prompt_lookup_max,
    }


def ngram_drafts_at(method: Method) -> DraftsAt:
    """Whether vLLM's ngram proposer drafts after a context: vLLM records no step it drafted
    nothing for, so the backend places those steps by PLD's own lookup."""
    cfg = method.cfg
    return lambda context: bool(
        lookup(context, cfg.prompt_lookup_min, cfg.prompt_lookup_max, cfg.gamma)
    )


# method name -> its speculative config from the method's config and the drafter's path
SPECULATIVE: dict[str, Callable[[Method, str | None], dict | None]] = {
    "ar": plain,
    "sps": draft_model,
    "dflash": dflash,
    "eagle3": eagle3,
    "pld": ngram,
}
# method name -> where its proposer drafts (absent: at every step, a drafter model)
DRAFTS_AT: dict[str, Callable[[Method], DraftsAt]] = {"pld": ngram_drafts_at}


def drafter_of(config: Config, method: Method) -> str | None:
    """The drafter's path or hub id as vLLM loads it (None: the method takes none)."""
    return loading.resolve(config.drafter, "drafter") if method.drafter_kind else None


@BACKENDS.register
class VLLM(Backend):
    name = "vllm"
    concurrent = True
    own_arms = False
    predicts = False
    methods = SPECULATIVE
    engine = "vLLM"

    def prepare(self, config: Config, method: Method) -> None:
        python_of(config.backend)
        SPECULATIVE[method.name](method, drafter_of(config, method))

    def arms(self, plan: Any, stack: ExitStack) -> tuple[Any, Arms, dict[str, Any]]:
        """The method and baseline arms in vLLM's servers; the target is loaded here too, for
        its stop tokens and the tie checks of divergences."""
        config, method, cfg = plan.config, plan.method, plan.config.target
        kind = kind_of(cfg)
        target = kind.load(cfg, "target", plan.device, kind.dtype(cfg, config))
        launch = Launch(
            python=python_of(config.backend),
            target=cfg,
            model=loading.resolve(cfg, "target"),
            dtype=str(target.model.dtype).removeprefix("torch."),
            max_len=compiled.static_length(longest_sequence(plan)),
            run=config.run,
            startup_s=config.backend.startup_s,
            logs=plan.store.run_dir,
        )
        speculative = SPECULATIVE[method.name](method, drafter_of(config, method))
        drafts_at = DRAFTS_AT[method.name](method) if method.name in DRAFTS_AT else None
        decoder, baseline = start_arms(stack, launch, speculative, method.warp, drafts_at)
        server = decoder.server
        engine = {
            "name": self.name,
            "python": launch.python,
            "version": server.version(),
            "args": server.args,
            "env": preload(launch.python),
        }
        arms = Arms(decoder, baseline, {}, measure_ties=method.warp.greedy)
        return target, arms, paths.unrooted(engine)
