"""The math world's training (`specbench-tiny train --world math`): a tokenizer that splits
digits, the causal target trained on generated GSM8K-style problems, and the task's held-out
problems. Every model is scored by what `task=tiny_math` measures: answer accuracy through
`task=gsm8k`'s extractor, on problems whose wording the training split never holds.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from specbench.metrics.answer import extract_strict, normalise
from specbench.models.tiny import build, math_corpus
from specbench.models.tiny.build import (
    Continuations,
    earlier,
    mean_tail,
    save,
    train_tiny_dflash,
    train_tiny_eagle3,
)
from specbench.models.tiny.cli import MATH_STAGES
from specbench.models.tiny.dflash import greedy_continuations
from specbench.models.tiny.dlm import from_causal
from specbench.models.tiny.tokenizer import train_tokenizer
from specbench.models.tiny.train import (
    Schedule,
    Shape,
    causal_model,
    evaluate_causal,
    evaluate_dlm,
    train_causal,
    train_dlm,
)

TARGET = Shape(hidden=320, layers=6, heads=5, ffn=864)  # the code world's target's shape
PROBLEMS = {"train": 120_000, "validation": 1000, "heldout": 500}
VOCAB = 1024  # more than the corpus's merges fill: every word of every template is one token
ACCURACY_PROBLEMS = 200  # validation problems each causal model's answer accuracy is taken on
HELDOUT_CHECK = 50  # held-out problems the target's training.json and the tests both score
SOLUTION_TOKENS = 192  # the longest solution (6 steps) is about 150 tokens
DRAFTER = build.DRAFTER  # SpS's drafter: the code world's drafter shape
# DFlash and EAGLE-3 read windows that end where the target starts its solution: 96 tokens hold
# a question and the end of the one before it; 160 new tokens hold a six-step solution
DFLASH = {**build.DFLASH, "sequences": 4096, "prefix": 96, "new": 160}
EAGLE3 = {**build.EAGLE3, "draft_vocab": 512, "window": 256, "prefix": 96}
# the adapted dLLM's data: corpus problems, and training questions the target solved greedily
DLM = {"corpus": 60_000, "solved": 6000}


def texts(split: str, n: int | None = None) -> list[str]:
    return [p.text() for p in math_corpus.problems(split, n or PROBLEMS[split])]


def token_stream(
    tokenizer: PreTrainedTokenizerBase, split: str, n: int | None = None
) -> torch.Tensor:
    """The split's problems, each closed by EOS, as one id tensor (as the code world's)."""
    ids: list[int] = []
    for text in texts(split, n):
        ids += tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.long)


@torch.no_grad()
def greedy_solutions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    questions: list[str],
    batch: int = 50,
) -> list[str]:
    """The model's greedy solution to each question (left-padded batches, stopped at EOS)."""
    tokenizer.padding_side = "left"
    out = []
    for start in range(0, len(questions), batch):
        prompts = [math_corpus.prompt(q) for q in questions[start : start + batch]]
        enc = tokenizer(prompts, return_tensors="pt", padding=True)
        ids = model.generate(
            **enc,
            max_new_tokens=SOLUTION_TOKENS,
            do_sample=False,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        out += tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return out


def accuracy(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, split: str, n: int
) -> float:
    """Exact-match accuracy of the model's greedy answers, by the strict extractor `task=gsm8k`
    scores with."""
    problems = math_corpus.problems(split, n)
    solutions = greedy_solutions(model, tokenizer, [p.question for p in problems])
    hits = sum(
        (answer := extract_strict(text)) is not None and normalise(answer) == str(p.answer)
        for p, text in zip(problems, solutions)
    )
    return hits / len(problems)


def train_target(args: argparse.Namespace, out: Path) -> None:
    started = time.time()
    tokenizer = train_tokenizer(texts("train"), VOCAB, split_digits=True)
    stream = token_stream(tokenizer, "train")
    torch.manual_seed(args.seed)
    target = causal_model(TARGET, tokenizer)
    schedule = Schedule(steps=args.target_steps, lr=2e-3)
    losses = train_causal(target, stream, schedule, seed=args.seed, desc="tiny-math")
    report = {
        "python": platform.python_version(),
        "problems": PROBLEMS,
        "train_tokens": len(stream),
        "seed": args.seed,
        "shape": vars(TARGET),
        "parameters": sum(p.numel() for p in target.parameters()),
        "schedule": vars(schedule),
        "seconds": time.time() - started,
        "final_train_loss": mean_tail(losses),
    }
    save(target, tokenizer, out, report)
    shipped = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    report["validation"] = causal_validation(shipped, tokenizer)
    report["heldout"] = heldout_check(shipped, tokenizer)
    (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    print("tiny-math validation:", report["validation"])


def causal_validation(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> dict:
    """A causal model's next-token loss and accuracy on the validation problems, and its greedy
    answer accuracy on the first of them."""
    return {
        **evaluate_causal(model, token_stream(tokenizer, "validation")),
        "answer_accuracy": accuracy(model, tokenizer, "validation", ACCURACY_PROBLEMS),
        "answer_problems": ACCURACY_PROBLEMS,
    }


def heldout_check(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> dict:
    """The shipped target's accuracy on the first held-out problems, which the tests measure
    again on the committed checkpoint (the same greedy decoding: the same number)."""
    return {
        "answer_accuracy": accuracy(target, tokenizer, "heldout", HELDOUT_CHECK),
        "answer_problems": HELDOUT_CHECK,
    }


def prompt_ends(stream: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """Positions of the stream where a question's `\nA:` ends: a window ending there is what
    the target sees before it writes its solution."""
    marker = tokenizer("\nA:")["input_ids"]
    hits = torch.ones(len(stream) - len(marker) + 1, dtype=torch.bool)
    for i, token in enumerate(marker):
        hits &= stream[i : len(stream) - len(marker) + 1 + i] == token
    return hits.nonzero()[:, 0] + len(marker) - 1


def math_continuations(
    target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> Continuations:
    """The math world's: the target's greedy solutions, after windows that end at a question's
    `A:` (DFlash and EAGLE-3 train on the target's own responses)."""
    streams: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def continuations(split: str, n: int, prefix: int, new: int, seed: int) -> torch.Tensor:
        if split not in streams:
            stream = token_stream(tokenizer, split)
            streams[split] = stream, prompt_ends(stream, tokenizer)
        stream, ends = streams[split]
        return greedy_continuations(target, stream, n, prefix, new, seed, ends=ends)

    return continuations


def solved_texts(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, n: int) -> list[str]:
    """Training questions with the target's own greedy solutions: the second half of the
    adapted dLLM's data, so its drafts are the answers the target verifies."""
    questions = [p.question for p in math_corpus.problems("train", n)]
    solutions = greedy_solutions(target, tokenizer, questions)
    return [f"{math_corpus.prompt(q)}{s}" for q, s in zip(questions, solutions)]


def stream_of(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> torch.Tensor:
    ids: list[int] = []
    for text in texts:
        ids += tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.long)


def train_drafter(args: argparse.Namespace, target: PreTrainedModel, tokenizer, out: Path) -> None:
    """SpS's drafter: the code world's drafter shape, distilled from the target's logits."""
    started = time.time()
    torch.manual_seed(args.seed + 1)
    drafter = causal_model(DRAFTER, tokenizer)
    schedule = Schedule(steps=args.drafter_steps, lr=3e-3)
    stream = token_stream(tokenizer, "train")
    losses = train_causal(
        drafter, stream, schedule, args.seed + 1, teacher=target, desc="tiny-math-ar"
    )
    report = {
        "shape": vars(DRAFTER),
        "schedule": vars(schedule),
        "distilled_from": "tiny-math",
        "final_train_kl": mean_tail(losses),
    }
    save(drafter, tokenizer, out, report)
    shipped = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    report["validation"] = causal_validation(shipped, tokenizer)
    finish(out, report, started)


def train_dlm_stage(
    args: argparse.Namespace, target: PreTrainedModel, tokenizer, out: Path
) -> None:
    """Dream's recipe: the dLLM starts from the target's own weights (shifted prediction keeps
    its next-token law at the first masked position) and trains with the block-diffusion loss
    on the corpus and on the target's greedy solutions, distilled from the target where a
    block is wholly masked."""
    started = time.time()
    texts_ = texts("train", DLM["corpus"]) + solved_texts(target, tokenizer, DLM["solved"])
    random.Random(args.seed + 2).shuffle(texts_)
    dlm = from_causal(target, mask_token_id=tokenizer.mask_token_id)
    schedule = Schedule(steps=args.dlm_steps, lr=5e-4)
    losses = train_dlm(
        dlm,
        stream_of(tokenizer, texts_),
        schedule,
        args.seed + 2,
        teacher=target,
        desc="tiny-math-dlm",
    )
    report = {
        "initialised_from": "tiny-math",
        "distilled_from": "tiny-math",
        "data": DLM,
        "schedule": vars(schedule),
        "final_train_loss": mean_tail(losses),
    }
    save(dlm, tokenizer, out, report)
    shipped = AutoModel.from_pretrained(out, dtype=torch.float32).eval()
    report["validation"] = evaluate_dlm(shipped, token_stream(tokenizer, "validation"))
    finish(out, report, started)


def finish(out: Path, report: dict, started: float) -> None:
    """training.json with the stage's time, and its validation numbers on the console."""
    report = {"python": platform.python_version(), **report, "seconds": time.time() - started}
    (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"{out.name} validation:", report["validation"])


def timed(out: Path, trainer: Callable[..., dict], *inputs: object) -> None:
    """A drafter stage of the code world's trainer (`build.py`), on the math world's data,
    written to `out` with its training.json."""
    started = time.time()
    finish(out, trainer(*inputs, out), started)


def heldout_rows() -> list[dict]:
    """task=tiny_math's samples: the held-out problems, their solutions kept as references."""
    return [
        {
            "id": f"tiny_math-{i:03d}",
            "question": p.question,
            "reference": str(p.answer),
            "solution": p.solution,
        }
        for i, p in enumerate(math_corpus.problems("heldout", PROBLEMS["heldout"]))
    ]


def train(args: argparse.Namespace) -> None:
    """The math world's stages in order; a stage left out is read from --out, else from the
    committed checkpoints (`earlier`)."""
    out = Path(args.out)
    stages = args.only or MATH_STAGES
    if args.threads:
        torch.set_num_threads(args.threads)
    if "tiny-math" in stages:
        train_target(args, out / "tiny-math")
    target = AutoModelForCausalLM.from_pretrained(
        earlier(out, "tiny-math"), dtype=torch.float32
    ).eval()
    tokenizer = AutoTokenizer.from_pretrained(earlier(out, "tiny-math"))
    if "tiny-math-ar" in stages:
        train_drafter(args, target, tokenizer, out / "tiny-math-ar")
    if "tiny-math-dlm" in stages:
        train_dlm_stage(args, target, tokenizer, out / "tiny-math-dlm")
    continuations = math_continuations(target, tokenizer)
    if "tiny-math-dflash" in stages:
        mask = tokenizer.mask_token_id
        seed = args.seed + 3
        inputs = (target, mask, continuations, DFLASH, args.dflash_steps, seed)
        timed(out / "tiny-math-dflash", train_tiny_dflash, *inputs)
    if "tiny-math-eagle3" in stages:
        inputs = (target, continuations, EAGLE3, args.eagle3_steps, args.seed + 5)
        timed(out / "tiny-math-eagle3", train_tiny_eagle3, *inputs)
    if "tiny_math" in stages:
        with (out / "tiny_math.jsonl").open("w") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in heldout_rows())
