#!/usr/bin/env bash
# Everything that needs the GPU, in one go: install the farm's wheels, run the GPU tests, then
# the benchmarks named as arguments (bench/<name>.py). Logs and JSON results go to $OUT (or
# bench/results when OUT is unset). Usage: scripts/gpu_session.sh [bench names...]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/results}"
mkdir -p "$out"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 FARM_CODE_CACHE=/tmp/farm-code
for op in conv2d_fwd conv2d_bwd_data conv2d_bwd_weight; do   # warm the code cache in parallel
  python3 -m farm.cli compile --op $op --target sm_90a --dtype bf16 --dtype fp16 --dtype fp32 \
      -j "$(nproc)" 2>&1 | tail -3
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
python3 -m pytest -q -m gpu -p no:cacheprovider ${GPU_TESTS:-tests} 2>&1 | tee "$out/gpu_tests.log" | tail -40
for name in "$@"; do
  echo "== bench/$name.py"
  python3 -m bench."$name" --out "$out" 2>&1 | tee "$out/$name.log" | tail -60
done
