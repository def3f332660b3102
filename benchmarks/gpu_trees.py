"""The trees' GPU check, sized to 7 minutes: DDTree's node budget swept on the xl world, each
cell beside DFlash with the same drafter and block on the same samples (vs dflash), SpS's
dynamic tree beside its own chain (vs chain), and both again on the tiny world; CUDA, bf16,
eager. A GPU verifies a tree of N nodes in about the time of one token, the case trees are
built for; on the CPU they pay only while verification stays memory-bound.

    python benchmarks/gpu_trees.py --budget 420 --limit 10 --results "$OUT/trees"
"""

from __future__ import annotations

from gpu_check import arguments, run_cells

BUDGETS = (32, 16, 64, 8)  # the default first: cells past the time budget are skipped
CELLS = {
    **{f"xl ddtree N{n}": ["experiment=ddtree_budget_xl", f"method.budget={n}"] for n in BUDGETS},
    "xl sps tree": ["experiment=sps_xl", "method.tree=dynamic", "method.budget=16"],
    "tiny ddtree N32": ["method=ddtree", "drafter=tiny-dflash", "method.budget=32"],
    "tiny sps tree": ["method=sps", "drafter=tiny-ar", "method.tree=dynamic", "method.budget=16"],
}


def main() -> None:
    run_cells(CELLS, arguments(__doc__, 420), "gpu_trees")


if __name__ == "__main__":
    main()
