#!/usr/bin/env bash
# The checks that need CUDA, in one run (a lent GPU machine, or a CUDA workstation):
# the real engine against generate() at 16-bit weights with every KV precision, the real
# benchmark, a headless real run, the window's engine process (spawned, recording), and
# bitsandbytes int8/nf4 where it is installed.
# Also: decode steps replayed from CUDA graphs against eager (tests/test_decode_graphs.py) and
# `kvscope bench cuda` (graphs on and off vs transformers' continuous batching, decode-step split).
# Usage: scripts/gpu_check.sh OUTDIR   (uses the python on PATH; kvscope need not be installed)
#        STEPS="env graphs bench_cuda" scripts/gpu_check.sh OUTDIR   runs only the steps named
set -u
OUT=${1:-gpu-check}
mkdir -p "$OUT"
PY=${PY:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# Run from the working tree without installing: the repository's folders are kvscope's subpackages.
if ! $PY -c "import kvscope.engine" 2>/dev/null; then
  SHIM=$(mktemp -d); ln -s "$ROOT" "$SHIM/kvscope"; export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
fi
export KVSCOPE_CACHE_DIR=${KVSCOPE_CACHE_DIR:-$(mktemp -d)} HF_HUB_OFFLINE=1
KV="$PY -m kvscope.app.cli.main"
step() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then return; fi
  echo "=== $name" | tee -a "$OUT/summary.txt"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  echo "    rc=$rc  $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
  tail -n 25 "$OUT/$name.log"
}
step env 60 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; $PY -V; \
  $PY -c 'import torch, transformers, numpy, safetensors; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.is_available()); print(\"transformers\", transformers.__version__, \"numpy\", numpy.__version__)'; \
  $PY -c 'import bitsandbytes; print(\"bitsandbytes\", bitsandbytes.__version__)' || echo 'no bitsandbytes'"
step graphs 120 $PY -m pytest -q -p no:cacheprovider "$ROOT/tests/test_decode_graphs.py"
step bench_cuda 330 $KV bench cuda --requests 64 --json "$OUT/bench_cuda.json"
step verify_fp16 150 $KV verify --model tiny-llama --device cuda --dtype fp16 --kv-cache-dtype all --json "$OUT/verify_fp16.json"
step verify_bf16 60 $KV verify --model tiny-llama --device cuda --dtype bf16 --kv-cache-dtype bf16 --json "$OUT/verify_bf16.json"
step math_this_machine 60 $KV math --model llama-3-8b --hardware this-machine
step run_real 90 $KV run --backend real --device cuda --model tiny-llama --workload azure-conv --requests ${RUN_REQUESTS:-300} --quiet --json "$OUT/run_real.json"
step bench_real 150 $KV bench real --device cuda --requests 64 --json "$OUT/bench_real.json"
step engine_process 150 $PY "$ROOT/scripts/engine_process_check.py" "$OUT/engine-process"
if [ -z "${STEPS:-}" ] && $PY -c "import bitsandbytes" 2>/dev/null; then
  step run_int8 45 $KV run --backend real --device cuda --model tiny-llama --quantization int8 --requests 50 --quiet
  step run_nf4 45 $KV run --backend real --device cuda --model tiny-llama --quantization nf4 --requests 50 --quiet
fi
cat "$OUT/summary.txt"
