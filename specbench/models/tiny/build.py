"""The tiny world's training: tokenizer, target, drafters and the tiny_code task, in stages
(`specbench-tiny train`, in `cli.py`, parses the command without importing torch)."""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from specbench import paths
from specbench.models.eagle3 import save_eagle3
from specbench.models.random_dflash import save_dflash
from specbench.models.rotary import cast
from specbench.models.tiny import corpus
from specbench.models.tiny.cli import STAGES
from specbench.models.tiny.dflash import (
    dflash_drafter,
    evaluate_dflash,
    greedy_continuations,
    target_features,
    train_dflash,
)
from specbench.models.tiny.dlm import from_causal
from specbench.models.tiny.eagle3 import (
    draft_vocabulary,
    eagle3_drafter,
    evaluate_eagle3,
    head_from_target,
    target_states,
    train_eagle3,
)
from specbench.models.tiny.tokenizer import train_tokenizer
from specbench.models.tiny.train import (
    Schedule,
    Shape,
    causal_model,
    evaluate_causal,
    evaluate_dlm,
    token_stream,
    train_causal,
    train_dlm,
)

TARGET = Shape(hidden=320, layers=6, heads=5, ffn=864)
DRAFTER = Shape(hidden=128, layers=2, heads=2, ffn=344)
TINY_CODE = {"samples": 100, "prefix_tokens": 128, "continuation_tokens": 128, "seed": 0}
# tiny-dflash: 2 layers (a third of the target's, as z-lab's 5 of Qwen3-8B's 36 are a seventh),
# blocks of 16, trained on the target's greedy continuations of training-split prefixes
DFLASH = {"layers": 2, "block": 16, "sequences": 8192, "prefix": 64, "new": 192, "blocks": 12}
# tiny-eagle3: EAGLE-3's one layer over the inputs of tiny's layers 1, 3 and 5 (upstream's rule,
# 2, n // 2, n - 3, names layer 3 twice for n = 6), half the vocabulary as its draft vocabulary
# (Llama 3.1's EAGLE-3: a quarter), 3 training-time-test steps (upstream: 7), on the target's
# greedy continuations of 32-token training-split prefixes (EAGLE-3 trains on responses the
# target regenerates); validated on its continuations of validation-split prefixes
EAGLE3 = {
    "aux_layer_ids": [1, 3, 5],
    "draft_vocab": 2048,
    "steps": 3,
    "windows": 2048,
    "window": 128,
    "batch": 8,
    "prefix": 32,
}


def save(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, out: Path, report: dict
) -> None:
    """Half precision keeps the committed checkpoints small; loading upcasts to run.dtype."""
    cast(model, torch.float16).save_pretrained(out)
    cast(model, torch.float32)
    tokenizer.save_pretrained(out)
    (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")


def tiny_code_samples(tokenizer: PreTrainedTokenizerBase) -> list[dict]:
    """Prefixes cut at random places of the held-out modules; the reference is what follows."""
    rng = random.Random(TINY_CODE["seed"])
    n_prefix, n_cont = TINY_CODE["prefix_tokens"], TINY_CODE["continuation_tokens"]
    modules = [
        (p, tokenizer(t)["input_ids"])
        for p, t in zip(corpus.files("heldout"), corpus.texts("heldout"))
    ]
    modules = [(p, ids) for p, ids in modules if len(ids) > n_prefix + n_cont]
    samples = []
    for i in range(TINY_CODE["samples"]):
        path, ids = modules[rng.randrange(len(modules))]
        cut = rng.randrange(n_prefix, len(ids) - n_cont)
        samples.append(
            {
                "id": f"tiny_code-{i:03d}",
                "module": path.relative_to(corpus.stdlib_root()).as_posix(),
                "prompt": tokenizer.decode(ids[cut - n_prefix : cut]),
                "reference": tokenizer.decode(ids[cut : cut + n_cont]),
            }
        )
    return samples


def mean_tail(values: list[float], n: int = 50) -> float:
    return sum(values[-n:]) / len(values[-n:])


def earlier(out: Path, stage: str) -> Path:
    """Where a stage this run does not train is read from: `out`, else the committed one."""
    return out / stage if (out / stage / "config.json").exists() else paths.TINY_DIR / stage


def train(args: argparse.Namespace) -> None:
    """Stages run in order; a stage left out is read back (`earlier`), so the drafters can be
    retrained (or trained in parallel processes) against an existing target."""
    out = Path(args.out)
    stages = args.only or STAGES
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if "tiny" in stages:
        tokenizer = train_tokenizer(corpus.texts("train"))
    else:
        tokenizer = AutoTokenizer.from_pretrained(earlier(out, "tiny"))
    train_stream = token_stream(tokenizer, corpus.texts("train"))
    val_stream = token_stream(tokenizer, corpus.texts("validation"))
    common = {
        "python": platform.python_version(),
        "train_tokens": len(train_stream),
        "seed": args.seed,
    }

    if "tiny" in stages:
        started = time.time()
        target = causal_model(TARGET, tokenizer)
        schedule = Schedule(steps=args.target_steps, lr=2e-3)
        losses = train_causal(target, train_stream, schedule, seed=args.seed, desc="tiny")
        report = {
            **common,
            "shape": vars(TARGET),
            "schedule": vars(schedule),
            "seconds": time.time() - started,
            "final_train_loss": mean_tail(losses),
        }
        save(target, tokenizer, out / "tiny", report)
    target = AutoModelForCausalLM.from_pretrained(
        earlier(out, "tiny"), dtype=torch.float32
    ).eval()  # as shipped
    if "tiny" in stages:
        report["validation"] = evaluate_causal(target, val_stream)
        (out / "tiny" / "training.json").write_text(json.dumps(report, indent=2) + "\n")
        print("tiny validation:", report["validation"])

    if "tiny-ar" in stages:
        started = time.time()
        torch.manual_seed(args.seed + 1)
        drafter = causal_model(DRAFTER, tokenizer)
        schedule = Schedule(steps=args.drafter_steps, lr=3e-3)
        losses = train_causal(
            drafter, train_stream, schedule, seed=args.seed + 1, teacher=target, desc="tiny-ar"
        )
        report = {
            **common,
            "shape": vars(DRAFTER),
            "schedule": vars(schedule),
            "distilled_from": "tiny",
            "seconds": time.time() - started,
            "final_train_kl": mean_tail(losses),
        }
        save(drafter, tokenizer, out / "tiny-ar", report)
        drafter = AutoModelForCausalLM.from_pretrained(out / "tiny-ar", dtype=torch.float32)
        report["validation"] = evaluate_causal(drafter, val_stream)
        (out / "tiny-ar" / "training.json").write_text(json.dumps(report, indent=2) + "\n")
        print("tiny-ar validation:", report["validation"])

    if "tiny-dlm" in stages:
        started = time.time()
        drafter = AutoModelForCausalLM.from_pretrained(earlier(out, "tiny-ar"), dtype=torch.float32)
        dlm = from_causal(drafter, mask_token_id=tokenizer.mask_token_id)
        schedule = Schedule(steps=args.dlm_steps, lr=1e-3)
        losses = train_dlm(dlm, train_stream, schedule, seed=args.seed + 2, teacher=target)
        report = {
            **common,
            "initialised_from": "tiny-ar",
            "distilled_from": "tiny",
            "schedule": vars(schedule),
            "seconds": time.time() - started,
            "final_train_loss": mean_tail(losses),
        }
        save(dlm, tokenizer, out / "tiny-dlm", report)
        dlm = AutoModel.from_pretrained(out / "tiny-dlm", dtype=torch.float32).eval()
        report["validation"] = evaluate_dlm(dlm, val_stream)
        (out / "tiny-dlm" / "training.json").write_text(json.dumps(report, indent=2) + "\n")
        print("tiny-dlm validation:", report["validation"])

    if "tiny-dflash" in stages:
        started = time.time()
        trained = train_tiny_dflash(
            target,
            tokenizer.mask_token_id,
            code_continuations(target, tokenizer),
            DFLASH,
            args.dflash_steps,
            args.seed + 3,
            out / "tiny-dflash",
        )
        report = {**common, **trained}
        report["seconds"] = time.time() - started
        (out / "tiny-dflash" / "training.json").write_text(json.dumps(report, indent=2) + "\n")
        print("tiny-dflash validation:", report["validation"])

    if "tiny-eagle3" in stages:
        started = time.time()
        trained = train_tiny_eagle3(
            target,
            code_continuations(target, tokenizer),
            EAGLE3,
            args.eagle3_steps,
            args.seed + 5,
            out / "tiny-eagle3",
        )
        report = {**common, **trained}
        report["seconds"] = time.time() - started
        (out / "tiny-eagle3" / "training.json").write_text(json.dumps(report, indent=2) + "\n")
        print("tiny-eagle3 validation:", report["validation"])

    if "tiny_code" in stages:
        with (out / "tiny_code.jsonl").open("w") as fh:
            fh.writelines(json.dumps(s) + "\n" for s in tiny_code_samples(tokenizer))


Continuations = Callable[[str, int, int, int, int], torch.Tensor]
"""(split, n, prefix, new, seed) -> [n, prefix + new]: the target's greedy continuations of `n`
prefixes of the split's text, the data both drafters of a world train and are validated on."""


def code_continuations(
    target: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> Continuations:
    """The code world's: random windows of the split's modules."""

    def continuations(split: str, n: int, prefix: int, new: int, seed: int) -> torch.Tensor:
        stream = token_stream(tokenizer, corpus.texts(split))
        return greedy_continuations(target, stream, n, prefix, new, seed)

    return continuations


def sampled(recipe: int, schedule: Schedule) -> int:
    """The sequences a drafter's data step makes: the recipe's, or as many as its schedule
    draws where that is fewer (a quick check's few steps need no full data set)."""
    return min(recipe, schedule.steps * schedule.batch)


def train_tiny_dflash(
    target: torch.nn.Module,
    mask_id: int,
    continuations: Continuations,
    recipe: dict,
    steps: int,
    seed: int,
    out: Path,
) -> dict:
    """The target's greedy continuations and its features, then the drafter (saved in half
    precision, as the other checkpoints, and without a tokenizer: it reads the target's); the
    report's numbers are measured on continuations of validation-split prefixes."""
    from dflash.model import build_target_layer_ids

    layers = build_target_layer_ids(target.config.num_hidden_layers, recipe["layers"])
    prefix, new = recipe["prefix"], recipe["new"]

    def data(split: str, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = continuations(split, n, prefix, new, seed)
        return ids, target_features(target, ids, layers)

    schedule = Schedule(steps=steps, lr=1e-3)
    recipe = {**recipe, "sequences": sampled(recipe["sequences"], schedule)}
    ids, features = data("train", recipe["sequences"], seed)
    torch.manual_seed(seed)
    drafter = dflash_drafter(target, recipe["layers"], layers, recipe["block"], mask_id)
    embedding = target.get_input_embeddings().weight.detach()
    losses = train_dflash(
        drafter, embedding, ids, features, prefix, schedule, seed, recipe["blocks"]
    )
    save_dflash(cast(drafter, torch.float16), out)
    cast(drafter, torch.float32).eval()
    val_ids, val_features = data("validation", 128, seed + 1)
    return {
        "recipe": recipe,
        "target_layer_ids": layers,
        "schedule": vars(schedule),
        "trained_on": "the target's greedy continuations of training-split prefixes",
        "final_train_loss": mean_tail(losses),
        "validation": evaluate_dflash(drafter, embedding, val_ids, val_features, prefix),
    }


def train_tiny_eagle3(
    target: torch.nn.Module,
    continuations: Continuations,
    recipe: dict,
    steps: int,
    seed: int,
    out: Path,
) -> dict:
    """The target's greedy continuations of training-split prefixes, the inputs of the layers
    EAGLE-3 fuses and the target's predictions on them, the draft vocabulary from those, then
    the training-time test; saved in half precision in EAGLE's own layout, without embeddings
    (it reads the target's). The report's numbers are measured on the target's greedy
    continuations of validation-split prefixes."""
    schedule = Schedule(steps=steps, batch=recipe["batch"], lr=3e-3, warmup=30)
    recipe = {**recipe, "windows": sampled(recipe["windows"], schedule)}
    ttt_steps, window, prefix = recipe["steps"], recipe["window"], recipe["prefix"]
    layers = [layer - 1 for layer in recipe["aux_layer_ids"]]  # a layer's input: the one before
    ids = continuations("train", recipe["windows"], prefix, window - prefix, seed)
    features, predicted = target_states(target, ids, layers)
    torch.manual_seed(seed)
    drafter = eagle3_drafter(target, recipe["aux_layer_ids"], recipe["draft_vocab"])
    draft_vocabulary(drafter, predicted)
    head_from_target(drafter, target)
    losses = train_eagle3(drafter, ids, features, predicted, schedule, seed, ttt_steps)
    save_eagle3(cast(drafter, torch.float16), out)
    cast(drafter, torch.float32).eval()
    val_ids = continuations("validation", 64, prefix, window - prefix, seed + 1)
    val_features, val_predicted = target_states(target, val_ids, layers)
    return {
        "recipe": recipe,
        "schedule": vars(schedule),
        "trained_on": "the target's greedy continuations of training-split prefixes, labels "
        "its greedy predictions",
        "draft_vocab_coverage": round(float(drafter.t2d[val_ids[:, prefix:]].float().mean()), 4),
        "final_train_loss": mean_tail(losses),
        "validation": evaluate_eagle3(
            drafter, val_ids, val_features, val_predicted, prefix, ttt_steps
        ),
    }
