"""The verify(k)/step curve of `tiny-xl` in llama.cpp, in f32, bf16, q8_0 and q4_0, beside
PyTorch's on the same machine: what a forward over k new tokens costs in steps of one token.

Speculation pays only where verifying a draft costs little more than one step. llama.cpp's
quantized kernels multiply int8 activations by int8 (or 4-bit) weights, so on a CPU without
bf16 matrix units a batch of k tokens can cost far less than k steps where PyTorch's float
matmuls cannot. llama.cpp's side is `llama-bench` (`make llamacpp`) on GGUF exports
(specbench/models/gguf_export.py): `-p k -n 0 -d <context>` times a batch of k tokens after
that many cached ones, the KV cache in llama.cpp's f16 for every weight type (llama-bench takes
no f32 cache; backend=llamacpp serves f32 weights with an f32 cache); PyTorch's is benchmarks/forward_cost.py's `step_ms` (k new tokens
behind a cached context, rolled back), in float32 and bfloat16.

    python benchmarks/llamacpp_verify_cost.py --threads 2 --out results/figures
    python benchmarks/llamacpp_verify_cost.py --threads 2 --isa avx2 --out results/figures

`--isa avx2` measures the AVX2-only machine's regime on any x86 CPU: llama.cpp from `make
llamacpp-avx2`, PyTorch, oneDNN and MKL capped at AVX2 (`specbench.cpu_kernels.pin`).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from specbench import cpu_kernels, paths

# torch reads its kernel caps once, at import: `--isa avx2` sets them and restarts before that
argv = sys.argv[1:]
avx2 = "--isa=avx2" in argv or ["--isa", "avx2"] in [argv[i : i + 2] for i in range(len(argv))]
if avx2 and os.environ.get("ATEN_CPU_CAPABILITY") != cpu_kernels.PORTABLE["ATEN_CPU_CAPABILITY"]:
    cpu_kernels.pin()
    os.execv(sys.executable, [sys.executable, *sys.argv])

import torch  # noqa: E402
from forward_cost import step_ms  # noqa: E402

from specbench.backends.llamacpp.server import BUILD  # noqa: E402
from specbench.config import ModelConfig  # noqa: E402
from specbench.models import gguf_export, loading  # noqa: E402
from specbench.models.kinds.causal import load_causal_lm  # noqa: E402
from specbench.runs.env import environment  # noqa: E402
from specbench.runs.machine import capped, of_env  # noqa: E402

BUILDS = {"native": BUILD, "avx2": paths.REPO_ROOT / ".llamacpp-avx2" / "bin"}

TARGET = ModelConfig(name="tiny-xl", name_or_path="specbench:tiny-xl")
KS = tuple(range(1, 18))


def llama_bench(bench: Path, model: Path, context: int, threads: int, repeats: int) -> dict:
    """Mean milliseconds of a batch of k tokens behind `context` cached ones, per k."""
    command = [str(bench), "-m", str(model), "-p", ",".join(map(str, KS))]
    command += ["-n", "0", "-d", str(context), "-r", str(repeats), "-t", str(threads), "-o", "json"]
    runs = json.loads(subprocess.run(command, check=True, capture_output=True).stdout)
    return {run["n_prompt"]: run["avg_ns"] / 1e6 for run in runs}


def torch_curve(dtype: str, context: int, repeats: int) -> dict:
    """Median milliseconds of k new tokens behind `context` cached ones in PyTorch."""
    lm = load_causal_lm(TARGET, "target", torch.device("cpu"), dtype)
    lm.prefill(list(range(3, 3 + context)))
    return {k: statistics.median(step_ms(lm, k) for _ in range(repeats)) for k in KS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quants", nargs="+", default=list(gguf_export.QUANTS))
    parser.add_argument("--torch", nargs="*", default=["float32", "bfloat16"])
    parser.add_argument("--isa", choices=sorted(BUILDS), default="native")
    parser.add_argument("--out", type=Path, help="write llamacpp_verify_cost.csv and .md here")
    args = parser.parse_args()
    bench = BUILDS[args.isa] / "llama-bench"
    if not bench.is_file():
        parser.error(
            f"no {bench}: run `make llamacpp{'' if args.isa == 'native' else '-' + args.isa}`"
        )
    torch.set_num_threads(args.threads)
    checkpoint = Path(loading.resolve(TARGET, "target"))
    curves = {}
    for quant in args.quants:
        model = gguf_export.cached(checkpoint, quant)
        curves[f"llama.cpp {quant}"] = llama_bench(
            bench, model, args.context, args.threads, args.repeats
        )
    for dtype in args.torch:
        curves[f"torch {dtype}"] = torch_curve(dtype, args.context, args.repeats)
    host = of_env(environment(torch.device("cpu"), ""))
    isa = host.isa if args.isa == "native" else capped(host.isa, args.isa)
    machine = host.label().replace(f" {host.isa} ", f" {isa} ")
    table = report(curves, machine, args)
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = "llamacpp_verify_cost" + ("" if args.isa == "native" else f"-{args.isa}")
        (args.out / f"{stem}.md").write_text(table)
        with (args.out / f"{stem}.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["engine", "k", "ms", "verify_over_step"])
            for name, curve in curves.items():
                writer.writerows(
                    [name, k, f"{ms:.4f}", f"{ms / curve[1]:.3f}"] for k, ms in curve.items()
                )


def report(curves: dict, machine: str, args: argparse.Namespace) -> str:
    """verify(k)/step per engine (rows) and k (columns), with one step's milliseconds."""
    shown = (1, 2, 4, 8, 12, 16, 17)
    head = "| engine | step ms | " + " | ".join(f"k={k}" for k in shown[1:]) + " |"
    lines = [head, "|" + "---|" * (len(shown) + 1)]
    for name, curve in curves.items():
        ratios = " | ".join(f"{curve[k] / curve[1]:.2f}" for k in shown[1:])
        lines.append(f"| {name} | {curve[1]:.2f} | {ratios} |")
    foot = (
        f"\ntiny-xl, verify(k)/step behind {args.context} cached tokens, {args.threads} threads, "
        f"{machine}, mean of {args.repeats} (llama-bench) / median of {args.repeats} (torch).\n"
    )
    return "\n".join(lines) + "\n" + foot


if __name__ == "__main__":
    main()
