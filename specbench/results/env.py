"""The environment fingerprint that every number carries."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from typing import Any

import torch
import transformers

from specbench import __version__, paths


def _cmd(args: list[str]) -> str | None:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=10, cwd=paths.REPO_ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device, config_hash: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "specbench": __version__,
        "git_commit": _cmd(["git", "rev-parse", "HEAD"]),
        "git_dirty": bool(_cmd(["git", "status", "--porcelain", "--untracked-files=no"])),
        "config_hash": config_hash,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "device_name": cpu_model() if device.type == "cpu" else None,
        "cuda": torch.version.cuda,
        "driver": None,
    }
    if device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
        env["gpu_count"] = torch.cuda.device_count()
        if shutil.which("nvidia-smi"):
            env["driver"] = _cmd(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            )
    return env


def fingerprint(env: dict[str, Any]) -> str:
    """One line for the foot of a table."""
    return (
        f"{env['device_name']} | torch {env['torch']} | transformers {env['transformers']} | "
        f"threads {env['torch_threads']} | commit {(env['git_commit'] or 'unknown')[:8]}"
        f"{'+dirty' if env['git_dirty'] else ''} | config {env['config_hash']}"
    )
