"""One cell, one stage per function, from the composed config: typed config (once) -> `validate`
(pure) -> `check_models` (checkpoint configs, tokenizers) -> `load_samples` -> `fit_context` ->
open the store -> `load_models` -> `evaluate` -> `summarise`. No weight loads before the store
is open, so every bad input fails in one line first. `specbench/run.py` imports this module
only once the config has composed: it imports torch and transformers."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from specbench import paths
from specbench.backends import Backend
from specbench.config import DTYPE_NAMES, Config, ModelConfig, RunConfig, check_knobs
from specbench.decoding import cost
from specbench.decoding.generation import Stop
from specbench.decoding.warp import Warp
from specbench.devices import check_device, resolve_device
from specbench.errors import ConfigError
from specbench.evaluate import Arms, Job, evaluate, warm_up
from specbench.method import Method
from specbench.metrics import intervals
from specbench.metrics.summary import by_trial, summarize
from specbench.models import loading
from specbench.models.kinds import kind_of
from specbench.registry import BACKEND_CONFIGS, BACKENDS, METHODS, discover
from specbench.runs import load
from specbench.runs.console import print_summary
from specbench.runs.env import environment, fingerprint
from specbench.runs.machine import capped, of_env
from specbench.runs.record import Record
from specbench.runs.store import RunStore, config_hash
from specbench.runs.summary import Summary
from specbench.runs.wandb import WandbMirror
from specbench.tasks.base import Sample, Task
from specbench.tasks.load import TaskSamples, load_samples


@dataclass(kw_only=True)
class Plan:
    """Everything validated and tokenised, the store open; nothing loaded yet. `config` is the
    typed config (dataclasses); `identity` its plain form, stored as `config.yaml`."""

    config: Config
    identity: dict[str, Any]
    run_id: str
    method: Method
    task: Task
    samples: list[Sample]
    prompt_ids: dict[str, list[int]]
    max_new: int
    tokenizer: Any
    device: torch.device
    store: RunStore


def _check_model(cfg: Any, key: str) -> None:
    if not cfg.name_or_path:
        raise ConfigError(
            f"{key}.name_or_path",
            cfg.name_or_path,
            "give a hub id, a local model directory or specbench:<built-in>",
        )
    if cfg.max_memory and not cfg.device_map:
        raise ConfigError(
            f"{key}.max_memory",
            dict(cfg.max_memory),
            f"caps accelerate's placement; set {key}.device_map (e.g. auto) with it",
        )
    kind_of(cfg).check(cfg, key)
    if cfg.dtype is not None and cfg.dtype not in DTYPE_NAMES:
        raise ConfigError(
            f"{key}.dtype", cfg.dtype, f"allowed: null (run.dtype), {', '.join(DTYPE_NAMES)}"
        )


def _check_engine(config: Config, method: Method) -> None:
    """A model whose kind compiles its graphs in the run's warm-up decodes (a diffusion LM's)
    needs one: without it, the first timed sample would time the compiler."""
    if config.run.engine != "compiled" or config.run.warmup >= 1:
        return
    models = [config.target] + ([config.drafter] if method.drafter_kind else [])
    late = [cfg.kind for cfg in models if kind_of(cfg).compiles_in_warm_up]
    if late:
        raise ConfigError(
            "run.warmup",
            config.run.warmup,
            f"method {method.name} here compiles a {late[0]} model in the warm-up decodes "
            "under run.engine=compiled; allowed: >= 1",
        )


def validate(config: Config) -> Method:
    """Every check that reads no file: the knobs, the device and the models' kinds."""
    check_knobs(config)
    check_device(config.run.device)
    if config.method.name not in METHODS:
        raise ConfigError("method", config.method.name, f"allowed: {', '.join(METHODS)}")
    method = METHODS[config.method.name](config.method, warp_of(config.run))
    if config.target.kind != method.target_kind:
        raise ConfigError(
            "target.kind",
            config.target.kind,
            f"method {method.name} needs a {method.target_kind} target",
        )
    _check_model(config.target, "target")
    method.check_target(config.target)
    if method.drafter_kind is not None:
        if config.drafter.name_or_path is None:
            raise ConfigError(
                "drafter",
                config.drafter.name,
                f"method {method.name} needs a drafter (e.g. drafter=gpt2)",
            )
        if config.drafter.kind != method.drafter_kind:
            raise ConfigError(
                "drafter.kind",
                config.drafter.kind,
                f"method {method.name} needs a {method.drafter_kind} drafter",
            )
        _check_model(config.drafter, "drafter")
    _check_engine(config, method)
    _check_oracle(config, method)
    backend_of(config).check(config, method)
    return method


def backend_of(config: Config) -> Backend:
    """The registered backend the `backend` group chose (its config's `name`)."""
    name = config.backend.name
    chosen = name in BACKENDS and name in BACKEND_CONFIGS
    if not chosen or type(config.backend) is not BACKEND_CONFIGS[name]:
        raise ConfigError(
            "backend.name", name, f"choose a backend with backend=<{'|'.join(BACKENDS)}>"
        )
    return BACKENDS[name]()


def _check_oracle(config: Config, method: Method) -> None:
    """The ceiling arm replaces a draft-verify method's drafts with the baseline's greedy
    continuation: it needs drafts, the baseline arm, and greedy decoding."""
    if not config.run.oracle:
        if config.run.simulated_acceptance is not None:
            raise ConfigError(
                "run.simulated_acceptance",
                config.run.simulated_acceptance,
                "shapes the ceiling arm; set run.oracle=true with it",
            )
        return
    if not method.has_ceiling:
        raise ConfigError("run.oracle", True, f"method {method.name} has no drafts to replace")
    if not config.run.baseline:
        raise ConfigError(
            "run.oracle", True, "needs run.baseline=true (it drafts the baseline's continuation)"
        )
    if not method.warp.greedy:
        raise ConfigError(
            "run.oracle",
            True,
            "needs run.temperature=0 (a sampled continuation is no perfect drafter)",
        )


def warp_of(run: RunConfig) -> Warp:
    return Warp(run.temperature, run.top_k, run.top_p)


def check_models(config: Config, method: Method) -> tuple[Any, list[tuple[str, int | None]]]:
    """Checkpoint configs and tokenizers (no weights): the target's tokenizer, and each model's
    context length for `fit_context`."""
    kind_of(config.target).check_checkpoint(config.target, "target", config)
    loading.check_weights(config.target, "target")
    tokenizer = loading.load_tokenizer(config.target, "target")
    contexts = []
    if method.drafter_kind is not None:
        kind = kind_of(config.drafter)
        loading.check_weights(config.drafter, "drafter")
        kind.check_checkpoint(config.drafter, "drafter", config)
        context = kind.check_drafter(config.drafter, tokenizer)
        if context is not None:
            contexts.append(("drafter", context))
    # the target's context from its config.json last: reading it builds a built-in target,
    # which a drafter refused for its tokenizer must not leave in the cache
    return tokenizer, [("target", loading.context_length(config.target, "target")), *contexts]


def fit_context(
    config: Config,
    prompt_ids: dict[str, list[int]],
    samples: list[Sample],
    contexts: list[tuple[str, int | None]],
    max_new: int,
) -> None:
    """Every prompt plus `max_new` tokens must fit the smallest context; `truncate_left` keeps
    a prompt's end instead (the dropped count goes into the sample's meta)."""
    context = min((ctx for _, ctx in contexts if ctx is not None), default=None)
    for sample in samples:
        ids = prompt_ids[sample.id]
        if context is None or len(ids) + max_new <= context:
            continue
        if config.run.fit_context == "truncate_left" and context - max_new >= 1:
            prompt_ids[sample.id] = ids[len(ids) + max_new - context :]
            sample.meta["prompt_tokens_dropped"] = len(ids) + max_new - context
            continue
        key = next(k for k, ctx in contexts if ctx == context)
        raise ConfigError(
            f"{config.task.name}[{sample.id}]",
            f"{len(ids)} prompt tokens",
            f"prompt + max_new_tokens ({max_new}) must fit the {key}'s context of {context} "
            "tokens (run.fit_context=truncate_left keeps the prompt's end)",
        )


def run_id_of(config: Config, identity: dict[str, Any]) -> str:
    """`run.name`, or method-target-drafter-task and the config hash: the cell's identity."""
    parts = [config.method.name, config.target.name, config.drafter.name, config.task.name]
    return config.run.name or "-".join([*parts, config_hash(identity)[:8]])


def prepare(cfg: DictConfig, loaded: TaskSamples | None = None) -> Plan:
    """Validate everything that can be checked without weights (ConfigError otherwise), then
    open the run directory. `loaded` is the task and samples `load_samples` already read
    (the command reads them before torch is imported)."""
    discover()
    config: Config = OmegaConf.to_object(cfg)
    method = validate(config)
    if method.drafter_kind is None:  # a drafter the method does not take is not its identity
        config.drafter = ModelConfig(name="none", name_or_path=None, kind="none")
    tokenizer, contexts = check_models(config, method)
    backend_of(config).prepare(config, method)
    task, samples, max_new = loaded or load_samples(config)
    method.check_task(task, samples)
    prompt_ids = {s.id: task.prompt_ids(tokenizer, s, config.target.chat_template) for s in samples}
    fit_context(config, prompt_ids, samples, contexts, max_new)
    identity = paths.portable(asdict(config))
    run_id = run_id_of(config, identity)
    store = RunStore.open(identity, run_id)
    device = resolve_device(config.run.device)
    return Plan(
        config=config,
        identity=identity,
        run_id=run_id,
        method=method,
        task=task,
        samples=samples,
        prompt_ids=prompt_ids,
        max_new=max_new,
        tokenizer=tokenizer,
        device=device,
        store=store,
    )


def wanted(plan: Plan) -> set[tuple[str, int]]:
    """The (sample id, trial) keys this cell's summary is made of: `run.limit` samples times
    `run.repeats` trials (a directory may hold more, from a run with larger ones)."""
    return {(s.id, trial) for s in plan.samples for trial in range(plan.config.run.repeats)}


def wanted_records(plan: Plan) -> list[Record]:
    keys = wanted(plan)
    return [r for r in plan.store.records if r.key in keys]


def summarise(plan: Plan, job: Job, env: dict[str, Any]) -> Summary:
    """The summary of the cell's records: who it is, what its losslessness means, every metric,
    and the cost model's prediction."""
    method, config = plan.method, plan.config
    records = wanted_records(plan)
    metrics = summarize(records, greedy=method.warp.greedy, round_unit=method.round_unit)
    summary = Summary.of(
        intervals.with_intervals(metrics, records),
        bootstrap=intervals.settings(),
        by_trial=by_trial(records, greedy=method.warp.greedy, round_unit=method.round_unit),
        run_id=plan.run_id,
        method=method.name,
        label=method.label(),
        target=config.target.name,
        drafter=config.drafter.name,
        task=config.task.name,
        baseline=method.baseline_name if config.run.baseline else None,
        lossless=method.exact(),
        lossless_wrt=method.lossless_wrt(),
        facts=method.facts(job.arms.method),
        workload=asdict(plan.task.workload(plan.samples)),
        env=fingerprint(env),
        machine=of_env(env).label(),
        load=env.get("load", {}),
        contended=load.contended(env.get("load", {})),
    )
    if not (records and summary.base and summary.base.speedup and backend_of(config).predicts):
        return summary
    if summary.contended:  # its forward costs would be timed beside the same other work
        return replace(summary, prediction_refused=load.REFUSED)
    prompt = plan.prompt_ids[plan.samples[0].id]
    return replace(summary, **method.cost_model(job.arms.method, prompt, summary))


def execute(plan: Plan) -> Summary:
    """The cell's summary: measured, or read back when every sample is recorded and summarised.
    The run directory's lock is released when this returns or fails, so a run waiting for it
    (`run.wait_lock`) then resumes from what this one recorded."""
    try:
        keys = wanted(plan)
        done = plan.store.finished(keys)
        complete = done is not None and done.n_samples == len(keys)
        summary = done if complete else measure(plan)
    finally:
        plan.store.close()
    print_summary(summary, plan.store.run_dir)
    return summary


def measure(plan: Plan) -> Summary:
    """Load weights, decode every unfinished sample, write environment and summary, and mirror
    them to W&B."""
    with ExitStack() as servers:  # a backend's server processes live as long as the cell
        return measure_arms(plan, *backend_of(plan.config).arms(plan, servers))


def foresee(plan: Plan, job: Job, warmed: list[Record], env: dict[str, Any]) -> None:
    """Before the timed arms: where the cost model, from the warm-up's acceptance and forward
    costs timed now, predicts a slowdown on this machine, one line on stderr says so and why;
    the run goes on (a cell that cannot pay here is still a measurement)."""
    method = plan.method
    if not warmed or not backend_of(plan.config).predicts:
        return
    metrics = summarize(warmed, greedy=method.warp.greedy, round_unit=method.round_unit)
    if not (metrics.base and metrics.base.speedup):  # the block model compares with it
        return
    model = method.cost_model(job.arms.method, plan.prompt_ids[warmed[0].id], metrics)
    if model.get("predicted_speedup", 1) < 1:
        dtype = str(job.target.model.dtype).removeprefix("torch.")
        print(
            f"specbench: warning: predicted {model['predicted_speedup']:.2f}x before timing: "
            f"{cost.why_slow(model['forward_ms'])} on {of_env(env).label()} ({dtype}); "
            "timing it anyway",
            file=sys.stderr,
        )


def measure_arms(plan: Plan, target: Any, arms: Arms, engine: dict) -> Summary:
    config, method = plan.config, plan.method
    stop = Stop(
        frozenset(target.eos_token_ids), tuple(config.task.stop), decode=plan.tokenizer.decode
    )
    job = Job(
        method=method,
        arms=arms,
        target=target,
        task=plan.task,
        samples=plan.samples,
        prompt_ids=plan.prompt_ids,
        tokenizer=plan.tokenizer,
        stop=stop,
        device=plan.device,
        run=config.run,
        max_new=plan.max_new,
    )
    env = environment(plan.device, config_hash(plan.identity))
    env["engine"] = engine
    if engine.get("isa"):  # kernels built for less than the CPU has
        env["machine"]["isa"] = capped(env["machine"]["isa"], engine["isa"])
    seconds, warmed = warm_up(job, plan.store)
    env["warm_up_s"] = round(seconds, 2)
    plan.store.write_json("env.json", env)
    foresee(plan, job, warmed, env)
    mirror = WandbMirror(
        plan.identity["logging"]["wandb"],
        plan.store,
        plan.run_id,
        config.run.experiment,
        plan.identity,
    )
    try:
        with load.sampled() as env["load"]:
            evaluate(job, plan.store, mirror)
    except KeyboardInterrupt:
        mirror.interrupted()
        raise
    except Exception:
        mirror.failed()
        raise
    plan.store.write_json("env.json", env)
    if load.contended(env["load"]):
        print(load.warning(env["load"]), file=sys.stderr)
    summary = summarise(plan, job, env)
    plan.store.write_json("summary.json", summary.to_json())
    mirror.finish(wanted_records(plan), summary)
    return summary
