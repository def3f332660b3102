"""`backend=llamacpp`: a cell's arms inside llama.cpp's `llama-server` instead of specbench's engine
(servers and requests: `server.py`; knobs: `config.py`).

The methods llama.cpp runs, and how each config maps to llama-server's `--spec-*` flags, are this
backend's table (`SPEC_FLAGS`); a knob llama.cpp has no flag for is refused in one line before
any server starts, and every other method is refused by name. The checkpoints are served as GGUF
exports in `backend.quant` (specbench/models/gguf_export.py). llama.cpp runs the method's and
the baseline's arms only, several requests in flight through its slots (`run.concurrency`), and
decodes greedily only; its forwards are not specbench's to time, so no cost model predicts it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from specbench import paths
from specbench.backends import Backend, longest_sequence, runs_only
from specbench.backends.llamacpp.server import (
    Launch,
    build_info,
    build_isa,
    server_of,
    start_arms,
)
from specbench.backends.serving import DraftsAt
from specbench.config import Config, ModelConfig
from specbench.errors import ConfigError
from specbench.evaluate import Arms
from specbench.method import Method
from specbench.models import compiled, gguf_export, loading
from specbench.models.kinds import kind_of
from specbench.registry import BACKENDS


def plain(method: Method, drafter: dict | None) -> list[str]:
    """`ar`: llama-server without speculation."""
    return []


def chain(spec_type: str, gamma: int) -> list[str]:
    """A chain of gamma drafts every step, verified greedily. p-min 0 keeps llama.cpp from
    cutting a draft short where the drafter is unsure; n-min 0 lets the last steps draft what
    the length limit leaves (min(gamma, remaining - 1)), as specbench's loop does, where
    n-min gamma would clear those drafts."""
    return [
        *("--spec-type", spec_type, "--spec-draft-n-max", str(gamma)),
        *("--spec-draft-n-min", "0", "--spec-draft-p-min", "0"),
    ]


def draft_simple(method: Method, drafter: dict | None) -> list[str]:
    """`sps`: a draft model proposing a chain of gamma tokens every step."""
    cfg = method.cfg
    runs_only(
        "llama.cpp's draft-simple",
        ("method.tree", cfg.tree, None),
        ("method.schedule", cfg.schedule, "constant"),
        ("method.rule", cfg.rule, "auto"),
    )
    return chain("draft-simple", cfg.gamma)


def draft_eagle3(method: Method, drafter: dict | None) -> list[str]:
    """`eagle3`: llama.cpp's draft-eagle3, the drafter fed the target's three layers' states
    (its GGUF names them) drafting a chain of gamma tokens every step; llama.cpp drafts no
    tree, so a tree's knobs (top_k, budget) have nothing to set."""
    cfg = method.cfg
    runs_only(
        "llama.cpp's draft-eagle3",
        ("method.tree", cfg.tree, None),
        ("method.rule", cfg.rule, "auto"),
    )
    return chain("draft-eagle3", cfg.gamma)


def ngram_simple(method: Method, drafter: dict | None) -> list[str]:
    """`pld`: llama.cpp's ngram-simple, which looks up one n-gram length (docs/methods.md has
    how its lookup differs from specbench's and vLLM's)."""
    cfg = method.cfg
    if cfg.prompt_lookup_min != cfg.prompt_lookup_max:
        raise ConfigError(
            "method.prompt_lookup_min",
            cfg.prompt_lookup_min,
            "llama.cpp's ngram-simple looks up one n-gram length: set it to "
            f"method.prompt_lookup_max ({cfg.prompt_lookup_max})",
        )
    if cfg.gamma < cfg.prompt_lookup_max:  # it would decode plainly, a draft never made
        raise ConfigError(
            "method.gamma",
            cfg.gamma,
            "llama.cpp's ngram-simple drafts only where it can copy at least n tokens "
            f"(common/ngram-map.cpp): set method.gamma >= method.prompt_lookup_max "
            f"({cfg.prompt_lookup_max})",
        )
    return [
        *("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(cfg.prompt_lookup_max)),
        *("--spec-ngram-simple-size-m", str(cfg.gamma), "--spec-ngram-simple-min-hits", "1"),
    ]


def draft_dflash(method: Method, drafter: dict | None) -> list[str]:
    """`dflash`: llama.cpp's draft-dflash, a block of block_size - 1 drafts per step."""
    if method.cfg.rule != "auto":
        raise ConfigError("method.rule", method.cfg.rule, "llama.cpp's draft-dflash runs auto only")
    block = method.cfg.block_size or drafter["block_size"]
    return ["--spec-type", "draft-dflash", "--spec-draft-n-max", str(block - 1)]


# method name -> llama-server's speculative flags from the method's config and the drafter's
# config.json (None: the method takes no drafter)
SPEC_FLAGS: dict[str, Callable[[Method, dict | None], list[str]]] = {
    "ar": plain,
    "sps": draft_simple,
    "pld": ngram_simple,
    "dflash": draft_dflash,
    "eagle3": draft_eagle3,
}
# the drafter kinds whose GGUF holds the target's vocabulary (they read the target's states)
READS_TARGET = ("dflash", "eagle3")


def ngram_simple_drafts(context: list[int], n: int, m: int) -> bool:
    """Whether llama.cpp's ngram-simple drafts after `context` (common/ngram-map.cpp,
    `common_ngram_simple_draft`): the last n tokens found earlier, the latest such place but
    the suffix itself and position 0, with at least n tokens after it to copy."""
    tokens, sampled = context[:-1], context[-1]
    length = len(tokens)
    if length <= n + m + 1:
        return False
    pattern = [*tokens[length - n + 1 :], sampled]
    for start in range(length - n - 1, 0, -1):
        if tokens[start : start + n] == pattern:
            return min(m, length - (start + n)) >= n
    return False


def ngram_drafts_at(method: Method) -> DraftsAt:
    """llama.cpp records no step its proposer drafted nothing for: the backend places those
    steps by replaying ngram-simple's decision."""
    cfg = method.cfg
    return lambda context: ngram_simple_drafts(context, cfg.prompt_lookup_max, cfg.gamma)


# method name -> where its proposer drafts (absent: at every step, a drafter model)
DRAFTS_AT: dict[str, Callable[[Method], DraftsAt]] = {"pld": ngram_drafts_at}


def local_checkpoint(cfg: ModelConfig, key: str) -> Path:
    """The checkpoint's directory, refused in one line unless it is local (a built-in or a
    `save_pretrained` directory) and GGUF export takes it."""
    ref = Path(loading.resolve(cfg, key))
    if not (ref / "config.json").is_file():
        raise ConfigError(
            f"{key}.name_or_path",
            cfg.name_or_path,
            "backend=llamacpp serves local checkpoints only (a specbench: built-in or a "
            "save_pretrained directory)",
        )
    gguf_export.check_exportable(
        loading.checkpoint_config(cfg, key), f"{key}.name_or_path", cfg.name_or_path
    )
    return ref


@BACKENDS.register
class LlamaCpp(Backend):
    name = "llamacpp"
    concurrent = True
    own_arms = False
    predicts = False
    methods = SPEC_FLAGS
    engine = "llama.cpp"

    def check(self, config: Config, method: Method) -> None:
        super().check(config, method)
        if not method.warp.greedy:
            raise ConfigError(
                "run.temperature", config.run.temperature, "backend=llamacpp decodes greedily only"
            )

    def prepare(self, config: Config, method: Method) -> None:
        server_of(config.backend)
        local_checkpoint(config.target, "target")
        drafter = None
        if method.drafter_kind:
            local_checkpoint(config.drafter, "drafter")
            drafter = loading.checkpoint_config(config.drafter, "drafter")
        SPEC_FLAGS[method.name](method, drafter)

    def arms(self, plan: Any, stack: ExitStack) -> tuple[Any, Arms, dict[str, Any]]:
        """The method and baseline arms in llama-server processes; the target is loaded here
        too, for its stop tokens and the tie checks of divergences."""
        config, method, cfg = plan.config, plan.method, plan.config.target
        kind = kind_of(cfg)
        target = kind.load(cfg, "target", plan.device, kind.dtype(cfg, config))
        quant, checkpoint = config.backend.quant, local_checkpoint(cfg, "target")
        model, drafter = gguf_export.cached(checkpoint, quant), None
        drafter_config = None
        if method.drafter_kind:
            drafter_config = loading.checkpoint_config(config.drafter, "drafter")
            drafter = gguf_export.cached(
                local_checkpoint(config.drafter, "drafter"),
                quant,
                target=checkpoint if method.drafter_kind in READS_TARGET else None,
            )
        flags = SPEC_FLAGS[method.name](method, drafter_config)
        launch = Launch(
            server=server_of(config.backend),
            model=model,
            drafter=drafter,
            quant=quant,
            max_len=compiled.static_length(longest_sequence(plan)),
            threads=config.backend.threads or config.run.threads,
            run=config.run,
            startup_s=config.backend.startup_s,
            logs=plan.store.run_dir,
        )
        drafts_at = DRAFTS_AT[method.name](method) if method.name in DRAFTS_AT else None
        decoder, baseline = start_arms(stack, launch, flags, drafts_at)
        build = build_info(launch.server)
        engine = {
            "name": self.name,
            "server": launch.server,
            "build": build,
            "isa": build_isa(build),
            "args": decoder.server.command()[1:],
            "models": {"target": model.name, "drafter": drafter.name if drafter else None},
        }
        arms = Arms(decoder, baseline, {}, measure_ties=method.warp.greedy)
        return target, arms, paths.unrooted(engine)
