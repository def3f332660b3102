"""The Hydra entry point: compose -> validate (no weights) -> load -> evaluate -> summarise."""

from __future__ import annotations

import shutil
import sys
from dataclasses import asdict, dataclass
from typing import Any

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from specbench import paths
from specbench.config import ModelConfig
from specbench.decoding.autoregressive import AutoregressiveDecoder
from specbench.decoding.generation import Stop
from specbench.decoding.warp import Warp
from specbench.errors import ConfigError
from specbench.evaluate import Arms, evaluate
from specbench.metrics.summary import summarize
from specbench.models import loading
from specbench.models.diffusion import ADAPTERS
from specbench.registry import METHODS, TASKS, MethodSpec, discover
from specbench.results.env import environment, fingerprint
from specbench.results.store import RunStore, config_hash
from specbench.results.sweep import SweepSummary, write_outcome
from specbench.results.wandb import WandbMirror
from specbench.tasks.base import Sample, Task

discover()  # method and task schemas must be in Hydra's ConfigStore before it composes

GROUPS = ("target", "drafter", "method", "task", "logging", "run", "experiment")
NO_DRAFTER = asdict(ModelConfig(name="none", name_or_path=None, kind="none"))


@dataclass
class Plan:
    """Everything validated and tokenised; nothing loaded yet."""

    config: dict[str, Any]
    run_id: str
    method: MethodSpec
    warp: Warp
    task: Task
    samples: list[Sample]
    prompt_ids: dict[str, list[int]]
    tokenizer: Any
    device: torch.device
    store: RunStore


def _check_run(run: Any) -> None:
    checks = [
        (
            "run.max_new_tokens",
            run.max_new_tokens,
            run.max_new_tokens is None or run.max_new_tokens >= 1,
            "must be null (the task's default) or an integer >= 1",
        ),
        ("run.temperature", run.temperature, run.temperature >= 0, "must be >= 0 (0 = greedy)"),
        ("run.top_p", run.top_p, 0 < run.top_p <= 1, "must be in (0, 1]"),
        ("run.top_k", run.top_k, run.top_k >= 0, "must be >= 0 (0 = off)"),
        ("run.warmup", run.warmup, run.warmup >= 0, "must be >= 0"),
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
            run.dtype == "auto" or run.dtype in loading.DTYPES,
            f"allowed: auto, {', '.join(loading.DTYPES)}",
        ),
    ]
    for key, value, ok, allowed in checks:
        if not ok:
            raise ConfigError(key, value, allowed)
    try:
        device = loading.resolve_device(run.device)
    except RuntimeError:
        raise ConfigError(
            "run.device", run.device, "allowed: auto, cpu, cuda, cuda:N, mps"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("run.device", run.device, "no CUDA device here; use auto or cpu")


def _check_model(cfg: Any, key: str) -> None:
    if cfg.max_memory and not cfg.device_map:
        raise ConfigError(
            f"{key}.max_memory",
            dict(cfg.max_memory),
            f"caps accelerate's placement; set {key}.device_map (e.g. auto) with it",
        )
    if cfg.kind == "diffusion" and cfg.adapter not in ADAPTERS:
        raise ConfigError(f"{key}.adapter", cfg.adapter, f"allowed: {', '.join(ADAPTERS)}")
    if cfg.dtype is not None and cfg.dtype not in loading.DTYPES:
        raise ConfigError(
            f"{key}.dtype", cfg.dtype, f"allowed: null (run.dtype), {', '.join(loading.DTYPES)}"
        )


def _same_tokenizer(a: Any, b: Any, extra_ok: bool = False) -> str | None:
    """Why drafter tokenizer `b` cannot draft for target tokenizer `a`, or None. A diffusion
    drafter (`extra_ok`) may add tokens of its own, its mask above all (Dream adds it to
    Qwen2.5's vocabulary), but every target token must keep its id."""
    va, vb = a.get_vocab(), b.get_vocab()
    if extra_ok:
        moved = [tok for tok, i in va.items() if vb.get(tok) != i]
        return f"{len(moved)} target tokens have other ids, e.g. {moved[:3]}" if moved else None
    if va != vb:
        return f"vocabularies differ ({len(vb)} vs {len(va)} entries)"
    for attr in ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id"):
        if getattr(a, attr) != getattr(b, attr):
            return f"{attr} differs ({getattr(b, attr)} vs {getattr(a, attr)})"
    return None


def _check_drafter_vocabulary(drafter: Any, target_tokens: int) -> None:
    """A diffusion drafter scores every target token: its logits must cover the target's
    vocabulary (MDLM-OWT's 50258 = GPT-2's 50257 + the mask)."""
    config = loading.check_diffusion_checkpoint(drafter, "drafter")
    size = loading.vocabulary_size(config)
    if size is not None and size < target_tokens:
        raise ConfigError(
            "drafter",
            drafter.name,
            f"its {size} logits do not cover the target tokenizer's {target_tokens} tokens; "
            "allowed: a drafter over the target's vocabulary",
        )


def prepare(cfg: DictConfig) -> Plan:
    """Validate everything that can be checked without weights; raise ConfigError otherwise."""
    discover()
    _check_run(cfg.run)
    if cfg.method.name not in METHODS:
        raise ConfigError("method", cfg.method.name, f"allowed: {', '.join(sorted(METHODS))}")
    method = METHODS[cfg.method.name]
    warp = Warp(cfg.run.temperature, cfg.run.top_k, cfg.run.top_p)
    method.check(cfg.method, warp)
    if cfg.target.kind != method.target_kind:
        raise ConfigError(
            "target.kind",
            cfg.target.kind,
            f"method {method.name} needs a {method.target_kind} target",
        )
    _check_model(cfg.target, "target")
    method.check_target(cfg.method, cfg.target)
    if cfg.target.kind == "diffusion":
        loading.check_diffusion_checkpoint(cfg.target, "target")
    if method.needs_drafter:
        if cfg.drafter.name_or_path is None:
            raise ConfigError(
                "drafter",
                cfg.drafter.name,
                f"method {method.name} needs a drafter (e.g. drafter=gpt2)",
            )
        if cfg.drafter.kind != method.drafter_kind:
            raise ConfigError(
                "drafter.kind",
                cfg.drafter.kind,
                f"method {method.name} needs a {method.drafter_kind} drafter",
            )
        _check_model(cfg.drafter, "drafter")
    if cfg.logging.wandb.mode not in ("offline", "online", "disabled"):
        raise ConfigError(
            "logging.wandb.mode", cfg.logging.wandb.mode, "allowed: offline, online, disabled"
        )

    config = paths.portable(OmegaConf.to_container(cfg, resolve=True))
    if not method.needs_drafter:
        config["drafter"] = dict(NO_DRAFTER)  # irrelevant to this method: not in its identity
    tokenizer = loading.load_tokenizer(cfg.target, "target")
    contexts = [("target", loading.context_length(cfg.target, "target"))]
    if method.needs_drafter:
        why = _same_tokenizer(
            tokenizer,
            loading.load_tokenizer(cfg.drafter, "drafter"),
            extra_ok=method.drafter_kind == "diffusion",
        )
        if why:
            raise ConfigError(
                "drafter",
                cfg.drafter.name,
                f"its tokenizer differs from the target's: {why}; allowed: a drafter sharing the target's tokenizer",
            )
        if method.drafter_kind == "causal":  # a diffusion drafter left-truncates its prefix
            contexts.append(("drafter", loading.context_length(cfg.drafter, "drafter")))
        else:
            _check_drafter_vocabulary(cfg.drafter, len(tokenizer))

    if cfg.task.name not in TASKS:
        raise ConfigError("task", cfg.task.name, f"allowed: {', '.join(sorted(TASKS))}")
    task = TASKS[cfg.task.name].build(cfg.task, cfg.target.chat_template)
    max_new = cfg.run.max_new_tokens or cfg.task.max_new_tokens
    if max_new < 1:
        raise ConfigError("task.max_new_tokens", max_new, "must be an integer >= 1")
    samples = task.samples()[: cfg.run.limit]
    if not samples:
        raise ConfigError("task", cfg.task.name, "has no samples with these settings")
    seen: set[str] = set()
    for sample in samples:
        if sample.id in seen:  # resume is keyed by id: a repeated id would be skipped as done
            raise ConfigError(
                "task", cfg.task.name, f"sample id {sample.id!r} appears twice; ids must be unique"
            )
        seen.add(sample.id)
    prompt_ids = {s.id: task.prompt_ids(tokenizer, s, cfg.target.chat_template) for s in samples}
    context = min((ctx for _, ctx in contexts if ctx is not None), default=None)
    for sample in samples:
        ids = prompt_ids[sample.id]
        if context is None or len(ids) + max_new <= context:
            continue
        if cfg.run.fit_context == "truncate_left" and context - max_new >= 1:
            prompt_ids[sample.id] = ids[len(ids) + max_new - context :]
            sample.meta["prompt_tokens_dropped"] = len(ids) + max_new - context
            continue
        key = next(k for k, ctx in contexts if ctx == context)
        raise ConfigError(
            f"{cfg.task.name}[{sample.id}]",
            f"{len(ids)} prompt tokens",
            f"prompt + max_new_tokens ({max_new}) must fit the {key}'s context of {context} "
            "tokens (run.fit_context=truncate_left keeps the prompt's end)",
        )

    digest = config_hash(config)
    run_id = cfg.run.name or "-".join(
        [cfg.method.name, cfg.target.name, config["drafter"]["name"], cfg.task.name, digest[:8]]
    )
    store = RunStore.open(config, run_id)
    return Plan(
        config,
        run_id,
        method,
        warp,
        task,
        samples,
        prompt_ids,
        tokenizer,
        loading.resolve_device(cfg.run.device),
        store,
    )


def plain(method_cfg: Any, target: Any, warp: Warp) -> AutoregressiveDecoder:
    """The baseline arm of a method on an AR target: the target's own decoding."""
    return AutoregressiveDecoder(target, warp)


def execute(plan: Plan) -> dict[str, Any]:
    """Load weights, decode every unfinished sample, write summary and environment (a cell
    whose samples are all recorded and summarised is reported as it stands)."""
    done = plan.store.finished({s.id for s in plan.samples})
    if done is not None and done.get("n_samples") == len(plan.samples):
        print_summary(done, plan.store.run_dir)
        return done
    cfg = OmegaConf.create(plan.config)
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    load = {"causal": loading.load_causal_lm, "diffusion": loading.load_diffusion_lm}
    target = load[cfg.target.kind](cfg.target, "target", plan.device, cfg.run.dtype)
    drafter = None
    if plan.method.needs_drafter:
        drafter = load[cfg.drafter.kind](cfg.drafter, "drafter", plan.device, cfg.run.dtype)
    baseline = None
    if cfg.run.baseline:
        baseline = (plan.method.baseline or plain)(cfg.method, target, plan.warp)
    arms = Arms(method=plan.method.build(cfg.method, target, drafter, plan.warp), baseline=baseline)
    approximate = getattr(arms.method, "approximate_cache", False)
    env = environment(plan.device, config_hash(plan.config))
    plan.store.write_json("env.json", env)
    mirror = WandbMirror(
        plan.config["logging"]["wandb"],
        plan.store.run_dir,
        plan.run_id,
        cfg.run.experiment,
        plan.config,
    )
    try:
        evaluate(
            arms,
            plan.task,
            plan.samples,
            plan.prompt_ids,
            plan.tokenizer,
            Stop(
                frozenset(target.eos_token_ids),
                tuple(cfg.task.stop),
                decode=plan.tokenizer.decode,
            ),
            plan.device,
            cfg.run,
            plan.store,
            mirror,
            plan.method.lossless(cfg.method, plan.warp),
            {"approximate_cache": approximate},
        )
    finally:
        plan.store.close()
    wanted = {s.id for s in plan.samples}
    records = [r for r in plan.store.records if r["id"] in wanted]
    summary = {
        "run_id": plan.run_id,
        "method": plan.method.name,
        "target": cfg.target.name,
        "drafter": plan.config["drafter"]["name"],
        "task": cfg.task.name,
        "lossless": plan.method.lossless(cfg.method, plan.warp),
        "approximate_cache": approximate,
        **summarize(records, greedy=plan.warp.greedy),
        "env": fingerprint(env),
    }
    if plan.method.cost_model and records and summary.get("speedup"):
        prompt = plan.prompt_ids[plan.samples[0].id]
        summary.update(plan.method.cost_model(arms.method, prompt, summary))
    plan.store.write_json("summary.json", summary)
    mirror.finish(records, summary)
    print_summary(summary, plan.store.run_dir)
    return summary


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _row(name: str, summary: dict[str, Any]) -> list[str]:
    return [
        name,
        str(summary["n_samples"]),
        _fmt(summary.get("speedup"), ".2f"),
        _fmt(summary.get("tok_s"), ".1f"),
        _fmt(summary.get("baseline_tok_s"), ".1f"),
        _fmt(summary.get("tau"), ".2f"),
        _fmt(summary.get("acceptance_rate"), ".2f"),
        _fmt(summary.get("tpf"), ".2f"),
        _fmt(summary.get("tokens_per_call"), ".1f"),
        _fmt(summary.get("ttft_ms"), ".1f"),
        _fmt(summary.get("lossless_rate"), ".2f"),
    ]


def print_summary(summary: dict[str, Any], run_dir: Any) -> None:
    """One row for the run, one per category when the task has them, and each quality
    metric beside the baseline's on the same samples."""
    table = Table(title=summary["run_id"])
    columns = ("", "n", "speedup", "tok/s", "base tok/s", "tau", "accept", "tpf", "pos/call")
    columns = (*columns, "ttft ms")
    for col in (*columns, "lossless"):
        table.add_column(col, justify="right")
    table.add_row(*_row("all", summary))
    for category, part in summary.get("by_category", {}).items():
        table.add_row(*_row(category, part))
    console = Console(width=max(120, shutil.get_terminal_size().columns))
    console.print(table)
    baseline = summary.get("baseline_quality", {})
    for metric, value in summary.get("quality", {}).items():
        beside = f"  (baseline {baseline[metric]:.4g})" if metric in baseline else ""
        console.print(f"{summary['task']} {metric}: {value:.4g}{beside}")
    if "predicted_speedup" in summary:
        flag = "  [bold red]gap above 10%[/bold red]" if summary["prediction_flag"] else ""
        console.print(
            f"predicted speedup {summary['predicted_speedup']:.2f} from acceptance and forward "
            f"costs (measured {summary['speedup']:.2f}, gap {summary['prediction_gap']:+.0%}){flag}"
        )
    console.print(f"[dim]{summary['env']}[/dim]")
    console.print(f"records: {run_dir}")


@hydra.main(version_base="1.3", config_path=str(paths.CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> dict[str, Any] | None:
    """One cell. In a multirun a failing cell (a bad pairing, out of memory, ...) is recorded in
    its job's outcome and the sweep goes on; alone it fails the command."""
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    plan = None
    try:
        plan = prepare(cfg)
        summary = execute(plan)
    except Exception as err:  # an interrupt is not caught: a killed sweep stops
        print(f"specbench: error: {err}", file=sys.stderr)
        if multirun:
            write_outcome("failed", plan.run_id if plan else None, err)
            return None
        if isinstance(err, ConfigError):
            raise SystemExit(2) from None
        raise
    if multirun:
        write_outcome("ok", plan.run_id)
    return summary


def check_group_choices(argv: list[str]) -> None:
    """Fail fast, in one line, on `group=value` overrides naming no config file (Hydra's own
    message for this spans a screen)."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+~")
        if not sep or key not in GROUPS or "(" in value:
            continue
        group_dir = paths.CONF_DIR / key
        allowed = sorted(p.stem for p in group_dir.glob("*.yaml"))
        for choice in value.split(","):
            if choice and choice not in allowed:
                raise ConfigError(key, choice, f"unknown {key}; allowed: {', '.join(allowed)}")


def cli() -> None:
    try:
        check_group_choices(sys.argv[1:])
    except ConfigError as err:
        print(f"specbench: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    main()
    if SweepSummary.failed:  # the other cells finished; the command still reports failure
        raise SystemExit(1)
