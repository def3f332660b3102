"""Golden fixtures for specbench's DDTree tree builder and tree walk
(`specbench/decoding/drafters/ddtree/method.py` `best_first_tree`, `specbench/decoding/verify.py`
`follow`), made by running upstream code.

Upstream: liranringel/ddtree at c96427a185677bf4133ed865dd1626a5041aef9b. The script runs
ddtree.py's `build_ddtree_tree(draft_logits, budget)` and
`follow_verified_tree(child_maps, posterior)`, loaded from the checkout named on the command
line, not copied: `ast` pulls those two functions and the `DDTREE_TREE_BUILD_STAGE_ORDER`
constant out of ddtree.py, and `empty_stage_times` out of dflash.py, and runs them in a
namespace holding heapq, time, numpy and torch. ddtree.py itself is never imported (it imports
loguru, transformers and the drafter model at module level).

Stand-in: dflash.py's `cuda_time` (`torch.cuda.synchronize()` then `time.perf_counter()`) is
`time.perf_counter`; it only times the build, so the trees are unchanged.

goldens.json holds
  * `upstream`: repo, commit and file;
  * `trees`: each case's logits recipe, `logits = torch.randn(L, V,
    generator=torch.Generator().manual_seed(seed)) * scale` in float32 on the CPU, then
    `torch.round(logits)` when `round` is true (a coarse grid, so equal log-probs occur), and
    `budget`; and upstream's outputs in upstream's format: `node_token_ids` and `node_depths`
    (length n, node j is tree index j + 1) and `parents` (length n + 1, `parents[0] = -1` for
    the root, tree indices). The logits are not stored.
  * `walks`: for some trees, a `posterior` row and upstream's `follow_verified_tree` result
    (`accepted_indices`, tree indices starting with the root's 0, and `next_token`).

How `posterior` is indexed: upstream calls `follow_verified_tree(child_maps, sample(logits))`
with the target's logits over `verify_input_ids = [root, *node_token_ids]`, so `posterior` is
[batch 1, n + 1] and `posterior[0, i]` is the target's token after tree index i (i = 0 the
root, i = j + 1 node j): the walk reads the row of the node it stands on. Specbench's `follow`
takes the same row (`target_ids[0]` the root's, `target_ids[1 + k]` node k's). Each walk's row
is drawn (Python `random.Random(walk seed)`) so the walk goes deep: at every tree index, with
probability `child_prob` the token of one of its children (when it has any), the child drawn in
proportion to its subtree's size, otherwise a uniform token in [0, V).

Equal logits within a row are ordered by `torch.topk`, which torch leaves unspecified; both
sides call the same CPU topk, so the tie cases hold for the torch they were made with
(2.13.0+cpu).

Rerun (from the repository root):
    python tools/goldens/ddtree.py <liranringel/ddtree checkout>
"""

from __future__ import annotations

import ast
import heapq
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

DDTREE_REPO = "liranringel/ddtree"
DDTREE_COMMIT = "c96427a185677bf4133ed865dd1626a5041aef9b"
OUT = Path(__file__).resolve().parents[2] / "tests" / "goldens" / "ddtree"

# (L, V, scale, round, budget) before the seed; every case gets its own seed
GRID = [
    (depth, vocab, 3.0, False, budget)
    for depth in (1, 3, 15)
    for vocab in (6, 1000, 32000)
    for budget in (1, 16, 32, 64, 256)
]
EXTRA = [
    # the heap empties before the budget: fewer prefixes than budget (3 + 9 + 27 = 39; 14)
    (3, 3, 3.0, False, 64),
    (3, 2, 1.0, False, 16),
    (2, 6, 1.0, False, 256),
    # budget 0: the root alone
    (3, 6, 3.0, False, 0),
    # peaked marginals: deep, chain-like trees
    (15, 1000, 10.0, False, 32),
    (15, 1000, 10.0, False, 64),
    (15, 1000, 10.0, False, 256),
    (15, 32000, 10.0, False, 256),
    (3, 6, 10.0, False, 64),
    (15, 6, 10.0, False, 256),
    # exact ties: logits on an integer grid, so equal log-probs (and scores) occur
    (3, 6, 1.0, True, 64),
    (3, 6, 1.0, True, 256),
    (15, 6, 1.0, True, 256),
    (15, 1000, 1.0, True, 64),
    (15, 1000, 1.0, True, 256),
    (15, 32000, 2.0, True, 256),
    (15, 1000, 5.0, True, 64),
    # every logit equal
    (3, 6, 0.0, False, 64),
    (15, 6, 0.0, False, 256),
    (15, 1000, 0.0, False, 32),
]
WALKS_PER_TREE = [(0.8, 3), (1.0, 1)]  # (child_prob, how many walks)


def load_upstream(checkout: Path) -> dict:
    """build_ddtree_tree and follow_verified_tree from the checkout, with what they need."""
    namespace = {
        "heapq": heapq,
        "time": time,
        "np": np,
        "torch": torch,
        "cuda_time": time.perf_counter,  # stand-in for dflash.py's synchronising timer
    }
    wanted = {
        "ddtree.py": {"DDTREE_TREE_BUILD_STAGE_ORDER", "build_ddtree_tree", "follow_verified_tree"},
        "dflash.py": {"empty_stage_times"},
    }
    for file, names in wanted.items():
        path = checkout / file
        module = ast.parse(path.read_text(), filename=str(path))
        found = []
        for node in module.body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                found.append((node.name, node))
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in names:
                        found.append((target.id, node))
        missing = names - {name for name, _ in found}
        if missing:
            raise SystemExit(f"{path} has no {sorted(missing)}")
        code = compile(ast.Module([node for _, node in found], []), str(path), "exec")
        exec(code, namespace)
    return namespace


def logits_of(case: dict) -> torch.Tensor:
    generator = torch.Generator().manual_seed(case["seed"])
    logits = torch.randn(case["L"], case["V"], generator=generator) * case["scale"]
    return torch.round(logits) if case["round"] else logits


def walk_row(child_maps: list[dict[int, int]], vocab: int, child_prob: float, seed: int) -> list:
    """One target token per tree index: with probability `child_prob` a child's token, the
    child drawn in proportion to its subtree's size (so walks head for the deep branches),
    otherwise a uniform token."""
    size = [1] * len(child_maps)
    for index in reversed(range(len(child_maps))):
        size[index] += sum(size[child] for child in child_maps[index].values())
    rng = random.Random(seed)
    row = []
    for children in child_maps:
        tokens = sorted(children)
        if tokens and rng.random() < child_prob:
            row.append(rng.choices(tokens, weights=[size[children[t]] for t in tokens])[0])
        else:
            row.append(rng.randrange(vocab))
    return row


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: tools/goldens/ddtree.py <liranringel/ddtree checkout>")
    checkout = Path(sys.argv[1])
    upstream = load_upstream(checkout)
    build, follow = upstream["build_ddtree_tree"], upstream["follow_verified_tree"]
    goldens = {
        "upstream": {"repo": DDTREE_REPO, "commit": DDTREE_COMMIT, "file": "ddtree.py"},
        "torch": torch.__version__,
        "trees": [],
        "walks": [],
    }
    walk_seed = 10_000
    for index, (depth, vocab, scale, rounded, budget) in enumerate(GRID + EXTRA):
        case = {"seed": index, "L": depth, "V": vocab, "scale": scale, "round": rounded}
        name = f"s{index}_L{depth}_V{vocab}_x{scale:g}{'_round' if rounded else ''}_B{budget}"
        ids, depths, parents, child_maps, _, _ = build(logits_of(case), budget)
        tree = {
            "name": name,
            **case,
            "budget": budget,
            "node_token_ids": ids.tolist(),
            "node_depths": depths.tolist(),
            "parents": [int(p) for p in parents],
        }
        goldens["trees"].append(tree)
        if depth == 1 or len(tree["node_token_ids"]) < 16:
            continue
        for child_prob, count in WALKS_PER_TREE:
            for _ in range(count):
                walk_seed += 1
                row = walk_row(child_maps, vocab, child_prob, walk_seed)
                accepted, next_token = follow(child_maps, torch.tensor([row]))
                goldens["walks"].append(
                    {
                        "tree": name,
                        "seed": walk_seed,
                        "child_prob": child_prob,
                        "posterior": row,
                        "accepted_indices": [int(i) for i in accepted],
                        "next_token": int(next_token),
                    }
                )
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "goldens.json").write_text(json.dumps(goldens, separators=(",", ":")) + "\n")
    revision = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    if revision and revision != DDTREE_COMMIT:
        print(f"warning: checkout HEAD {revision} is not {DDTREE_COMMIT}")
    print(
        f"wrote {OUT / 'goldens.json'} ({len(goldens['trees'])} trees, "
        f"{len(goldens['walks'])} walks; checkout HEAD {revision or 'n/a'})"
    )


if __name__ == "__main__":
    main()
