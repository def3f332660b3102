"""The eager and compiled engines on the tiny world, every comparison interleaved in one run.

1. Per-call cost of each tiny model at the decoding context (a 128-token prompt cached): the
   target on 1 token, on gamma + 1 and on a DFlash block of 16; the drafter on 1 token.
2. AR, SpS (tiny-ar) and DFlash (tiny-dflash) cells under both engines on `tiny_code`
   (greedy): each method's speedup over its own engine's AR, the share of wall time spent
   outside model calls (the harness), and how often the compiled engine's outputs equal the
   eager engine's.
3. specbench SpS compiled against transformers' assisted generation (eager, the same pair, the
   same constant gamma): identical outputs and the tokens/s ratio.

    python benchmarks/engine.py --samples 20 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from vs_hf_assisted import first_divergence, fix_assistant_draft_length, timed

from common import print_table, sps_decoder
from specbench import paths
from specbench.config import ModelConfig
from specbench.decoding.drafters.dflash.config import DFlashConfig
from specbench.decoding.drafters.dflash.method import DFlash
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.metrics.speed import synchronize
from specbench.models.causal import CausalLM
from specbench.models.compiled import CompiledCausalLM, static_length
from specbench.models.kinds import dflash as dflash_kind
from specbench.models.kinds.causal import load_causal_lm

GOALS = {"tiny, 1 token": 0.5, "tiny-ar, 1 token": 0.35}
HF_GOAL = 1.5


def load(name: str) -> CausalLM:
    cfg = ModelConfig(name=name, name_or_path=f"specbench:{name}")
    return load_causal_lm(cfg, name, torch.device("cpu"), "float32")


def burst_ms(lm: CausalLM, tokens: int, burst: int) -> float:
    """Mean milliseconds of `burst` back-to-back forwards over `tokens` new tokens, each rolled
    back (untimed) before the next: a model's calls in a row, as decoding makes them."""
    elapsed = 0.0
    for _ in range(burst):
        synchronize(lm.device)
        t0 = time.perf_counter()
        lm.forward_tokens([11] * tokens)
        synchronize(lm.device)
        elapsed += time.perf_counter() - t0
        lm.rollback(lm.length - tokens)
    return 1000 * elapsed / burst


def call_costs(models: dict[str, dict[str, CausalLM]], gamma: int, repeats: int) -> None:
    """Bursts of 50 calls, the arms alternating burst by burst: interleaving single calls
    would time each model with the other's weights in the CPU caches, which decoding never
    does."""
    calls = {
        "tiny, 1 token": ("tiny", 1),
        f"tiny, {gamma + 1} tokens": ("tiny", gamma + 1),
        "tiny, 16 tokens": ("tiny", 16),
        "tiny-ar, 1 token": ("tiny-ar", 1),
    }
    for engine in models.values():
        for lm in engine.values():
            lm.prefill(list(range(100, 228)))
    times = {(call, e): [] for call in calls for e in models}
    for i in range(repeats + 2):  # the first 2 rounds warm up
        for call, (name, tokens) in calls.items():
            for engine in models:
                ms = burst_ms(models[engine][name], tokens, 50)
                if i >= 2:
                    times[call, engine].append(ms)
    median = {key: statistics.median(v) for key, v in times.items()}
    print(f"\n1. per-call cost, median of {repeats} bursts of 50, 128 tokens cached (ms)")
    rows = []
    for call in calls:
        ratio = median[call, "compiled"] / median[call, "eager"]
        goal = GOALS.get(call)
        verdict = "" if goal is None else f"<= {goal} {'met' if ratio <= goal else 'NOT met'}"
        rows.append(
            [
                call,
                f"{median[call, 'eager']:.2f}",
                f"{median[call, 'compiled']:.2f}",
                f"{ratio:.2f}",
                verdict,
            ]
        )
    print_table(["call", "eager", "compiled", "compiled/eager", "goal"], rows)


def cells(
    models: dict[str, dict[str, CausalLM]],
    dflash_model: torch.nn.Module,
    prompts: list[list[int]],
    args: argparse.Namespace,
) -> None:
    arms = {}
    for engine, lms in models.items():
        arms[engine, "ar"] = AutoregressiveDecoder(lms["tiny"], Warp())
        arms[engine, "sps"] = sps_decoder(lms["tiny"], lms["tiny-ar"], args.gamma)
        # on the compiled target, DFlash's drafter loop compiles its forward here
        arms[engine, "dflash"] = DFlash(DFlashConfig(), Warp()).build(
            lms["tiny"], dflash_model, None
        )
    for lms in models.values():
        for lm in lms.values():
            lm.time_forwards = True
    wall = dict.fromkeys(arms, 0.0)
    model_s = dict.fromkeys(arms, 0.0)
    tokens = {arm: [] for arm in arms}
    for k, prompt in enumerate([prompts[0]] * 2 + prompts):  # two warm-up generations per arm
        for (engine, method), decoder in arms.items():
            lms = models[engine].values()
            before = sum(lm.forward_s for lm in lms)
            gen = decoder.generate(prompt, args.max_new_tokens, torch.Generator())
            if k >= 2:
                wall[engine, method] += gen.wall_s
                model_s[engine, method] += sum(lm.forward_s for lm in lms) - before
                if method == "dflash":  # its drafter is no CausalLM: its drafting counts whole
                    model_s[engine, method] += gen.draft_s
                tokens[engine, method].append(gen.tokens)
    print(f"\n2. cells on tiny_code, {len(prompts)} prompts x {args.max_new_tokens} tokens, greedy")
    rows = []
    for engine, method in arms:
        speedup = wall[engine, "ar"] / wall[engine, method]
        same = sum(a == b for a, b in zip(tokens[engine, method], tokens[engine, "ar"]))
        harness = 1 - model_s[engine, method] / wall[engine, method]
        rows.append(
            [
                f"{method} ({engine})",
                f"{sum(map(len, tokens[engine, method])) / wall[engine, method]:.1f}",
                f"{speedup:.2f}",
                f"{same}/{len(prompts)}",
                f"{100 * harness:.1f}%",
            ]
        )
    print_table(["cell", "tokens/s", "speedup", "= own AR", "outside model calls"], rows)
    print("(DFlash: outside target forwards and drafting, the drafter's own harness work excluded)")
    for method in ("ar", "sps", "dflash"):
        pairs = list(zip(tokens["compiled", method], tokens["eager", method]))
        diverged = [first_divergence(a, b) for a, b in pairs if a != b]
        print(
            f"compiled = eager outputs ({method}): {len(pairs) - len(diverged)}/{len(pairs)}"
            + (f", first divergences at {diverged}" if diverged else "")
        )


def versus_hf(compiled: dict[str, CausalLM], prompts: list[list[int]], args) -> None:
    target, drafter = compiled["tiny"], compiled["tiny-ar"]
    for lm in (target, drafter):
        lm.time_forwards = False
    hf_drafter = load("tiny-ar").model
    fix_assistant_draft_length(hf_drafter, args.gamma)
    sps = sps_decoder(target, drafter, args.gamma)

    def run_specbench(prompt: list[int]) -> list[int]:
        return sps.generate(prompt, args.max_new_tokens, torch.Generator()).tokens

    def run_hf(prompt: list[int]) -> list[int]:
        ids = torch.tensor([prompt])
        out = target.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            assistant_model=hf_drafter,
            do_sample=False,
            max_new_tokens=args.max_new_tokens,
        )
        return out[0, len(prompt) :].tolist()

    arms = {"specbench compiled": run_specbench, "hf assisted (eager)": run_hf}
    wall = dict.fromkeys(arms, 0.0)
    tokens = {name: [] for name in arms}
    for k, prompt in enumerate([prompts[0]] * 2 + prompts):
        for name, run in arms.items():
            out, seconds = timed(torch.device("cpu"), run, prompt)
            if k >= 2:
                wall[name] += seconds
                tokens[name].append(out)
    rate = {name: sum(map(len, tokens[name])) / wall[name] for name in arms}
    same = sum(a == b for a, b in zip(*tokens.values()))
    ratio = rate["specbench compiled"] / rate["hf assisted (eager)"]
    print(f"\n3. SpS gamma {args.gamma}: specbench compiled vs transformers' assisted generation")
    print_table(["arm", "tokens/s"], [[name, f"{r:.1f}"] for name, r in rate.items()])
    print(f"identical outputs: {same}/{len(prompts)}")
    print(
        f"tokens/s ratio: {ratio:.2f}x (goal >= {HF_GOAL}x: {'met' if ratio >= HF_GOAL else 'NOT met'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = (paths.TINY_DIR / "tiny_code.jsonl").read_text().splitlines()
    eager = {name: load(name) for name in ("tiny", "tiny-ar")}
    tokenizer = eager["tiny"].tokenizer
    prompts = [tokenizer(json.loads(r)["prompt"])["input_ids"] for r in rows[: args.samples]]
    length = static_length(max(map(len, prompts)) + args.max_new_tokens)
    compiled = {name: CompiledCausalLM.from_eager(load(name), length) for name in eager}
    cfg = ModelConfig(name="tiny-dflash", name_or_path="specbench:tiny-dflash", kind="dflash")
    dflash_model = dflash_kind.load(cfg, "drafter", torch.device("cpu"), "float32")
    compile_s = {
        "tiny": compiled["tiny"].warm_up(tuple(dflash_model.target_layer_ids)),
        "tiny-ar": compiled["tiny-ar"].warm_up(),
    }
    print(
        f"engines on the tiny world | threads {torch.get_num_threads()} | static cache {length} "
        f"| compile s: {', '.join(f'{n} {s:.1f}' for n, s in compile_s.items())}"
    )
    models = {"eager": eager, "compiled": compiled}
    call_costs(models, args.gamma, args.repeats)
    cells(models, dflash_model, prompts, args)
    versus_hf(compiled, prompts, args)


if __name__ == "__main__":
    main()
