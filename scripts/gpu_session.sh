#!/usr/bin/env bash
# Everything that needs the GPU, in one go: install the farm's wheels, warm the code cache, run
# the benchmarks named as arguments (each "name [args]" runs bench/<name>.py), then the GPU tests
# (GPU_TESTS: test paths, "none" to skip). Logs and JSON results go to $OUT (or bench/results),
# each step's log as it runs, so that a run cut short by its time limit still brings them back.
# Usage: scripts/gpu_session.sh [ "bench-name [args...]" ...]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/results}"
mkdir -p "$out"
if [ -d .whl ]; then
  # every wheel under .whl, one of each name (a carried subfolder such as .whl/gpu will do)
  wheels=$(find .whl -type f -name "*.whl" | awk -F/ '!seen[$NF]++')
  # shellcheck disable=SC2086
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site $wheels >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 FARM_CODE_CACHE=${FARM_CODE_CACHE:-/tmp/farm-code}
# warm the code cache (OPS, DTYPES, FAMILIES: space-separated; every family by default), in
# parallel and without Ray, so that a run carrying only the GPU wheels compiles in bulk too
for op in ${OPS:-conv2d_fwd conv2d_bwd_data conv2d_bwd_weight groupnorm_bwd}; do
  for family in ${FAMILIES:-all}; do
    python3 - "$op" "$family" ${DTYPES:-bf16 fp16 fp32} <<'PY' 2>&1 | tail -2
import os, sys
from farm.compile import FolderCache
from farm.compile_all import compile_instances, instances_of
op, family, dtypes = sys.argv[1], sys.argv[2], sys.argv[3:]
found = instances_of(op, dtypes, None if family == "all" else family, "sm_90a")
s = compile_instances(found, "sm_90a", FolderCache(), workers=os.cpu_count() or 1)
print(f"{op} {family}: {s.instances} instances, {s.compiled} compiled, "
      f"{len(s.failures)} failed, {s.seconds:.0f} s")
PY
  done
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
for spec in "$@"; do
  read -r name args <<< "$spec"
  echo "== bench/$name.py $args"
  # shellcheck disable=SC2086
  python3 -m bench."$name" --out "$out" $args 2>&1 | tee "$out/$name.log" | tail -60
done
if [ "${GPU_TESTS:-tests}" != none ]; then
  python3 -m pytest -q -m gpu -p no:cacheprovider ${GPU_TESTS:-tests/test_*gpu*.py} 2>&1 \
      | tee "$out/gpu_tests.log" | tail -40
fi
