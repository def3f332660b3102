"""Where specbench finds the repository, the shared data folder and its model cache."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"
PACKAGE_DATA = Path(__file__).resolve().parent / "data"
TINY_DIR = Path(__file__).resolve().parent / "models" / "tiny" / "checkpoints"


def data_dir() -> Path:
    """The shared data folder: $SPECBENCH_DATA_DIR, else `shared/data` beside the repository."""
    env = os.environ.get("SPECBENCH_DATA_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


def cache_dir() -> Path:
    """Where built-in models are written once and reused: $SPECBENCH_CACHE, else ~/.cache/specbench."""
    env = os.environ.get("SPECBENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "specbench"
