"""How fast the code sandbox judges programs: HumanEval's 164 canonical solutions (all pass)
and 164 empty completions (all fail), at several worker counts, each in one run.

    python benchmarks/sandbox_throughput.py --workers 1 2 4
"""

from __future__ import annotations

import argparse
import time

from specbench import paths
from specbench.metrics import sandbox
from specbench.tasks.humaneval import HumanEvalConfig, HumanEvalTask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    task = HumanEvalTask(
        HumanEvalConfig(source=str(paths.data_dir() / "humaneval/HumanEval.jsonl.gz"))
    )
    samples = task.samples()
    print(f"sandbox isolation: {sandbox.isolation()}")
    for label, completion in (("canonical", None), ("empty", "")):
        programs = [
            task.program(s, s.reference if completion is None else completion) for s in samples
        ]
        for workers in args.workers:
            started = time.perf_counter()
            outcomes = sandbox.run_many(programs, workers=workers)
            seconds = time.perf_counter() - started
            passed = sum(o.passed for o in outcomes)
            print(
                f"{label:9s} workers={workers}: {len(programs)} programs in {seconds:.1f} s "
                f"({len(programs) / seconds:.1f}/s), pass@1 {passed / len(programs):.3f}"
            )


if __name__ == "__main__":
    main()
