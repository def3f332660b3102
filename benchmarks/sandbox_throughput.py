"""How fast and how faithfully the code sandbox judges programs.

Pass counts of the canonical solutions (HumanEval 164, sanitized MBPP 257, full MBPP 500),
then, arms interleaved in one run: the latency of a trivial check and the throughput on
HumanEval's canonical solutions at each worker count. `--before REV` adds the sandbox of an
earlier commit as a second arm (loaded from git, judging the same programs in its own format:
program and tests in one process).

    python benchmarks/sandbox_throughput.py --workers 1 2 --before 6df6a6b
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specbench import paths, sandbox
from specbench.tasks.humaneval import HumanEvalConfig, HumanEvalTask
from specbench.tasks.mbpp import MbppConfig, MbppTask

DATA = paths.data_dir()
ROOT = Path(__file__).resolve().parents[1]
CALLS = 20_000


def suites() -> dict[str, tuple]:
    return {
        "HumanEval": HumanEvalTask(
            HumanEvalConfig(source=str(DATA / "humaneval/HumanEval.jsonl.gz"))
        ),
        "MBPP sanitized": MbppTask(
            MbppConfig(variant="sanitized", source=str(DATA / "mbpp/sanitized-mbpp.json"))
        ),
        "MBPP full": MbppTask(MbppConfig(variant="full", source=str(DATA / "mbpp/mbpp.jsonl"))),
    }


def old_sandbox(rev: str, where: Path):
    """The sandbox module of commit `rev`, importable from `where`."""
    for name in ("sandbox.py", "sandbox_runner.py"):
        text = subprocess.run(
            ["git", "show", f"{rev}:specbench/metrics/{name}"],
            cwd=ROOT, check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        (where / name).write_text(text)
    spec = importlib.util.spec_from_file_location("old_sandbox", where / "sandbox.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def one_process_program(check: sandbox.Check) -> str:
    """The old format: one file, the prelude (HumanEval's prompt, whose stub the program
    redefines) first."""
    return f"{check.prelude}\n{check.program}\n{check.tests}"


def timed(judge, items, workers: int) -> tuple[float, int]:
    started = time.perf_counter()
    outcomes = judge(items, workers)
    return time.perf_counter() - started, sum(o.passed for o in outcomes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--before", help="a commit whose sandbox is measured as a second arm")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for name, task in suites().items():
        samples = task.samples()
        seconds, passed = timed(
            lambda c, w: sandbox.run_many(c, workers=w),
            [task.code_check(s, s.reference) for s in samples], 2,
        )  # fmt: skip
        print(f"{name}: {passed}/{len(samples)} canonical solutions pass ({seconds:.1f} s)")

    task = suites()["HumanEval"]
    checks = [task.code_check(s, s.reference) for s in task.samples()]
    trivial = [sandbox.Check("def f():\n    return 1\n", "assert f() == 1\n", ("f",))] * 20
    arms = {"nsjail": lambda items, w: sandbox.run_many(items, workers=w)}
    if args.before:
        old = old_sandbox(args.before, Path(tempfile.mkdtemp()))
        arms[f"before ({args.before})"] = lambda items, w: old.run_many(
            [one_process_program(c) for c in items], workers=w
        )
    for judge in arms.values():
        judge(trivial[:2], 1)  # warm: staging, probes
    many_calls = sandbox.Check(
        "def f():\n    return 1\n", f"for _ in range({CALLS}):\n    assert f() == 1\n", ("f",)
    )
    seconds, _ = timed(arms["nsjail"], [many_calls], 1)
    trivial_s, _ = timed(arms["nsjail"], trivial, 1)
    per_call = (seconds - trivial_s / len(trivial)) / CALLS
    print(f"nsjail: a call from the tests to the program costs {per_call * 1e6:.0f} us")
    for repeat in range(args.repeats):
        for arm, judge in arms.items():
            seconds, _ = timed(judge, trivial, 1)
            print(f"[{repeat}] {arm:22s} trivial check: {seconds / len(trivial) * 1000:.1f} ms")
            for workers in args.workers:
                seconds, passed = timed(judge, checks, workers)
                print(
                    f"[{repeat}] {arm:22s} workers={workers}: {len(checks) / seconds:.1f} "
                    f"programs/s, {passed}/{len(checks)} pass"
                )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
