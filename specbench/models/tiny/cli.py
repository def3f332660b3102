"""`specbench-tiny train`: rebuild the tiny world from the standard library's source.

specbench-tiny train                     # tokenizer, tiny (target), tiny-ar, tiny-dlm, tiny-dflash,
                                         # tiny-eagle3
specbench-tiny train --only tiny-dflash   # one drafter again, against the committed target
specbench-tiny train --out /tmp/tiny --target-steps 50 --drafter-steps 20 --dlm-steps 20 \
    --dflash-steps 20 --eagle3-steps 20   # a quick check (the drafters' data shrinks with steps)
specbench-tiny train --overwrite-committed   # rebuild the committed checkpoints (make tiny)
specbench-tiny train --world math         # the math world: tiny-math (target), tiny-math-ar,
                                         # tiny-math-dlm, tiny-math-dflash, tiny-math-eagle3, tiny_math

Checkpoints go to --out, by default $SPECBENCH_CACHE/tiny-world; the committed ones are rewritten
only with --overwrite-committed. A stage left out (--only) is read from --out when it is there,
else from the committed checkpoints.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from specbench import paths
from specbench.errors import OneLineParser
from specbench.interrupt import EXIT_CODE, on_ctrl_c

STAGES = ("tiny", "tiny-ar", "tiny-dlm", "tiny-dflash", "tiny-eagle3", "tiny_code")
MATH_STAGES = (
    "tiny-math",
    "tiny-math-ar",
    "tiny-math-dlm",
    "tiny-math-dflash",
    "tiny-math-eagle3",
    "tiny_math",
)
WORLDS = {"code": STAGES, "math": MATH_STAGES}
# optimiser steps of each stage by default; the math world's fit each stage in 45 minutes on
# two cores (its DFlash data are longer windows than the code world's)
STEPS = {
    "code": {"target": 2000, "drafter": 1500, "dlm": 1500, "dflash": 3000, "eagle3": 2000},
    "math": {"target": 2400, "drafter": 1500, "dlm": 1500, "dflash": 2000, "eagle3": 2000},
}


def train(args: argparse.Namespace) -> None:
    """Train the stages `args` names (torch is imported only here); Ctrl-C is one line saying
    what to rerun, not the traceback of wherever training was."""
    try:
        with on_ctrl_c():
            if args.world == "math":
                from specbench.models.tiny import math_world

                math_world.train(args)
            else:
                from specbench.models.tiny import build

                build.train(args)
    except KeyboardInterrupt:
        print(
            f"specbench-tiny: interrupted; the stages that finished are in {args.out} "
            "(rerun with --only and the stages left)",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_CODE) from None


def positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be an integer >= 1")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog="specbench-tiny", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train the tokenizer and the tiny-world models")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", help="where checkpoints go (default: $SPECBENCH_CACHE/tiny-world)")
    where.add_argument(
        "--overwrite-committed",
        action="store_true",
        help="rewrite the committed checkpoints in specbench/models/tiny/checkpoints",
    )
    for stage in STEPS["code"]:
        p.add_argument(f"--{stage}-steps", type=positive, help="default: the world's (STEPS)")
    p.add_argument("--world", choices=WORLDS, default="code", help="which world's models")
    p.add_argument(
        "--only",
        nargs="+",
        choices=STAGES + MATH_STAGES,
        help="run these stages (of --world), read the rest from --out",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=positive, default=None)
    args = parser.parse_args(argv)
    foreign = sorted(set(args.only or ()) - set(WORLDS[args.world]))
    if foreign:
        p.error(f"--only {' '.join(foreign)}: not a stage of --world {args.world}")
    for stage, steps in STEPS[args.world].items():
        if getattr(args, f"{stage}_steps") is None:
            setattr(args, f"{stage}_steps", steps)
    if args.overwrite_committed:
        args.out = str(paths.TINY_DIR)
    elif args.out is None:
        args.out = str(paths.cache_dir() / "tiny-world")
    try:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=args.out):
            pass
    except OSError as err:
        p.error(f"--out {args.out}: must be a writable directory ({err.strerror})")
    train(args)


if __name__ == "__main__":
    main()
