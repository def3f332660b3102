"""Where specbench finds the repository, the shared data folder and its model cache."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"
EXPERIMENTS_DIR = REPO_ROOT / "experiments"
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


def portable(value: Any) -> Any:
    """A resolved config with this machine's locations written back as the resolvers that
    produce them (`${tiny:...}`, `${pkgdata:...}`, `${data:...}`): stored configs and run
    identities then mean the same run on every machine, and name no developer's directory."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str):
        for resolver, root in (("tiny", TINY_DIR), ("pkgdata", PACKAGE_DATA), ("data", data_dir())):
            prefix = f"{root}{os.sep}"
            if value.startswith(prefix):
                return f"${{{resolver}:{value[len(prefix) :]}}}"
    return value


def unrooted(value: Any) -> Any:
    """`value` with this machine's directories taken out of every string, also inside one (a
    JSON argument): a path under the repository is written relative to it, one under the model
    cache as `$SPECBENCH_CACHE/...`, so a stored file names no developer's directory."""
    if isinstance(value, dict):
        return {k: unrooted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unrooted(v) for v in value]
    if isinstance(value, str):
        value = value.replace(f"{REPO_ROOT}{os.sep}", "")
        return value.replace(f"{cache_dir()}{os.sep}", f"$SPECBENCH_CACHE{os.sep}")
    return value
