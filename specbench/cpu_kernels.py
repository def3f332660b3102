"""The CPU kernels a token-identical bf16 comparison is made with.

A bf16 matrix product on a CPU with AVX512-BF16 or AMX runs through oneDNN's native bf16 dot
products; on an AVX2-only CPU, through ATen's fp32-accumulating kernels. The two round
differently, and in bf16 a one-ulp difference flips ties, so goldens recorded from reference
code hold only on the kernels that recorded them: the bf16 goldens were recorded, and are
compared, with every library capped at AVX2, which every x86-64 machine this project runs on has.
Nothing else in specbench pins kernels: a benchmark runs the machine's fastest ones.
"""

from __future__ import annotations

import os

# each library's own switch; read when the library first dispatches, so set before torch loads
PORTABLE = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}
CAPABILITY = "AVX2"  # what torch.backends.cpu.get_cpu_capability() reports once pinned


def pin() -> None:
    """Cap PyTorch's, oneDNN's and MKL's CPU code paths at AVX2 (call before importing torch)."""
    os.environ.update(PORTABLE)
