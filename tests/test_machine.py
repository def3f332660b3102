"""What env.json says of the machine and the code: the matrix ISA from the CPU's flags, the
short class reports group by, this machine's description, the class of a run written before
the field existed, and `git_dirty` as a change to the code that ran."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from specbench import paths
from specbench.runs.env import code_dirty, environment, fingerprint
from specbench.runs.machine import Machine, capped, matrix_isa, of_env


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


def test_kernels_capped_below_the_cpu_name_the_cap() -> None:
    """`ATEN_CPU_CAPABILITY=avx2` on an AMX or AVX512 CPU measures the AVX2 machine's regime."""
    amx = {"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}
    assert matrix_isa(amx, "AVX2") == "avx2"
    assert matrix_isa(amx, "DEFAULT") == "other"
    assert matrix_isa({"avx", "avx2"}, "AVX2") == "avx2"
    assert capped("amx", "avx2") == "avx2" and capped("avx2", "avx512") == "avx2"
    assert capped("avx512_bf16", None) == "avx512_bf16"


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
    capability = torch.backends.cpu.get_cpu_capability()  # conftest caps it at AVX2
    assert machine.isa == matrix_isa(flags, capability) == "avx2" and machine.gpu is None
    assert machine.threads == torch.get_num_threads() and machine.cpus >= 1
    assert machine.torch_capability == torch.backends.cpu.get_cpu_capability()
    assert fingerprint(env).startswith(f"{machine.label()} | torch ")


def test_a_committed_env_json_reads_as_what_it_recorded() -> None:
    """A run written before the machine field: its CPU's name and cores, the ISA unrecorded;
    one written since: the class its machine block names."""
    short = {"AMD EPYC": "AMD EPYC", "Intel(R) Xeon(R) Processor": "Intel Xeon"}
    stored = sorted(paths.REPO_ROOT.glob("results/reference/*/*/env.json"))
    envs = [json.loads(path.read_text()) for path in stored]
    assert any("machine" not in env for env in envs)
    for path, env in zip(stored, envs):
        if "machine" in env:
            recorded = env["machine"]
            want = f"cpu {short[recorded['cpu']]} {recorded['isa']} {recorded['cpus']}c"
        else:
            want = f"cpu {short[env['cpu']]} (isa unrecorded) {env['cpu_count']}c"
        assert of_env(env).label() == want, path


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def test_git_dirty_means_the_code_that_ran_differed_from_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rewritten result file leaves the code clean; an edited module or a new config file
    (which the run would read) makes it dirty."""
    for name in ("specbench/x.py", "results/r.json", "conf/c.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("0\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "code and results")
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    (tmp_path / "results" / "r.json").write_text("1\n")
    (tmp_path / "results" / "new.json").write_text("1\n")
    assert not code_dirty()
    (tmp_path / "conf" / "new.yaml").write_text("1\n")
    assert code_dirty()
    (tmp_path / "conf" / "new.yaml").unlink()
    (tmp_path / "specbench" / "x.py").write_text("1\n")
    assert code_dirty()
