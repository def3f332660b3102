#!/usr/bin/env bash
# The GPU world's device check on a lent GPU machine, from the repository root: the image's
# python has torch; the other packages come from .whl/ (`make gpu-wheels`, run beforehand where
# pip reaches PyPI, and carried). Writes $OUT/gpu_world.tgz: the run directories, world.json,
# forward_cost.csv, cells.json, table.md and the log (docs/tiny-world.md: the GPU world).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 SPECBENCH_CACHE=/tmp/specbench-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
mkdir -p /tmp/gpu_world
python3 benchmarks/gpu_world.py --out /tmp/gpu_world --budget "${BUDGET:-500}" "$@" 2>&1 \
    | grep --line-buffered -v '^Loading weights' | tee /tmp/gpu_world/log.txt
status=${PIPESTATUS[0]}
tar czf "$OUT/gpu_world.tgz" -C /tmp gpu_world
exit "$status"
