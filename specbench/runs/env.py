"""The environment fingerprint that every number carries: the software, the code's commit, and
the machine (`specbench.runs.machine`)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import asdict
from typing import Any

import torch
import transformers

from specbench import __version__, paths
from specbench.runs.machine import Machine, matrix_isa, of_env


def _cmd(args: list[str]) -> str | None:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=10, cwd=paths.REPO_ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _cpuinfo(key: str) -> str | None:
    """The first `key` line of /proc/cpuinfo (None off Linux)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.split(":", 1)[0].strip() == key:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def _cpus() -> int | None:
    """The CPUs this process may run on (a container's or taskset's share, not the host's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def machine(device: torch.device) -> Machine:
    """This machine as a run on `device` uses it: the CPU and its matrix ISA, and the GPU."""
    capability = torch.backends.cpu.get_cpu_capability()
    flags = set((_cpuinfo("flags") or "").split())
    gpu: dict[str, Any] = {}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        gpu = {
            "gpu": props.name,
            "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "gpu_count": torch.cuda.device_count(),
            "cuda": torch.version.cuda,
        }
        if shutil.which("nvidia-smi"):
            query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            driver = _cmd(query)  # a line per GPU
            gpu["driver"] = driver.splitlines()[0] if driver else None
    elif device.type != "cpu":
        gpu = {"gpu": device.type}
    return Machine(
        cpu=cpu_model(),
        isa=matrix_isa(flags, capability),
        cpus=_cpus(),
        threads=torch.get_num_threads(),
        torch_capability=capability,
        **gpu,
    )


# what a run executes: the package, its configs and the build files (results are not code)
CODE_PATHS = ("specbench", "conf", "pyproject.toml", "Makefile", "benchmarks", "tools")


def code_dirty() -> bool:
    """Whether the code that runs differs from the commit: a change to `CODE_PATHS`, or a new
    file there (a module the registry would discover); rewritten result files do not count."""
    return bool(_cmd(["git", "status", "--porcelain", "--", *CODE_PATHS]))


def environment(device: torch.device, config_hash: str) -> dict[str, Any]:
    return {
        "specbench": __version__,
        "git_commit": _cmd(["git", "rev-parse", "HEAD"]),
        "git_dirty": code_dirty(),
        "config_hash": config_hash,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "device": str(device),
        "machine": asdict(machine(device)),
    }


def fingerprint(env: dict[str, Any]) -> str:
    """One line for the foot of a table: the machine class first."""
    host = of_env(env)
    return (
        f"{host.label()} | torch {env['torch']} | transformers {env['transformers']} | "
        f"threads {host.threads} | commit {(env['git_commit'] or 'unknown')[:8]}"
        f"{'+dirty' if env['git_dirty'] else ''} | config {env['config_hash']}"
    )
