"""The GPU world's device check, one command: build the world on the GPU (`tiny-8b`,
`tiny-dlm-8b`, `tiny-dflash-8b`: grown in float32, checked against their sources, saved in bf16),
record its forward-cost curve, run every `*_gpu` preset (compiled engine: static caches and
CUDA graphs; lossless checks on), measure each cell's harness overhead, and write the run
directories, `world.json`, `forward_cost.csv`, `cells.json` and `table.md` under `--out`.

Sized for one 10-minute device call on an H100 or H200: building the two 7B models about a
minute, the curve half a minute, then cells of 8 tiny_code prompts x 128 tokens (each beside
the target's own decoding) while `--budget` lasts; a cell that would not fit is listed as
skipped. `--rehearse` runs the same code on a CPU at the rehearsal growth (`tiny-8b-rehearsal`,
...) in float32, 2 prompts x 16 tokens: the slow test tier runs it, so no device minute is
spent on a bug a CPU can find.

    python benchmarks/gpu_world.py --out /tmp/gpu_world --budget 480      # a CUDA box
    python benchmarks/gpu_world.py --rehearse --out /tmp/gpu_world        # any CPU

On a lent device machine (docs/tiny-world.md: `make gpu-wheels` first, here):
    tools/gpu_world.sh
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from specbench import paths
from specbench.backends.specbench.backend import Specbench
from specbench.config import ENGINES, ModelConfig
from specbench.decoding.cost import median_ms
from specbench.metrics.speed import synchronize
from specbench.models import compiled
from specbench.models.kinds.causal import load_causal_lm
from specbench.models.kinds.diffusion import load_diffusion_lm
from specbench.models.loading import resolve
from specbench.pipeline import measure_arms, prepare
from specbench.registry import discover
from specbench.runs.summary import Summary

# every *_gpu preset; ddtree at three budgets (DFlash runs beside each)
CELLS = {
    "sps": ["experiment=sps_gpu"],
    "sps tree": ["experiment=sps_tree_gpu"],
    "pld": ["experiment=pld_gpu"],
    "dflash": ["experiment=dflash_gpu"],
    **{f"ddtree N{n}": ["experiment=ddtree_gpu", f"method.budget={n}"] for n in (16, 32, 64)},
    "eagle3": ["experiment=eagle3_gpu"],
    "specdiff": ["experiment=specdiff_gpu"],
    "diffuspec": ["experiment=diffuspec_gpu"],
    "failfast": ["experiment=failfast_gpu"],
    "dllm": ["experiment=dllm_gpu"],
    "psd": ["experiment=psd_gpu"],
    "spiffy": ["experiment=spiffy_gpu"],
}
CURVE = (1, 2, 4, 8, 16, 24, 32, 48, 64)  # verify(k) / step(1)
CONTEXT = 128  # tokens cached before a timed forward
DLM_BLOCK = 32  # the dLLM presets' block
SPIFFY_DRAFTS = 10  # draft rows a Spiffy verification batch adds (its presets' nodes)
OVERHEAD_PROMPTS = 2  # decodes of each cell's method arm with its model calls timed
# what a model is called through: causal LMs, diffusion LMs, a DFlash drafter and its head
MODEL_CALLS = (
    "forward_tokens",
    "forward",
    "canvas_logits",
    "tree_logits",
    "block_logits",
    "compute_logits",
)


@dataclass(frozen=True)
class Scale:
    """Where and at what size the world runs."""

    models: dict[str, str]  # the presets' model names -> the built-ins that run
    device: str
    dtype: str  # the grown models' dtype in every cell
    limit: int
    max_new_tokens: int
    engine: str = "compiled"


GPU = Scale(
    {name: name for name in ("tiny-8b", "tiny-dlm-8b", "tiny-dflash-8b", "tiny-eagle3-8b")},
    "cuda",
    "bfloat16",
    8,
    128,
)
REHEARSAL = Scale({name: f"{name}-rehearsal" for name in GPU.models}, "cpu", "float32", 2, 16)


def builtin(name: str, kind: str = "causal") -> ModelConfig:
    adapter = "tiny" if kind == "diffusion" else None
    return ModelConfig(name=name, name_or_path=f"specbench:{name}", kind=kind, adapter=adapter)


def build_world(scale: Scale, out: Path) -> dict:
    """Each grown built-in, built where it is missing (timed), with its growth record (its
    parameters and the float32 check against its source)."""
    world = {}
    for role, name in scale.models.items():
        started = time.perf_counter()
        where = Path(resolve(builtin(name), role))
        world[name] = {
            **json.loads((where / "growth.json").read_text()),
            "ready_s": round(time.perf_counter() - started, 1),
        }
        check = world[name].get("check")
        print(f"{name}: {world[name]['parameters'] / 1e6:,.0f}M parameters, check {check}")
    (out / "world.json").write_text(json.dumps(world, indent=2) + "\n")
    return world


def causal_costs(name: str, scale: Scale, device: torch.device, costs: dict) -> None:
    """A causal model under the cells' engine: k new tokens over a cached context."""
    lm = load_causal_lm(builtin(name), name, device, scale.dtype)
    if scale.engine == "compiled":
        lm = compiled.CompiledCausalLM.from_eager(lm, compiled.static_length(CONTEXT + 2 * 64))
        lm.warm_up()
    lm.prefill(list(range(100, 100 + CONTEXT)))
    for k in CURVE if name != "tiny-ar" else (1,):
        ids = list(range(10, 10 + k))
        costs[f"{name}, {k} tokens"] = median_ms(
            lambda ids=ids: lm.forward_tokens(ids, keep=len(ids)),
            device,
            after=lambda k=k: lm.rollback(lm.length - k),
        )


def dlm_costs(name: str, scale: Scale, device: torch.device, costs: dict) -> None:
    """The dLLM under the cells' engine, read through a prefix cache as its presets read it: a
    block behind the cached prefix, and a verification batch of the block with Spiffy's draft
    rows, as one forward."""
    lm = load_diffusion_lm(builtin(name, "diffusion"), "target", device, scale.dtype)
    if scale.engine == "compiled":
        compiled.compile_diffusion(lm)
    reading = lm.reading(prefix_cache=True)
    lo, hi = CONTEXT, CONTEXT + DLM_BLOCK
    canvas = torch.tensor([list(range(100, 100 + CONTEXT)) + [lm.mask_id] * DLM_BLOCK])
    canvas = canvas.to(device)
    drafts = canvas[:, lo:].expand(SPIFFY_DRAFTS, -1)
    lm.canvas_logits(canvas, lo, hi, reading)  # the prefix enters the cache once
    calls = {
        f"{name}, block of {DLM_BLOCK}": lambda: lm.canvas_logits(canvas, lo, hi, reading),
        f"{name}, block + {SPIFFY_DRAFTS} draft rows": lambda: lm.tree_logits(
            canvas, lo, hi, drafts, reading
        ),
    }
    for label, call in calls.items():
        costs[label] = median_ms(call, device)


def forward_costs(scale: Scale, out: Path) -> dict:
    """Median milliseconds of every call the cells' costs rest on, written to CSV."""
    device, costs = torch.device(scale.device), {}
    for name in (scale.models["tiny-8b"], "tiny-ar"):
        causal_costs(name, scale, device, costs)
    dlm_costs(scale.models["tiny-dlm-8b"], scale, device, costs)
    with open(out / "forward_cost.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([("call", "median_ms"), *sorted(costs.items())])
    return costs


def curve_lines(costs: dict, scale: Scale) -> list[str]:
    target, dlm = scale.models["tiny-8b"], scale.models["tiny-dlm-8b"]
    step = costs[f"{target}, 1 tokens"]
    lines = [f"{target} step {step:.2f} ms; verify(k)/step:"]
    lines += [f"  k={k}: {costs[f'{target}, {k} tokens'] / step:.2f}" for k in CURVE]
    lines.append(f"tiny-ar step / target step: {costs['tiny-ar, 1 tokens'] / step:.3f}")
    block = costs[f"{dlm}, block of {DLM_BLOCK}"]
    batch = costs[f"{dlm}, block + {SPIFFY_DRAFTS} draft rows"] / block
    lines.append(f"{dlm} block of {DLM_BLOCK} {block:.2f} ms; with the draft rows: {batch:.2f}x")
    return lines


def overrides(cell: list[str], scale: Scale, out: Path) -> list[str]:
    """A cell's preset at the scale's size; at the rehearsal's, on its own built-ins."""
    chosen = [
        *cell,
        f"run.device={scale.device}",
        f"run.engine={scale.engine}",
        f"run.limit={scale.limit}",
        f"run.max_new_tokens={scale.max_new_tokens}",
        f"run.results_dir={out / 'runs'}",
        "run.progress=false",
        "logging.wandb.mode=disabled",
    ]
    with initialize_config_dir(str(paths.CONF_DIR), version_base="1.3"):
        composed = compose("config", overrides=chosen)
    for role in ("target", "drafter"):
        name = scale.models.get(composed[role].name, composed[role].name)
        if name != composed[role].name:
            chosen += [f"{role}.name={name}", f"{role}.name_or_path=specbench:{name}"]
    return [*chosen, f"target.dtype={scale.dtype}"]  # a DFlash drafter runs in the target's


def models_in(decoder: object, depth: int = 3) -> list[object]:
    """The models a decoder calls: objects with a model call (`MODEL_CALLS`) found among its
    attributes, its drafter's, and so on down `depth` levels."""
    found, seen = {}, set()

    def walk(obj: object, level: int) -> None:
        if id(obj) in seen or level > depth or not hasattr(obj, "__dict__"):
            return
        seen.add(id(obj))
        if obj is not decoder and any(hasattr(obj, call) for call in MODEL_CALLS):
            found[id(obj)] = obj
            return
        for value in vars(obj).values():
            if not isinstance(value, (torch.Tensor, str, int, float)):
                walk(value, level + 1)

    walk(decoder, 0)
    return list(found.values())


@contextmanager
def model_calls_timed(models: list[object], clock: dict, device: torch.device):
    """Each model call's time (device synchronised) added up in `clock` while inside; a call
    made inside another (`forward_tokens` calls `forward`) counts once. The models are as they
    were afterwards: the next cell may keep them (`backends.specbench.RESIDENT`)."""
    depth, wrapped = [0], []

    def timed(call):
        def wrapper(*args, **kwargs):
            if depth[0]:
                return call(*args, **kwargs)
            depth[0] += 1
            synchronize(device)
            t0 = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                synchronize(device)
                clock["model_s"] += time.perf_counter() - t0
                depth[0] -= 1

        return wrapper

    for model in models:
        for name in MODEL_CALLS:
            if hasattr(model, name):
                wrapped.append((model, name, vars(model).get(name)))
                setattr(model, name, timed(getattr(model, name)))
    try:
        yield
    finally:
        for model, name, own in reversed(wrapped):
            if own is None:
                delattr(model, name)
            else:
                setattr(model, name, own)


def harness_overhead(plan, arms) -> float:
    """1 - model time / wall time over a few decodes of the method arm, its model calls timed,
    after the cell's measured arms: what the harness itself costs (a drafter loop compiled as
    one graph, as DFlash's, counts as model time only where it is called as a model)."""
    clock, wall = {"model_s": 0.0}, 0.0
    with model_calls_timed(models_in(arms.method), clock, plan.device):
        for sample in plan.samples[:OVERHEAD_PROMPTS]:
            prompt = plan.prompt_ids[sample.id]
            wall += arms.method.generate(prompt, plan.max_new, torch.Generator()).wall_s
    return 1 - clock["model_s"] / wall


def run_cell(cell: list[str], scale: Scale, out: Path) -> dict:
    """One cell as specbench-run measures it, then its harness overhead on the same models."""
    chosen = overrides(cell, scale, out)
    with initialize_config_dir(str(paths.CONF_DIR), version_base="1.3"):
        plan = prepare(compose("config", overrides=chosen))
    with ExitStack() as servers:
        target, arms, engine = Specbench().arms(plan, servers)
        summary = measure_arms(plan, target, arms, engine)
        overhead = harness_overhead(plan, arms)
    plan.store.close()
    return {**row(summary), "harness_overhead": overhead, "run_id": plan.run_id}


def row(summary: Summary) -> dict:
    """The numbers the table shows, from the cell's summary."""
    columns = summary.columns()
    return {
        "speedup": columns["speedup"],
        "predicted": summary.predicted_speedup,
        "gap": summary.prediction_gap,
        "tau": summary.tau,
        "tpf": summary.tpf,
        "lossless": summary.lossless,  # the method's claim (a lossy policy's is false)
        "lossless_rate": columns["lossless_rate"],
        "vs": {name: arm["speedup"] for name, arm in columns["vs"].items()},
    }


def run_cells(
    cells: dict[str, list[str]], scale: Scale, out: Path, budget: float, started: float
) -> dict:
    """Each cell while the budget lasts (a cell starts only if the longest one so far fits)."""
    results, longest = {}, 0.0
    for name, cell in cells.items():
        if time.perf_counter() - started + longest > budget:
            results[name] = {"skipped": "budget"}
            print(f"{name}: skipped (budget)", flush=True)
            continue
        t0 = time.perf_counter()
        results[name] = run_cell(cell, scale, out)
        longest = max(longest, time.perf_counter() - t0)
        results[name]["cell_s"] = round(time.perf_counter() - t0, 1)
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    (out / "cells.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def table(results: dict, device: str) -> str:
    lines = [
        f"GPU world on {device}",
        "",
        "| cell | speedup | predicted | gap | tau | TPF | lossless | harness overhead | beside |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        if "skipped" in r:
            lines.append(f"| {name} | skipped ({r['skipped']}) |" + " |" * 7)
            continue
        beside = ", ".join(f"vs {k} {fmt(v)}" for k, v in r["vs"].items())
        lines.append(
            f"| {name} | {fmt(r['speedup'])} | {fmt(r['predicted'])} | {fmt(r['gap'], '+.0%')} "
            f"| {fmt(r['tau'])} | {fmt(r['tpf'])} | {fmt(r['lossless_rate'])} "
            f"| {fmt(r['harness_overhead'], '.1%')} | {beside} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--budget", type=float, help="seconds for everything (default: 480, rehearsal: none)"
    )
    parser.add_argument("--rehearse", action="store_true", help="on a CPU, at rehearsal size")
    parser.add_argument("--engine", choices=ENGINES, default="compiled")
    parser.add_argument("--cells", nargs="+", choices=sorted(CELLS), help="default: all")
    args = parser.parse_args()
    scale = replace(REHEARSAL if args.rehearse else GPU, engine=args.engine)
    cells = {name: CELLS[name] for name in args.cells or CELLS}
    budget = args.budget or (float("inf") if args.rehearse else 480)
    if scale.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_world: no CUDA device here (--rehearse runs it on a CPU)")
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    discover()
    build_world(scale, args.out)
    costs = forward_costs(scale, args.out)
    print("\n".join(curve_lines(costs, scale)), flush=True)
    results = run_cells(cells, scale, args.out, budget, started)
    device = torch.cuda.get_device_name() if scale.device == "cuda" else "a CPU (rehearsal)"
    device += f", {scale.engine} engine"
    text = table(results, device) + "\n" + "\n".join(curve_lines(costs, scale)) + "\n"
    (args.out / "table.md").write_text(text)
    print(f"\n{text}({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
