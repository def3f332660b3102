"""Honest timers: the device is synchronised before every clock read."""

from __future__ import annotations

import time

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class Stopwatch:
    """Wall clock of one generation: started before the first forward, read at the first token
    (TTFT) and at the end, always after the device has finished its queued work."""

    def __init__(self, device: torch.device):
        self.device = device
        self.t0 = 0.0
        self.ttft_s: float | None = None

    def start(self) -> None:
        synchronize(self.device)
        self.ttft_s = None
        self.t0 = time.perf_counter()

    def first_token(self) -> None:
        if self.ttft_s is None:
            synchronize(self.device)
            self.ttft_s = time.perf_counter() - self.t0

    def elapsed(self) -> float:
        synchronize(self.device)
        return time.perf_counter() - self.t0
