"""Every bad input the three commands refuse, each timed from a fresh process as a user meets it:
the exit code, whether stderr is one line, what was left in the results directory, and the
seconds to the refusal. A refusal that needs no model should take under 2 s (it is checked
before torch is imported); one that needs a checkpoint's files (a damaged safetensors file, a
device torch does not have) is refused before any weight loads.

    python benchmarks/refusals.py              # a table on stdout
    python benchmarks/refusals.py --out results/figures/refusals.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from specbench import paths

BIN = Path(sys.executable).parent


def damaged(root: Path, name: str, damage: Callable[[Path], None]) -> str:
    """A copy of tiny-ar, damaged; its path."""
    out = root / name
    shutil.copytree(paths.TINY_DIR / "tiny-ar", out)
    damage(out)
    return str(out)


def cut_short(model: Path) -> None:
    weights = model / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)


def terabyte_header(model: Path) -> None:
    weights = model / "model.safetensors"
    weights.write_bytes(struct.pack("<Q", 2**40) + weights.read_bytes()[8:])


def wrong_vocabulary(model: Path) -> None:
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "vocab_size": 5000}))


def prompts(root: Path, name: str, text: bytes) -> str:
    path = root / name
    path.write_bytes(text)
    return f"task=prompts task.source={path}"


def cases(root: Path) -> list[tuple[str, str, bool]]:
    """(command, arguments, needs a model's files) for every refusal."""
    blocker = root / "a-file"
    blocker.write_text("")
    foreign = root / "foreign" / "run"
    foreign.mkdir(parents=True)
    (foreign / "summary.json").write_text('{"foreign": true}')
    cut = root / "cut" / "run"
    cut.mkdir(parents=True)
    (cut / "summary.json").write_text("{")
    run = [
        "run.threads=-2",
        "run.threads=0",
        "run.temperature=inf",
        "run.temperature=-0.5",
        "run.top_p=1.5",
        "run.max_new_tokens=0",
        "run.limit=many",
        "run.name=../../x",
        "run.experiment=../../x",
        "run.results_dir=",
        f"run.results_dir={blocker}/results",
        "run.engine=jit",
        "run.fit_context=wrap",
        "method=nope",
        "method.gamam=3",
        "+run.temprature=0.7",
        "method.gamma=0",
        "method.gamma=100000",
        "method.rule=greedy run.temperature=0.7",
        "method=specdiff drafter=tiny-dlm method.q_source=best",
        "method=diffuspec drafter=tiny-dlm run.temperature=0.7",
        "method=diffuspec drafter=tiny-dlm method.k_min=40",
        "method=dflash drafter=tiny-dflash method.block_size=1",
        "method=psd target=tiny-dlm method.policy=origin",
        "method=dllm target=tiny-dlm method.policy=threshold method.confidence=entropy",
        "method=spiffy target=tiny-dlm method.keep=9",
        "task=humaneval task.timeout_s=0",
        "task=mbpp task.variant=tiny",
        "task=spec_bench task.categories=[poetry]",
        "task=prompts task.source=missing.jsonl",
        prompts(root, "number.jsonl", b'{"id": "a", "prompt": 5}\n'),
        prompts(root, "empty.jsonl", b'{"id": "a", "prompt": ""}\n'),
        prompts(root, "broken.jsonl", b'{"id": "a", "prompt": "x"}\n{"id": "b", oops}\n'),
        prompts(root, "latin1.jsonl", b'{"id": "a", "prompt": "caf\xe9"}\n'),
        prompts(root, "twice.jsonl", b'{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n'),
        "logging.wandb.mode=online",
        "logging.wandb.mode=cloud",
    ]
    models = [
        f"drafter.name_or_path={damaged(root, 'cut-short', cut_short)}",
        f"drafter.name_or_path={damaged(root, 'terabyte', terabyte_header)}",
        f"drafter.name_or_path={damaged(root, 'vocab', wrong_vocabulary)}",
        f"drafter.name_or_path={root / 'no-such-model'}",
        "run.device=mps",
    ]
    stored = paths.REPO_ROOT / "results"
    report = [
        f"--results {foreign.parent} leaderboard",
        f"--results {cut.parent} leaderboard",
        f"--results {stored} pareto --task gsm8k --quality exact_match",
        f"--results {stored} pareto --task tiny_code --quality rouge9",
        f"--results {stored} --out {blocker}/x leaderboard",
        f"figures --specs {root / 'no-specs'}",
    ]
    tiny = [
        "--help",
        "train --target-steps -3",
        "train --dflash-steps 0",
        "train --out /proc/specbench",
    ]
    return [
        *(("specbench-run", a, False) for a in run),
        *(("specbench-run", a, True) for a in models),
        *(("specbench-report", a, False) for a in report),
        *(("specbench-tiny", a, False) for a in tiny),
    ]


def refuse(command: str, args: str, root: Path) -> dict:
    """One refusal from a fresh process: its exit code, stderr lines, files left, seconds."""
    results = root / "results"
    shutil.rmtree(results, ignore_errors=True)
    argv = [str(BIN / command), *args.split()]
    if command == "specbench-run" and "run.results_dir=" not in args:
        argv.append(f"run.results_dir={results}")
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "NETRC")}
    env["HOME"] = str(root)  # no ~/.netrc: no W&B login
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=root, env=env, timeout=300)
    seconds = time.perf_counter() - started
    lines = done.stderr.strip().splitlines()
    left = (
        sorted(str(p.relative_to(results)) for p in results.rglob("*")) if results.exists() else []
    )
    return {
        "command": command,
        "args": args.replace(str(root), "<tmp>"),
        "exit": done.returncode,
        "one_line": len(lines) == 1 or (args == "--help" and done.returncode == 0),
        "files_left": len(left),
        "seconds": round(seconds, 2),
        "says": (lines[-1] if lines else done.stdout.strip().splitlines()[0])[:110],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="also write the rows as CSV here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = [
            {**refuse(command, a, root), "needs_model": model} for command, a, model in cases(root)
        ]
    print("| command | arguments | exit | one line | files left | s | needs a model | says |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['command']} | `{r['args']}` | {r['exit']} | {r['one_line']} | "
            f"{r['files_left']} | {r['seconds']:.2f} | {r['needs_model']} | {r['says']} |"
        )
    light = [r["seconds"] for r in rows if not r["needs_model"]]
    print(
        f"\n{len(rows)} refusals: {sum(r['one_line'] for r in rows)} one line, "
        f"{sum(r['files_left'] == 0 for r in rows)} leaving no file; without a model "
        f"{sum(s < 2 for s in light)}/{len(light)} under 2 s (max {max(light):.2f} s)"
    )
    if args.out:
        with open(args.out, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
