"""The math world: its generated problems (seeded, split by wording, in GSM8K's answer format)
and `task=tiny_math`, which scores through gsm8k's own extractor."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from specbench.metrics import answer
from specbench.models.tiny import math_corpus
from specbench.tasks import gsm8k, tiny_math
from specbench.tasks.base import Sample

STEP = re.compile(r"(\d+)([-+*/])(\d+) = <<\1\2\3=(\d+)>>\4")


def test_the_generator_gives_the_same_problems_in_a_fresh_interpreter() -> None:
    here = [p.text() for p in math_corpus.problems("heldout", 20)]
    code = (
        "import json; from specbench.models.tiny import math_corpus as m; "
        "print(json.dumps([p.text() for p in m.problems('heldout', 20)]))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    )
    assert here == __import__("json").loads(other.stdout)


def test_splits_are_disjoint_by_wording_not_only_by_numbers() -> None:
    skeletons = {
        split: {p.skeleton for p in math_corpus.problems(split, n)}
        for split, n in (("train", 5000), ("validation", 300), ("heldout", 500))
    }
    assert not skeletons["train"] & skeletons["heldout"]
    assert not skeletons["train"] & skeletons["validation"]
    assert not skeletons["validation"] & skeletons["heldout"]
    assert len(skeletons["heldout"]) == 500  # no two held-out problems share their wording


def test_every_solution_is_gsm8k_format_and_its_arithmetic_is_right() -> None:
    counts = set()
    for problem in math_corpus.problems("train", 2000):
        *lines, last = problem.solution.split("\n")
        assert last == f"#### {problem.answer}"
        steps = [STEP.search(line) for line in lines]
        assert all(steps), problem.solution
        for m in steps:
            a, op, b, value = int(m[1]), m[2], int(m[3]), int(m[4])
            assert value == {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[op]
            assert max(a, b, value) <= math_corpus.LIMIT
        counts.add(len(lines))
        assert problem.text().startswith(f"Q: {problem.question}\nA: ")
    assert counts == set(range(math_corpus.STEPS[0], math_corpus.STEPS[1] + 1))


def test_the_problems_vary_in_wording() -> None:
    """Every family, and each of a step's phrasings, turns up in a few thousand problems."""
    problems = math_corpus.problems("train", 3000)
    assert len({p.skeleton for p in problems}) > 0.7 * len(problems)
    text = "\n".join(p.text() for p in problems)
    for phrasings in (
        ("at first.", "There are"),  # how a story opens
        ("Together that is", "So far"),  # a bill's running total
        ("That leaves", "left."),  # what is left
        ("How many", "How much change"),
        ("every hour", "every day", "every week", "every minute"),
    ):
        for phrase in phrasings:
            assert phrase in text, phrase


def test_tiny_math_scores_with_gsm8ks_extractor() -> None:
    problem = math_corpus.problems("heldout", 1)[0]
    task = tiny_math.TinyMathTask(tiny_math.TinyMathConfig(oracle=None))
    sample = Sample(
        id="x", prompt=math_corpus.prompt(problem.question), reference=str(problem.answer)
    )
    right = task.score(sample, f" {problem.solution}")
    assert right == answer.score_answer(str(problem.answer), problem.solution)
    assert gsm8k.Gsm8kTask.score(task, sample, problem.solution) == right  # one code path
    assert right == {"exact_match_strict": 1.0, "exact_match_flexible": 1.0}
    wrong = problem.solution.replace(f"#### {problem.answer}", f"#### {problem.answer + 1}")
    assert task.score(sample, wrong)["exact_match_strict"] == 0.0


@pytest.mark.parametrize("split", ["train", "nope"])
def test_an_unknown_split_is_refused(split: str) -> None:
    if split == "nope":
        with pytest.raises(ValueError, match="split must be one of"):
            math_corpus.problems(split, 1)
    else:
        assert len(math_corpus.problems(split, 3)) == 3


def test_every_stage_of_the_math_world_trains_on_a_tiny_budget(tmp_path, monkeypatch) -> None:
    """Each stage runs end to end on a few problems with a tiny shape: a checkpoint that loads
    the way specbench loads it, and a training.json with validation numbers."""
    import json

    from transformers import AutoModel, AutoModelForCausalLM

    from specbench.models.eagle3 import load_eagle3
    from specbench.models.tiny import cli, math_world
    from specbench.models.tiny.train import Shape

    monkeypatch.setattr(math_world, "TARGET", Shape(hidden=32, layers=6, heads=2, ffn=64))
    monkeypatch.setattr(math_world, "DRAFTER", Shape(hidden=32, layers=1, heads=2, ffn=64))
    monkeypatch.setattr(math_world, "PROBLEMS", {"train": 300, "validation": 40, "heldout": 500})
    monkeypatch.setattr(math_world, "ACCURACY_PROBLEMS", 4)
    monkeypatch.setattr(math_world, "SOLUTION_TOKENS", 8)
    monkeypatch.setattr(math_world, "DLM", {"corpus": 100, "solved": 4})
    monkeypatch.setattr(
        math_world, "DFLASH", {**math_world.DFLASH, "sequences": 8, "new": 24, "blocks": 1}
    )
    monkeypatch.setattr(
        math_world,
        "EAGLE3",
        {**math_world.EAGLE3, "windows": 8, "window": 112, "draft_vocab": 64, "batch": 2},
    )
    steps = ["--target-steps", "2", "--drafter-steps", "2", "--dlm-steps", "2"]
    steps += ["--dflash-steps", "2", "--eagle3-steps", "2", "--threads", "1"]
    cli.main(["train", "--world", "math", "--out", str(tmp_path), *steps])

    for name in ("tiny-math", "tiny-math-ar"):
        assert AutoModelForCausalLM.from_pretrained(tmp_path / name).config.hidden_size == 32
    assert AutoModel.from_pretrained(tmp_path / "tiny-math-dlm").config.mask_token_id == 2
    assert load_eagle3(tmp_path / "tiny-math-eagle3").config.hidden_size == 32
    for name in cli.MATH_STAGES[:-1]:
        report = json.loads((tmp_path / name / "training.json").read_text())
        assert report["validation"] and report["seconds"] > 0, name
    rows = [json.loads(line) for line in (tmp_path / "tiny_math.jsonl").read_text().splitlines()]
    assert (
        len(rows) == 500 and rows[0]["question"] == math_corpus.problems("heldout", 1)[0].question
    )


def test_the_committed_target_scores_what_its_training_json_says() -> None:
    """The committed tiny-math, decoded greedily on the first held-out problems, scores the
    accuracy its training recorded (the same decoding, loaded from the half-precision file)."""
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specbench import paths
    from specbench.models.tiny import math_world

    directory = paths.TINY_DIR / "tiny-math"
    recorded = json.loads((directory / "training.json").read_text())["heldout"]
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    measured = math_world.accuracy(model, tokenizer, "heldout", recorded["answer_problems"])
    assert abs(measured - recorded["answer_accuracy"]) <= 0.05
