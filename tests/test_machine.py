"""The machine class every result carries: the matrix ISA from the CPU's flags, the short
label reports group by, this machine's description in env.json, and the class of a run written
before the field existed."""

from __future__ import annotations

import json

import pytest
import torch

from specbench import paths
from specbench.results.env import environment, fingerprint
from specbench.results.machine import Machine, matrix_isa, of_env


@pytest.mark.parametrize(
    "flags, isa",
    [
        ({"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}, "amx"),
        ({"avx2", "avx512f", "avx512_bf16", "amx_tile"}, "avx512_bf16"),  # no bf16 tiles
        ({"avx2", "avx512f"}, "avx512"),
        ({"avx", "avx2", "fma"}, "avx2"),
        ({"sse4_2"}, "other"),
    ],
)
def test_the_matrix_isa_is_the_best_the_flags_name(flags: set[str], isa: str) -> None:
    assert matrix_isa(flags, "AVX512") == isa  # flags, where there are any, decide


def test_without_flags_torch_capability_names_the_isa() -> None:
    assert matrix_isa(set(), "AVX2") == "avx2"
    assert matrix_isa(set(), "DEFAULT") == "other"


def test_the_class_names_cpu_isa_and_cores_or_the_gpu() -> None:
    epyc = Machine(cpu="AMD EPYC 7B13 64-Core Processor", isa="avx2", cpus=2, threads=2)
    assert epyc.label() == "cpu AMD EPYC 7B13 64-Core avx2 2c"
    xeon = Machine(
        cpu="Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz", isa="amx", cpus=8, threads=8
    )
    assert xeon.label() == "cpu Intel Xeon Platinum 8480+ amx 8c"
    h100 = Machine(cpu="AMD EPYC", isa="avx2", cpus=16, threads=16, gpu="NVIDIA H100 80GB HBM3")
    assert h100.label() == "gpu NVIDIA H100 80GB HBM3"


def test_env_json_describes_this_machine_and_the_fingerprint_leads_with_its_class() -> None:
    env = json.loads(json.dumps(environment(torch.device("cpu"), "0123abcd")))
    machine = of_env(env)
    flags = set(open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0].split())
    assert machine.isa == matrix_isa(flags, None) and machine.gpu is None
    assert machine.threads == torch.get_num_threads() and machine.cpus >= 1
    assert machine.torch_capability == torch.backends.cpu.get_cpu_capability()
    assert fingerprint(env).startswith(f"{machine.label()} | torch ")


def test_a_committed_env_json_reads_as_what_it_recorded() -> None:
    """A run written before the machine field: its CPU's name and cores, the ISA unrecorded."""
    short = {"AMD EPYC": "AMD EPYC", "Intel(R) Xeon(R) Processor": "Intel Xeon"}
    stored = sorted(paths.REPO_ROOT.glob("results/reference/*/*/env.json"))
    assert stored
    for path in stored:
        env = json.loads(path.read_text())
        want = f"cpu {short[env['cpu']]} (isa unrecorded) {env['cpu_count']}c"
        assert of_env(env).label() == want, path
