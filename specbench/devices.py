"""The run's device, resolved and checked with torch alone: `specbench-run` checks it before
importing transformers and the stages, so a device this machine lacks is refused in about the
time torch takes to import."""

from __future__ import annotations

import torch

from specbench.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def check_device(name: str) -> torch.device:
    """The device `run.device` names, which must exist here (the run's other knobs:
    `config.check_run`, before torch)."""
    try:
        device = resolve_device(name)
    except RuntimeError:
        raise ConfigError("run.device", name, "allowed: auto, cpu, cuda, cuda:N, mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("run.device", name, "no CUDA device here; use auto or cpu")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(
            "run.device", name, "must be a device this machine has (no MPS here); use auto or cpu"
        )
    return device
