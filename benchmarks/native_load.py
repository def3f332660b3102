"""Import time, load time and peak memory of each golden checkpoint (tests/goldens/<family>) through
specbench's native class against the same checkpoint through the upstream class, each load in
a fresh process (peak RSS is per process), arms interleaved, medians of `--repeats`.

The upstream arm runs in an environment with the upstream's transformers 4.x (where the hub
classes load unpatched) and imports the model class from an upstream checkout:

    python benchmarks/native_load.py --upstream-python /tmp/upstream/bin/python \
        --fast-dllm <Fast-dLLM checkout> --mdlm-model <dir holding the hub's modeling_mdlm.py>
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

GOLDENS = Path(__file__).resolve().parents[1] / "tests" / "goldens"

# one load, timed, then the process's peak RSS; prints one JSON line
PROBE = """
import json, resource, sys, time
sys.path[:0] = {paths!r}
import torch
t0 = time.perf_counter()
{load}
t1 = time.perf_counter()
model = cls.from_pretrained({path!r}, {dtype_kw}=torch.float32)
t2 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"import_s": t1 - t0, "s": t2 - t1, "rss_mb": rss}}))
"""

NATIVE = "import specbench.models.native\nfrom transformers import AutoModel as cls"
UPSTREAM = {
    "llada": "from model.modeling_llada import LLaDAModelLM as cls",
    "dream": "from model.modeling_dream import DreamModel as cls",
    "mdlm": "from modeling_mdlm import MDLM as cls",
}


def probe(python: str, load: str, paths: list[str], family: str) -> dict:
    dtype_kw = "dtype" if load == NATIVE else "torch_dtype"  # transformers 5 / 4
    code = PROBE.format(paths=paths, load=load, path=str(GOLDENS / family), dtype_kw=dtype_kw)
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream-python", required=True)
    parser.add_argument("--fast-dllm", required=True, help="a Fast-dLLM checkout")
    parser.add_argument("--mdlm-model", help="a directory with the hub's modeling_mdlm.py")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    upstream_paths = {
        "llada": [str(Path(args.fast_dllm) / "llada")],
        "dream": [str(Path(args.fast_dllm) / "dream")],
        "mdlm": [args.mdlm_model] if args.mdlm_model else None,
    }
    print(f"{'family':<7} {'arm':<9} {'import s':>9} {'load s':>7} {'peak RSS MB':>12}")
    for family in ("llada", "dream", "mdlm"):
        if upstream_paths[family] is None:
            continue
        arms = {
            "native": (sys.executable, NATIVE, []),
            "upstream": (args.upstream_python, UPSTREAM[family], upstream_paths[family]),
        }
        runs = {arm: [] for arm in arms}
        for _ in range(args.repeats):
            for arm, (python, load, paths) in arms.items():
                runs[arm].append(probe(python, load, paths, family))
        for arm, results in runs.items():
            imports = statistics.median(r["import_s"] for r in results)
            seconds = statistics.median(r["s"] for r in results)
            rss = statistics.median(r["rss_mb"] for r in results)
            print(f"{family:<7} {arm:<9} {imports:>9.2f} {seconds:>7.3f} {rss:>12.0f}")


if __name__ == "__main__":
    main()
