"""Structured configs for the axes every run shares; a typo in any key fails at compose time.

Method and task configs are defined next to their code (see `registry.py`); this file holds the
target/drafter, logging and run schemas and the top-level `Config` that ties the groups together.
"""

from __future__ import annotations

import math
import netrc
import os
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any
from urllib.parse import urlparse

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from specbench import paths
from specbench.errors import ConfigError


@dataclass
class ModelConfig:
    """A target or drafter. `name_or_path` is a hub id, a `save_pretrained` directory, or
    `specbench:<name>` for a model the project builds itself; null means no model (drafter=none)."""

    name: str = MISSING
    name_or_path: str | None = MISSING
    kind: str = "causal"  # causal | diffusion | dflash (a DFlash drafter) | none
    adapter: str | None = None  # diffusion models: tiny | mdlm | dream | llada
    mask_token_id: int | None = None  # diffusion models: null reads the model's config
    context_length: int | None = None  # null reads the model's config
    tokenizer: str | None = None  # where the tokenizer lives, if not beside the weights
    revision: str | None = None
    trust_remote_code: bool = False
    dtype: str | None = None
    # accelerate's placement for big models: "auto" shards over the visible GPUs (and CPU),
    # `max_memory` caps each device, e.g. {0: "70GiB", 1: "70GiB", cpu: "200GiB"}
    device_map: str | None = None
    max_memory: dict[str, str] = field(default_factory=dict)
    chat_template: bool = False
    # extra arguments to the chat template, e.g. Qwen3's {enable_thinking: false}
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    system_prompt: str | None = None  # a system message before the user's turns (chat only)


WANDB_MODES = ("offline", "online", "disabled")


@dataclass
class WandbConfig:
    """W&B mirrors the local records."""

    mode: str = "offline"  # offline needs no login; disabled skips W&B; online syncs
    project: str = "specbench"
    entity: str | None = None
    group: str | None = None
    # W&B's own console lines (its run summary, sync hints); off, a run prints specbench's
    verbose: bool = False

    def check(self) -> None:
        """A mode W&B has, and for `online` a login to sync with: without one W&B would stop
        the run at its first record, asking for a key on a terminal it may not have."""
        if self.mode not in WANDB_MODES:
            raise ConfigError("logging.wandb.mode", self.mode, f"allowed: {', '.join(WANDB_MODES)}")
        if self.mode == "online" and not wandb_login():
            raise ConfigError(
                "logging.wandb.mode",
                self.mode,
                "needs a W&B login (`wandb login`, or WANDB_API_KEY); offline, the default, "
                "needs none (`wandb sync` uploads it later)",
            )


def wandb_login() -> bool:
    """Whether W&B has an API key: WANDB_API_KEY, or its host's entry in ~/.netrc (where
    `wandb login` writes it)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


@dataclass
class LoggingConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class RunConfig:
    max_new_tokens: int | None = None  # null: each task's own default
    limit: int | None = None
    # decodings of the whole sample set (trials), each recorded: the spread between them is
    # the machine's drift, which one trial's interval over samples does not hold
    repeats: int = 1
    seed: int = 0
    warmup: int = 2  # untimed decodes of each arm before measuring
    baseline: bool = True
    # also run the method's ceiling: its decoder drafting the target's own continuation
    # (`vs.oracle`, `ceiling_fraction`); greedy draft-verify methods
    oracle: bool = False
    # the oracle's acceptance forced (SGLang's SGLANG_SIMULATE_ACC_LEN): an accepted length per
    # round (an integer >= 1) or a per-token rate in (0, 1); its outputs stay the target's
    simulated_acceptance: float | None = None
    device: str = "auto"
    dtype: str = "auto"
    # eager: transformers' forward and dynamic cache; compiled: torch.compile of every model,
    # on static caches for causal LMs (specbench/models/compiled.py)
    engine: str = "eager"
    # requests in flight at once, per arm (a serving engine's batch, e.g. backend=vllm): a
    # sweep is a multirun, run.concurrency=1,4,16, one cell per level
    concurrency: int = 1
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    threads: int | None = None
    fit_context: str = "error"  # a prompt too long for a model's context: error, or truncate_left
    results_dir: str = "results/runs"
    experiment: str = "adhoc"
    name: str | None = None
    progress: bool = True
    # a run directory another process is writing: refuse (false, naming that process) or wait
    wait_lock: bool = False


@dataclass
class Config:
    target: ModelConfig = MISSING
    drafter: ModelConfig = MISSING
    method: Any = MISSING
    task: Any = MISSING
    logging: LoggingConfig = MISSING
    run: RunConfig = MISSING
    backend: Any = MISSING  # the engine the arms run on: a backend's config (conf/backend/)


def _register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="schema", node=Config)
    cs.store(group="target", name="schema_model", node=ModelConfig)
    cs.store(group="drafter", name="schema_model", node=ModelConfig)
    cs.store(group="logging", name="schema_logging", node=LoggingConfig)
    cs.store(group="run", name="schema_run", node=RunConfig)
    if not OmegaConf.has_resolver("data"):
        OmegaConf.register_new_resolver("data", lambda rel: str(paths.data_dir() / rel))
        OmegaConf.register_new_resolver("pkgdata", lambda rel: str(paths.PACKAGE_DATA / rel))
        OmegaConf.register_new_resolver("tiny", lambda rel: str(paths.TINY_DIR / rel))


_register()

ENGINES = ("eager", "compiled")
# the dtypes a model may run in (loading.DTYPES maps them to torch's)
DTYPE_NAMES = ("float32", "bfloat16", "float16", "float64")


def check_run(run: RunConfig) -> None:
    """The run's knobs that need no torch, checked as soon as the config composes (the device's
    existence is checked once torch is imported)."""
    checks = [
        (
            "run.max_new_tokens",
            run.max_new_tokens,
            run.max_new_tokens is None or run.max_new_tokens >= 1,
            "must be null (the task's default) or an integer >= 1",
        ),
        (
            "run.temperature",
            run.temperature,
            0 <= run.temperature < math.inf,
            "must be a finite number >= 0 (0 = greedy)",
        ),
        (
            "run.threads",
            run.threads,
            run.threads is None or run.threads >= 1,
            "must be null (torch's default) or an integer >= 1",
        ),
        (
            "run.results_dir",
            run.results_dir,
            bool(str(run.results_dir).strip()),
            "must be a directory path (default results/runs)",
        ),
        *(
            (
                key,
                value,
                value is None or _inside(value),
                "must be a plain name: no '/', no '..', not empty",
            )
            for key, value in (("run.name", run.name), ("run.experiment", run.experiment))
        ),
        *(
            (key, value, value is None or len(value.encode()) <= NAME_MAX, NAME_RULE)
            for key, value in (("run.name", run.name), ("run.experiment", run.experiment))
        ),
        ("run.top_p", run.top_p, 0 < run.top_p <= 1, "must be in (0, 1]"),
        ("run.top_k", run.top_k, run.top_k >= 0, "must be >= 0 (0 = off)"),
        ("run.warmup", run.warmup, run.warmup >= 0, "must be >= 0"),
        (
            "run.simulated_acceptance",
            run.simulated_acceptance,
            run.simulated_acceptance is None
            or 0 < run.simulated_acceptance < 1
            or (run.simulated_acceptance >= 1 and float(run.simulated_acceptance).is_integer()),
            "must be null, a rate in (0, 1), or an accepted length (an integer >= 1)",
        ),
        (
            "run.fit_context",
            run.fit_context,
            run.fit_context in ("error", "truncate_left"),
            "allowed: error, truncate_left",
        ),
        ("run.limit", run.limit, run.limit is None or run.limit >= 1, "must be null (all) or >= 1"),
        (
            "run.dtype",
            run.dtype,
            run.dtype == "auto" or run.dtype in DTYPE_NAMES,
            f"allowed: auto, {', '.join(DTYPE_NAMES)}",
        ),
        (
            "run.engine",
            run.engine,
            run.engine in ENGINES,
            f"allowed: {', '.join(ENGINES)}",
        ),
        ("run.concurrency", run.concurrency, run.concurrency >= 1, "must be an integer >= 1"),
        ("run.repeats", run.repeats, run.repeats >= 1, "must be an integer >= 1"),
    ]
    for key, value, ok, allowed in checks:
        if not ok:
            raise ConfigError(key, value, allowed)


def check_knobs(config: Config) -> None:
    """Every knob that needs no torch, no model and no dataset, checked as soon as the config
    composes: the run's, the backend's, the task's and the method's (their configs' own
    `check`)."""
    check_run(config.run)
    config.backend.check()
    config.logging.wandb.check()
    config.task.check()
    config.method.check(config.run.temperature, max_new_tokens(config))


def max_new_tokens(config: Config) -> int:
    """The tokens each sample generates: `run.max_new_tokens`, else the task's own default."""
    return config.run.max_new_tokens or config.task.max_new_tokens


# a directory name's limit on the filesystems results go to (ext4, xfs, btrfs, tmpfs)
NAME_MAX = 255
NAME_RULE = f"must be at most {NAME_MAX} bytes: it names a directory"


def _inside(name: str) -> bool:
    """A run or experiment name is one directory level inside the results directory."""
    name = str(name)
    return bool(name.strip()) and "/" not in name and "\\" not in name and name not in (".", "..")


def refuse_stray_keys(node: DictConfig, prefix: str = "") -> None:
    """A key that Hydra's `+key=value` added beside a schema's fields would be dropped without a
    word when the config becomes typed objects (`+run.temprature=0.7` would run greedy)."""
    kind = OmegaConf.get_type(node)
    allowed = [f.name for f in fields(kind)] if is_dataclass(kind) else None
    for key in node:
        if allowed is not None and key not in allowed:
            raise ConfigError(
                f"{prefix}{key}",
                OmegaConf.select(node, str(key)),
                f"no such key in {kind.__name__}; allowed: {', '.join(allowed)}",
            )
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            refuse_stray_keys(child, f"{prefix}{key}.")
