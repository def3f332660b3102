"""The machine a number was measured on, and its class: the one short string reports group by.

A speedup belongs to a method and a machine. On a CPU the matrix ISA decides the regime: with
AMX tiles verifying 16 bf16 tokens costs about one target step more than one token, on an
AVX2-only core about eleven (docs/measurement.md#which-machine-can-show-what); so the class
names the ISA, not only the model string (which says "AMD EPYC" either way). On a GPU it is
the GPU's name. Nothing here imports torch: the reports read classes without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# the CPU matrix ISAs, best first: the first whose flags the CPU has is its class's
ISAS = ("amx", "avx512_bf16", "avx512", "avx2", "other")
ISA_FLAGS = {
    "amx": {"amx_tile", "amx_bf16"},
    "avx512_bf16": {"avx512_bf16"},
    "avx512": {"avx512f"},
    "avx2": {"avx2"},
}
# `torch.backends.cpu.get_cpu_capability()`, where the CPU's flags cannot be read
CAPABILITY_ISAS = {"AVX512": "avx512", "AVX2": "avx2"}
UNRECORDED = "unrecorded"


def matrix_isa(flags: set[str], capability: str | None) -> str:
    """The best matrix ISA the run's kernels could use: the best the CPU's flags name, capped
    where torch's kernels were (`ATEN_CPU_CAPABILITY=avx2`, `specbench.cpu_kernels.pin`:
    ATen reports AVX512 on every AVX512 CPU, so a lower capability on one is a cap); torch's
    capability alone where there are no flags (not Linux)."""
    if not flags:
        return CAPABILITY_ISAS.get(capability or "", "other")
    isa = next((isa for isa in ISAS[:-1] if ISA_FLAGS[isa] <= flags), "other")
    return (
        isa
        if capability in (None, "AVX512")
        else capped(isa, CAPABILITY_ISAS.get(capability, "other"))
    )


def capped(isa: str, cap: str | None) -> str:
    """The worse of a machine's ISA and the best its kernels were built or limited to."""
    return isa if cap is None else max(isa, cap, key=ISAS.index)


@dataclass(frozen=True)
class Machine:
    """What env.json says of the machine. None: not recorded (a run written before this)."""

    cpu: str  # the CPU's model name
    isa: str | None  # its matrix ISA, one of ISAS
    cpus: int | None  # logical CPUs the run could use
    threads: int | None  # torch's intra-op threads
    torch_capability: str | None = None  # torch's vector kernels (AVX512, AVX2, DEFAULT, ...)
    gpu: str | None = None  # the accelerator the run used; None: it ran on the CPU
    gpu_memory_gib: float | None = None
    gpu_count: int | None = None
    driver: str | None = None
    cuda: str | None = None

    def label(self) -> str:
        """The machine class: "gpu NVIDIA H100 80GB HBM3", "cpu AMD EPYC avx2 2c"."""
        if self.gpu:
            return f"gpu {self.gpu}"
        isa = self.isa or f"(isa {UNRECORDED})"
        cpus = f"{self.cpus}c" if self.cpus else f"(cores {UNRECORDED})"
        return f"cpu {short_cpu(self.cpu)} {isa} {cpus}"


def short_cpu(model: str) -> str:
    """A CPU model name without its trademarks, "CPU"/"Processor" and clock speed."""
    model = re.sub(r"\((R|TM|tm)\)|\bCPU\b|\bProcessor\b|@.*$", " ", model)
    return " ".join(model.split())


def of_env(env: dict[str, Any]) -> Machine:
    """The machine env.json describes; one written before it had a `machine` says what it
    recorded (its CPU's name, cores, threads, device name), its ISA unrecorded."""
    if "machine" in env:
        return Machine(**env["machine"])
    on_cpu = str(env.get("device", "cpu")).startswith("cpu")
    return Machine(
        cpu=env.get("cpu") or UNRECORDED,
        isa=None,
        cpus=env.get("cpu_count"),
        threads=env.get("torch_threads"),
        gpu=None if on_cpu else env.get("device_name") or env.get("device"),
        driver=env.get("driver"),
        cuda=env.get("cuda"),
    )


def of_fingerprint(fingerprint: str) -> str:
    """The class of a run whose summary and files say only its fingerprint's device name."""
    return f"{fingerprint.split(' | ')[0]} (class {UNRECORDED})"
