"""The tiny world's text: the standard library's .py files, split by a hash of each module's
path into train (90%), validation (5%) and held-out (5%, the source of tiny_code prompts).

The split is fixed by path, so it is the same on every machine; the text itself is whatever
standard library the running Python ships (the committed checkpoints were built on 3.11).
"""

from __future__ import annotations

import sysconfig
import zlib
from pathlib import Path

SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "turtledemo", "site-packages", "_bundled"}
SPLITS = ("train", "validation", "heldout")


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def split_of(relative: str) -> str:
    bucket = zlib.crc32(relative.encode()) % 20
    return "heldout" if bucket == 0 else "validation" if bucket == 1 else "train"


def files(split: str) -> list[Path]:
    """The split's files, sorted by path so every consumer sees them in one order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    root = stdlib_root()
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if SKIP_DIRS.isdisjoint(relative.parts[:-1]) and split_of(relative.as_posix()) == split:
            found.append(path)
    return found


def texts(split: str) -> list[str]:
    return [p.read_text(encoding="utf-8", errors="replace") for p in files(split)]
