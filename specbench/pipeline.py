"""One cell, one stage per function, from the composed config: typed config (once) -> `validate`
(pure) -> `check_models` (checkpoint configs, tokenizers) -> `load_samples` -> `fit_context` ->
open the store -> `load_models` -> `evaluate` -> `summarise`. No weight loads before the store
is open, so every bad input fails in one line first. `specbench/run.py` imports this module
only once the config has composed: it imports torch and transformers."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from specbench import paths
from specbench.config import DTYPE_NAMES, VLLM, Config, ModelConfig, RunConfig, check_knobs
from specbench.decoding.generation import Stop
from specbench.decoding.warp import Warp
from specbench.devices import check_device, resolve_device
from specbench.errors import ConfigError
from specbench.evaluate import Arms, Job, evaluate, warm_up
from specbench.method import Method
from specbench.metrics import cost
from specbench.metrics.summary import summarize
from specbench.models import compiled, loading
from specbench.models.kinds import ModelKind
from specbench.registry import METHODS, MODEL_KINDS, discover
from specbench.results.console import print_summary
from specbench.results.env import environment, fingerprint
from specbench.results.machine import of_env
from specbench.results.record import Record
from specbench.results.store import RunStore, config_hash
from specbench.results.summary import CEILING, Summary
from specbench.results.wandb import WandbMirror
from specbench.serving import vllm
from specbench.tasks.base import Sample, Task
from specbench.tasks.load import TaskSamples, load_samples


@dataclass
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


def kind_of(cfg: ModelConfig) -> ModelKind:
    """The registered kind a model's YAML names (`validate` has checked it is the one its
    method takes)."""
    return MODEL_KINDS[cfg.kind]()


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
    _check_backend(config, method)
    return method


def _check_backend(config: Config, method: Method) -> None:
    """vLLM runs the methods it implements, on their own (no reference or ceiling arms);
    requests in flight together need its batching engine."""
    if config.run.backend != VLLM:
        if config.run.concurrency > 1:
            raise ConfigError(
                "run.concurrency",
                config.run.concurrency,
                "needs run.backend=vllm (specbench's engine decodes one request at a time)",
            )
        return
    if not method.runs_on_vllm:
        runs = ", ".join(name for name in METHODS if METHODS[name].runs_on_vllm)
        raise ConfigError("run.backend", VLLM, f"vLLM runs methods {runs}; not {method.name}")
    if config.run.oracle:
        raise ConfigError("run.oracle", True, "is specbench's own arm; use run.backend=specbench")


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
    contexts = [("target", loading.context_length(config.target, "target"))]
    if method.drafter_kind is None:
        return tokenizer, contexts
    kind = kind_of(config.drafter)
    loading.check_weights(config.drafter, "drafter")
    kind.check_checkpoint(config.drafter, "drafter", config)
    context = kind.check_drafter(config.drafter, tokenizer)
    if context is not None:
        contexts.append(("drafter", context))
    return tokenizer, contexts


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
    if config.run.backend == VLLM:
        vllm.python_of(config.run)
        method.vllm_speculative_config(vllm_drafter(config, method))
    task, samples, max_new = loaded or load_samples(config)
    method.check_task(task, samples)
    prompt_ids = {s.id: task.prompt_ids(tokenizer, s, config.target.chat_template) for s in samples}
    fit_context(config, prompt_ids, samples, contexts, max_new)
    identity = paths.portable(asdict(config))
    run_id = run_id_of(config, identity)
    store = RunStore.open(identity, run_id)
    device = resolve_device(config.run.device)
    return Plan(
        config,
        identity,
        run_id,
        method,
        task,
        samples,
        prompt_ids,
        max_new,
        tokenizer,
        device,
        store,
    )


# Models kept from the previous cell of this process, by what made them (a sweep's cells in
# one process, the GPU world's check): loaded and compiled once while consecutive cells ask for
# them, released as soon as a cell does not. Decoders read models' counters as differences and
# reset their caches per generation, so a kept model decodes as a fresh one.
RESIDENT: dict[tuple, Any] = {}


def load_models(plan: Plan) -> tuple[Any, Any]:
    """The target and, if the method takes one, the drafter, each loaded by its kind on the
    run's device; under the compiled engine each through its kind's compile hook, the target
    capturing the layers the drafter reads. Models the previous cell left (`RESIDENT`) are
    reused; the rest of what it left is released before anything loads."""
    config = plan.config
    if config.run.threads:
        torch.set_num_threads(config.run.threads)
    roles = {"target": config.target}
    if plan.method.drafter_kind is not None:
        roles["drafter"] = config.drafter
    kinds = {key: kind_of(cfg) for key, cfg in roles.items()}
    dtypes = {key: kinds[key].dtype(cfg, config) for key, cfg in roles.items()}
    loads = {
        key: (kinds[key].name, repr(cfg), str(plan.device), dtypes[key])
        for key, cfg in roles.items()
    }
    _release(lambda kept: kept[:4] in loads.values())
    models = {
        key: _resident(
            loads[key], lambda key=key: kinds[key].load(roles[key], key, plan.device, dtypes[key])
        )
        for key in roles
    }
    if config.run.engine != "compiled":
        _release(lambda kept: kept in loads.values())
        return models["target"], models.get("drafter")
    reads = kinds["drafter"].reads_target_layers(models["drafter"]) if "drafter" in kinds else ()
    length, trees = longest_sequence(plan), plan.method.drafts_trees()
    shapes = {key: (length, tuple(reads) if key == "target" else (), trees) for key in roles}
    builds = {key: (*loads[key], *shapes[key]) for key in roles}
    _release(lambda kept: kept in loads.values() or kept in builds.values())
    for key in roles:
        models[key] = _resident(
            builds[key], lambda key=key: kinds[key].compile(models[key], *shapes[key])
        )
    return models["target"], models.get("drafter")


def _resident(key: tuple, make: Callable[[], Any]) -> Any:
    if key not in RESIDENT:
        RESIDENT[key] = make()
    return RESIDENT[key]


def _release(keep: Callable[[tuple], bool]) -> None:
    """Drop the kept models `keep` rejects, and give their memory back."""
    dropped = [key for key in RESIDENT if not keep(key)]
    for key in dropped:
        del RESIDENT[key]
    if dropped:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def longest_sequence(plan: Plan) -> int:
    """The static caches' size: the longest sample's prompt and every generated token, and in a
    multi-turn sample each later user turn with a template allowance."""
    template = 64  # tokens a chat template may add around one turn

    def need(sample: Sample) -> int:
        later = sample.user_turns[1:]
        turns = sum(len(plan.tokenizer(text)["input_ids"]) + template for text in later)
        return len(plan.prompt_ids[sample.id]) + turns + plan.max_new * (1 + len(later))

    return compiled.static_length(max(need(s) for s in plan.samples))


def summarise(plan: Plan, job: Job, env: dict[str, Any]) -> Summary:
    """The summary of the cell's records: who it is, what its losslessness means, every metric,
    and the cost model's prediction."""
    method, config = plan.method, plan.config
    wanted = {s.id for s in plan.samples}
    records = [r for r in plan.store.records if r.id in wanted]
    summary = Summary.of(
        summarize(records, greedy=method.warp.greedy, round_unit=method.round_unit),
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
    )
    if records and summary.speedup and config.run.backend != VLLM:  # it times specbench's forwards
        prompt = plan.prompt_ids[plan.samples[0].id]
        summary = replace(summary, **method.cost_model(job.arms.method, prompt, summary))
    return summary


def execute(plan: Plan) -> Summary:
    """The cell's summary: measured, or read back when every sample is recorded and summarised.
    The run directory's lock is released when this returns or fails, so a run waiting for it
    (`run.wait_lock`) then resumes from what this one recorded."""
    try:
        done = plan.store.finished({s.id for s in plan.samples})
        complete = done is not None and done.n_samples == len(plan.samples)
        summary = done if complete else measure(plan)
    finally:
        plan.store.close()
    print_summary(summary, plan.store.run_dir)
    return summary


def measure(plan: Plan) -> Summary:
    """Load weights, decode every unfinished sample, write environment and summary, and mirror
    them to W&B."""
    with ExitStack() as servers:  # a backend's server processes live as long as the cell
        build = vllm_arms if plan.config.run.backend == VLLM else specbench_arms
        return measure_arms(plan, *build(plan, servers))


def specbench_arms(plan: Plan, servers: ExitStack) -> tuple[Any, Arms, dict[str, Any]]:
    """The target, the decoders every sample runs on specbench's engine (the method's, the
    baseline, references and the ceiling) and what env.json says of the engine."""
    config, method = plan.config, plan.method
    target, drafter = load_models(plan)
    baseline = method.baseline(target) if config.run.baseline else None
    references = method.references(target, drafter) if config.run.baseline else {}
    decoder = method.build(target, drafter, plan.task)
    if config.run.oracle:
        references[CEILING] = method.ceiling(decoder, baseline, config.run.simulated_acceptance)
    engine = compiled.describe(
        config.run.engine,
        target=[target],
        drafter=[drafter, getattr(decoder, "drafter", None)],
    )
    return target, Arms(decoder, baseline, references), engine


def vllm_arms(plan: Plan, servers: ExitStack) -> tuple[Any, Arms, dict[str, Any]]:
    """The method and baseline arms in vLLM's servers (stopped when `servers` closes); the
    target is loaded here too, for its stop tokens and the tie checks of divergences."""
    config, method, cfg = plan.config, plan.method, plan.config.target
    target = kind_of(cfg).load(cfg, "target", plan.device, kind_of(cfg).dtype(cfg, config))
    python = vllm.python_of(config.run)
    decoder, baseline = vllm.start_arms(
        servers,
        python,
        (cfg, loading.resolve(cfg, "target")),
        str(target.model.dtype).removeprefix("torch."),
        longest_sequence(plan),
        config.run,
        method.vllm_speculative_config(vllm_drafter(config, method)),
        plan.store.run_dir,
        method.warp,
        method.vllm_drafts_at(),
    )
    server = decoder.server
    engine = paths.unrooted(
        {
            "name": VLLM,
            "python": python,
            "version": server.version(),
            "args": server.args,
            "env": vllm.preload(python),
        }
    )
    return target, Arms(decoder, baseline, {}, measure_ties=method.warp.greedy), engine


def vllm_drafter(config: Config, method: Method) -> str | None:
    """The drafter's path or hub id as vLLM loads it (None: the method takes none)."""
    return loading.resolve(config.drafter, "drafter") if method.drafter_kind else None


def foresee(plan: Plan, job: Job, warmed: list[Record], env: dict[str, Any]) -> None:
    """Before the timed arms: where the cost model, from the warm-up's acceptance and forward
    costs timed now, predicts a slowdown on this machine, one line on stderr says so and why;
    the run goes on (a cell that cannot pay here is still a measurement)."""
    method = plan.method
    if not warmed or plan.config.run.backend == VLLM:
        return
    metrics = summarize(warmed, greedy=method.warp.greedy, round_unit=method.round_unit)
    if not metrics.speedup:  # no baseline arm: the block model compares with it
        return
    model = method.cost_model(job.arms.method, plan.prompt_ids[warmed[0].id], metrics)
    if model and model["predicted_speedup"] < 1:
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
        method,
        arms,
        target,
        plan.task,
        plan.samples,
        plan.prompt_ids,
        plan.tokenizer,
        stop,
        plan.device,
        config.run,
    )
    env = environment(plan.device, config_hash(plan.identity))
    env["engine"] = engine
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
        evaluate(job, plan.store, mirror)
    except KeyboardInterrupt:
        mirror.interrupted()
        raise
    except Exception:
        mirror.failed()
        raise
    summary = summarise(plan, job, env)
    plan.store.write_json("summary.json", summary.to_json())
    mirror.finish([r for r in plan.store.records if r.id in {s.id for s in plan.samples}], summary)
    return summary
